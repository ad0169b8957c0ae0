package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// holdersStore opens a store of kind with the settings row.
func holdersStore(t testing.TB, kind string) *store.Store {
	t.Helper()
	ctx := context.Background()
	opts := store.Options{DataDir: t.TempDir()}
	if kind == testenv.Postgres {
		testenv.RequirePostgres(t)
		opts.DatabaseURL = testenv.FreshPostgres(t)
	}
	s, err := store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Write(ctx, func(tx *store.Tx) error { return tx.EnsureSettings(ctx, permissions.DefaultGlobal) }); err != nil {
		t.Fatal(err)
	}
	return s
}

// holdersWalk pages through HoldersPage n at a time and returns the
// usernames.
func holdersWalk(t *testing.T, s *store.Store, h store.Holders, n int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		users, keys, err := s.HoldersPage(context.Background(), h, after, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(users) != len(keys) {
			t.Fatalf("%d users, %d keys", len(users), len(keys))
		}
		for i, u := range users {
			if keys[i] != strings.ToLower(u.Username) {
				t.Fatalf("the key of %s is %q", u.Username, keys[i])
			}
			out = append(out, u.Username)
		}
		if len(users) < n {
			return out
		}
		after = keys[len(keys)-1]
	}
}

// HoldersPage reads, in the order of lower-cased usernames, every user, or
// the holders of some roles, some users and the owner, each once; the
// holders' order follows a rename, memberships written by hand and a bulk
// change of members.
func TestHoldersPage(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := holdersStore(t, kind)
		names := []string{"Owner", "alice", "Bob", "carol", "Dave", "erin", "Frank", "grace"}
		ids := map[string]string{}
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			for _, r := range []string{"red", "blue", "green"} {
				if _, err := tx.InsertRole(ctx, model.Role{ID: r, Name: r, CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
					return err
				}
			}
			for i, n := range names {
				u := newUser(n)
				u.IsOwner = i == 0
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
				ids[n] = u.ID
			}
			for role, holders := range map[string][]string{"red": {"alice", "Dave", "grace"}, "blue": {"Dave", "erin", "Bob"}} {
				for _, n := range holders {
					if _, err := tx.AddUserRole(ctx, ids[n], role, model.Now()); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		check := func(h store.Holders, want ...string) {
			t.Helper()
			for _, n := range []int{1, 2, 3, 50} {
				if got := holdersWalk(t, s, h, n); !slices.Equal(got, want) {
					t.Fatalf("%+v by %d: %v, want %v", h, n, got, want)
				}
			}
		}
		check(store.Holders{Everyone: true}, "alice", "Bob", "carol", "Dave", "erin", "Frank", "grace", "Owner")
		check(store.Holders{Roles: []string{"red", "blue"}}, "alice", "Bob", "Dave", "erin", "grace", "Owner")
		check(store.Holders{Roles: []string{"green"}, Users: []string{ids["Frank"], ids["alice"]}}, "alice", "Frank", "Owner")
		check(store.Holders{}, "Owner")

		// A rename moves the user among the holders; a membership written
		// behind the service's back gets its user's key.
		_, err = s.Write(ctx, func(tx *store.Tx) error {
			u, err := tx.GetUser(ctx, ids["alice"])
			if err != nil {
				return err
			}
			u.Username = "Zoe"
			if _, err := tx.UpdateUser(ctx, u); err != nil {
				return err
			}
			return tx.ExecForTestInTx(ctx, "INSERT INTO user_roles (user_id, role_id, created_at) VALUES (?, 'green', 0)", ids["carol"])
		})
		if err != nil {
			t.Fatal(err)
		}
		check(store.Holders{Roles: []string{"red"}}, "Dave", "grace", "Owner", "Zoe")
		check(store.Holders{Roles: []string{"green"}}, "carol", "Owner")

		// A bulk change of members writes each membership with its key.
		_, err = s.Write(ctx, func(tx *store.Tx) error {
			_, _, err := tx.ChangeRoleMembers(ctx, "green", []string{ids["Frank"], ids["alice"], ids["Bob"]}, []string{ids["carol"]}, model.Now())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		check(store.Holders{Roles: []string{"green"}}, "Bob", "Frank", "Owner", "Zoe")
	})
}

// On SQLite, a page of holders reads the roles' index ranges and the
// users by ID: no step scans the users (SQLite has no statistics, so the
// plan is the statement's, whatever the data).
func TestHoldersPagePlan(t *testing.T) {
	s := holdersStore(t, testenv.SQLite)
	plan, err := s.ExplainHoldersPageForTest(context.Background(), store.Holders{Roles: []string{"a", "b"}, Users: []string{"x"}}, "", 51)
	if err != nil {
		t.Fatal(err)
	}
	everyone, err := s.ExplainHoldersPageForTest(context.Background(), store.Holders{Everyone: true}, "", 51)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(everyone, "SEARCH u USING INDEX") || strings.Contains(everyone, "TEMP B-TREE FOR ORDER BY") {
		t.Errorf("a page of every user does not read the usernames' index in order:\n%s", everyone)
	}
	// The statement's tables: users as u, c and o, user_roles as h. A scan
	// of one of them without an index would read them whole (a scan of a
	// subquery's rows, such as r0, reads what its index range gave).
	tableScan := regexp.MustCompile(`^SCAN (u|c|o|h)$`)
	for _, line := range strings.Split(plan, "\n") {
		if tableScan.MatchString(strings.TrimSpace(line)) {
			t.Errorf("the plan scans a table: %q\n%s", line, plan)
		}
	}
	if !strings.Contains(plan, "user_roles_role_username") {
		t.Errorf("the plan does not read the holders' index:\n%s", plan)
	}
}

// A page of users reads the roles of its own users, never every
// membership. PostgreSQL costs the roles' column for the rows the scan
// under the page's LIMIT could give (every user), and for that many it
// would read a page's EXISTS as a hash of all of user_roles, built anew
// for each page: a page among a million members, 1% of them holding a
// role, took 2.5 ms instead of 0.2. Here each of 2,000 users holds a
// role; the first page of everyone's holders, and of the list of users,
// reads a few memberships per user of the page (on SQLite, whose plan is
// the statement's, no step scans user_roles).
func TestUserPagesReadTheirUsersRolesOnly(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := holdersStore(t, kind)
		var ids []string
		for _, u := range insertUsers(t, s, 2000, func(i int) model.User { return newUser(fmt.Sprintf("h%04d", i)) }) {
			ids = append(ids, u.ID)
		}
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			if _, err := tx.InsertRole(ctx, model.Role{ID: "r", Name: "r", CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
				return err
			}
			_, _, err := tx.ChangeRoleMembers(ctx, "r", ids, nil, model.Now())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if kind == testenv.Postgres {
			if err := s.ExecForTest("ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
		const n = 51
		holders, err := s.ExplainHoldersPageForTest(ctx, store.Holders{Everyone: true}, "", n)
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.ExplainListUsersForTest(ctx, store.UserFilter{}, "", n-1)
		if err != nil {
			t.Fatal(err)
		}
		tableScan := regexp.MustCompile(`^SCAN (x|ur)$`) // user_roles' aliases
		for name, plan := range map[string]string{"everyone's holders": holders, "the list of users": list} {
			if kind == testenv.SQLite {
				for _, line := range strings.Split(plan, "\n") {
					if tableScan.MatchString(strings.TrimSpace(line)) {
						t.Errorf("a page of %s scans user_roles: %q\n%s", name, line, plan)
					}
				}
				continue
			}
			var root []struct{ Plan pgPlan }
			if err := json.Unmarshal([]byte(plan), &root); err != nil || len(root) != 1 {
				t.Fatalf("%v: %s", err, plan)
			}
			read := 0.0
			root[0].Plan.walk(func(p pgPlan) {
				if p.Relation == "user_roles" {
					read += (p.ActualRows + p.RowsRemovedByFilter) * p.ActualLoops
				}
			})
			if read > 3*n {
				t.Errorf("a page of %s read %.0f memberships, want at most %d:\n%s", name, read, 3*n, plan)
			}
		}
	})
}

// BenchmarkHoldersPage reads the first page of 50 of a role held by 1% of
// the users, and of every user, at 10,000 and 100,000 users: the cost of
// a page must not grow with the users.
func BenchmarkHoldersPage(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			benchStoresPrepared(b, 0, func(b *testing.B, s *store.Store, _ []string) {
				ctx := context.Background()
				var ids []string
				for len(ids) < n { // in several writes: one would outlast the write deadline
					_, err := s.Write(ctx, func(tx *store.Tx) error {
						for range min(5000, n-len(ids)) {
							u, err := tx.InsertUser(ctx, newUser(fmt.Sprintf("seed%d", len(ids))))
							if err != nil {
								return err
							}
							ids = append(ids, u.ID)
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				_, err := s.Write(ctx, func(tx *store.Tx) error {
					for i := range 250 {
						if _, err := tx.InsertRole(ctx, model.Role{ID: fmt.Sprintf("r%03d", i), Name: "r", CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
							return err
						}
					}
					var holders []string
					for i := 0; i < len(ids); i += 100 {
						holders = append(holders, ids[i])
					}
					_, _, err := tx.ChangeRoleMembers(ctx, "r001", holders, nil, model.Now())
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if s.Postgres() { // as a database seeded in bulk is settled before it is measured
					if err := s.ExecForTest("ANALYZE"); err != nil {
						b.Fatal(err)
					}
				}
			}, func(b *testing.B, s *store.Store, _ []string) {
				ctx := context.Background()
				for _, h := range []struct {
					name string
					h    store.Holders
				}{{"role", store.Holders{Roles: []string{"r001"}}}, {"everyone", store.Holders{Everyone: true}}} {
					b.Run(h.name, func(b *testing.B) {
						for b.Loop() {
							users, _, err := s.HoldersPage(ctx, h.h, "", 51)
							if err != nil || len(users) != 51 {
								b.Fatalf("%d users, %v", len(users), err)
							}
						}
					})
				}
			})
		})
	}
}

package store_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestUserConflictsNameWhatIsTaken: the unique indexes (there is no query
// before the write) find a username or email taken ignoring case, and the
// 409 says which; the failed write leaves the transaction's other writes
// intact.
func TestUserConflictsNameWhatIsTaken(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		withEmail := func(name, email string) model.User {
			u := newUser(name)
			u.Email = &email
			return u
		}
		var alice model.User
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			var err error
			alice, err = tx.InsertUser(ctx, withEmail("Alice", "alice@example.com"))
			if err != nil {
				return err
			}
			_, err = tx.InsertUser(ctx, withEmail("bob", "bob@example.com"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name  string
			write func(tx *store.Tx) error
			want  string
		}{
			{"username in another case", func(tx *store.Tx) error { _, err := tx.InsertUser(ctx, newUser("ALICE")); return err }, `username "ALICE" is taken`},
			{"email in another case", func(tx *store.Tx) error {
				_, err := tx.InsertUser(ctx, withEmail("carol", "Bob@Example.com"))
				return err
			}, `email "Bob@Example.com" is taken`},
			{"username taken by an update", func(tx *store.Tx) error {
				u := alice
				u.Username = "BOB"
				_, err := tx.UpdateUser(ctx, u)
				return err
			}, `username "BOB" is taken`},
			{"email taken by an update", func(tx *store.Tx) error {
				u := alice
				e := "BOB@example.com"
				u.Email = &e
				_, err := tx.UpdateUser(ctx, u)
				return err
			}, `email "BOB@example.com" is taken`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := s.Write(ctx, tc.write)
				var e *apperr.Error
				if !errors.As(err, &e) || !errors.Is(err, apperr.ErrConflict) || !strings.Contains(e.Detail, tc.want) {
					t.Fatalf("got %v, want a conflict saying %s", err, tc.want)
				}
			})
		}
		if u, err := s.User(ctx, alice.ID); err != nil || u.Username != "Alice" || *u.Email != "alice@example.com" {
			t.Fatalf("alice after refused updates: %+v, %v", u, err)
		}
	})
}

// TestUserRolesByPositionDescending: a user read alone and in a page lists
// their role IDs by position descending (neither by ID nor by assignment),
// and a user without roles an empty list.
func TestUserRolesByPositionDescending(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		var users [3]model.User
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			for _, id := range []string{"b", "c", "a"} { // each new role takes position 1: b 3, c 2, a 1
				if _, err := tx.InsertRole(ctx, model.Role{ID: id, Name: id, CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
					return err
				}
			}
			for i, name := range []string{"one", "two", "three"} {
				u, err := tx.InsertUser(ctx, newUser(name))
				if err != nil {
					return err
				}
				users[i] = u
			}
			for _, a := range []struct{ user, role string }{{users[0].ID, "a"}, {users[0].ID, "b"}, {users[2].ID, "c"}, {users[2].ID, "a"}, {users[2].ID, "b"}} {
				if _, err := tx.AddUserRole(ctx, a.user, a.role, model.Now()); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{users[0].ID: "b,a", users[1].ID: "", users[2].ID: "b,c,a"}
		for _, u := range users {
			got, err := s.User(ctx, u.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Roles == nil || strings.Join(got.Roles, ",") != want[u.ID] {
				t.Errorf("ReadUser(%s).Roles = %#v, want %q", u.Username, got.Roles, want[u.ID])
			}
		}
		page, _, err := s.ListUsers(ctx, store.UserFilter{}, "", 50)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 3 {
			t.Fatalf("page of %d users", len(page))
		}
		for _, u := range page {
			if u.Roles == nil || strings.Join(u.Roles, ",") != want[u.ID] {
				t.Errorf("ListUsers: %s has roles %#v, want %q", u.Username, u.Roles, want[u.ID])
			}
		}
	})
}

// TestSearchOrderAndPages: a prefix search lists each match once, in the
// order of the least key it matches by (username, then display name, then
// email for who may search emails, on a tie), then by ID, and walking the
// pages by the positions the store returns gives exactly that list, for
// every page size, with and without a role and a status filter, on both
// stores. Its few users never reach a page's bound (1,000 entries of each
// range), so every page but the last is full. The
// names are drawn from two letters so that prefixes, keys of one user and
// display names of many users collide.
func TestSearchOrderAndPages(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		rng := rand.New(rand.NewPCG(7, uint64(len(kind))))
		word := func(letters string, n int) string {
			b := make([]byte, 1+rng.IntN(n))
			for i := range b {
				b[i] = letters[rng.IntN(len(letters))]
			}
			return string(b)
		}
		users := insertUsers(t, s, 160, func(i int) model.User {
			u := newUser(fmt.Sprintf("%s%d", word("aAbB", 3), i))
			switch rng.IntN(3) {
			case 0:
				u.DisplayName = u.Username // two keys of one user tie
			default:
				u.DisplayName = word("aAbB", 4) // shared by many
			}
			if rng.IntN(2) == 0 {
				e := fmt.Sprintf("%s%d@x.example", word("ab", 2), i)
				u.Email = &e
			}
			if rng.IntN(4) == 0 {
				u.Status = model.StatusSuspended
			}
			return u
		})
		held := map[string]bool{} // the users holding the role "r"
		write(t, s, func(ctx context.Context, tx *store.Tx) error {
			clear(held) // a write may run again
			now := model.Now()
			if _, err := tx.InsertRole(ctx, model.Role{ID: "r", Name: "r", CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
			for _, u := range users {
				if rng.IntN(3) == 0 {
					if _, err := tx.AddUserRole(ctx, u.ID, "r", now); err != nil {
						return err
					}
					held[u.ID] = true
				}
			}
			return nil
		})
		// want is the search's list, worked out here.
		want := func(f store.UserFilter) []string {
			type match struct{ key, id string }
			var ms []match
			for _, u := range users {
				if f.Status != "" && u.Status != f.Status || f.RoleID != "" && !held[u.ID] {
					continue
				}
				keys := []string{strings.ToLower(u.Username), strings.ToLower(u.DisplayName)}
				if f.MatchEmail && u.Email != nil {
					keys = append(keys, strings.ToLower(*u.Email))
				}
				best := ""
				for _, k := range keys { // the earlier of equal keys: the same string
					if strings.HasPrefix(k, strings.ToLower(f.Prefix)) && (best == "" || k < best) {
						best = k
					}
				}
				if best != "" {
					ms = append(ms, match{best, u.ID})
				}
			}
			slices.SortFunc(ms, func(a, b match) int {
				return cmp.Or(strings.Compare(a.key, b.key), strings.Compare(a.id, b.id))
			})
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.id
			}
			return ids
		}
		// Every search below is a page the cache does not hold, of users
		// it keeps (each read once here): the database gives the entries,
		// the kept users their users (searchKept). The same walks in the
		// database alone, users and all, list the same.
		for _, u := range users {
			if _, err := s.User(s.ReadScope(ctx), u.ID); err != nil {
				t.Fatal(err)
			}
		}
		searches, kept := 0, s.CacheStats().KeptSearches
		for _, prefix := range []string{"a", "B", "ab", "ba", "aB", "abab", "b1", "x"} {
			for _, email := range []bool{false, true} {
				for _, filter := range []store.UserFilter{{}, {Status: model.StatusActive}, {RoleID: "r"}, {RoleID: "r", Status: model.StatusSuspended}} {
					f := store.UserFilter{Prefix: prefix, MatchEmail: email, Status: filter.Status, RoleID: filter.RoleID}
					wanted := want(f)
					for _, walk := range []struct {
						name  string
						list  func(ctx context.Context, f store.UserFilter, after string, limit int) ([]model.User, string, error)
						count int
					}{{"ListUsers", s.ListUsers, 1}, {"the database", s.ListUsersFromDatabaseForTest, 0}} {
						for _, limit := range []int{1, 3, 50} {
							var got []string
							after := ""
							for page := 0; ; page++ {
								if page > len(users) {
									t.Fatalf("%s, %+v, %d a page: the pages never end", walk.name, f, limit)
								}
								us, next, err := walk.list(s.ReadScope(ctx), f, after, limit)
								if err != nil {
									t.Fatalf("%s, %+v after %q: %v", walk.name, f, after, err)
								}
								searches += walk.count
								if len(us) > limit || next != "" && len(us) < limit {
									t.Fatalf("%+v: a page of %d of %d, next %q", f, len(us), limit, next)
								}
								for _, u := range us {
									got = append(got, u.ID)
								}
								if next == "" {
									break
								}
								after = next
							}
							if !slices.Equal(got, wanted) {
								t.Errorf("%s, %+v, %d a page:\n got %v\nwant %v", walk.name, f, limit, got, wanted)
							}
						}
					}
				}
			}
		}
		if got := s.CacheStats().KeptSearches - kept; got != int64(searches) {
			t.Errorf("%d of %d searches were answered with the kept users; want all", got, searches)
		}
	})
}

// TestSearchReadsOnlyItsPage: a prefix search reads each key's index from
// its position on, never every match: deep in 3,000 users who share the
// prefix (by username, display name and email alike), a page of 20 reads on
// PostgreSQL at most one page and one row from each key's range (the
// executed plan's rows, those its filters dropped included), and SQLite's
// plan searches an index for each key and scans no table. The page is one
// statement.
func TestSearchReadsOnlyItsPage(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		insertUsers(t, s, 3000, func(i int) model.User {
			u := newUser(fmt.Sprintf("m%05d", i))
			u.DisplayName = fmt.Sprintf("M %d", i%700) // display names repeat
			e := fmt.Sprintf("m%05d@x.example", i)
			u.Email = &e
			return u
		})
		if kind == testenv.Postgres {
			if err := s.ExecForTest("ANALYZE users"); err != nil {
				t.Fatal(err)
			}
		}
		const limit = 20
		f := store.UserFilter{Prefix: "M", MatchEmail: true}
		after := ""
		for range 60 { // page 61: past the display names, deep in the usernames
			_, next, err := s.ListUsers(s.ReadScope(ctx), f, after, limit)
			if err != nil || next == "" {
				t.Fatalf("next %q, %v", next, err)
			}
			after = next
		}
		before := s.QueryCount()
		if page, _, err := s.ListUsersFromDatabaseForTest(ctx, f, after, limit); err != nil || len(page) != limit {
			t.Fatalf("%d users, %v", len(page), err)
		}
		if n := s.QueryCount() - before; n != 1 {
			t.Errorf("the page took %d statements, want 1", n)
		}
		plan, err := s.ExplainListUsersForTest(ctx, f, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		if kind == testenv.SQLite {
			if len(regexp.MustCompile(`SEARCH c USING (COVERING )?INDEX`).FindAllString(plan, -1)) != 3 || strings.Contains(plan, "SCAN c") {
				t.Errorf("the plan does not search each key's index:\n%s", plan)
			}
			return
		}
		var root []struct{ Plan pgPlan }
		if err := json.Unmarshal([]byte(plan), &root); err != nil || len(root) != 1 {
			t.Fatalf("%v: %s", err, plan)
		}
		read := 0
		root[0].Plan.walk(func(p pgPlan) {
			if p.Relation == "users" && p.Alias != "u" {
				if !strings.Contains(p.NodeType, "Index") {
					t.Errorf("a key's range is read by a %s", p.NodeType)
				}
				read += int(p.ActualRows*p.ActualLoops) + int(p.RowsRemovedByFilter)
			}
		})
		if read == 0 || read > 3*(limit+1) {
			t.Errorf("the page read %d rows of the keys' ranges, want 1 to %d:\n%s", read, 3*(limit+1), plan)
		}
	})
}

// pgPlan is a node of PostgreSQL's EXPLAIN (FORMAT JSON).
type pgPlan struct {
	NodeType            string   `json:"Node Type"`
	Relation            string   `json:"Relation Name"`
	Alias               string   `json:"Alias"`
	ActualRows          float64  `json:"Actual Rows"`
	ActualLoops         float64  `json:"Actual Loops"`
	RowsRemovedByFilter float64  `json:"Rows Removed by Filter"`
	Plans               []pgPlan `json:"Plans"`
}

func (p pgPlan) walk(fn func(pgPlan)) {
	fn(p)
	for _, c := range p.Plans {
		c.walk(fn)
	}
}

// TestSearchPassesOverInFewRounds: where a long run of entries lists no
// one (here every username, since each user's display name "P n" sorts
// before every username "p0…"), a page reads it in rounds that double, not
// in rounds of a page each, and no further than its bound: past 1,000
// entries of a range it ends with the position it reached.
func TestSearchPassesOverInFewRounds(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := openStore(t, kind)
		const n = 2000
		insertUsers(t, s, n, func(i int) model.User {
			u := newUser(fmt.Sprintf("p%04d", i))
			u.DisplayName = fmt.Sprintf("P %d", i)
			return u
		})
		start := s.QueryCount()
		got, pages := walkUsersInDatabase(t, s, store.UserFilter{Prefix: "p"}, 100, 6)
		seen := len(got)
		// 19 pages of display names, a statement each; the 20th lists the
		// last 100 and looks for one more past the usernames in rounds of
		// 101, 202, 404 and 293 entries (its bound: 1,000); the 21st
		// passes over the next 1,000 usernames the same way, and the 22nd
		// finds the end in one: 28 statements, not 2,000.
		if statements := s.QueryCount() - start; seen != n || pages != 22 || statements > 28 {
			t.Errorf("%d users in %d pages and %d statements, want %d in 22 pages and at most 28", seen, pages, statements, n)
		}
	})
}

// TestSearchFilterReadsABoundedPage: a list whose filters pass few of the
// users it reads (a search with a role or a status filter, a role's
// holders with a status) reads at most 1,000 entries of each index range a
// page, not the whole range: over 2,500 users who all match the prefix and
// hold the role "all", of whom four alone are suspended and hold "rare"
// (the first, the 1,000th and 1,001st, where a page's bound falls, and the
// last), the pages end short, with a position to go on from, in few
// statements each (rounds of limit+1 entries, doubling while the page is
// unfinished, up to the bound: at most 2 + log2(1,000/(limit+1))), and
// walking them lists exactly those four, once each, at every page size.
func TestSearchFilterReadsABoundedPage(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := openStore(t, kind)
		const n = 2500
		few := map[int]bool{0: true, 999: true, 1000: true, n - 1: true}
		users := insertUsers(t, s, n, func(i int) model.User {
			u := newUser(fmt.Sprintf("f%04d", i)) // display name "f…" too
			if few[i] {
				u.Status = model.StatusSuspended
			}
			return u
		})
		write(t, s, func(ctx context.Context, tx *store.Tx) error {
			now := model.Now()
			for _, r := range []string{"all", "rare"} {
				if _, err := tx.InsertRole(ctx, model.Role{ID: r, Name: r, CreatedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
			}
			for i, u := range users {
				if _, err := tx.AddUserRole(ctx, u.ID, "all", now); err != nil {
					return err
				}
				if few[i] {
					if _, err := tx.AddUserRole(ctx, u.ID, "rare", now); err != nil {
						return err
					}
				}
			}
			return nil
		})
		want := []string{"f0000", "f0999", "f1000", fmt.Sprintf("f%04d", n-1)}
		for _, f := range []store.UserFilter{
			{Prefix: "f", Status: model.StatusSuspended},
			{Prefix: "F", RoleID: "rare"},
			{Prefix: "f", RoleID: "rare", Status: model.StatusSuspended},
			{RoleID: "all", Status: model.StatusSuspended},
		} {
			for _, limit := range []int{1, 20, 200} {
				got, pages := walkUsersInDatabase(t, s, f, limit, int64(2+bits.Len(uint(1000/(limit+1)))))
				// Each user has two entries in a search (username and
				// display name), at most 2,000 a page; a role's holders
				// one, at most 1,000 a page.
				if !slices.Equal(got, want) || limit == 20 && pages != 3 {
					t.Errorf("%+v, %d a page: %v in %d pages, want %v (in 3 at 20 a page)", f, limit, got, pages, want)
				}
			}
		}
	})
}

// walkUsersInDatabase walks every page of a list of users in the database
// (past the read cache), limit a page, and returns the usernames listed
// and the pages; each page may take at most statements statements.
func walkUsersInDatabase(t *testing.T, s *store.Store, f store.UserFilter, limit int, statements int64) ([]string, int) {
	t.Helper()
	var got []string
	pages, after := 0, ""
	for {
		before := s.QueryCount()
		page, next, err := s.ListUsersFromDatabaseForTest(context.Background(), f, after, limit)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if st := s.QueryCount() - before; st > statements {
			t.Errorf("%+v, %d a page: page %d took %d statements, want at most %d", f, limit, pages+1, st, statements)
		}
		pages++
		for _, u := range page {
			got = append(got, u.Username)
		}
		if next == "" {
			return got, pages
		}
		if pages > 100 {
			t.Fatalf("%+v, %d a page: the pages never end", f, limit)
		}
		after = next
	}
}

// insertUsers inserts n users, made by user(i), in one write, and returns
// them as stored.
func insertUsers(t *testing.T, s *store.Store, n int, user func(i int) model.User) []model.User {
	t.Helper()
	ctx := context.Background()
	users := make([]model.User, 0, n)
	if _, err := s.Write(ctx, func(tx *store.Tx) error {
		users = users[:0] // a write may run again
		for i := range n {
			u, err := tx.InsertUser(ctx, user(i))
			if err != nil {
				return err
			}
			users = append(users, u)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return users
}

// TestUserReadsConcurrently: many requests reading users at once, past a
// cache too small to hold them (on PostgreSQL their misses share
// statements), each get the user they asked for, with their roles, or a
// not-found for an ID nobody has.
func TestUserReadsConcurrently(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := sameDatabase(t, kind, func(o *store.Options) { o.CacheBytes = 32 << 10 })()
		var users []model.User
		write(t, s, func(ctx context.Context, tx *store.Tx) error {
			now := model.Now()
			role, err := tx.InsertRole(ctx, model.Role{ID: "mods", Name: "mods", CreatedAt: now, UpdatedAt: now})
			if err != nil {
				return err
			}
			for i := range 300 {
				u, err := tx.InsertUser(ctx, newUser(fmt.Sprintf("c%03d", i)))
				if err != nil {
					return err
				}
				if i%3 == 0 {
					if _, err := tx.AddUserRole(ctx, u.ID, role.ID, now); err != nil {
						return err
					}
					u.Roles = []string{role.ID}
				}
				users = append(users, u)
			}
			return nil
		})
		errs := make(chan error, 32)
		for g := range 32 {
			go func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 200 {
					if rng.IntN(10) == 0 {
						_, err := s.User(s.ReadScope(ctx), "no-such-user")
						if !errors.Is(err, apperr.ErrNotFound) {
							errs <- fmt.Errorf("a missing user: %v", err)
							return
						}
						continue
					}
					want := users[rng.IntN(len(users))]
					got, err := s.User(s.ReadScope(ctx), want.ID)
					if err != nil || got.Username != want.Username || !slices.Equal(got.Roles, want.Roles) {
						errs <- fmt.Errorf("user %s: %+v, %v", want.Username, got, err)
						return
					}
				}
				errs <- nil
			}()
		}
		for range 32 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		st := s.CacheStats()
		switch sent := s.UserBatchesSentForTest(); {
		case kind == "postgres" && (sent == 0 || sent > st.Misses):
			t.Errorf("%d batched statements for %d misses; want at least one, and no more than the misses", sent, st.Misses)
		case kind == "sqlite" && sent != 0:
			t.Errorf("SQLite sent %d batched statements; want none (a read there is no round trip)", sent)
		}
	})
}

// TestSearchRunsOnTheSearchPool: on PostgreSQL, a search runs on the
// connections of its own that plan their statements once (generic plans:
// internal/sqldb's TestSearchPoolPlansOnce). What the searches answer is
// what the other search tests check.
func TestSearchRunsOnTheSearchPool(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		if kind != "postgres" {
			t.Skip("SQLite plans a prepared statement once (TestSQLiteLimitsAreNotPlanned)")
		}
		t.Parallel()
		s := openStore(t, kind)
		before := s.SearchStatementsForTest()
		if _, _, err := s.ListUsers(s.ReadScope(context.Background()), store.UserFilter{Prefix: "a"}, "", 20); err != nil {
			t.Fatal(err)
		}
		if after := s.SearchStatementsForTest(); after <= before {
			t.Errorf("a search prepared nothing on the search pool (%d statements before, %d after)", before, after)
		}
	})
}

package store_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// search lists every user a prefix search finds, walking its pages, by
// username; it fails the test if a user is listed twice or out of ID order.
func search(t *testing.T, s *store.Store, f store.UserFilter, limit int) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	after := ""
	for {
		page, more, err := s.ListUsers(ctx, f, after, limit)
		if err != nil {
			t.Fatalf("search %+v: %v", f, err)
		}
		for _, u := range page {
			if u.ID <= after {
				t.Fatalf("search %+v: %s (%s) listed after %s", f, u.Username, u.ID, after)
			}
			after = u.ID
			names = append(names, u.Username)
		}
		if !more {
			return names
		}
	}
}

// TestUserSearchIndexFollowsWrites: the search index is kept by the
// transaction that writes a user, so a search right after a create, a
// rename, an email change, a delete, many users at once, or a write that
// failed finds exactly the users whose keys match then, in ID order, on
// both stores.
func TestUserSearchIndexFollowsWrites(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		insert := func(username, display string, email *string) model.User {
			t.Helper()
			u := newUser(username)
			u.DisplayName, u.Email = display, email
			var got model.User
			if _, err := s.Write(ctx, func(tx *store.Tx) error {
				var err error
				got, err = tx.InsertUser(ctx, u)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return got
		}
		update := func(u model.User) model.User {
			t.Helper()
			if _, err := s.Write(ctx, func(tx *store.Tx) error {
				var err error
				u, err = tx.UpdateUser(ctx, u)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return u
		}
		email := func(e string) *string { return &e }
		names := func(p string) store.UserFilter { return store.UserFilter{Prefix: p} }
		all := func(p string) store.UserFilter { return store.UserFilter{Prefix: p, MatchEmail: true} }

		alice := insert("Alice", "Alice Smith", email("al@example.com"))
		bob := insert("bob", "Bobby Tables", email("robert@example.com"))
		insert("carol", "Alfred", nil)

		for _, tc := range []struct {
			name string
			f    store.UserFilter
			want []string
		}{
			{"a prefix of usernames and display names", names("al"), []string{"Alice", "carol"}},
			{"case is ignored", names("ALICE S"), []string{"Alice"}},
			{"a whole display name", names("bobby tables"), []string{"bob"}},
			{"emails are not searched without MatchEmail", names("rob"), nil},
			{"emails are searched with MatchEmail", all("rob"), []string{"bob"}},
			{"a user matching by name and email is listed once", all("al"), []string{"Alice", "carol"}},
			{"no match", names("zed"), nil},
		} {
			t.Run("created/"+tc.name, func(t *testing.T) {
				if got := search(t, s, tc.f, 1); !slices.Equal(got, tc.want) {
					t.Errorf("search %+v = %v, want %v", tc.f, got, tc.want)
				}
			})
		}

		alice.Username, alice.DisplayName, alice.Email = "zed", "Zed", email("zed@example.com")
		update(alice)
		bob.Status = model.StatusSuspended // a write that leaves the keys alone
		update(bob)
		for _, tc := range []struct {
			name string
			f    store.UserFilter
			want []string
		}{
			{"the old name is gone", names("alice"), nil},
			{"the old email is gone", all("al@"), nil},
			{"the new name is found", names("ze"), []string{"zed"}},
			{"the new email is found", all("zed@"), []string{"zed"}},
			{"an update of other fields keeps the keys", names("bobby"), []string{"bob"}},
			{"a status filter on the range", store.UserFilter{Prefix: "b", Status: model.StatusSuspended}, []string{"bob"}},
			{"a status filter that excludes", store.UserFilter{Prefix: "b", Status: model.StatusActive}, nil},
		} {
			t.Run("renamed/"+tc.name, func(t *testing.T) {
				if got := search(t, s, tc.f, 2); !slices.Equal(got, tc.want) {
					t.Errorf("search %+v = %v, want %v", tc.f, got, tc.want)
				}
			})
		}

		if _, err := s.Write(ctx, func(tx *store.Tx) error { _, err := tx.DeleteUser(ctx, bob.ID); return err }); err != nil {
			t.Fatal(err)
		}
		if got := search(t, s, all("b"), 5); len(got) != 0 {
			t.Errorf("after bob's deletion, search b = %v", got)
		}
		if n, err := s.SearchRowsForTest(ctx, bob.ID); err != nil || n != 0 {
			t.Errorf("bob deleted keeps %d rows of the search index (%v)", n, err)
		}

		// Many users in one transaction (as the bench's bulk seeding
		// writes them), paged through with a limit that does not divide
		// them; then a transaction that fails after inserting leaves none.
		var want []string
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range 130 {
				u := newUser(fmt.Sprintf("m%04d", i))
				u.DisplayName = "Member " + strconv.Itoa(i)
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
				want = append(want, u.Username)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := search(t, s, names("m0"), 50); !slices.Equal(got, want) {
			t.Errorf("bulk: search m0 found %d users, want the %d inserted in order", len(got), len(want))
		}
		if got := search(t, s, names("member 12"), 3); !slices.Equal(got, append([]string{"m0012"}, want[120:]...)) {
			t.Errorf("bulk: search 'member 12' = %v", got)
		}
		failed := fmt.Errorf("given up")
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			if _, err := tx.InsertUser(ctx, newUser("rolledback")); err != nil {
				return err
			}
			return failed
		}); err == nil {
			t.Fatal("the failing write succeeded")
		}
		if got := search(t, s, names("rolled"), 5); len(got) != 0 {
			t.Errorf("a rolled-back user is found: %v", got)
		}
		if _, _, err := s.ListUsers(ctx, names(strings.Repeat("x", store.SearchPrefixMax+1)), "", 5); err == nil {
			t.Errorf("a search longer than %d characters is accepted", store.SearchPrefixMax)
		}
	})
}

// TestUserSearchPlanUsesTheIndex: a prefix search reads one range of the
// search index's primary key, in the order of the page (no sort, no scan
// of a table), and on PostgreSQL reads no more of its rows than the page
// answers and one more, however many users match.
func TestUserSearchPlanUsesTheIndex(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		var ids []string
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range 3000 {
				u := newUser(fmt.Sprintf("p%04d", i))
				if i%3 == 0 {
					e := fmt.Sprintf("p%04d@example.com", i)
					u.Email = &e
				}
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
				ids = append(ids, u.ID)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.AnalyzeForTest(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			f    store.UserFilter
		}{
			{"names", store.UserFilter{Prefix: "p"}},
			{"names and emails", store.UserFilter{Prefix: "p", MatchEmail: true}},
			{"names and a status", store.UserFilter{Prefix: "p", Status: model.StatusActive}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				const limit = 20
				plan, err := s.ExplainListUsersForTest(ctx, tc.f, ids[1000], limit, false)
				if err != nil {
					t.Fatal(err)
				}
				if kind == testenv.SQLite {
					// One SEARCH per range, by the primary key with the cursor as
					// its lower bound; users by their key; no sort of the range.
					ranges := regexp.MustCompile(`SEARCH s USING PRIMARY KEY \(source=\? AND prefix=\? AND user_id>\?\)`).FindAllString(plan, -1)
					want := 1
					if tc.f.MatchEmail {
						want = 2
					}
					if len(ranges) != want || strings.Contains(plan, "SCAN s") || strings.Contains(plan, "SCAN u") ||
						strings.Contains(plan, "SCAN f") || !strings.Contains(plan, "SEARCH u USING INDEX sqlite_autoindex_users_1 (id=?)") {
						t.Errorf("plan of %+v:\n%s", tc.f, plan)
					}
					return
				}
				if !strings.Contains(plan, "user_search_pkey") || strings.Contains(plan, "Seq Scan on user_search") {
					t.Errorf("plan of %+v:\n%s", tc.f, plan)
				}
				analyzed, err := s.ExplainListUsersForTest(ctx, tc.f, ids[1000], limit, true)
				if err != nil {
					t.Fatal(err)
				}
				// Every node reading user_search reads at most limit+1 rows.
				reads := regexp.MustCompile(`Index (?:Only )?Scan using user_search_pkey.*\(actual rows=(\d+)`).FindAllStringSubmatch(analyzed, -1)
				if len(reads) == 0 {
					t.Errorf("no read of user_search in:\n%s", analyzed)
				}
				for _, m := range reads {
					if n, _ := strconv.Atoi(m[1]); n > limit+1 {
						t.Errorf("a range of the index read %d rows for a page of %d:\n%s", n, limit, analyzed)
					}
				}
			})
		}
		page, _, err := s.ListUsers(ctx, store.UserFilter{Prefix: "p"}, ids[1000], 20)
		if err != nil || len(page) != 20 || page[0].ID != ids[1001] {
			t.Fatalf("the page after user 1000: %d users, %v", len(page), err)
		}
	})
}

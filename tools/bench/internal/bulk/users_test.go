package bulk

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

func TestUsers(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		opts := store.Options{DataDir: t.TempDir()}
		if kind == testenv.Postgres {
			opts = store.Options{DatabaseURL: testenv.FreshPostgres(t)}
		}
		// Two transactions (or statements), the second short.
		n := PerTransaction + 500
		if kind == testenv.Postgres {
			n = PerStatement + 500
		}
		ids, err := Users(ctx, opts.DataDir, opts.DatabaseURL, n, func(i int) (string, string) {
			return fmt.Sprintf("m_%07d", i), fmt.Sprintf("Member %07d", i)
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != n || !slices.IsSorted(ids) {
			t.Fatalf("%d IDs, sorted %v; want %d in the order of the names", len(ids), slices.IsSorted(ids), n)
		}

		s, err := store.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got, err := s.CountUsers(ctx); err != nil || got != int64(n) {
			t.Fatalf("CountUsers = %d, %v; want %d", got, err, n)
		}
		// What the bench asks, through the product's own queries: a user
		// made by the store, one made as a copy, and a prefix 100 users
		// share.
		for _, i := range []int{0, n - 1} {
			u, err := s.User(ctx, ids[i])
			if err != nil || u.Username != fmt.Sprintf("m_%07d", i) || u.DisplayName != fmt.Sprintf("Member %07d", i) ||
				u.Status != "active" || u.IsOwner || u.Version != 1 || u.CreatedAt.IsZero() {
				t.Fatalf("user %d: %+v, %v", i, u, err)
			}
		}
		users, next, err := s.ListUsers(ctx, store.UserFilter{Prefix: "M_00012"}, "", 20)
		if err != nil || len(users) != 20 || next == "" || users[0].ID != ids[1200] {
			t.Fatalf("search: %d users, next %q, %v", len(users), next, err)
		}
		if _, err := s.UserByUsername(ctx, fmt.Sprintf("M_%07d", n-1)); err != nil {
			t.Fatalf("the last user by username, ignoring case: %v", err)
		}

		t.Run("a taken name fails, and says which", func(t *testing.T) {
			_, err := Users(ctx, opts.DataDir, opts.DatabaseURL, 1, func(int) (string, string) { return "m_0000007", "x" })
			if err == nil {
				t.Fatal("no error for a taken username")
			}
		})
	})
}

package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestSearchKeptOnlyAsTheDatabaseHasIt: a search answered with the kept
// users (searchKept) gives way to the database's own page wherever one of
// its entries' users is not kept as the entry found it: a user never read,
// a user kept at another version than the row's (a change not followed
// yet), a row whose key is not its name lower-cased. ListUsers then
// answers what the database has.
func TestSearchKeptOnlyAsTheDatabaseHasIt(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		ids := make([]string, 5)
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
				return err
			}
			now := model.Now()
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7()).String()
				u := model.User{ID: ids[i], Username: fmt.Sprintf("Kept%d", i), DisplayName: fmt.Sprintf("Shown %d", i),
					Status: model.StatusActive, CreatedAt: now, UpdatedAt: now}
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		f := store.UserFilter{Prefix: "kept"}
		kept := func() ([]model.User, error) {
			return s.SearchKeptForTest(s.ReadScope(ctx), f, "", 10)
		}
		limit := 10
		// The list as ListUsers gives it: names and statuses, in order.
		list := func() []string {
			t.Helper()
			limit++ // a page the cache does not hold
			users, _, err := s.ListUsers(s.ReadScope(ctx), f, "", limit)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, u := range users {
				out = append(out, u.Username+" "+u.Status)
			}
			return out
		}
		want := []string{"Kept0 active", "Kept1 active", "Kept2 active", "Kept3 active", "Kept4 active"}

		if _, err := kept(); !errors.Is(err, store.ErrNotKeptForTest) {
			t.Fatalf("users never read: %v; want errNotKept", err)
		}
		if got := list(); !slices.Equal(got, want) { // keeps the page's users
			t.Fatalf("got %q, want %q", got, want)
		}
		if users, err := kept(); err != nil || len(users) != 5 {
			t.Fatalf("every user kept: %d users, %v; want 5 from the kept users", len(users), err)
		}

		// A change the cache has not followed: the kept user is of the
		// version before it.
		if err := s.ExecForTest("UPDATE users SET status = 'suspended', version = version + 1 WHERE id = ?", ids[2]); err != nil {
			t.Fatal(err)
		}
		if _, err := kept(); !errors.Is(err, store.ErrNotKeptForTest) {
			t.Fatalf("a user kept at an older version: %v; want errNotKept", err)
		}
		want[2] = "Kept2 suspended"
		if got := list(); !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
		if _, err := kept(); err != nil {
			t.Fatalf("the change followed and the user read again: %v; want the kept users", err)
		}

		// A key that is not the name lower-cased (written by other means,
		// the version unchanged): the database's order and rows.
		if err := s.ExecForTest("UPDATE users SET username_key = 'kept9' WHERE id = ?", ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := kept(); !errors.Is(err, store.ErrNotKeptForTest) {
			t.Fatalf("a key that is not the name's: %v; want errNotKept", err)
		}
		want = append(want[1:], "Kept0 active")
		if got := list(); !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}

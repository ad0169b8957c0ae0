package store_test

import (
	"context"
	"errors"
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

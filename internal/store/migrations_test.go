package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

func storeOptions(t *testing.T, kind string) store.Options {
	t.Helper()
	if kind == testenv.Postgres {
		return store.Options{DatabaseURL: testenv.FreshPostgres(t)}
	}
	return store.Options{DataDir: t.TempDir()}
}

// TestIntegerTimestampsMigration: a database written before migration 0004
// (timestamps as SQLite DATETIME text or PostgreSQL timestamptz) reads back
// every timestamp to the microsecond after it, keeps its foreign keys and
// their cascades, and never reuses an event seq, even when the newest events
// were deleted before the migration.
func TestIntegerTimestampsMigration(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		opts := storeOptions(t, kind)
		before := store.MigrationIndex("0004_integer_timestamps") - 1
		if before < 1 {
			t.Fatal("migration 0004_integer_timestamps not found")
		}
		old, err := store.Open(ctx, store.OptionsUpTo(opts, before))
		if err != nil {
			t.Fatal(err)
		}
		// Rows as the code before 0004 wrote them: time.Time values.
		created := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
		updated := time.Date(2026, 11, 12, 13, 14, 15, 100000000, time.UTC) // a fraction with trailing zeros
		expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)              // none at all
		for _, st := range []struct {
			sql  string
			args []any
		}{
			{"INSERT INTO settings (id, global_permissions, global_version, auth_version, created_at, updated_at) VALUES (1, 0, 1, 7, ?, ?)", []any{created, updated}},
			{"INSERT INTO users (id, username, username_key, display_name, display_name_key, email, email_key, status, is_owner, version, created_at, updated_at) VALUES ('u1', 'Alice', 'alice', 'Alice A', 'alice a', NULL, NULL, 'active', true, 3, ?, ?)", []any{created, updated}},
			{"INSERT INTO roles (id, name, position, color, permissions, version, created_at, updated_at) VALUES ('mods', 'Mods', 1, NULL, 0, 1, ?, ?)", []any{created, updated}},
			{"INSERT INTO user_roles (user_id, role_id, created_at) VALUES ('u1', 'mods', ?)", []any{created}},
			{"INSERT INTO channels (id, name, topic, version, overwrites_version, created_at, updated_at) VALUES ('ops', 'Ops', NULL, 2, 1, ?, ?)", []any{created, updated}},
			{"INSERT INTO tokens (id, user_id, name, hash, created_at, expires_at) VALUES ('t1', 'u1', 'x', 'h1', ?, ?)", []any{created, expires}},
			{"INSERT INTO tokens (id, user_id, name, hash, created_at, expires_at) VALUES ('t2', 'u1', 'y', 'h2', ?, NULL)", []any{created}},
			{"INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES ('user.created', NULL, 'user:u1', '{}', NULL, ?)", []any{created}},
			{"INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES ('role.created', NULL, 'role:mods', '{}', NULL, ?)", []any{updated}},
			{"INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES ('channel.created', NULL, 'channel:ops', '{}', NULL, ?)", []any{updated}},
			{"DELETE FROM events WHERE type = 'channel.created'", nil}, // the newest event is gone
		} {
			if err := old.ExecForTest(st.sql, st.args...); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}

		s, err := store.Open(ctx, opts)
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
		defer s.Close()
		u, err := s.User(ctx, "u1")
		if err != nil {
			t.Fatal(err)
		}
		if !u.CreatedAt.Equal(created) || !u.UpdatedAt.Equal(updated) || u.Version != 3 || len(u.Roles) != 1 || u.Roles[0] != "mods" {
			t.Fatalf("user after the migration: %+v", u)
		}
		c, err := s.GetChannel(ctx, "ops")
		if err != nil || !c.CreatedAt.Equal(created) || !c.UpdatedAt.Equal(updated) {
			t.Fatalf("channel after the migration: %+v, %v", c, err)
		}
		cred, err := s.Credentials(ctx, "h1")
		if err != nil || cred.ExpiresAt == nil || !cred.ExpiresAt.Equal(expires) {
			t.Fatalf("token after the migration: %+v, %v", cred, err)
		}
		if cred, err := s.Credentials(ctx, "h2"); err != nil || cred.ExpiresAt != nil {
			t.Fatalf("token without expiry after the migration: %+v, %v", cred, err)
		}
		evs, _, err := s.ListEvents(ctx, store.EventFilter{}, 10)
		if err != nil || len(evs) != 2 || !evs[0].CreatedAt.Equal(updated) || !evs[1].CreatedAt.Equal(created) {
			t.Fatalf("events after the migration: %+v, %v", evs, err)
		}
		since := updated
		if evs, _, err := s.ListEvents(ctx, store.EventFilter{Since: &since}, 10); err != nil || len(evs) != 1 || evs[0].Type != "role.created" {
			t.Fatalf("events since %v after the migration: %+v, %v", since, evs, err)
		}
		committed, err := s.Write(ctx, func(tx *store.Tx) error {
			err := tx.AppendEvent(ctx, model.Event{Type: "channel.deleted", Subject: "channel:ops"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if seq := committed[0].Seq; seq != 4 {
			t.Fatalf("the first event after the migration has seq %d, want 4 (3 was used before)", seq)
		}
		// Foreign keys hold and cascade: deleting the user takes their
		// role assignment and tokens.
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			_, err := tx.DeleteUser(ctx, "u1")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Credentials(ctx, "h1"); !errors.Is(err, apperr.ErrUnauthenticated) {
			t.Fatalf("a deleted user's token after the migration: %v, want it gone", err)
		}
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			return tx.ExecForTestInTx(ctx, "INSERT INTO user_roles (user_id, role_id, created_at) VALUES ('nobody', 'mods', 0)")
		}); err == nil {
			t.Fatal("a user_roles row for a missing user was accepted: foreign keys are off after the migration")
		}
	})
}

// TestBigWriteTablesLeaveRoomInTheirPages: on PostgreSQL the tables whose
// rows big writes update by the hundred are stored with room in each page,
// so those updates stay in their pages (HOT) and write no index again.
func TestBigWriteTablesLeaveRoomInTheirPages(t *testing.T) {
	opts := store.Options{DatabaseURL: testenv.FreshPostgres(t)}
	s, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, table := range []string{"users", "channels", "roles"} {
		err := s.ExecForTest(`DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = '` + table + `'::regclass AND 'fillfactor=70' = ANY(reloptions)) THEN
    RAISE EXCEPTION 'no fillfactor';
  END IF;
END $$`)
		if err != nil {
			t.Errorf("%s: %v", table, err)
		}
	}
}

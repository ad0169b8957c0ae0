// Package bulk writes fixtures straight into a Guildhall database, for
// scenarios the API would take minutes to build (a million users: 253 s
// through POST /api/users, a long audit log). This package is all the
// tools know of the product's store: what it calls, and the one statement
// of its own.
package bulk

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

const (
	// PerTransaction is how many users one write transaction of the store
	// inserts.
	PerTransaction = 2000
	// PerStatement is how many users one copying statement inserts on
	// PostgreSQL.
	PerStatement = 50_000
)

// Users inserts n active users into the store in dataDir (SQLite), or at
// databaseURL when it is a postgres:// URL, which no server may be using,
// and returns their IDs. User i is named by name(i); the IDs
// are UUIDv7 as the server makes them, increasing with i, so the users
// list in the order of i, after those already there. No event is written
// (no user.created each, which only the audit log would show).
//
// On SQLite each user goes through the product's store: store.Open, then
// Store.Write with Tx.InsertUser PerTransaction times in each, then
// Store.Close. On PostgreSQL, where each Tx.InsertUser is a round trip
// (a million of them took minutes), only the first user does; the others
// are copies of the row it wrote, made by PostgreSQL itself (copyUsers).
func Users(ctx context.Context, dataDir, databaseURL string, n int, name func(i int) (username, displayName string)) ([]string, error) {
	opts := store.Options{DataDir: dataDir, DatabaseURL: databaseURL}
	ids := make([]string, n)
	for i := range ids {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		ids[i] = id.String()
	}
	s, err := store.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	through := n
	if store.IsPostgresURL(opts.DatabaseURL) {
		through = min(n, 1)
	}
	err = insertUsers(ctx, s, ids[:through], name)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("bulk users: close: %w", cerr)
	}
	if err == nil && through < n {
		err = copyUsers(ctx, opts.DatabaseURL, ids, through, name)
	}
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// insertUsers writes the users of ids through the store's write API.
func insertUsers(ctx context.Context, s *store.Store, ids []string, name func(i int) (string, string)) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	for from := 0; from < len(ids); from += PerTransaction {
		to := min(from+PerTransaction, len(ids))
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := from; i < to; i++ {
				username, display := name(i)
				u := model.User{ID: ids[i], Username: username, DisplayName: display, Status: model.StatusActive, CreatedAt: now, UpdatedAt: now}
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return fmt.Errorf("user %d (%s): %w", i, username, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bulk users: %w", err)
		}
	}
	return nil
}

// copyRows makes users from the row of user $1, which the store wrote: the
// row as JSON, with the ID, the names and their lower-cased keys (what
// Tx.InsertUser derives from the names) replaced, made a users row again.
// Every other column, present or added later, keeps the template's value.
// Of the schema it knows the table users and those five columns. (LATERAL:
// (jsonb_populate_record(...)).* would call the function once per column,
// ten times slower.)
const copyRows = `INSERT INTO users
SELECT r.* FROM users t, unnest($2::text[], $3::text[], $4::text[]) AS v(id, username, display_name),
LATERAL jsonb_populate_record(NULL::users, to_jsonb(t) || jsonb_build_object(
	'id', v.id, 'username', v.username, 'username_key', lower(v.username),
	'display_name', v.display_name, 'display_name_key', lower(v.display_name))) r
WHERE t.id = $1`

// copyUsers inserts users from..len(ids)-1 as copies of user 0's row,
// PerStatement to a statement.
func copyUsers(ctx context.Context, databaseURL string, ids []string, from int, name func(i int) (string, string)) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("bulk users: %w", err)
	}
	defer conn.Close(context.Background())
	for ; from < len(ids); from += PerStatement {
		to := min(from+PerStatement, len(ids))
		usernames, displays := make([]string, 0, to-from), make([]string, 0, to-from)
		for i := from; i < to; i++ {
			u, d := name(i)
			usernames, displays = append(usernames, u), append(displays, d)
		}
		tag, err := conn.Exec(ctx, copyRows, ids[0], ids[from:to], usernames, displays)
		if err != nil {
			return fmt.Errorf("bulk users %d..%d: %w", from, to-1, err)
		}
		if tag.RowsAffected() != int64(to-from) {
			return fmt.Errorf("bulk users %d..%d: %d rows inserted, want %d (is user 0 there?)", from, to-1, tag.RowsAffected(), to-from)
		}
	}
	return nil
}

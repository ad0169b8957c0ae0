package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3" // the sqlite3 driver, as the CLI would open the file

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestHandMadeChangesHold: a token deleted, a user
// suspended or a role's permissions taken away by hand (psql, sqlite3; not
// through the API) governs an instance whose cache holds the state before:
// the change log's triggers log it, whoever writes. On SQLite the very
// next request; on PostgreSQL, whose instance answers from memory under
// its lease, the requests after it heard the commit's notification, within
// a heartbeat at most (docs/design.md, "Leases"; tested with a second of
// slack for a busy machine: the bound is a requirement, not a speed
// target).
func TestHandMadeChangesHold(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		e := testenv.Start(t, kind)
		var exec func(stmt string, args ...any) error
		table := func(name string) string { return name }
		if kind == testenv.Postgres {
			u, err := url.Parse(e.Config.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			schema := u.Query().Get("search_path")
			table = func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
			operator, err := pgx.Connect(ctx, testenv.PostgresURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = operator.Close(ctx) })
			exec = func(stmt string, args ...any) error {
				_, err := operator.Exec(ctx, strings.ReplaceAll(stmt, "?", "$1"), args...)
				return err
			}
		} else {
			db, err := sql.Open("sqlite3", "file:"+filepath.Join(e.Config.DataDir, "guildhall.db")+"?_busy_timeout=10000")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			exec = func(stmt string, args ...any) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.Exec(stmt, args...); err != nil {
					return err
				}
				return tx.Commit()
			}
		}

		bob, carol, dave := e.NewUser("bob"), e.NewUser("carol"), e.NewUser("dave")
		e.NewRole("mods", "MANAGE_ROLES")
		e.Assign(dave.ID, "mods")
		warm := func(r testenv.Req, want int) {
			t.Helper()
			for range 3 { // cached from the first on
				e.Must(want, r)
			}
		}
		bobReads := testenv.Req{Method: "GET", Path: "/users/" + bob.ID, Token: bob.Token}
		carolReads := testenv.Req{Method: "GET", Path: "/users/" + carol.ID, Token: carol.Token}
		daveReadsBobs := testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/permissions", Token: dave.Token}
		warm(bobReads, http.StatusOK)
		warm(carolReads, http.StatusOK)
		warm(daveReadsBobs, http.StatusOK)

		for _, c := range []struct {
			what string
			sql  string
			arg  string
			req  testenv.Req
			want int
		}{
			{"a token deleted", "DELETE FROM " + table("tokens") + " WHERE user_id = ?", bob.ID, bobReads, http.StatusUnauthorized},
			{"a user suspended", "UPDATE " + table("users") + " SET status = 'suspended' WHERE id = ?", carol.ID, carolReads, http.StatusUnauthorized},
			{"a role's permissions taken away", "UPDATE " + table("roles") + " SET permissions = 0 WHERE id = ?", "mods", daveReadsBobs, http.StatusForbidden},
		} {
			if err := exec(c.sql, c.arg); err != nil {
				t.Fatalf("%s: %v", c.sql, err)
			}
			deadline := time.Now().Add(fresh.DefaultLease/4 + time.Second)
			for {
				r := e.Do(c.req)
				if r.Status == c.want {
					break
				}
				if kind == testenv.SQLite || time.Now().After(deadline) {
					t.Errorf("after %s by hand, the next request: %s; want %d", c.what, r, c.want)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	})
}

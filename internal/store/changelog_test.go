package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3" // the sqlite3 driver, as an operator's sqlite3 would open the file

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// pgSchema opens a store on a fresh PostgreSQL schema with one user, and a
// connection to the database whose search_path does not name that schema,
// as an operator's psql session would be. The store has no lease, so its
// every request asks the change log: what these tests hold is what the log
// tells (lease_test.go holds how soon a lease hears it).
func pgSchema(t *testing.T) (s *store.Store, schema string, alice model.User, operator *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.FreshPostgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema = u.Query().Get("search_path")
	s, err = store.Open(ctx, store.Options{DatabaseURL: dbURL, NoLeases: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	alice = seedAlice(t, s)
	operator, err = pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = operator.Close(ctx) })
	return s, schema, alice, operator
}

// execTx runs statements in one transaction on conn and commits it.
func execTx(t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, sql := range stmts {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// literal quotes s as an SQL string.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// operatorOf is a session on a store's database outside Guildhall, as an
// operator's psql or sqlite3 would be: exec runs statements in one
// transaction; table names a table of the store's schema.
func operatorOf(t *testing.T, kind string, opts store.Options) (exec func(stmts ...string), table func(string) string) {
	t.Helper()
	ctx := context.Background()
	if kind == testenv.Postgres {
		u, err := url.Parse(opts.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		schema := u.Query().Get("search_path")
		conn, err := pgx.Connect(ctx, testenv.PostgresURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		return func(stmts ...string) { t.Helper(); execTx(t, conn, stmts...) },
			func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(opts.DataDir, "guildhall.db")+"?_busy_timeout=10000&_foreign_keys=on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return func(stmts ...string) {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			for _, s := range stmts {
				if _, err := tx.Exec(s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		},
		func(name string) string { return name }
}

// TestChangeLogCoversEveryTable: every table of the schema is either one
// whose writes the change log logs (with its triggers) or one that no
// cached read reads. A new table must be put in one of the two lists
// (internal/store/changelog.go).
func TestChangeLogCoversEveryTable(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		opts := storeOptions(t, kind)
		s, err := store.Open(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		logged, unlogged := store.ChangeLogTables()
		tables, triggers := schemaObjects(t, kind, opts)
		for _, table := range tables {
			if !slices.Contains(logged, table) && !slices.Contains(unlogged, table) {
				t.Errorf("table %s is in neither changeLogTables nor unloggedTables", table)
			}
		}
		for _, table := range logged {
			want := []string{table + "_log_insert", table + "_log_update", table + "_log_delete"}
			if kind == testenv.Postgres {
				want = []string{table + "_log", table + "_log_truncate"}
			}
			for _, w := range want {
				if !slices.Contains(triggers[table], w) {
					t.Errorf("table %s lacks its trigger %s (has %v)", table, w, triggers[table])
				}
			}
		}
	})
}

// schemaObjects lists the tables of the store's schema, and the triggers of
// each (on PostgreSQL, only those that fire always, replica sessions
// included).
func schemaObjects(t *testing.T, kind string, opts store.Options) ([]string, map[string][]string) {
	t.Helper()
	ctx := context.Background()
	triggers := map[string][]string{}
	var tables []string
	if kind == testenv.Postgres {
		u, _ := url.Parse(opts.DatabaseURL)
		schema := u.Query().Get("search_path")
		conn, err := pgx.Connect(ctx, testenv.PostgresURL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, _ := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
		if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		rows, _ = conn.Query(ctx, `SELECT c.relname, g.tgname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND g.tgenabled = 'A'`, schema)
		pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Trigger string }])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pairs {
			triggers[p.Table] = append(triggers[p.Table], p.Trigger)
		}
		return tables, triggers
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(opts.DataDir, "guildhall.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT type, name, tbl_name FROM sqlite_master WHERE type IN ('table', 'trigger') AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ, name, table string
		if err := rows.Scan(&typ, &name, &table); err != nil {
			t.Fatal(err)
		}
		if typ == "table" {
			tables = append(tables, name)
		} else {
			triggers[table] = append(triggers[table], name)
		}
	}
	return tables, triggers
}

// TestCacheSeesHandMadeChangesPerTable: a change made by hand (psql,
// sqlite3: not through Guildhall) to each logged table reaches the cached
// read that depends on it, on a store that had it cached: the user
// (users), their roles (user_roles) in position order (roles), a channel
// (channels), its overwrites (overwrites), the global permissions
// (settings), a token (tokens). Leaving a table out of changeLogTables
// fails its case. PostgreSQL's store has no lease: the next request asks
// (lease_test.go holds how soon a lease hears a change by hand).
func TestCacheSeesHandMadeChangesPerTable(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		opts := storeOptions(t, kind)
		opts.NoLeases = true
		s, err := store.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		alice := seedAlice(t, s)
		now := model.Now()
		write(t, s, func(ctx context.Context, tx *store.Tx) error {
			for _, id := range []string{"low", "high"} {
				if _, err := tx.InsertRole(ctx, model.Role{ID: id, Name: id, CreatedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
				if _, err := tx.AddUserRole(ctx, alice.ID, id, now); err != nil {
					return err
				}
			}
			if _, err := tx.InsertChannel(ctx, model.Channel{ID: "ops", Name: "ops", CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
			if err := tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetUser, TargetID: alice.ID,
				Allow: permissions.Of(permissions.SendMessages)}); err != nil {
				return err
			}
			return tx.InsertToken(ctx, model.Token{ID: "t1", UserID: alice.ID, Name: "cli", CreatedAt: now}, "hash-of-t1")
		})
		exec, table := operatorOf(t, kind, opts)
		auth := func(f func(a *store.AuthState) string) func() string {
			return func() string {
				a, err := s.AuthState(request(s))
				if err != nil {
					t.Fatal(err)
				}
				return f(a)
			}
		}
		user := func(f func(u model.User) string) func() string {
			return func() string {
				u, err := s.User(request(s), alice.ID)
				if err != nil {
					t.Fatal(err)
				}
				return f(u)
			}
		}
		for _, c := range []struct {
			table string
			read  func() string
			sql   []string
		}{
			{"users", user(func(u model.User) string { return u.DisplayName }),
				[]string{"UPDATE " + table("users") + " SET display_name = 'renamed'"}},
			// "high", created last, took position 1 and moved "low" up to 2:
			// "low,high" until they swap.
			{"roles", user(func(u model.User) string { return strings.Join(u.Roles, ",") }), []string{
				"UPDATE " + table("roles") + " SET position = 100 WHERE id = 'low'",
				"UPDATE " + table("roles") + " SET position = 2 WHERE id = 'high'",
				"UPDATE " + table("roles") + " SET position = 1 WHERE id = 'low'"}},
			{"user_roles", user(func(u model.User) string { return strings.Join(u.Roles, ",") }),
				[]string{"DELETE FROM " + table("user_roles") + " WHERE role_id = 'low'"}},
			{"channels", auth(func(a *store.AuthState) string { c, _ := a.Channel("ops"); return c.Name }),
				[]string{"UPDATE " + table("channels") + " SET name = 'renamed'"}},
			{"overwrites", auth(func(a *store.AuthState) string { l, _, _ := a.Overwrites("ops"); return fmt.Sprint(len(l)) }),
				[]string{"DELETE FROM " + table("overwrites")}},
			{"settings", auth(func(a *store.AuthState) string { g, _ := a.Global(); return fmt.Sprint(g.Names()) }),
				[]string{"UPDATE " + table("settings") + " SET global_permissions = 0"}},
			{"tokens", func() string {
				_, err := s.Credentials(request(s), "hash-of-t1")
				return fmt.Sprint(err)
			}, []string{"DELETE FROM " + table("tokens")}},
		} {
			t.Run(c.table, func(t *testing.T) {
				before, again := c.read(), c.read() // cached
				if again != before {
					t.Fatalf("read %q, then %q", before, again)
				}
				exec(c.sql...)
				if after := c.read(); after == before {
					t.Errorf("after a change of %s by hand, the read still answers %q", c.table, after)
				}
			})
		}
	})
}

// TestChangeLogSeesPostgresSessions: on PostgreSQL, changes made from a
// session whose search_path is another schema, a transaction that writes
// after a savepoint rolled back, a TRUNCATE, and a write in a replica
// session (as a logical replication subscriber applies changes) all reach
// the cache.
func TestChangeLogSeesPostgresSessions(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	// name is what the first read after a change answers; the one after it
	// (from the cache) must agree.
	name := func() string {
		t.Helper()
		first, err := s.User(request(s), alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.User(request(s), alice.ID)
		if err != nil || again.DisplayName != first.DisplayName {
			t.Fatalf("read %q, then %q (%v)", first.DisplayName, again.DisplayName, err)
		}
		return first.DisplayName
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := operator.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	name()
	exec("UPDATE "+users+" SET display_name = 'from psql' WHERE id = $1", alice.ID)
	if got := name(); got != "from psql" {
		t.Fatalf("after an UPDATE from another search_path: %q", got)
	}

	// The triggers fire at once here, inside the savepoint: rolling it back
	// takes back the bump, the change and the setting that says the
	// transaction bumped, so the next write bumps again. Until the commit,
	// reads answer what was.
	id := literal(alice.ID)
	tx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SET CONSTRAINTS ALL IMMEDIATE",
		"SAVEPOINT x",
		"UPDATE " + users + " SET display_name = 'rolled back' WHERE id = " + id,
		"ROLLBACK TO SAVEPOINT x",
		"UPDATE " + users + " SET display_name = 'kept' WHERE id = " + id,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if got := name(); got != "from psql" {
		t.Fatalf("during an uncommitted transaction: %q", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := name(); got != "kept" {
		t.Fatalf("after a transaction with a savepoint rolled back: %q", got)
	}

	write(t, s, func(ctx context.Context, tx *store.Tx) error {
		if _, err := tx.InsertChannel(ctx, model.Channel{ID: "ops", Name: "ops", CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
			return err
		}
		return tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetUser, TargetID: alice.ID,
			Allow: permissions.Of(permissions.SendMessages)})
	})
	overwrites := func() int {
		a, err := s.AuthState(request(s))
		if err != nil {
			t.Fatal(err)
		}
		l, _, _ := a.Overwrites("ops")
		return len(l)
	}
	if n := overwrites(); n != 1 {
		t.Fatalf("%d overwrites", n)
	}
	exec("TRUNCATE " + pgx.Identifier{schema, "overwrites"}.Sanitize())
	if n := overwrites(); n != 0 {
		t.Fatalf("%d overwrites after a TRUNCATE", n)
	}

	execTx(t, operator,
		"SET LOCAL session_replication_role = replica",
		"UPDATE "+users+" SET display_name = 'replicated' WHERE id = "+id)
	if got := name(); got != "replicated" {
		t.Fatalf("after a write in a replica session: %q", got)
	}
}

// TestChangeLogTellsARewrittenHistory: a history that is not the one the
// cache followed, though its versions go on from where the cache stands (a
// commit that was visible and then lost in a crash with synchronous_commit
// off or a failover, after which the next commit takes its version with
// other data), is found by the chain of nonces, and the cache starts over.
func TestChangeLogTellsARewrittenHistory(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	dv := pgx.Identifier{schema, "data_version"}.Sanitize()
	log := pgx.Identifier{schema, "change_log"}.Sanitize()
	read := func() string {
		t.Helper()
		u, err := s.User(request(s), alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		return u.DisplayName
	}
	read()
	if got := read(); got != "alice" {
		t.Fatalf("%q", got)
	}
	var v int64
	if err := operator.QueryRow(ctx, "SELECT v FROM "+dv).Scan(&v); err != nil {
		t.Fatal(err)
	}
	// The lost commit: the row one bump back with another nonce, its log
	// gone, as if the one the cache saw had never happened (the triggers
	// off: the loss is not a change).
	execTx(t, operator,
		"SET LOCAL session_replication_role = replica",
		"ALTER TABLE "+users+" DISABLE TRIGGER users_log",
		"UPDATE "+users+" SET display_name = 'lost'",
		"ALTER TABLE "+users+" ENABLE ALWAYS TRIGGER users_log",
		fmt.Sprintf("DELETE FROM %s WHERE v = %d", log, v),
		fmt.Sprintf("UPDATE %s SET v = %d, nonce = nonce + 1", dv, v-1))
	// The next commit reaches the same version, then one more.
	execTx(t, operator, "UPDATE "+pgx.Identifier{schema, "roles"}.Sanitize()+" SET name = name")
	before := s.CacheStats()
	if got := read(); got != "lost" {
		t.Fatalf("after a rewritten history, the read answers %q", got)
	}
	if st := s.CacheStats(); st.Resets != before.Resets+1 {
		t.Fatalf("the cache did not start over: %+v, then %+v", before, st)
	}
}

// TestCacheWithoutADataVersionRow: with the row deleted by hand, nothing is
// answered from the cache; the next write puts the row back, and the cache
// answers again.
func TestCacheWithoutADataVersionRow(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	dv := pgx.Identifier{schema, "data_version"}.Sanitize()
	read := func() string {
		t.Helper()
		u, err := s.User(request(s), alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		return u.DisplayName
	}
	read()
	read()
	if _, err := operator.Exec(ctx, "DELETE FROM "+dv); err != nil {
		t.Fatal(err)
	}
	before := s.CacheStats()
	if got, again := read(), read(); got != "alice" || again != got {
		t.Fatalf("without the row: %q, %q", got, again)
	}
	if st := s.CacheStats(); st.Hits != before.Hits {
		t.Fatalf("answered from the cache without a data version: %+v, then %+v", before, st)
	}
	if _, err := operator.Exec(ctx, "UPDATE "+users+" SET display_name = 'row back'"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := operator.QueryRow(ctx, "SELECT count(*) FROM "+dv).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d data_version rows after a write, %v", n, err)
	}
	if got := read(); got != "row back" {
		t.Fatalf("after the write: %q", got)
	}
	before = s.CacheStats()
	if got := read(); got != "row back" {
		t.Fatalf("after the write: %q", got)
	}
	if st := s.CacheStats(); st.Hits != before.Hits+1 {
		t.Fatalf("the cache does not answer again: %+v, then %+v", before, st)
	}
}

// TestChangeLogPrunedPastTheCache: an instance whose place in the change
// log was pruned (it answered nothing for a long while) finds the hole and
// starts over, on both stores. PostgreSQL's store has no lease: the next
// request asks (with one, the request may come before the change by hand
// is heard, within the bound lease_test.go holds).
func TestChangeLogPrunedPastTheCache(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		opts := storeOptions(t, kind)
		opts.NoLeases = true
		s, err := store.Open(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		alice := seedAlice(t, s)
		exec, table := operatorOf(t, kind, opts)
		read := func() string {
			t.Helper()
			u, err := s.User(request(s), alice.ID)
			if err != nil {
				t.Fatal(err)
			}
			return u.DisplayName
		}
		read()
		exec("UPDATE " + table("users") + " SET display_name = 'pruned'")
		exec("DELETE FROM " + table("change_log"))
		before := s.CacheStats()
		if got := read(); got != "pruned" {
			t.Fatalf("after the log was pruned past the cache: %q", got)
		}
		if st := s.CacheStats(); st.Resets != before.Resets+1 {
			t.Fatalf("the cache did not start over: %+v, then %+v", before, st)
		}
		if n, err := s.PruneChangeLog(context.Background()); err != nil || n != 0 {
			t.Fatalf("pruning a short log: %d, %v", n, err)
		}
	})
}

// TestChangeLogMigrationBesideAnOlderWriter: an instance of the version
// before migration 0012 is in the middle of a write (a user suspended, then
// the credentials version moved: users, then settings) when an instance of
// this version starts and migrates; neither fails (creating the triggers
// locks the tables in another order, so the migration takes the writers'
// lock first).
func TestChangeLogMigrationBesideAnOlderWriter(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.FreshPostgres(t)
	old, err := store.Open(ctx, store.OptionsUpTo(store.Options{DatabaseURL: dbURL}, store.MigrationIndex("0012_change_log")-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	// The older version's statements, written out: this version's models
	// know columns its schema does not have yet.
	if err := old.ExecForTest(`INSERT INTO settings (id, global_permissions, global_version, auth_version, credentials_version, created_at, updated_at)
VALUES (1, 0, 1, 1, 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	if err := old.ExecForTest(`INSERT INTO users (id, username, username_key, display_name, display_name_key, status, is_owner, version, created_at, updated_at)
VALUES ('u1', 'alice', 'alice', 'alice', 'alice', 'active', false, 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	if _, err := old.Write(ctx, func(tx *store.Tx) error {
		if err := tx.ExecForTestInTx(ctx, "UPDATE users SET status = 'suspended' WHERE id = 'u1'"); err != nil {
			return err
		}
		go func() {
			s, err := store.Open(ctx, store.Options{DatabaseURL: dbURL})
			if err == nil {
				err = s.Close()
			}
			migrated <- err
		}()
		time.Sleep(300 * time.Millisecond) // the migration is waiting now
		return tx.ExecForTestInTx(ctx, "UPDATE settings SET credentials_version = credentials_version + 1")
	}); err != nil {
		t.Fatalf("the older instance's write: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the new instance's start: %v", err)
	}
}

// TestChangeLogFunctionsFollowARenamedSchema: the triggers' functions name
// their schema; after the schema is renamed, the next start installs them
// for the new name, and writes and the cache work as before.
func TestChangeLogFunctionsFollowARenamedSchema(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	renamed := schema + "_renamed"
	if _, err := operator.Exec(ctx, "ALTER SCHEMA "+pgx.Identifier{schema}.Sanitize()+" RENAME TO "+pgx.Identifier{renamed}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = operator.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{renamed}.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", renamed)
	u.RawQuery = q.Encode()
	s2, err := store.Open(ctx, store.Options{DatabaseURL: u.String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	for range 2 {
		if _, err := s2.User(request(s2), alice.ID); err != nil {
			t.Fatal(err)
		}
	}
	write(t, s2, func(ctx context.Context, tx *store.Tx) error {
		u := alice
		u.DisplayName = "after the rename"
		_, err := tx.UpdateUser(ctx, u)
		return err
	})
	if got, err := s2.User(request(s2), alice.ID); err != nil || got.DisplayName != "after the rename" {
		t.Fatalf("after the rename: %+v, %v", got, err)
	}
}

// TestChangeLogPerSchema: one transaction that writes the tables of two
// deployments (two schemas) logs in both: each one's next read sees its
// change.
func TestChangeLogPerSchema(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	a, schemaA, alice, operator := pgSchema(t)
	b, schemaB, bob, _ := pgSchema(t)
	for range 2 { // cached
		if _, err := a.User(request(a), alice.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.User(request(b), bob.ID); err != nil {
			t.Fatal(err)
		}
	}
	execTx(t, operator,
		"UPDATE "+pgx.Identifier{schemaA, "users"}.Sanitize()+" SET display_name = 'both'",
		"UPDATE "+pgx.Identifier{schemaB, "users"}.Sanitize()+" SET display_name = 'both'")
	for _, c := range []struct {
		s  *store.Store
		id string
	}{{a, alice.ID}, {b, bob.ID}} {
		if u, err := c.s.User(request(c.s), c.id); err != nil || u.DisplayName != "both" {
			t.Errorf("after one transaction wrote both schemas: %+v, %v", u, err)
		}
	}
	_ = ctx
}

// TestWriteOutlastsADeadlockWithPsql: another program's transaction logs
// at its commit, where its first change bumps the data version and updates
// the settings row (the version counters of earlier releases). A write of
// the service that changed the settings row holds it while it goes on.
// When the other transaction holds a row the write waits for, and commits
// meanwhile, its logging waits for the settings row: PostgreSQL ends one of
// them to break the cycle, and the write, if it is the one, runs again and
// succeeds. (A write that read back its changes holds the version row too,
// with the same outcome.)
func TestWriteOutlastsADeadlockWithPsql(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	optx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = optx.Rollback(ctx) }()
	if _, err := optx.Exec(ctx, "UPDATE "+users+" SET display_name = 'by psql' WHERE id = $1", alice.ID); err != nil {
		t.Fatal(err)
	}
	runs := 0
	done := make(chan error, 1)
	go func() {
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			runs++
			if err := tx.SetGlobal(ctx, permissions.DefaultGlobal); err != nil { // holds the settings row from here
				return err
			}
			u := alice
			u.DisplayName = "by the service"
			_, err := tx.UpdateUser(ctx, u) // waits for psql's row
			return err
		})
		done <- err
	}()
	// The write waits for psql's row: only then does psql's commit, which
	// waits for the version row, close the cycle.
	waitUntilBlocking(t, optx, func() {
		select {
		case err := <-done:
			t.Fatalf("the write ended before waiting for psql's row: %v", err)
		default:
		}
	})
	commitErr := optx.Commit(ctx) // waits for the version row: a cycle
	if err := <-done; err != nil {
		t.Fatalf("the write failed after %d runs (psql's commit: %v): %v", runs, commitErr, err)
	}
	if commitErr != nil && !strings.Contains(commitErr.Error(), "40P01") {
		t.Fatalf("psql's commit: %v", commitErr)
	}
	if runs < 2 && commitErr == nil {
		t.Fatal("no deadlock happened: the test did not close the cycle it is about")
	}
	t.Logf("the write ran %d times; psql's commit: %v", runs, commitErr)
	u, err := s.User(request(s), alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.DisplayName != "by the service" {
		t.Fatalf("display name %q, want the service's write", u.DisplayName)
	}
}

// TestWriteSeesWhatCommittedWhileItWaitedForTheLock: a write reads the
// data version in the statement that takes the write lock, and asks the
// change log nothing when its cache stands there. The version must be
// read once the lock is held: psql holds the lock (as an older instance
// would) and suspends alice while a write waits for it; the write must
// then read alice suspended through the cache, and a write with nothing
// committed before it must ask nothing.
func TestWriteSeesWhatCommittedWhileItWaitedForTheLock(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	write(t, s, func(ctx context.Context, tx *store.Tx) error {
		return tx.InsertToken(ctx, model.Token{ID: "t1", UserID: alice.ID, Name: "cli", CreatedAt: model.Now()}, "hash-of-t1")
	})
	// alice's credentials, kept by the cache, which stands at the last
	// version: a write reads them from it and asks nothing.
	if _, err := s.Credentials(request(s), "hash-of-t1"); err != nil {
		t.Fatal(err)
	}
	statusInWrite := func() (string, error) {
		var status string
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			c, err := tx.Credentials(ctx, "hash-of-t1")
			status = c.Status
			return err
		})
		return status, err
	}
	stats := s.CacheStats()
	if st, err := statusInWrite(); err != nil || st != model.StatusActive {
		t.Fatalf("alice %q (%v), want active", st, err)
	}
	if after := s.CacheStats(); after.AtLock-stats.AtLock != 1 || after.Questions != stats.Questions {
		t.Fatalf("%d writes found the cache at the version under the lock, %d questions; want 1 and none",
			after.AtLock-stats.AtLock, after.Questions-stats.Questions)
	}

	optx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = optx.Rollback(ctx) }()
	key := s.WriteLockKey()
	if _, err := optx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	if _, err := optx.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "users"}.Sanitize()+" SET status = $1 WHERE id = $2",
		model.StatusSuspended, alice.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		status string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		st, err := statusInWrite()
		done <- result{st, err}
	}()
	// The write waits for the lock psql holds.
	waitUntilBlocking(t, optx, func() {
		select {
		case r := <-done:
			t.Fatalf("the write ended before waiting for the lock: %q, %v", r.status, r.err)
		default:
		}
	})
	if err := optx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.status != model.StatusSuspended {
		t.Fatalf("the write read alice %q (%v); want suspended, committed before it held the lock", r.status, r.err)
	}
}

// waitUntilBlocking returns once tx blocks another session (a write
// waiting for what it holds); check runs between looks, to fail the test
// when the write ended first.
func waitUntilBlocking(t *testing.T, tx pgx.Tx, check func()) {
	t.Helper()
	ctx := context.Background()
	for waiting := false; !waiting; {
		if _, err := tx.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid)))").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			check()
			time.Sleep(10 * time.Millisecond)
		}
	}
}

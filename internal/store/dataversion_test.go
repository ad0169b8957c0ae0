package store_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// pgSchema opens a store on a fresh PostgreSQL schema with one user, and a
// connection to the database whose search_path does not name that schema,
// as an operator's psql session would be.
func pgSchema(t *testing.T) (s *store.Store, schema string, alice model.User, operator *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.FreshPostgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema = u.Query().Get("search_path")
	s, err = store.Open(ctx, store.Options{DatabaseURL: dbURL})
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

// TestDataVersionCoversEveryTable: every table of the schema is either one
// whose writes move the data version (with its row and TRUNCATE triggers,
// firing also in replica sessions) or one that no cached read reads. A new
// table must be put in one of the two lists.
func TestDataVersionCoversEveryTable(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	_, schema, _, operator := pgSchema(t)
	cached, uncached := store.DataVersionTables()
	rows, err := operator.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < len(cached) {
		t.Fatalf("tables %v: fewer than the cached ones %v", tables, cached)
	}
	for _, table := range tables {
		if !slices.Contains(cached, table) && !slices.Contains(uncached, table) {
			t.Errorf("table %s is in neither cachedTables nor uncachedTables (internal/store/dataversion.go)", table)
		}
	}
	for _, table := range cached {
		var n int
		// tgenabled 'A': fires always, replica sessions included.
		err := operator.QueryRow(ctx, `SELECT count(*) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND g.tgname IN ($2 || '_data_version', $2 || '_data_version_truncate') AND g.tgenabled = 'A'`,
			schema, table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("table %s has %d of its 2 data-version triggers enabled always", table, n)
		}
	}
}

// TestReadCacheSeesHandMadeChanges: on PostgreSQL, changes made outside
// Guildhall move the data version too: an UPDATE from a session whose
// search_path is another schema, a transaction that writes after a
// savepoint rolled back, a TRUNCATE, and a write in a replica session (as a
// logical replication subscriber applies changes).
func TestReadCacheSeesHandMadeChanges(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	// name is what the first read after a change answers; the one after it
	// (from the cache) must agree.
	name := func() string {
		t.Helper()
		first, _, err := s.ReadUser(ctx, alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := s.ReadUser(ctx, alice.ID)
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
	before := s.ReadCacheStats()
	if got := name(); got != "alice" {
		t.Fatalf("display name %q", got)
	}
	if st := s.ReadCacheStats(); st.Hits != before.Hits+2 {
		t.Fatalf("repeated reads were not answered from the cache: %+v, then %+v", before, st)
	}

	exec("UPDATE "+users+" SET display_name = 'from psql' WHERE id = $1", alice.ID)
	if got := name(); got != "from psql" {
		t.Fatalf("after an UPDATE from another search_path: %q", got)
	}

	// The triggers fire at once here, inside the savepoint: rolling it back
	// takes back the bump and the setting that says the transaction
	// bumped, so the next write bumps again.
	// Until the commit, reads answer what was (the bump, made at once, is
	// not visible either).
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

	if _, err := s.Write(ctx, func(tx *store.Tx) error {
		if _, err := tx.InsertChannel(ctx, model.Channel{ID: "ops", Name: "ops", CreatedAt: model.Now(), UpdatedAt: model.Now()}); err != nil {
			return err
		}
		return tx.PutOverwrite(ctx, model.Overwrite{ChannelID: "ops", TargetType: model.TargetUser, TargetID: alice.ID,
			Allow: permissions.Of(permissions.SendMessages)})
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if l, err := s.ReadOverwrites(ctx, "ops"); err != nil || len(l.Items) != 1 {
			t.Fatalf("overwrites %+v, %v", l, err)
		}
	}
	exec("TRUNCATE " + pgx.Identifier{schema, "overwrites"}.Sanitize())
	if l, err := s.ReadOverwrites(ctx, "ops"); err != nil || len(l.Items) != 0 {
		t.Fatalf("overwrites %+v, %v after a TRUNCATE", l, err)
	}

	if got := name(); got != "kept" { // cached as of now
		t.Fatalf("display name %q", got)
	}
	execTx(t, operator,
		"SET LOCAL session_replication_role = replica",
		"UPDATE "+users+" SET display_name = 'replicated' WHERE id = "+id)
	if got := name(); got != "replicated" {
		t.Fatalf("after a write in a replica session: %q", got)
	}
}

// TestReadCacheTellsARepeatedVersionFromTheOneItHolds: a data version
// whose v comes back to the v the cache holds, with other data (a commit
// that was visible and then lost in a crash with synchronous_commit off or a
// failover, after which the next bump reaches the same v), is not the state
// the cache holds: each bump draws a new nonce. The cache then refills at
// the lower v.
func TestReadCacheTellsARepeatedVersionFromTheOneItHolds(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	dv := pgx.Identifier{schema, "data_version"}.Sanitize()
	for range 2 {
		if u, _, err := s.ReadUser(ctx, alice.ID); err != nil || u.DisplayName != "alice" {
			t.Fatalf("%+v, %v", u, err)
		}
	}
	var v int64
	if err := operator.QueryRow(ctx, "SELECT v FROM "+dv).Scan(&v); err != nil {
		t.Fatal(err)
	}
	// The lost commit: the row one bump back, as if the one the cache saw
	// had never happened (the triggers off, as nothing else changes here).
	if _, err := operator.Exec(ctx, "UPDATE "+dv+" SET v = v - 1"); err != nil {
		t.Fatal(err)
	}
	// The next commit reaches the same v, with other data.
	if _, err := operator.Exec(ctx, "UPDATE "+users+" SET display_name = 'after the loss'"); err != nil {
		t.Fatal(err)
	}
	var again int64
	if err := operator.QueryRow(ctx, "SELECT v FROM "+dv).Scan(&again); err != nil || again != v {
		t.Fatalf("data version %d, %v; the test needs it back at %d", again, err, v)
	}
	before := s.ReadCacheStats()
	for range 2 {
		if u, _, err := s.ReadUser(ctx, alice.ID); err != nil || u.DisplayName != "after the loss" {
			t.Fatalf("after the repeated version: %+v, %v", u, err)
		}
	}
	if st := s.ReadCacheStats(); st.Hits != before.Hits+1 || st.Misses != before.Misses+1 {
		t.Fatalf("after the repeated version, one miss then one hit: %+v, then %+v", before, st)
	}

	// A state put back whole (a restore of an older dump, its row
	// included) holds the data of its row: the cache refills at it.
	if _, err := operator.Exec(ctx, "UPDATE "+dv+" SET v = 1"); err != nil {
		t.Fatal(err)
	}
	before = s.ReadCacheStats()
	for range 2 {
		if _, _, err := s.ReadUser(ctx, alice.ID); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.ReadCacheStats(); st.Hits != before.Hits+1 {
		t.Fatalf("at a lower v, the cache did not refill: %+v, then %+v", before, st)
	}
}

// TestReadCacheWithoutADataVersionRow: with the row deleted by hand, reads
// go to the database, and what the cache held is dropped; the next write
// puts the row back, and the cache answers again.
func TestReadCacheWithoutADataVersionRow(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	users := pgx.Identifier{schema, "users"}.Sanitize()
	dv := pgx.Identifier{schema, "data_version"}.Sanitize()
	read := func() string {
		t.Helper()
		u, _, err := s.ReadUser(ctx, alice.ID)
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
	before := s.ReadCacheStats()
	if got := read(); got != "alice" {
		t.Fatalf("without the row: %q", got)
	}
	if st := s.ReadCacheStats(); st.Hits != before.Hits {
		t.Fatalf("answered from the cache without a data version: %+v, then %+v", before, st)
	}
	if _, err := operator.Exec(ctx, "UPDATE "+users+" SET display_name = 'row back'"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := operator.QueryRow(ctx, "SELECT count(*) FROM "+dv).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d data_version rows after a write, %v", n, err)
	}
	before = s.ReadCacheStats()
	if got, again := read(), read(); got != "row back" || again != got {
		t.Fatalf("after the write: %q, then %q", got, again)
	}
	if st := s.ReadCacheStats(); st.Hits != before.Hits+1 {
		t.Fatalf("the cache does not answer again: %+v, then %+v", before, st)
	}

	// What the cache held before a read found no row is gone: a row put
	// back by hand as it was, beside a change made with the trigger off,
	// does not bring it back.
	var v, nonce int64
	if err := operator.QueryRow(ctx, "SELECT v, nonce FROM "+dv).Scan(&v, &nonce); err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Exec(ctx, "DELETE FROM "+dv); err != nil {
		t.Fatal(err)
	}
	read()
	execTx(t, operator,
		"ALTER TABLE "+users+" DISABLE TRIGGER users_data_version",
		"UPDATE "+users+" SET display_name = 'while the row was away'",
		"ALTER TABLE "+users+" ENABLE ALWAYS TRIGGER users_data_version",
		fmt.Sprintf("INSERT INTO %s (id, v, nonce) VALUES (1, %d, %d)", dv, v, nonce))
	if got := read(); got != "while the row was away" {
		t.Fatalf("the row put back as it was brought back what the cache held: %q", got)
	}
}

// TestReadCacheSeesHandMadeChangesPerTable: a change made by hand to each
// table the caches depend on reaches the read that depends on it, on an
// instance that had it cached: the user (users), their roles (user_roles)
// in position order (roles), a channel (channels), its overwrites
// (overwrites), and the versions the credentials and authorization caches
// are keyed by (settings; tokens, whose deletion by hand moves the
// credentials version). Leaving one of these tables out of cachedTables
// fails its case.
func TestReadCacheSeesHandMadeChangesPerTable(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	s, schema, alice, operator := pgSchema(t)
	now := model.Now()
	if _, err := s.Write(ctx, func(tx *store.Tx) error {
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
	}); err != nil {
		t.Fatal(err)
	}
	table := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	roles := func() string {
		u, _, err := s.ReadUser(ctx, alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(u.Roles, ",")
	}
	versions := func() string {
		v, err := s.CurrentVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%+v", v)
	}
	for _, c := range []struct {
		table string
		read  func() string
		sql   []string
	}{
		{"users", func() string { u, _, _ := s.ReadUser(ctx, alice.ID); return u.DisplayName },
			[]string{"UPDATE " + table("users") + " SET display_name = 'renamed'"}},
		// "high", created last, took position 1 and moved "low" up to 2:
		// "low,high" until they swap.
		{"roles", roles, []string{
			"UPDATE " + table("roles") + " SET position = 100 WHERE id = 'low'",
			"UPDATE " + table("roles") + " SET position = 2 WHERE id = 'high'",
			"UPDATE " + table("roles") + " SET position = 1 WHERE id = 'low'"}},
		{"user_roles", roles, []string{"DELETE FROM " + table("user_roles") + " WHERE role_id = 'low'"}},
		{"channels", func() string { c, _, _ := s.ReadChannel(ctx, "ops"); return c.Name },
			[]string{"UPDATE " + table("channels") + " SET name = 'renamed'"}},
		{"overwrites", func() string { l, _ := s.ReadOverwrites(ctx, "ops"); return fmt.Sprint(len(l.Items)) },
			[]string{"DELETE FROM " + table("overwrites")}},
		{"settings", versions, []string{"UPDATE " + table("settings") + " SET global_permissions = 0"}},
		{"tokens", versions, []string{"DELETE FROM " + table("tokens")}},
	} {
		t.Run(c.table, func(t *testing.T) {
			before, again := c.read(), c.read() // cached
			if again != before {
				t.Fatalf("read %q, then %q", before, again)
			}
			execTx(t, operator, c.sql...)
			if after := c.read(); after == before {
				t.Errorf("after a change of %s by hand, the read still answers %q", c.table, after)
			}
		})
	}
}

// TestDataVersionMigrationBesideAnOlderWriter: an instance of the version
// before migration 0011 is in the middle of a write (a user suspended, then
// the credentials version moved: users, then settings) when an instance of
// this version starts and migrates; neither fails (creating the triggers
// locks the tables in another order, so the migration takes the writers'
// lock first).
func TestDataVersionMigrationBesideAnOlderWriter(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	dbURL := testenv.FreshPostgres(t)
	old, err := store.Open(ctx, store.OptionsUpTo(store.Options{DatabaseURL: dbURL}, store.MigrationIndex("0011_data_version")-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	alice := seedAlice(t, old)
	migrated := make(chan error, 1)
	if _, err := old.Write(ctx, func(tx *store.Tx) error {
		u := alice
		u.Status = model.StatusSuspended
		if _, err := tx.UpdateUser(ctx, u); err != nil {
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
		return tx.BumpCredentials(ctx)
	}); err != nil {
		t.Fatalf("the older instance's write: %v", err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the new instance's start: %v", err)
	}
}

// TestDataVersionFunctionFollowsARenamedSchema: the triggers' function
// names its schema; after the schema is renamed, the next start installs it
// for the new name, and writes and the cache work as before.
func TestDataVersionFunctionFollowsARenamedSchema(t *testing.T) {
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
		if _, _, err := s2.ReadUser(ctx, alice.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s2.Write(ctx, func(tx *store.Tx) error {
		u := alice
		u.DisplayName = "after the rename"
		_, err := tx.UpdateUser(ctx, u)
		return err
	}); err != nil {
		t.Fatalf("a write after the rename: %v", err)
	}
	if got, _, err := s2.ReadUser(ctx, alice.ID); err != nil || got.DisplayName != "after the rename" {
		t.Fatalf("after the rename: %+v, %v", got, err)
	}
}

// TestDataVersionPerSchema: one transaction that writes the tables of two
// deployments (two schemas) moves both their data versions: each one's next
// read sees its change.
func TestDataVersionPerSchema(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	ctx := context.Background()
	a, schemaA, alice, operator := pgSchema(t)
	b, schemaB, bob, _ := pgSchema(t)
	for range 2 { // cached
		if _, _, err := a.ReadUser(ctx, alice.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.ReadUser(ctx, bob.ID); err != nil {
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
		if u, _, err := c.s.ReadUser(ctx, c.id); err != nil || u.DisplayName != "both" {
			t.Errorf("after one transaction wrote both schemas: %+v, %v", u, err)
		}
	}
}

package store_test

import (
	"context"
	"net/url"
	"slices"
	"testing"

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
	if _, err := s.Write(ctx, func(tx *store.Tx) error {
		if err := tx.EnsureSettings(ctx, permissions.DefaultGlobal); err != nil {
			return err
		}
		var err error
		alice, err = tx.InsertUser(ctx, newUser("alice"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	operator, err = pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = operator.Close(ctx) })
	return s, schema, alice, operator
}

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

	tx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The triggers fire at once here, inside the savepoint: rolling it back
	// takes back the bump and the setting that says the transaction
	// bumped, so the next write bumps again.
	for _, sql := range []string{
		"SET CONSTRAINTS ALL IMMEDIATE",
		"SAVEPOINT x",
		"UPDATE " + users + " SET display_name = 'rolled back' WHERE id = $1",
		"ROLLBACK TO SAVEPOINT x",
		"UPDATE " + users + " SET display_name = 'kept' WHERE id = $1",
	} {
		args := []any{alice.ID}
		if sql[0] != 'U' {
			args = nil
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
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
	tx, err = operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+users+" SET display_name = 'replicated' WHERE id = $1", alice.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := name(); got != "replicated" {
		t.Fatalf("after a write in a replica session: %q", got)
	}
}

// TestReadCacheTellsARestoredVersionFromTheCurrentOne: a data_version row
// put back to a number it showed before (a restore of an older dump under a
// running instance, against the instructions) is not the state the cache
// holds: the transaction that set it differs, and the read goes to the
// database.
func TestReadCacheTellsARestoredVersionFromTheCurrentOne(t *testing.T) {
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
	var v, xid int64
	if err := operator.QueryRow(ctx, "SELECT v, xid FROM "+dv).Scan(&v, &xid); err != nil {
		t.Fatal(err)
	}
	// The restored state: other data, the same v, set by another
	// transaction (the restore's), with the trigger off as a restore may
	// have it.
	tx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"ALTER TABLE " + users + " DISABLE TRIGGER users_data_version",
		"UPDATE " + users + " SET display_name = 'restored'",
		"ALTER TABLE " + users + " ENABLE ALWAYS TRIGGER users_data_version",
		"UPDATE " + dv + " SET xid = txid_current()",
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var v2 int64
	if err := operator.QueryRow(ctx, "SELECT v FROM "+dv).Scan(&v2); err != nil || v2 != v {
		t.Fatalf("data version %d, %v; the test needs it unchanged (%d)", v2, err, v)
	}
	if u, _, err := s.ReadUser(ctx, alice.ID); err != nil || u.DisplayName != "restored" {
		t.Fatalf("after the restore: %+v, %v", u, err)
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
	tx, err := operator.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{schemaA, schemaB} {
		if _, err := tx.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "users"}.Sanitize()+" SET display_name = 'both'"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s  *store.Store
		id string
	}{{a, alice.ID}, {b, bob.ID}} {
		if u, _, err := c.s.ReadUser(ctx, c.id); err != nil || u.DisplayName != "both" {
			t.Errorf("after one transaction wrote both schemas: %+v, %v", u, err)
		}
	}
}

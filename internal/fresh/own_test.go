package fresh_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"

	. "github.com/guildhall/guildhall/internal/fresh"
)

// TestInstallReplacesOwnChangesOfAnotherShape: a database whose
// own_changes returns other columns (as a build of another shape would
// leave it) gets this build's at the next start, where CREATE OR REPLACE
// alone fails.
func TestInstallReplacesOwnChangesOfAnotherShape(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	ctx := context.Background()
	for _, q := range []string{"DROP FUNCTION own_changes()",
		"CREATE FUNCTION own_changes() RETURNS TABLE (tbl TEXT) LANGUAGE sql AS 'SELECT 1::text'"} {
		if _, err := w.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := Install(ctx, tx, Registry{Logged: []Table{{Name: "gadgets", LogAs: "gadgets", Key: "id"}}}, &w.pg); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var columns int
	if err := w.db.QueryRow("SELECT cardinality(proallargtypes) FROM pg_proc WHERE oid = to_regprocedure('own_changes()')").Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if columns != 2 {
		t.Fatalf("own_changes returns %d columns after the install, want 2 (tbl, key)", columns)
	}
}

// TestOwnChangesAcrossASavepoint: the logging triggers of the service's
// write transactions stay deferred until the transaction asks. Reading
// back what it changed (Own) fires those pending and defers the later
// ones again; a savepoint rolled back takes its changes back, the read
// ones too; the version read before the prepare fires the rest. The log
// then holds exactly what committed, under one version.
func TestOwnChangesAcrossASavepoint(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	ctx := context.Background()
	var before int64
	if err := w.db.QueryRow("SELECT v FROM data_version WHERE id = 1").Scan(&before); err != nil {
		t.Fatal(err)
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	exec := func(q string) {
		t.Helper()
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	own := func() []string {
		t.Helper()
		changes, err := c.Own(ctx, tx.QueryContext, &w.pg, 0)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, ch := range changes {
			keys = append(keys, ch.Key)
		}
		slices.Sort(keys)
		return slices.Compact(keys)
	}
	logged := func(key string) int {
		t.Helper()
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM change_log WHERE key = $1", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	exec(w.pg.LockWrites())
	exec("INSERT INTO gadgets VALUES ('a', 1)")
	if n := logged("a"); n != 0 {
		t.Fatalf("a write's change was logged as its statement ended (%d entries): the triggers fire at every statement", n)
	}
	exec("SAVEPOINT s")
	exec("INSERT INTO gadgets VALUES ('b', 2)")
	if got := own(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("read back %v, want [a b]", got)
	}
	exec("INSERT INTO gadgets VALUES ('x', 3)")
	if n := logged("x"); n != 0 {
		t.Fatalf("a change after the read back was logged as its statement ended (%d entries): the triggers stayed immediate", n)
	}
	exec("ROLLBACK TO SAVEPOINT s")
	if got := own(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after the savepoint rolled back, read back %v, want [a]", got)
	}
	exec("INSERT INTO gadgets VALUES ('c', 4)")
	var v, nonce sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT v, nonce FROM "+QuoteIdent(w.pg.Schema)+".commit_changes()").Scan(&v, &nonce); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !v.Valid || v.Int64 != before+1 {
		t.Fatalf("the transaction's version %v, want %d (the data version bumped once)", v, before+1)
	}
	rows, err := w.db.Query("SELECT key FROM change_log WHERE v = $1 ORDER BY key", v.Int64)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"a", "c"}) {
		t.Fatalf("the log holds %v under the transaction's version, want [a c]", keys)
	}
	var now int64
	if err := w.db.QueryRow("SELECT v FROM data_version WHERE id = 1").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now != v.Int64 {
		t.Fatalf("data version %d after the commit, want %d", now, v.Int64)
	}
}

package sqldb_test

import (
	"context"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// TestSearchPoolPlansOnce: on PostgreSQL, searches run on connections of
// their own that plan their statements once (generic plans), and no other
// statement does; Ping (readiness) fails without them.
func TestSearchPoolPlansOnce(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	db := openDB(t, testenv.Postgres)
	ctx := context.Background()
	mode := func(search bool) string {
		t.Helper()
		c, err := db.ConnForTest(ctx, search)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var m string
		if err := c.QueryRowContext(ctx, "SHOW plan_cache_mode").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if search, read := mode(true), mode(false); search != "force_generic_plan" || read != "auto" {
		t.Fatalf("plan_cache_mode: %q on the search pool, %q on the read pool; want force_generic_plan and auto", search, read)
	}
	// Readiness covers the searches' pool: searches fail without it.
	if err := db.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.CloseSearchPoolForTest(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(ctx); err == nil {
		t.Error("Ping answers nil with the searches' pool closed")
	}
}

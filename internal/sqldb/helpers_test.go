package sqldb_test

import (
	"context"
	"testing"

	"github.com/guildhall/guildhall/internal/sqldb"
	"github.com/guildhall/guildhall/internal/testenv"
)

// openDB opens a database of the kind (testenv.SQLite or testenv.Postgres),
// closed when the test ends.
func openDB(t *testing.T, kind string) *sqldb.DB {
	t.Helper()
	opts := sqldb.Options{DataDir: t.TempDir()}
	if kind == testenv.Postgres {
		opts = sqldb.Options{DatabaseURL: testenv.FreshPostgres(t)}
	}
	db, err := sqldb.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

package sqldb

import (
	"context"
	"database/sql"
)

// Hooks for the package's external tests.

// ConnForTest returns a connection of the read pool or, with search, of the
// pool searches run on (PostgreSQL).
func (db *DB) ConnForTest(ctx context.Context, search bool) (*sql.Conn, error) {
	if search {
		return db.searchStmts.db.Conn(ctx)
	}
	rdb, err := db.read.DB()
	if err != nil {
		return nil, err
	}
	return rdb.Conn(ctx)
}

// CloseSearchPoolForTest closes the pool searches run on (PostgreSQL).
func (db *DB) CloseSearchPoolForTest() error { return db.searchStmts.db.Close() }

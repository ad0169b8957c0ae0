package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"
)

// CommitHooks let the read cache invalidate every instance's memory before
// a write takes effect (internal/fresh's leases, PostgreSQL): VersionSQL
// reads, as the transaction's last statement, the version and nonce the
// change log gave it (NULLs when it logged nothing) and a count, others;
// Prepare gets the three before the commit and returns once the
// transaction may commit, or an error that rolls it back.
//
// LockSQL, when set, takes the write lock instead of the dialect's
// statement: with the lock's key and the transaction's bounds on the lock
// wait and on each statement, in milliseconds, as its arguments, it
// selects the data version (v and nonce, NULLs when there is none) as of
// once the lock is held, which Tx.LockedVersion then gives.
type CommitHooks struct {
	LockSQL    string
	VersionSQL string
	Prepare    func(ctx context.Context, v, nonce, others int64) error
}

// SetCommitHooks sets the hooks, before any write.
func (db *DB) SetCommitHooks(h CommitHooks) { db.commits = h }

// endTransaction is a PostgreSQL write transaction's last statement: the
// notification of its events' last seq (last > 0), delivered to listeners
// when (and only if) the transaction commits, and its version read with
// it, which it then prepares (CommitHooks).
func (db *DB) endTransaction(ctx context.Context, g *gorm.DB, last int64) error {
	h := db.commits
	if h.VersionSQL == "" {
		if last > 0 {
			if err := g.Exec(notifyEvents, db.ns.Channel, fmt.Sprint(last)).Error; err != nil {
				return fmt.Errorf("notify: %w", err)
			}
		}
		return nil
	}
	var row *sql.Row
	if last > 0 {
		row = g.Raw("SELECT pg_notify(?, ?), x.v, x.nonce, x.others FROM ("+h.VersionSQL+") x", db.ns.Channel, fmt.Sprint(last)).Row()
	} else {
		row = g.Raw("SELECT NULL, x.v, x.nonce, x.others FROM (" + h.VersionSQL + ") x").Row()
	}
	var notified any
	var v, nonce sql.NullInt64
	var others int64
	if err := row.Scan(&notified, &v, &nonce, &others); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if !v.Valid {
		return nil
	}
	return h.Prepare(ctx, v.Int64, nonce.Int64, others)
}

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
// change log gave it (NULLs when it logged nothing), a count, others, and
// a text, own (NULL or not); Prepare gets the first three before the
// commit and returns once the transaction may commit, or an error that
// rolls it back. Ended, when set, gets the version, nonce and own of a
// transaction that prepared, once it ended, and whether it is known to
// have committed: the cache follows its own commit with them, and the
// reads that waited for it go on.
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
	Ended      func(v, nonce int64, own string, committed bool)
}

// SetCommitHooks sets the hooks, before any write.
func (db *DB) SetCommitHooks(h CommitHooks) { db.commits = h }

// endTransaction is a PostgreSQL write transaction's last statement: the
// notification of its events' last seq (last > 0), delivered to listeners
// when (and only if) the transaction commits, and its version read with
// it, which it then prepares (CommitHooks). ended, when not nil, is to be
// called once the transaction ended, with whether it committed.
func (db *DB) endTransaction(ctx context.Context, g *gorm.DB, last int64) (ended func(committed bool), err error) {
	h := db.commits
	if h.VersionSQL == "" {
		if last > 0 {
			if err := g.Exec(notifyEvents, db.ns.Channel, fmt.Sprint(last)).Error; err != nil {
				return nil, fmt.Errorf("notify: %w", err)
			}
		}
		return nil, nil
	}
	var row *sql.Row
	if last > 0 {
		row = g.Raw("SELECT pg_notify(?, ?), x.v, x.nonce, x.others, x.own FROM ("+h.VersionSQL+") x", db.ns.Channel, fmt.Sprint(last)).Row()
	} else {
		row = g.Raw("SELECT NULL, x.v, x.nonce, x.others, x.own FROM (" + h.VersionSQL + ") x").Row()
	}
	var notified any
	var v, nonce sql.NullInt64
	var others int64
	var own sql.NullString
	if err := row.Scan(&notified, &v, &nonce, &others, &own); err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	if !v.Valid {
		return nil, nil
	}
	if err := h.Prepare(ctx, v.Int64, nonce.Int64, others); err != nil {
		return nil, err
	}
	if h.Ended == nil {
		return nil, nil
	}
	return func(committed bool) { h.Ended(v.Int64, nonce.Int64, own.String, committed) }, nil
}

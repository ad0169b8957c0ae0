package sqldb

import (
	"database/sql"
	"fmt"

	"gorm.io/gorm"
)

// CommitHooks let the read cache hold a write's answer until its commit
// governs every instance's reads (internal/fresh's leases, PostgreSQL):
// VersionSQL reads, as the transaction's last statement, the version and
// nonce the change log gave it (NULLs when it logged nothing); Committing
// gets them before the commit, and Committed, after it, in the request's
// goroutine (Write), so the writer goes on with the next transaction
// meanwhile.
type CommitHooks struct {
	VersionSQL string
	Committing func(v, nonce int64)
	Committed  func(v int64)
}

// SetCommitHooks sets the hooks, before any write.
func (db *DB) SetCommitHooks(h CommitHooks) { db.commits = h }

// endTransaction is a PostgreSQL write transaction's last statement: the
// notification of its events' last seq (last > 0), delivered to listeners
// when (and only if) the transaction commits, and its version read with
// it. It returns the version, or 0.
func (db *DB) endTransaction(g *gorm.DB, last int64) (int64, error) {
	h := db.commits
	if h.VersionSQL == "" {
		if last > 0 {
			if err := g.Exec(notifyEvents, db.ns.Channel, fmt.Sprint(last)).Error; err != nil {
				return 0, fmt.Errorf("notify: %w", err)
			}
		}
		return 0, nil
	}
	var row *sql.Row
	if last > 0 {
		row = g.Raw("SELECT pg_notify(?, ?), x.v, x.nonce FROM ("+h.VersionSQL+") x", db.ns.Channel, fmt.Sprint(last)).Row()
	} else {
		row = g.Raw("SELECT NULL, x.v, x.nonce FROM (" + h.VersionSQL + ") x").Row()
	}
	var notified any
	var v, nonce sql.NullInt64
	if err := row.Scan(&notified, &v, &nonce); err != nil {
		return 0, fmt.Errorf("notify: %w", err)
	}
	if !v.Valid {
		return 0, nil
	}
	h.Committing(v.Int64, nonce.Int64)
	return v.Int64, nil
}

package sqldb

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/model"
)

// Tx is one request's part of a write transaction (see Write). Its
// statements see the state it will commit on: writers are serialized, and
// the requests before it in the same transaction have already made their
// changes.
type Tx struct {
	Queries
	events    []model.Event
	eventData []string // the events' data, encoded
	batch     *batch
}

// batch is what the requests of one run of a transaction share.
type batch struct {
	shared any
	// locked: the data version read with the write lock (CommitHooks.LockSQL).
	locked               bool
	lockedV, lockedNonce int64
}

// LockedVersion is the data version, v and nonce, that the transaction
// read once it held the write lock; ok is false when it read none (SQLite,
// no LockSQL hook, no version row).
func (tx *Tx) LockedVersion() (v, nonce int64, ok bool) {
	return tx.batch.lockedV, tx.batch.lockedNonce, tx.batch.locked
}

// Shared is the value the requests of one transaction share, made by init
// at the first call of the transaction: what its callers keep of it for
// the others (what the transaction read and changed so far). A batch run
// again with savepoints is a transaction of its own, with a value of its
// own.
func (tx *Tx) Shared(init func() any) any {
	if tx.batch.shared == nil {
		tx.batch.shared = init()
	}
	return tx.batch.shared
}

// WritesSoFar counts the statements of the transaction so far that may
// have written (any but a plain SELECT): while it stays the same, what the
// transaction changed stays the same.
func (tx *Tx) WritesSoFar() int64 { return tx.writes.len() }

// WritesSince returns the statements that may have written after the
// first n (WritesSoFar).
func (tx *Tx) WritesSince(n int64) []Written { return tx.writes.since(n) }

// Span is the span of the write (nil when not traced): its statements run
// under the batch's context, and belong to it.
func (tx *Tx) Span() trace.Span { return tx.span }

// beginJob opens the savepoint of a job of a batch, releasing the previous
// job's (COMMIT releases the last one). On PostgreSQL both go in one round
// trip (several statements without arguments use the simple protocol); on
// SQLite each is a prepared statement, with no round trip to save.
func (tx *Tx) beginJob(ctx context.Context, first bool) error {
	if tx.dialect.Name() == "postgres" {
		stmt := "RELEASE SAVEPOINT gh_job; SAVEPOINT gh_job"
		if first {
			stmt = "SAVEPOINT gh_job"
		}
		return tx.savepoint(ctx, stmt)
	}
	if !first {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT gh_job"); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT gh_job"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	return nil
}

// rollbackJob undoes what a failed job of a batch did; its savepoint stays
// (the next job's beginJob releases it).
func (tx *Tx) rollbackJob(ctx context.Context) error {
	// What the transaction changed is no longer what it was: a rollback
	// counts as a write (WritesSoFar).
	tx.writes.add(Written{Op: "ROLLBACK"})
	if tx.dialect.Name() == "postgres" {
		return tx.savepoint(ctx, "ROLLBACK TO SAVEPOINT gh_job")
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT gh_job"); err != nil {
		return fmt.Errorf("roll back to savepoint: %w", err)
	}
	return nil
}

func (tx *Tx) savepoint(ctx context.Context, stmt string) error {
	tx.count()
	sp := tx.tracer.statement(tx.ctx(ctx), stmt)
	_, err := tx.sqlTx.ExecContext(ctx, stmt)
	EndSpan(sp, err)
	if err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

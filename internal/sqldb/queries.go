package sqldb

import (
	"context"
	"database/sql"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
)

// Queries run statements on one pool: the read pool (DB.Reads), the
// searches' (DB.Searches), or a write transaction's connection (Tx), so a
// transaction never waits on itself. A Queries is a value: copies share
// its pool and its prepared statements.
type Queries struct {
	db      *gorm.DB
	dialect Dialect
	stmts   *stmtCache      // prepared statements of the pool db belongs to
	sqlTx   *sql.Tx         // set inside a write transaction
	txCtx   context.Context // set inside a write transaction: see Tx
	counter *atomic.Int64   // QueryCount
	// writes, inside a write transaction, are its statements that may
	// have written (Tx.WritesSoFar, Tx.WritesSince).
	writes *txWrites
	// txStmts, inside a write transaction, are the statements already
	// bound to it (Queries.stmt).
	txStmts *txStmts
	// held, inside a write transaction, are the rows its requests hold
	// back (held.go), written before any other statement.
	held   *heldRows
	tracer *tracer // nil: tracing off
	// span, inside a write transaction, is the span of the write whose
	// part of the batch q runs (nil: not traced): its statements run under
	// the batch's context, and belong to that span.
	span trace.Span
}

// ctx is the context statements run under. Inside a write transaction it is
// the batch's, never the request's: a request that goes away must not
// interrupt a statement of a transaction other requests share (SQLite rolls
// back the whole transaction when a statement is interrupted).
//
// Outside transactions, SQLite statements run without the request's
// cancellation: with a cancellable context, database/sql and the SQLite
// driver each start a goroutine per statement to watch it (a measurable
// share of a cheap request), and a local, indexed, bounded SQLite read has
// nothing to cancel. PostgreSQL statements keep the request's context: a database that
// hangs must not hold the request.
func (q Queries) ctx(ctx context.Context) context.Context {
	if q.txCtx != nil {
		if q.span != nil {
			return trace.ContextWithSpan(q.txCtx, q.span)
		}
		return q.txCtx
	}
	if q.dialect.Name() == "sqlite" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// With is GORM's builder on q's pool or transaction, under the context
// its statements run under.
func (q Queries) With(ctx context.Context) *gorm.DB { return q.db.WithContext(q.ctx(ctx)) }

// Dialect is the database's.
func (q Queries) Dialect() Dialect { return q.dialect }

// Prepared is how many statements are kept prepared on q's pool.
func (q Queries) Prepared() int {
	q.stmts.mu.RLock()
	defer q.stmts.mu.RUnlock()
	return len(q.stmts.m)
}

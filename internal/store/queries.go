package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
)

// How the store runs SQL, one rule:
//
//   - The hot reads, the ones a request makes on every call and the cache
//     answers (credentials, a user, a page of users), the change log's
//     questions, and the two hot writes, a new user (every member who
//     joins makes it) and the audit events (every write appends them:
//     insertEvents), are constant SQL in hot.go and tx.go, run as
//     statements prepared once per pool (sql.go) and scanned by hand into
//     the model, without reflection. A parameter SQLite's planner reads
//     (a LIMIT) would have it prepare the statement again at every run:
//     a LIMIT's count is dialect.limit's.
//   - Everything else, the writes, the reads of a write transaction that
//     are not hot, the cold reads and the authorization state's parts
//     (authstate.go), goes through GORM's builder on the row types of
//     rows.go; SQL text appears only in the migrations and, for a
//     statement the builder cannot say (an UPDATE ... WHERE id IN
//     (SELECT ...)), as gorm.Expr or a named constant beside its function.
//
// No function does both. There is one read path per question: outside a
// transaction the Store's cached reads (User, ListUsers, Credentials,
// AuthState), inside one the Tx's (GetUser, Credentials, AuthState), which
// share the SQL and the scanners of the hot reads.

// queries are the reads, shared by the store (read pool) and a write
// transaction (its own handle, so a transaction never waits on itself).
type queries struct {
	db      *gorm.DB
	dialect dialect
	stmts   *stmtCache      // prepared statements of the pool db belongs to
	sqlTx   *sql.Tx         // set inside a write transaction
	txCtx   context.Context // set inside a write transaction: see Tx
	counter *atomic.Int64   // QueryCount
	// writes, inside a write transaction, counts its statements that may
	// have written (Tx.own reads what the transaction changed again only
	// after one).
	writes *atomic.Int64
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
func (q queries) ctx(ctx context.Context) context.Context {
	if q.txCtx != nil {
		if q.span != nil {
			return trace.ContextWithSpan(q.txCtx, q.span)
		}
		return q.txCtx
	}
	if q.dialect.name() == "sqlite" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (q queries) with(ctx context.Context) *gorm.DB { return q.db.WithContext(q.ctx(ctx)) }

// notFound turns gorm's record-not-found into a 404 with the detail given.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return apperr.NotFound(format, args...)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}

package sqldb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"gorm.io/gorm"
)

// DefaultStatementTimeout bounds each statement when Options say nothing.
const DefaultStatementTimeout = 5 * time.Second

// txPerStatement is how many statements' time a transaction gets.
const txPerStatement = 4

// boundStatements gives every statement sent through g a deadline of d
// (unless its context has an earlier one): a database that stops answering
// (a frozen or unreachable server, a pool that never frees a connection)
// fails the statement with context.DeadlineExceeded, which Classify makes a
// 503, instead of holding the request for ever.
//
// SQLite statements get none (see stmtCache.withTimeout).
func (db *DB) boundStatements(g *gorm.DB, d time.Duration) error {
	if !db.Postgres() {
		return nil
	}
	const key = "guildhall:cancel_deadline"
	bound := func(cancelAfter bool) func(*gorm.DB) {
		return func(g *gorm.DB) {
			ctx := g.Statement.Context
			if ctx == nil {
				ctx = context.Background()
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d || ctx.Value(unboundedKey{}) != nil {
				return
			}
			ctx, cancel := context.WithTimeout(ctx, d)
			g.Statement.Context = ctx
			if cancelAfter {
				g.InstanceSet(key, cancel)
			} else {
				// Rows are read after the callbacks return: the deadline
				// stays until it passes.
				time.AfterFunc(d, cancel)
			}
		}
	}
	release := func(g *gorm.DB) {
		if c, ok := g.InstanceGet(key); ok {
			c.(context.CancelFunc)()
		}
	}
	cb := g.Callback()
	const name = "guildhall:deadline"
	for _, err := range []error{
		cb.Create().Before("gorm:create").Register(name, bound(true)),
		cb.Create().After("gorm:create").Register(name+"_release", release),
		cb.Query().Before("gorm:query").Register(name, bound(true)),
		cb.Query().After("gorm:query").Register(name+"_release", release),
		cb.Update().Before("gorm:update").Register(name, bound(true)),
		cb.Update().After("gorm:update").Register(name+"_release", release),
		cb.Delete().Before("gorm:delete").Register(name, bound(true)),
		cb.Delete().After("gorm:delete").Register(name+"_release", release),
		cb.Raw().Before("gorm:raw").Register(name, bound(true)),
		cb.Raw().After("gorm:raw").Register(name+"_release", release),
		cb.Row().Before("gorm:row").Register(name, bound(false)),
	} {
		if err != nil {
			return fmt.Errorf("register statement deadline: %w", err)
		}
	}
	return nil
}

// TxContext bounds a transaction outside the writer (its BEGIN, which no
// statement callback sees, included) by a few statements' time.
func (db *DB) TxContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := db.statementTimeout * txPerStatement
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

type unboundedKey struct{}

// Unbounded marks a context whose statements may take as long as they take
// (the migrations, and the lock that makes instances take turns at them).
func Unbounded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unboundedKey{}, true)
}

// withTimeout sets the deadline of the cache's statements (the hot ones that
// bypass GORM and its callbacks). SQLite statements get none: a local file
// does not hang the way a server does (lock waits are bounded by
// busy_timeout), and a cancellable context costs SQLite reads a goroutine
// per statement in database/sql and the driver (see Queries.ctx).
func (c *stmtCache) withTimeout(d time.Duration) *stmtCache {
	if !c.rebind { // SQLite
		d = 0
	}
	c.timeout = d
	return c
}

// bound gives a statement the cache's deadline (unless ctx has an earlier
// one, or is unbounded).
func (c *stmtCache) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c == nil || c.timeout <= 0 || ctx.Value(unboundedKey{}) != nil {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= c.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

// boundRows is bound for a query whose rows are read after it returns: the
// deadline stays until it passes.
func (c *stmtCache) boundRows(ctx context.Context) context.Context {
	if c == nil || c.timeout <= 0 {
		return ctx
	}
	ctx, cancel := c.bound(ctx)
	time.AfterFunc(c.timeout, cancel)
	return ctx
}

// canceledStatementGrace is how long a PostgreSQL statement whose context
// was canceled (its client went away) may still take before its connection
// is closed.
const canceledStatementGrace = time.Second

// cancelHandler decides what a PostgreSQL connection does when the context
// of its statement ends. pgx's default closes the connection at once, and
// opening one again costs a backend's start and every statement's prepare
// and plan. A statement's deadline (the database does not answer) still
// closes it at once: that is what bounds the request. A cancellation, a
// client gone, lets the statement finish (they take milliseconds) and
// keeps the connection; only one still running after
// canceledStatementGrace is cut off. Were each closed at once, every wave
// of clients that leave mid-request (a load balancer's, a load test's)
// would cost as many connections, and the requests behind them would
// wait for new ones.
type cancelHandler struct{ conn net.Conn }

func newCancelHandler(c *pgconn.PgConn) ctxwatch.Handler { return &cancelHandler{conn: c.Conn()} }

func (h *cancelHandler) HandleCancel(ctx context.Context) {
	at := time.Now()
	// A deadline that passed is a deadline, even when a timer of ours
	// canceled the context first (boundRows, boundStatements).
	dl, ok := ctx.Deadline()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) && (!ok || at.Before(dl)) {
		at = at.Add(canceledStatementGrace)
	}
	_ = h.conn.SetDeadline(at)
}

func (h *cancelHandler) HandleUnwatchAfterCancel() { _ = h.conn.SetDeadline(time.Time{}) }

// keepOnCancel gives a connection about to open the cancelHandler.
func keepOnCancel(_ context.Context, cfg *pgx.ConnConfig) error {
	cfg.BuildContextWatcherHandler = newCancelHandler
	return nil
}

// A PostgreSQL instance that stops in the middle of a write transaction
// (its process paused or frozen, its machine cut off) holds the write lock
// that every instance's writes take. Its client cannot end the
// transaction, so the database does, by these bounds, and the others'
// writes go on at most about 9 s after it stopped:
//
//   - each statement of a write transaction ends by writeStatementBound
//     (SET LOCAL statement_timeout, with the lock: boundWrite), so a
//     statement it had sent finishes or fails by then;
//   - a session idle in a transaction is ended after idleInTransaction
//     (idle_in_transaction_session_timeout), which rolls the transaction
//     back and releases the lock: a client stopped between statements, or
//     after its last statement's answer;
//   - the server closes a connection whose data stays unacknowledged for
//     tcpUserTimeout (tcp_user_timeout: a client cut off while the server
//     sends it an answer), and probes an idle connection's peer every
//     second after two idle ones (keepalives: a session-level lock, the
//     migrations', of an instance cut off).
//
// A write transaction's client never leaves it idle for long: between its
// statements it only runs the request's own code, microseconds to
// milliseconds, and before its commit it waits for the prepare of the
// read leases (internal/fresh's lease.go), a lease (2 s) at most.
// idleInTransaction is well above that, on a loaded machine too, and with
// writeStatementBound below the 10 s a stopped instance may hold the
// others up.
const (
	writeStatementBound = 5 * time.Second
	idleInTransaction   = 4 * time.Second
	tcpUserTimeout      = 4 * time.Second
)

// sessionSettings is run on each new PostgreSQL connection: the bounds
// above that are the session's. A setting the URL gives (a runtime
// parameter of the same name) is left as the URL says. They are SET once a
// connection is open, not sent at startup, which a pooler may refuse;
// before PostgreSQL 12 there is no tcp_user_timeout, and the others do.
func sessionSettings(ctx context.Context, c *pgx.Conn) error {
	given := c.Config().RuntimeParams
	set := func(settings ...[2]string) string {
		var b strings.Builder
		for _, s := range settings {
			if _, ok := given[s[0]]; !ok {
				fmt.Fprintf(&b, "SET %s = %s; ", s[0], s[1])
			}
		}
		return b.String()
	}
	ms := func(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }
	if q := set([2]string{"idle_in_transaction_session_timeout", ms(idleInTransaction)},
		[2]string{"tcp_keepalives_idle", "2"}, [2]string{"tcp_keepalives_interval", "1"},
		[2]string{"tcp_keepalives_count", "3"}); q != "" {
		if _, err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("set the session's timeouts: %w", err)
		}
	}
	if q := set([2]string{"tcp_user_timeout", ms(tcpUserTimeout)}); q != "" {
		_, err := c.Exec(ctx, q)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42704" { // undefined_object
			return nil
		}
		if err != nil {
			return fmt.Errorf("set the session's timeouts: %w", err)
		}
	}
	return nil
}

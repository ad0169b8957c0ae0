package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// The hot statements (internal/store's queries.go says which) bypass
// GORM's statement builder and reflection: they are plain SQL run on GORM's
// connection pool through prepared statements (Queries.Query and
// Queries.Exec) that are reused for the life of the DB. A statement is
// prepared once per pool (database/sql then prepares it once per
// connection) and, inside a write transaction, reused through
// sql.Tx.StmtContext, which finds the statement already prepared on the
// writer connection. GORM's statements inside a write transaction go
// through it too (stmtPool), while fewer than maxStatements are kept: the
// hot statements are a fixed set of texts (up to 16 shapes of a page of
// users, and the events' INSERT for each count of rows up to EventChunk),
// kept whatever the bound, and GORM's varied ones fill the rest.

// stmtCache holds the prepared statements of one pool, by their SQL.
type stmtCache struct {
	db      *sql.DB
	rebind  bool // PostgreSQL: ? becomes $1, $2, ...
	mu      sync.RWMutex
	m       map[string]*sql.Stmt
	pending map[string]bool // first met inside a transaction: see prepareIn
	timeout time.Duration   // of each statement (deadline.go)
}

func newStmtCache(db *sql.DB, d Dialect) *stmtCache {
	return &stmtCache{db: db, rebind: d.Name() == "postgres", m: map[string]*sql.Stmt{}, pending: map[string]bool{}}
}

func (c *stmtCache) text(query string) string {
	if c.rebind {
		return rebind(query)
	}
	return query
}

// room reports whether query is kept, or may be.
func (c *stmtCache) room(query string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, kept := c.m[query]
	return kept || c.pending[query] || len(c.m)+len(c.pending) < maxStatements
}

func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[query]
}

// get returns the statement of query, preparing it on the pool the first
// time. It prepares outside the lock: a prepare waits for the database
// (under ctx's deadline), and another request's statement must not wait
// behind it, which would add one deadline per request in line. Two
// requests that prepare the same statement at once keep the first.
func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := c.lookup(query); st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, c.text(query))
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", FirstLine(query), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept := c.m[query]; kept != nil {
		_ = st.Close()
		return kept, nil
	}
	c.m[query] = st
	delete(c.pending, query)
	return st, nil
}

// prepareIn returns the statement for use in tx. A statement not yet in the
// cache cannot be prepared on the pool from inside a transaction when the
// transaction holds the pool's only connection (SQLite's writer): it is
// prepared on the transaction for this once, and remembered for
// preparePending, which the writer calls between transactions.
func (c *stmtCache) prepareIn(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st := c.lookup(query); st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	st, err := tx.PrepareContext(ctx, c.text(query))
	if err != nil {
		return nil, fmt.Errorf("prepare %q: %w", FirstLine(query), err)
	}
	c.mu.Lock()
	c.pending[query] = true
	c.mu.Unlock()
	return st, nil
}

// preparePending prepares on the pool the statements first met inside a
// transaction.
func (c *stmtCache) preparePending(ctx context.Context) error {
	c.mu.RLock()
	n := len(c.pending)
	c.mu.RUnlock()
	if n == 0 {
		return nil
	}
	c.mu.RLock()
	queries := make([]string, 0, n)
	for q := range c.pending {
		queries = append(queries, q)
	}
	c.mu.RUnlock()
	for _, q := range queries {
		if _, err := c.get(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}

// rebind turns ? placeholders into PostgreSQL's $n (the hot SQL has no ?
// inside literals).
func rebind(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// FirstLine is a statement's first line, to name it in an error.
func FirstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i] + " …"
	}
	return q
}

// Query runs a constant SQL query through a reused prepared statement: on
// q's pool, or inside the write transaction when q belongs to one.
func (q Queries) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := q.held.flush(ctx); err != nil {
		return nil, err
	}
	ctx = q.ctx(ctx)
	ctx = q.stmts.boundRows(ctx) // deadline.go
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	q.count()
	q.wrote(query)
	sp := q.tracer.statement(ctx, query)
	rows, err := st.QueryContext(ctx, args...)
	EndSpan(sp, err) // the rows are read after: the span is the statement's, until its first answer
	return rows, err
}

// Exec runs a constant SQL statement like Query.
func (q Queries) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := q.held.flush(ctx); err != nil {
		return nil, err
	}
	q.wrote(query)
	return q.run(ctx, query, args...)
}

// run is Exec, with neither the rows held written first nor the statement
// noted as a write (what writes the rows held).
func (q Queries) run(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = q.ctx(ctx)
	ctx, cancel := q.stmts.bound(ctx) // deadline.go
	defer cancel()
	st, err := q.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	q.count()
	sp := q.tracer.statement(ctx, query)
	res, err := st.ExecContext(ctx, args...)
	EndSpan(sp, err)
	return res, err
}

func (q Queries) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if q.sqlTx != nil {
		if st := q.txStmts.get(query); st != nil {
			return st, nil
		}
		// Tx.StmtContext reuses the statement already prepared on the
		// transaction's connection (preparing it there the first time).
		st, err := q.stmts.prepareIn(ctx, q.sqlTx, query)
		if err == nil {
			q.txStmts.put(query, st)
		}
		return st, err
	}
	return q.stmts.get(ctx, query)
}

// txStmts are the statements a write transaction has bound to itself
// (Tx.StmtContext), kept for its life: the requests of a batch run the same
// few statements, and each binding costs a statement object that the
// transaction keeps, and closes, until it ends.
type txStmts struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// get returns the statement bound for query, or nil (always nil on a nil
// txStmts).
func (t *txStmts) get(query string) *sql.Stmt {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[query]
}

func (t *txStmts) put(query string, st *sql.Stmt) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[string]*sql.Stmt)
	}
	t.m[query] = st
}

// wrote notes a statement of a write transaction that may have written.
func (q Queries) wrote(query string) {
	if q.writes != nil {
		q.writes.note(query)
	}
}

// Written is a statement of a write transaction that may have written: its
// operation (its first keyword: INSERT, UPDATE, DELETE, SAVEPOINT, ...),
// the table it names ("" when it names none), and, for an INSERT, whether
// it may update rows that exist (ON CONFLICT ... DO UPDATE).
type Written struct {
	Op, Table string
	Upsert    bool
}

// txWrites are a write transaction's statements that may have written, in
// order. Its writes run on the writer's goroutine; the lock keeps a reader
// on another (a test) right.
type txWrites struct {
	mu   sync.Mutex
	list []Written
}

// note adds query when it may have written.
func (w *txWrites) note(query string) {
	if !mayWrite(query) {
		return
	}
	op, table := summarize(query)
	upsert := op == "INSERT" && strings.Contains(strings.ToUpper(query), "DO UPDATE")
	w.add(Written{Op: op, Table: table, Upsert: upsert})
}

func (w *txWrites) add(wr Written) {
	w.mu.Lock()
	w.list = append(w.list, wr)
	w.mu.Unlock()
}

func (w *txWrites) len() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int64(len(w.list))
}

// since returns the statements after the first n. The list is only
// appended to, so the part returned (its capacity cut at its length) stays
// as it is without a copy: every request of a batch asks, and a copy each
// time cost the batch allocations in the square of its size.
func (w *txWrites) since(n int64) []Written {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n >= int64(len(w.list)) {
		return nil
	}
	return w.list[n:len(w.list):len(w.list)]
}

// mayWrite reports whether a statement may change rows: anything but a
// plain SELECT (a WITH may hold a write; a savepoint's rollback undoes
// some).
func mayWrite(query string) bool {
	q := strings.TrimLeft(query, " \t\n\r(")
	return len(q) < 6 || !strings.EqualFold(q[:6], "SELECT")
}

func (q Queries) count() {
	if q.counter != nil {
		q.counter.Add(1)
	}
}

// inTransaction returns q for the GORM transaction db (its statements reuse
// q's prepared statements through the transaction); txCtx, when set, is the
// context every statement runs under (see Queries.ctx).
//
// GORM's statements in the transaction reuse prepared statements too
// (stmtPool): GORM alone prepares each statement anew, and a SQLite
// statement on a table with triggers costs more to prepare than to run.
func (q Queries) inTransaction(db *gorm.DB, txCtx context.Context) (Queries, error) {
	sqlTx, ok := db.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return Queries{}, fmt.Errorf("transaction: unexpected connection %T", db.Statement.ConnPool)
	}
	ctx := db.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	// A session with a context clones the statement: the transaction keeps
	// its own connection, which it commits.
	db = db.Session(&gorm.Session{Context: ctx})
	q.writes, q.txStmts, q.held = &txWrites{}, &txStmts{}, &heldRows{}
	db.Statement.ConnPool = stmtPool{tx: sqlTx, stmts: q.stmts, writes: q.writes, held: q.held}
	q.db, q.sqlTx, q.txCtx = db, sqlTx, txCtx
	q.held.q = q
	return q, nil
}

// stmtPool is GORM's connection inside a write transaction: its
// statements go through the pool's prepared statements (stmtCache), up to
// maxStatements of them; past that (GORM writes IN lists of every length),
// a statement is run unprepared.
type stmtPool struct {
	tx     *sql.Tx
	stmts  *stmtCache
	writes *txWrites // Queries.writes
	held   *heldRows // Queries.held: written before each statement
}

// maxStatements bounds the statements a stmtCache keeps for GORM; the hot
// statements, a fixed set, are kept past it.
const maxStatements = 512

func (p stmtPool) stmt(ctx context.Context, query string) (*sql.Stmt, bool, error) {
	if !p.stmts.room(query) {
		return nil, false, nil
	}
	st, err := p.stmts.prepareIn(ctx, p.tx, query)
	return st, err == nil, err
}

func (p stmtPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return p.tx.PrepareContext(ctx, query)
}

func (p stmtPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := p.held.flush(ctx); err != nil {
		return nil, err
	}
	p.writes.note(query)
	if st, ok, err := p.stmt(ctx, query); err != nil {
		return nil, err
	} else if ok {
		return st.ExecContext(ctx, args...)
	}
	return p.tx.ExecContext(ctx, query, args...)
}

func (p stmtPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := p.held.flush(ctx); err != nil {
		return nil, err
	}
	p.writes.note(query)
	if st, ok, err := p.stmt(ctx, query); err != nil {
		return nil, err
	} else if ok {
		return st.QueryContext(ctx, args...)
	}
	return p.tx.QueryContext(ctx, query, args...)
}

func (p stmtPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	// A *sql.Row cannot carry the failure to write the rows held: the
	// statement runs anyway (PostgreSQL fails it, the transaction being
	// aborted), and the batch sees the failure at its end (heldRows.end).
	_ = p.held.flush(ctx)
	p.writes.note(query)
	if st, ok, err := p.stmt(ctx, query); err == nil && ok {
		return st.QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

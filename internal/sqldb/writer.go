package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/model"
)

// Group commit. Every write goes through one writer goroutine per DB.
// Requests that arrive while a transaction commits wait together and then
// share the next transaction and its one sync (SQLite's fsync with
// synchronous=FULL; PostgreSQL's WAL flush at COMMIT): a request that fails
// undoes only its own changes (the batch runs again with a savepoint per
// request, see commit), its events are written at the end of the
// transaction, in one statement on PostgreSQL (see insertEvents), and each
// is answered only after the commit that holds it returned, that is, once
// it is durable. The transaction takes the write lock as before (the single
// SQLite writer connection with BEGIN IMMEDIATE; the advisory lock on
// PostgreSQL), so event seqs follow commit order and every request is
// authorized against the state it commits on: the state the requests
// before it in the batch left.
//
// A write is bounded by its context's deadline (the request's database
// budget; four statements' time for a write with none): a request stops
// waiting at its deadline, whether its write is still queued (it is then
// never run: the 503 it answers is true) or in a transaction (which has a
// deadline no later than its earliest write's, so its answer is near). A
// request never waits for the transactions before its own, however many
// are in line behind a database that does not answer.

// maxBatch bounds the requests one transaction carries.
const maxBatch = 64

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("store: closed")

type writeJob struct {
	ctx   context.Context
	fn    func(tx *Tx) error
	done  chan writeResult
	span  trace.Span // the write's (trace.go); nil when not traced
	large bool       // runs alone (LargeWrite)
	// deadline is when its request stops waiting (see Write).
	deadline time.Time
	// state says whether a transaction runs the job or its request gave up
	// on it first (jobQueued, jobTaken, jobAbandoned).
	state atomic.Int32
}

const (
	jobQueued    int32 = iota
	jobTaken           // a transaction holding the write lock runs it
	jobAbandoned       // its request stopped waiting before: it never runs
)

// take claims the job for the transaction that holds the write lock (again,
// when the batch runs a second time); false when its request gave up on it
// first.
func (j *writeJob) take() bool {
	return j.state.CompareAndSwap(jobQueued, jobTaken) || j.state.Load() == jobTaken
}

// ErrOutcomeUnknown is the error of a write whose transaction did not
// answer by its deadline once it ran (its commit may yet succeed, or may
// have succeeded without the acknowledgement arriving): the write may or
// may not have been carried out. Classify makes it a 503 that says so.
var ErrOutcomeUnknown = errors.New("store: the database did not confirm the write in time; it may or may not have been carried out")

// errAbandoned is the result of a job whose request stopped waiting before
// a transaction took it (nobody reads it).
var errAbandoned = errors.New("store: the request stopped waiting before its write ran")

// writeGrace is how long a request whose deadline has passed waits for the
// transaction that runs its write: the transaction's deadline is no later
// than the request's, so its answer (a rollback, mostly) is near.
const writeGrace = 500 * time.Millisecond

// deadlockReruns bounds the runs of a batch again after the database ended
// it to break a deadlock (writeBatch).
const deadlockReruns = 3

type writeResult struct {
	events    []model.Event
	eventData []string // encoded, for insertEvents
	err       error
}

type writer struct {
	db    *DB
	jobs  chan *writeJob
	quit  chan struct{}
	ended chan struct{}

	probe writeProbe // WritesSucceed's

	transactions atomic.Int64 // batches, committed or not
	writes       atomic.Int64 // jobs run in them
	reruns       atomic.Int64 // batches run again with savepoints
}

// WriterStats counts the write batches and the writes they carried (writes
// per batch is the group commit's batch size), and the batches that ran a
// second time, with a savepoint per write, because one of their writes
// failed.
type WriterStats struct {
	Transactions int64
	Writes       int64
	Reruns       int64
}

// WriterStats returns the writer's counters since the DB was opened.
func (db *DB) WriterStats() WriterStats {
	w := db.writer
	return WriterStats{Transactions: w.transactions.Load(), Writes: w.writes.Load(), Reruns: w.reruns.Load()}
}

// QueuedWrites is the number of writes waiting for the writer.
func (db *DB) QueuedWrites() int { return len(db.writer.jobs) }

func startWriter(db *DB) *writer {
	w := &writer{db: db, jobs: make(chan *writeJob, maxBatch), quit: make(chan struct{}), ended: make(chan struct{})}
	go w.run()
	return w
}

// stop lets the writer finish the jobs already queued, then ends it.
func (w *writer) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.ended
}

func (w *writer) run() {
	defer close(w.ended)
	batch := make([]*writeJob, 0, maxBatch)
	var large []*writeJob // large writes, waiting for a transaction of their own
	prev := 0             // the size of the last transaction
	for {
		batch = batch[:0]
		if len(large) == 0 {
			select {
			case j := <-w.jobs:
				if j.large {
					large = append(large, j)
				} else {
					batch = append(batch, j)
				}
			case <-w.quit:
				// Answer what is still queued, then end.
				for {
					select {
					case j := <-w.jobs:
						w.commit([]*writeJob{j})
					default:
						return
					}
				}
			}
		}
		w.gather(&batch, &large, prev > 1)
		if len(batch) > 0 {
			prev = len(batch)
			w.commit(batch)
		}
		if len(large) > 0 {
			j := large[0]
			large = large[1:]
			w.commit([]*writeJob{j})
		}
	}
}

// LargeWrite marks the context of a write at the limits (a reorder of
// hundreds of channels, a change of a thousand members, an import): the
// writer runs it in a transaction of its own, after the small writes
// queued with it, so that a small write waits for at most one large
// transaction (the one running when it arrives), never for several, nor
// for one it shares. Writes not yet acknowledged may commit in any order.
func LargeWrite(ctx context.Context) context.Context {
	return context.WithValue(ctx, largeKey{}, true)
}

type largeKey struct{}

// A commit costs about the same for one write as for many (its sync, and
// writing the pages the writes share), and on a busy instance writes arrive
// a few tens of microseconds apart. So while writes keep coming (the last
// transaction had several, or more are queued), the writer gathers them as
// long as each arrives within gatherGap of the one before, for at most
// gatherMax: a few hundred microseconds of latency buys batches several
// times larger. A lone writer (one client at a time) never waits.
const (
	gatherGap = 500 * time.Microsecond
	gatherMax = 3 * time.Millisecond
)

// gather adds the writes queued to the batch, each large one to large,
// and, when the batch has any, waits for more as said above.
func (w *writer) gather(batch *[]*writeJob, large *[]*writeJob, busy bool) {
	place := func(j *writeJob) {
		if j.large {
			*large = append(*large, j)
		} else {
			*batch = append(*batch, j)
		}
	}
	for len(*batch) < maxBatch { // what is already queued
		select {
		case j := <-w.jobs:
			place(j)
			continue
		default:
		}
		break
	}
	if len(*batch) == 0 || !busy && len(*batch) == 1 {
		return
	}
	deadline := time.Now().Add(gatherMax)
	gap := time.NewTimer(gatherGap)
	defer gap.Stop()
	for len(*batch) < maxBatch {
		select {
		case j := <-w.jobs:
			place(j)
			wait := min(gatherGap, time.Until(deadline))
			if wait <= 0 {
				return
			}
			gap.Reset(wait)
		case <-gap.C:
			return
		case <-w.quit:
			return
		}
	}
}

// Write runs fn in a write transaction and returns the events it appended,
// with their sequence numbers, once they are committed and durable. If fn
// returns an error, nothing it did is kept, and nothing of the other writes
// that share its transaction is lost.
//
// fn must be deterministic in what it writes given the state it reads, and
// must touch nothing but tx: it runs inside a transaction that other
// requests share, and when another write of that transaction fails it runs
// a second time, the first run undone (a write through the DB would also
// wait for the writer that runs it).
//
// ctx bounds the write: its deadline (four statements' time when it has
// none) is when Write returns, with ctx's error when the write never ran,
// or with ErrOutcomeUnknown when its transaction did not answer in time.
func (db *DB) Write(ctx context.Context, fn func(tx *Tx) error) (_ []model.Event, err error) {
	var sp trace.Span
	if db.tracer != nil {
		ctx, sp = db.tracer.write(ctx)
		if sp != nil {
			defer func() { EndSpan(sp, err) }()
		}
	}
	queued := time.Now()
	j := &writeJob{ctx: ctx, fn: fn, done: make(chan writeResult, 1), span: sp, large: ctx.Value(largeKey{}) != nil}
	var ok bool
	if j.deadline, ok = ctx.Deadline(); !ok {
		j.deadline = time.Now().Add(db.statementTimeout * txPerStatement)
	}
	select {
	case <-db.writer.quit:
		return nil, ErrClosed
	default:
	}
	select {
	case db.writer.jobs <- j:
	case <-ctx.Done():
		db.noteWrite(ctx.Err(), time.Since(queued)) // the queue stayed full until the deadline
		return nil, ctx.Err()
	case <-db.writer.quit:
		return nil, ErrClosed
	}
	r := j.wait(ctx)
	db.noteWrite(r.err, time.Since(queued))
	return r.events, r.err
}

// probeFresh is how recent a commit must be for WritesSucceed to take it
// as the answer, without a probe of its own.
const probeFresh = time.Second

// WritesSucceed reports whether this instance's writes can succeed now
// (/readyz): not while Writable says they cannot, and not while no write
// transaction of its writer commits by ctx's deadline. A commit in the last
// second answers at once; otherwise an empty write (the write lock taken,
// nothing written: BEGIN IMMEDIATE on SQLite, the advisory lock on
// PostgreSQL, no sync) goes through the writer like any write, so it fails
// when writes would: the writer stuck in a transaction that does not end
// (a frozen disk or database), the lock held by a stopped instance or
// another process. Callers at the same time share one probe, and after a
// probe that failed the next second's callers are answered from it.
func (db *DB) WritesSucceed(ctx context.Context) error {
	if err := db.Writable(); err != nil {
		return err
	}
	if t := db.faults.lastCommit.Load(); t != 0 && time.Since(time.Unix(0, t)) < probeFresh {
		return nil
	}
	p := &db.writer.probe
	p.mu.Lock()
	if !p.failed.IsZero() && time.Since(p.failed) < probeFresh && db.faults.lastCommit.Load() < p.failed.UnixNano() {
		err := p.err
		p.mu.Unlock()
		return err
	}
	c := p.call
	if c == nil {
		c = &probeCall{done: make(chan struct{})}
		p.call = c
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeFresh)
		if dl, ok := ctx.Deadline(); ok {
			cancel()
			pctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
		}
		go func() {
			defer cancel()
			c.err = db.writer.probeOnce(pctx)
			p.mu.Lock()
			p.call = nil
			if c.err != nil {
				p.failed, p.err = time.Now(), c.err
			}
			p.mu.Unlock()
			close(c.done)
		}()
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("no write transaction committed in time: %w", ctx.Err())
	}
}

// writeProbe is the probe of WritesSucceed in flight, and the last that
// failed.
type writeProbe struct {
	mu     sync.Mutex
	call   *probeCall
	failed time.Time
	err    error
}

type probeCall struct {
	done chan struct{}
	err  error
}

// probeOnce runs an empty write through the writer by ctx's deadline.
func (w *writer) probeOnce(ctx context.Context) error {
	j := &writeJob{ctx: ctx, fn: func(*Tx) error { return nil }, done: make(chan writeResult, 1)}
	j.deadline, _ = ctx.Deadline()
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		w.db.faults.lastStalled.Store(time.Now().UnixNano())
		return fmt.Errorf("the writer takes no write (every place in its queue is taken): %w", ctx.Err())
	case <-w.quit:
		return ErrClosed
	}
	select {
	case r := <-j.done:
		if r.err != nil {
			return fmt.Errorf("an empty write failed: %w", r.err)
		}
		return nil
	case <-ctx.Done():
		// The writer skips it if it has not taken it yet; its answer, if
		// any, goes to a buffer nobody reads.
		j.state.CompareAndSwap(jobQueued, jobAbandoned)
		w.db.faults.lastStalled.Store(time.Now().UnixNano())
		return fmt.Errorf("no write transaction committed in time (the transaction before has not ended, or the write lock is held elsewhere): %w", ctx.Err())
	}
}

// wait returns the job's result, or stops waiting when ctx is done: at
// once when no transaction has taken the job (it then never runs), else
// after writeGrace at most (the transaction that runs it ends by the job's
// deadline; a client gone early gets no answer anyway).
func (j *writeJob) wait(ctx context.Context) writeResult {
	select {
	case r := <-j.done:
		return r
	case <-ctx.Done():
	}
	if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
		// Said in the log: where the time went.
		return writeResult{err: fmt.Errorf("the write had not started (the transaction before it has not ended, or the write lock is held): %w", ctx.Err())}
	}
	t := time.NewTimer(writeGrace)
	defer t.Stop()
	select {
	case r := <-j.done:
		return r
	case <-t.C:
		return writeResult{err: fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())}
	}
}

// jobError carries the error of a batch's only job out of the transaction.
type jobError struct{ err error }

func (e jobError) Error() string { return e.err.Error() }

func (e jobError) Unwrap() error { return e.err }

func (w *writer) commit(batch []*writeJob) {
	live := batch[:0:0]
	for _, j := range batch {
		if j.state.Load() == jobAbandoned {
			continue // its request has answered already
		}
		if err := j.ctx.Err(); err != nil {
			j.done <- writeResult{err: err} // gone before it started: nothing to do
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	w.transactions.Add(1)
	w.writes.Add(int64(len(live)))
	// Optimistically, the writes of a batch run one after the other with no
	// savepoint between them: nearly every write succeeds, and on PostgreSQL
	// a savepoint is a round trip per write. If one fails, the transaction
	// is rolled back, and the batch runs again, each write in its own
	// savepoint, so that the failure undoes only its own changes. A write
	// may therefore run twice, the first run undone: fn must touch nothing
	// but tx (see Write).
	deadline := live[0].deadline
	for _, j := range live[1:] {
		if j.deadline.Before(deadline) {
			deadline = j.deadline
		}
	}
	results, err := w.attempt(live, false, deadline)
	if errors.Is(err, errRerun) {
		w.reruns.Add(1)
		results, err = w.attempt(live, true, deadline)
	}
	for n := 0; deadlocked(err) && n < deadlockReruns && time.Now().Before(deadline); n++ {
		// The database ended the transaction to break a cycle with another
		// program's (psql's) that holds a row the batch needed and waits,
		// at its commit, for a row the batch held that its logging updates:
		// the settings row, or the change log's version row once the batch
		// read back its changes (fresh's registry). Nothing of the batch
		// holds anything now, and it runs again. While that commit is still logging its changes,
		// a rerun that changes the settings row first closes another cycle
		// (the commit locks the version row, then the settings row), so it
		// may take more than one; a pause that grows from none lets that
		// commit end first.
		w.reruns.Add(1)
		time.Sleep(time.Duration(n) * 10 * time.Millisecond)
		results, err = w.attempt(live, true, deadline)
	}
	if err != nil {
		var je jobError
		if errors.As(err, &je) {
			err = je.err
		}
		for i := range results {
			results[i] = writeResult{err: err}
		}
	}
	if err == nil {
		w.db.faults.lastCommit.Store(time.Now().UnixNano())
	}
	for i, j := range live {
		j.done <- results[i]
	}
	if err != nil {
		// The database may not answer: the next transaction must not wait
		// behind a prepare meant to save time.
		return
	}
	// Statements first met in this transaction are prepared on the pool now,
	// while no transaction holds its connection, for the next ones to reuse.
	// Not fatal when it fails: the next transaction prepares them again.
	// Bounded like a statement on PostgreSQL: a frozen database must not
	// hold the writer.
	ctx := context.Background()
	if w.db.Postgres() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.db.statementTimeout)
		defer cancel()
	}
	_ = w.db.wstmts.preparePending(ctx)
}

// notifyEvents tells the listeners of the schema's event channel the last
// seq committed (a function call, which GORM's builder cannot say).
const notifyEvents = "SELECT pg_notify(?, ?)"

// errRerun ends an optimistic attempt in which a write of several failed.
var errRerun = errors.New("store: a write of the batch failed; run it again with savepoints")

// attempt runs the batch in one transaction, each write in its own savepoint
// when savepoints is set, and commits it.
func (w *writer) attempt(live []*writeJob, savepoints bool, deadline time.Time) ([]writeResult, error) {
	db := w.db
	results := make([]writeResult, len(live))
	// A PostgreSQL batch ends by the deadline of its earliest write (each
	// statement has its own deadline too): the lock, BEGIN and COMMIT, which
	// no statement deadline covers, then fail on a frozen database instead
	// of holding every writer, and each request gets its answer by its
	// deadline. A SQLite batch has no network to hang on, and a cancellable
	// context would cost a goroutine per statement in the driver; its waits
	// for the file lock are bounded by busy_timeout, and requests whose
	// deadline passes meanwhile stop waiting before it runs them (take).
	ctx := context.Background()
	if db.Postgres() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	committing := false
	// The cache is told of a prepared transaction's end however it ends,
	// a panic included: reads of this instance may be waiting for it.
	var ended func(committed bool)
	committed := false
	defer func() {
		if ended != nil {
			ended(committed)
		}
	}()
	err := db.write.WithContext(ctx).Transaction(func(g *gorm.DB) error {
		b := &batch{}
		if err := db.lockWrites(g, deadline, b); err != nil {
			return err
		}
		base := Queries{dialect: db.dialect, stmts: db.wstmts, counter: &db.statements, tracer: db.tracer}
		q, err := base.inTransaction(g, ctx)
		if err != nil {
			return err
		}
		if err := db.runBatch(ctx, q, b, live, savepoints, results); err != nil {
			return err
		}
		last, err := q.insertEvents(ctx, results)
		if err == nil {
			err = q.held.end(ctx) // the rows still held, with no event to go with
		}
		if err != nil {
			return heldFailed(ctx, q.held, err)
		}
		if db.Postgres() {
			if ended, err = db.endTransaction(ctx, g, last); err != nil {
				return err
			}
		}
		committing = true
		return nil
	}, db.dialect.writeTx())
	if err != nil && committing && (ctx.Err() != nil || unavailable(err)) {
		// The commit was sent and not answered: it may have taken effect.
		err = fmt.Errorf("%w: commit: %w", ErrOutcomeUnknown, err)
	}
	committed = err == nil
	return results, err
}

// lockWrites takes the write lock in the transaction g (PostgreSQL; on
// SQLite, BEGIN IMMEDIATE has taken it). The database ends the wait for
// the lock at the batch's deadline, and a statement of a transaction whose
// client stopped (deadline.go), whether the client's own deadlines can act
// or not.
//
// With CommitHooks.LockSQL, the same statement then reads the data
// version into b (Tx.LockedVersion): the read cache need not ask what
// changed before the lock when it already stands there.
func (db *DB) lockWrites(g *gorm.DB, deadline time.Time, b *batch) error {
	lock := db.dialect.LockWrites()
	if lock == "" {
		return nil
	}
	wait, statement := time.Until(deadline), min(db.statementTimeout, writeStatementBound)
	if h := db.commits.LockSQL; h != "" {
		var v, nonce sql.NullInt64
		if err := g.Raw(h, db.ns.WriteKey, boundMillis(wait), boundMillis(statement)).Row().Scan(&v, &nonce); err != nil {
			return fmt.Errorf("take write lock: %w", err)
		}
		b.locked, b.lockedV, b.lockedNonce = v.Valid && nonce.Valid, v.Int64, nonce.Int64
		return nil
	}
	if err := g.Exec(db.dialect.boundWrite(wait, statement) + lock).Error; err != nil {
		return fmt.Errorf("take write lock: %w", err)
	}
	return nil
}

// runBatch runs the batch's writes in the transaction q belongs to, each
// in its own savepoint when savepoints is set, and sets their results. It
// returns an error when the transaction must not commit: the only write
// failed, the database failed, or a write failed without savepoints
// (errRerun).
func (db *DB) runBatch(ctx context.Context, q Queries, b *batch, live []*writeJob, savepoints bool, results []writeResult) error {
	single := len(live) == 1
	// A batch of one holds its rows only where that saves a round trip.
	q.held.hold = !savepoints && (!single || db.Postgres())
	first := true // no savepoint opened yet
	for i, j := range live {
		if !j.take() {
			results[i].err = errAbandoned
			continue
		}
		tx := &Tx{Queries: q, batch: b}
		if j.span != nil {
			tx.span = j.span
			running(j.span, len(live), savepoints)
		}
		if savepoints {
			if err := tx.beginJob(ctx, first); err != nil {
				return err
			}
			first = false
		}
		err := db.runJob(j, tx)
		if err != nil && q.held.err != nil {
			// Rows held were written, and failed, in one of its
			// statements: whose they were, only a run with each row
			// inserted at once tells.
			return heldFailed(ctx, q.held, err)
		}
		switch {
		case err == nil:
			results[i].events, results[i].eventData = tx.events, tx.eventData
		case single:
			return jobError{err}
		case ctx.Err() != nil || unavailable(err) || diskFull(err):
			// The database failed, not the write (a frozen database, a
			// lost connection, a full disk): running the batch again
			// would only fail the same way, after as long again.
			return err
		case !savepoints:
			return errRerun
		default:
			// One request's failure undoes its own changes only.
			if rerr := tx.rollbackJob(ctx); rerr != nil {
				return fmt.Errorf("roll back a failed write: %w (after %v)", rerr, err)
			}
			results[i].err = err
		}
	}
	return nil
}

// heldFailed is what ends a transaction that failed with err: errRerun
// when writing rows held failed (h.err) and the database did not (a
// frozen database, a lost connection, a full disk, a statement past its
// deadline would fail a rerun the same way: neither err nor the held
// rows' own failure, which a write may have ignored, may say so), else
// err.
func heldFailed(ctx context.Context, h *heldRows, err error) error {
	if h.err == nil || ctx.Err() != nil || unavailable(err) || diskFull(err) || unavailable(h.err) || diskFull(h.err) {
		return err
	}
	return errRerun
}

// runJob runs one request's part of a batch; a panic becomes its error, so
// it cannot take the writer (and every other request) down.
func (db *DB) runJob(j *writeJob, tx *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in write: %v\n%s", r, debug.Stack())
		}
	}()
	return j.fn(tx)
}

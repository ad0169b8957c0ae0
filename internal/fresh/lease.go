package fresh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leases let a PostgreSQL instance answer a read from memory with no
// question to the database, and still have every change acknowledged by
// any instance govern every later request (Chubby's cache invalidation,
// over LISTEN/NOTIFY): a commit is invalidated everywhere before it takes
// effect.
//
//   - A write transaction, holding the write lock and its version V,
//     prepares before it commits: on another connection it records V in
//     the prepared table and notifies "p V" (prepare). PostgreSQL delivers
//     notifications to every listener in one order, heartbeats and
//     acknowledgements included.
//   - Every instance listens on a connection of its own. A prepare or a
//     commit it hears raises its floor to that version and makes its next
//     read ask (want moves); its own commit heard back moves nothing (its
//     prepare did); a round sets have to the want it began at
//     only when its answer stands at the floor or later, so a prepared
//     version holds every instance's reads to the database until they see
//     it committed. It acknowledges another instance's prepare at once. An
//     instance that (re)connects reads the prepared table after it
//     listens, for the prepare it did not hear.
//   - An instance holds a lease while its heartbeats come back to it: a
//     heartbeat sent at t, heard back, makes the lease run to t + lease.
//     Every other instance, hearing it later than t, holds it for longer.
//     Heartbeats also write the lease into the instances table, which an
//     instance reads when it (re)connects, so it knows the leases granted
//     before it listened, and they carry the sender's floor.
//   - A read is answered from memory only while the lease runs and no
//     prepare or commit was heard since the last round (or since the
//     cache followed its own commit: followedOwn); otherwise it asks, as
//     without leases.
//   - The transaction commits once its prepare came back on the writer's
//     own listener (every heartbeat ordered before it heard then) and
//     every other instance holding a lease has acknowledged it or its lease
//     ran out. So when the commit becomes visible, to any reader on any
//     instance, no instance answers from a memory older than it. An
//     instance stopped (SIGSTOP, a lost connection) holds writes for at
//     most a lease; on resuming, its own lease has run out and it asks
//     until a heartbeat comes back.
//   - A transaction alone sends no prepare. Heartbeats take the write
//     lock shared, so none commits while a write transaction holds it, and
//     every lease granted before the transaction took it is in the
//     instances table. The transaction reads the table last (versionSQL):
//     when no other instance's lease may still run, it only makes this
//     instance's own reads ask and commits; once committed, the cache
//     follows the commit by itself and they answer from memory again
//     (Cache.Ended, followedOwn). Any lease granted later comes
//     from a heartbeat notified after its commit, so heard after it (an
//     instance that listens too late to hear the commit sees it in its
//     first round, as any commit it did not hear). The common deployment,
//     one instance, so pays for the leases nothing on its writes. The
//     price: a write that waits out a stopped instance's lease holds every
//     heartbeat meanwhile, so the other instances ask for that while too.
//     Instances of earlier releases hold no lease.
//
// Waiting after the commit instead, before answering the writer, is not
// enough: the commit is visible to every reader of the database at once,
// and a request that saw it (a read that missed the cache, a write that
// waited for its row) could be answered before another instance heard of
// it, whose next request would then answer from an older memory.
//
// A change made behind the service's back (psql, an instance of an
// earlier version) prepares nothing: the trigger notifies its commit, and
// it governs every request that arrives after the notification is heard,
// and at the latest after a heartbeat, which also reads the data version.

// Lease timing. The lease is long enough for heartbeats to renew it on a
// busy machine, short enough that a stopped instance holds writes briefly.
const (
	DefaultLease    = 2 * time.Second
	leaseMargin     = 50 * time.Millisecond // what another instance adds to a lease, for clocks that drift
	reconnectMinGap = 100 * time.Millisecond
	firstListen     = 5 * time.Second // how long opening the store waits for the listener
)

// LeaseOptions say how an instance listens (FollowPostgres).
type LeaseOptions struct {
	URL      string        // the database, for the three connections of the listener
	Instance string        // this instance's ID, unique among the instances
	Lease    time.Duration // DefaultLease when 0; the heartbeat comes 4 times per lease
	Logger   *slog.Logger
}

// leases is an instance's side of the protocol.
type leases struct {
	opts    LeaseOptions
	pg      Postgres
	channel string
	log     *slog.Logger

	// want moves with every prepare and commit heard and at every
	// connection; a round that began at want sets have to it once applied,
	// when its answer stands at the floor (heard) it began with. Reads are
	// answered from memory only while they are equal (and the lease runs).
	want, have atomic.Uint64
	until      atomic.Int64 // the lease's end, in monotonic nanoseconds since base; 0: none
	untilWall  atomic.Int64 // and in Unix nanoseconds

	base  time.Time
	mu    sync.Mutex
	wake  chan struct{} // closed and replaced when what waiters wait for moves
	conn  uint64        // the connection's epoch; 0 while not listening
	epoch uint64        // counts the connections: a connection's epoch is never taken again
	hbSeq uint64        // the last heartbeat's sequence number, over every connection
	// heard is the floor: the highest version prepared or committed heard
	// on this connection, or read from the prepared table when it began.
	// A round sets have only when its answer stands at it or later.
	heard     int64
	others    map[string]*peer
	own       map[int64]ownCommit // this instance's prepares by version, until they commit or not
	notices   uint64              // the notifications heard on this connection
	sent      map[uint64]sentAt   // heartbeats sent on this connection, by seq
	ack       chan int64          // versions to acknowledge (heardNotice coalesces them)
	stop      context.CancelFunc
	done      chan struct{}
	listening chan struct{} // closed when the listener first listens
	once      sync.Once
	// mine are the versions this instance prepared, alone or not, with
	// their nonce, until their commit is heard on the connection they
	// were prepared on: the prepare moved want and the floor already, so
	// the commit tells this instance nothing new and moves neither.
	mine map[int64]int64
	// alone is the last version prepared with no other lease running, and
	// the want its prepare moved to (followedOwn).
	alone aloneCommit
	// at reports whether the cache stands at a version (FollowPostgres).
	at func(v, nonce int64) bool
	// q runs the prepare statement, on a connection of the pool: not the
	// write transaction's, whose notifications wait for its commit.
	q QueryFunc
	// gate is taken by the listener for each notification; tests hold it
	// to stand for a listener that lags.
	gate sync.Mutex
}

// peer is another instance, as heard: until when its lease may run, the
// highest version it acknowledged, and the notification it was first heard
// at (0: read from the instances table).
type peer struct {
	until int64
	acked int64
	since uint64
}

// sentAt is when a heartbeat was sent, on both clocks (current).
type sentAt struct{ mono, wall int64 }

// ownCommit is one of this instance's prepares: its nonce (a version
// rolled back is taken again by the next commit, with another nonce), and
// the notification it was heard back at (0: not yet).
type ownCommit struct {
	nonce int64
	heard uint64
}

// ChangeChannel is the channel the change log notifies on.
func ChangeChannel(tag string) string { return "guildhall_fresh_" + tag }

// instancesTable holds the leases, for instances that (re)connect.
func instancesTable(schema string) string { return quoteIdent(schema) + ".fresh_instances" }

func instancesTableSQL(schema string) string {
	return "CREATE TABLE IF NOT EXISTS " + instancesTable(schema) + " (id TEXT PRIMARY KEY, expires_at TIMESTAMPTZ NOT NULL)"
}

// preparedTable holds the highest version prepared (one row), for
// instances that (re)connect between a prepare and its commit. The write
// lock orders the prepares; the row never goes back (GREATEST), for a
// prepare the writer gave up on that the server runs late. It is unlogged, so a
// prepare costs no flush to disk: a crash that empties it also ended every
// transaction that had prepared.
func preparedTable(schema string) string { return quoteIdent(schema) + ".fresh_prepared" }

func preparedTableSQL(schema string) string {
	return "CREATE UNLOGGED TABLE IF NOT EXISTS " + preparedTable(schema) + " (id INTEGER PRIMARY KEY, v BIGINT NOT NULL)"
}

func newLeases(opts LeaseOptions, pg Postgres) *leases {
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &leases{opts: opts, pg: pg, channel: ChangeChannel(pg.Tag), log: opts.Logger, base: time.Now(),
		wake: make(chan struct{}), others: map[string]*peer{}, own: map[int64]ownCommit{}, mine: map[int64]int64{}}
}

func (l *leases) now() int64 { return int64(time.Since(l.base)) }

// current reports whether a read may be answered from memory. The lease
// is measured on the monotonic clock, which runs while the process is
// stopped, and on the wall clock too, for a machine whose monotonic clock
// stops while it is frozen: either one past the end ends it.
//
// While nothing but this instance's own write, prepared alone, stands
// between want and have, a read waits (at most until ctx ends) for that
// write to end rather than ask: until the commit is visible a question
// can only answer the version before it, which sets no have, so every
// read arriving meanwhile would ask again, some five rounds a create
// beside a stream of reads. Once the writer's cache has followed the
// commit (followedOwn) the read is answered from memory; otherwise it
// asks.
func (l *leases) current(ctx context.Context) bool {
	if l.want.Load() != l.have.Load() {
		done := l.ownPending()
		if done == nil {
			return false
		}
		select {
		case <-done:
		case <-ctx.Done():
			return false
		}
	}
	return l.held()
}

// held reports whether a read may be answered from memory now, waiting
// for nothing (current).
func (l *leases) held() bool {
	if l.want.Load() != l.have.Load() {
		return false
	}
	now := time.Now()
	return int64(now.Sub(l.base)) < l.until.Load() && now.UnixNano() < l.untilWall.Load()
}

// roundStart is what a round begins at: want, and the floor its answer
// must reach to set have. Read together: a prepare heard moves both.
func (l *leases) roundStart() (want uint64, floor int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.want.Load(), l.heard
}

// broadcast wakes the waiters; l.mu is held.
func (l *leases) broadcast() {
	close(l.wake)
	l.wake = make(chan struct{})
}

// start runs the listener until stop. It returns once the listener first
// listens, or after firstListen: a write answered before that waits out a
// lease (committed).
func (l *leases) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.done, l.listening = cancel, make(chan struct{}), make(chan struct{})
	defer func() {
		t := time.NewTimer(firstListen)
		defer t.Stop()
		select {
		case <-l.listening:
		case <-t.C:
		}
	}()
	go func() {
		defer close(l.done)
		gap := reconnectMinGap
		for ctx.Err() == nil {
			began := time.Now()
			err := l.listen(ctx)
			l.disconnected()
			if ctx.Err() != nil {
				return
			}
			if time.Since(began) > time.Minute {
				gap = reconnectMinGap
			}
			l.log.Warn("change listener disconnected; reads ask the database until it is back", "err", err, "in", gap)
			select {
			case <-ctx.Done():
				return
			case <-time.After(gap):
			}
			gap = min(gap*2, 5*time.Second)
		}
	}()
}

// close stops the listener, and says goodbye: the others stop waiting for
// this instance at once.
func (l *leases) close() {
	if l.stop == nil {
		return
	}
	l.stop()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c, err := pgx.Connect(ctx, l.opts.URL); err == nil {
		_, _ = c.Exec(ctx, "DELETE FROM "+instancesTable(l.pg.Schema)+" WHERE id = $1", l.opts.Instance)
		_, _ = c.Exec(ctx, "SELECT pg_notify($1, $2)", l.channel, "b "+l.opts.Instance)
		_ = c.Close(ctx)
	}
}

func (l *leases) disconnected() {
	l.until.Store(0)
	l.want.Add(1)
	l.mu.Lock()
	l.conn = 0
	l.broadcast()
	l.mu.Unlock()
}

// listen connects, reads the leases granted before, and follows the
// channel until the connection fails.
func (l *leases) listen(ctx context.Context) error {
	recv, err := pgx.Connect(ctx, l.opts.URL)
	if err != nil {
		return err
	}
	defer recv.Close(context.WithoutCancel(ctx))
	// Heartbeats and acknowledgements go on connections of their own: a
	// heartbeat waits for the write transaction in flight, and an
	// acknowledgement is what such a transaction may be waiting for.
	beat, err := pgx.Connect(ctx, l.opts.URL)
	if err != nil {
		return err
	}
	defer beat.Close(context.WithoutCancel(ctx))
	send, err := pgx.Connect(ctx, l.opts.URL)
	if err != nil {
		return err
	}
	defer send.Close(context.WithoutCancel(ctx))
	if _, err := recv.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	// Whatever committed before LISTEN took effect is read by a round that
	// begins after this: want moves now.
	l.want.Add(1)
	if err := l.seed(ctx, recv); err != nil {
		return err
	}
	// Any connection failing ends them all: a listener that cannot
	// acknowledge or renew is no better than none.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.mu.Lock()
	ack := l.ack
	l.mu.Unlock()
	errs := make(chan error, 2)
	go func() {
		errs <- l.heartbeats(lctx, beat)
		cancel()
	}()
	go func() {
		errs <- l.acknowledge(lctx, send, ack)
		cancel()
	}()
	for {
		n, err := recv.WaitForNotification(lctx)
		if err != nil {
			cancel()
			return errors.Join(err, <-errs, <-errs)
		}
		l.gate.Lock()
		l.heardNotice(n.Payload)
		l.gate.Unlock()
	}
}

// seed starts a connection: the version last prepared, which it may not
// have heard (every notification it did not hear was read, by another
// backend, from a transaction its snapshot shows committed), and the leases
// the instances table holds (granted before this instance listened, which
// it may not hear renewed).
func (l *leases) seed(ctx context.Context, c *pgx.Conn) error {
	var prepared int64
	if err := c.QueryRow(ctx, `SELECT COALESCE((SELECT v FROM `+preparedTable(l.pg.Schema)+` WHERE id = 1), 0)`).Scan(&prepared); err != nil {
		return fmt.Errorf("read the version prepared: %w", err)
	}
	rows, err := c.Query(ctx, `SELECT id, EXTRACT(EPOCH FROM expires_at - clock_timestamp())::float8 FROM `+
		instancesTable(l.pg.Schema)+` WHERE expires_at > clock_timestamp() AND id <> $1`, l.opts.Instance)
	if err != nil {
		return fmt.Errorf("read the instances' leases: %w", err)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.others = map[string]*peer{}
	for rows.Next() {
		var id string
		var left float64
		if err := rows.Scan(&id, &left); err != nil {
			rows.Close()
			return err
		}
		l.others[id] = &peer{until: now + int64(left*float64(time.Second)) + int64(leaseMargin)}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	l.epoch++
	l.conn = l.epoch
	l.heard, l.notices, l.sent, l.ack = prepared, 0, map[uint64]sentAt{}, make(chan int64, 1)
	// The floor now comes from the prepared table, which a write alone
	// does not write: the commit of a version prepared before counts as
	// anyone's, and raises the floor when heard.
	clear(l.mine)
	l.want.Add(1) // a round that began before the floor was read sets no have
	l.broadcast()
	l.once.Do(func() { close(l.listening) })
	return nil
}

// heardNotice takes one notification.
func (l *leases) heardNotice(payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notices++
	switch kind {
	case "h": // a heartbeat: id acked seq
		f := strings.Fields(rest)
		if len(f) != 3 {
			return
		}
		acked, _ := strconv.ParseInt(f[1], 10, 64)
		if f[0] == l.opts.Instance {
			seq, _ := strconv.ParseUint(f[2], 10, 64)
			if at, ok := l.sent[seq]; ok {
				delete(l.sent, seq)
				if end := at.mono + int64(l.opts.Lease); end > l.until.Load() {
					l.until.Store(end)
					l.untilWall.Store(at.wall + int64(l.opts.Lease))
				}
			}
			return
		}
		p := l.peer(f[0])
		p.until = max(p.until, now+int64(l.opts.Lease+leaseMargin))
		p.acked = max(p.acked, acked)
	case "a": // an acknowledgement: id version
		id, v, _ := strings.Cut(rest, " ")
		acked, _ := strconv.ParseInt(v, 10, 64)
		if p := l.others[id]; p != nil {
			p.acked = max(p.acked, acked)
		}
	case "b": // goodbye
		delete(l.others, rest)
	case "p": // a prepare: version nonce
		f := strings.Fields(rest)
		if len(f) != 2 {
			return
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return
		}
		nonce, _ := strconv.ParseInt(f[1], 10, 64)
		l.want.Add(1)
		l.heard = max(l.heard, v)
		if c, mine := l.own[v]; mine && c.nonce == nonce {
			c.heard = l.notices
			l.own[v] = c
			break
		}
		select {
		case l.ack <- v:
		default: // one pending: replace it with the newer
			select {
			case old := <-l.ack:
				v = max(v, old)
			default:
			}
			l.ack <- v
		}
	default: // a commit: its version and nonce
		v, err := strconv.ParseInt(kind, 10, 64)
		if err != nil {
			return
		}
		if nonce, err := strconv.ParseInt(rest, 10, 64); err == nil {
			if n, ok := l.mine[v]; ok && n == nonce {
				delete(l.mine, v)
				return
			}
		}
		l.want.Add(1)
		l.heard = max(l.heard, v)
	}
	l.broadcast()
}

func (l *leases) peer(id string) *peer {
	p := l.others[id]
	if p == nil {
		p = &peer{since: l.notices}
		l.others[id] = p
	}
	return p
}

// versionSQL is a write transaction's last statement: its version and
// nonce (NULLs when it bumped none), how many other instances' leases
// may still run (others), read under the write lock, and own, what
// Cache.Ended follows the commit by (commit_changes). A lease's end as the
// table holds it is no earlier than the instance's own (it is reckoned
// from when the heartbeat ran, which was sent earlier). A lease counts
// for another lease and the margin after that end: the database's clock
// may step forward (a time sync, a failover) by as much without a running
// lease looking ended. What it costs is a prepare per write for a few
// seconds after an instance stopped without a goodbye.
func (l *leases) versionSQL() string {
	return "SELECT x.v, x.nonce, (SELECT count(*) FROM " + instancesTable(l.pg.Schema) + " i WHERE i.id <> " +
		quoteLiteral(l.opts.Instance) + " AND i.expires_at > clock_timestamp() - make_interval(secs => " +
		strconv.FormatFloat((l.opts.Lease+leaseMargin).Seconds(), 'f', -1, 64) + ")) AS others, x.own FROM " +
		quoteIdent(l.pg.Schema) + ".commit_changes() x"
}

// prepareSQL records the version prepared and notifies it, in one
// statement that commits on its own.
func (l *leases) prepareSQL() string {
	return `WITH up AS (INSERT INTO ` + preparedTable(l.pg.Schema) + ` (id, v) VALUES (1, $1) ` +
		`ON CONFLICT (id) DO UPDATE SET v = GREATEST(` + preparedTable(l.pg.Schema) + `.v, excluded.v) RETURNING 1) SELECT pg_notify($2, $3) FROM up`
}

// prepare returns once the version v (with nonce), which the caller's
// transaction holds under the write lock, may commit: every instance
// holding a lease, this one included, will ask the database before it
// answers from memory, until it sees v committed. It prepares v (heard
// back here: every heartbeat ordered before it is heard then), then waits
// until every other instance holding a lease has acknowledged it, or its
// lease ran out. It never waits longer than a lease (and the margin) after
// the prepare, with a listener or without: a lease granted from a
// heartbeat sent before the prepare has run out by then, and one from a
// heartbeat ordered after it was granted to an instance that had heard it
// (or read it from the table). So an instance whose listener hangs while
// its heartbeats go on holds each write for a lease at most. An error
// (the prepare could not be sent, ctx ended) means the transaction must
// not commit.
//
// others is how many other instances' leases may still run, as the
// transaction read the instances table under the write lock (versionSQL).
// With none, no other instance can hold a lease before this commit is
// notified to it: every heartbeat that could grant one waits for the write
// lock, and an instance that listens too late to hear the commit sees it
// in its first round (seed). Then only this instance's own reads must ask
// from now on, until it has followed the commit itself (followedOwn), and
// nothing is sent.
func (l *leases) prepare(ctx context.Context, v, nonce, others int64) error {
	l.mu.Lock()
	if len(l.mine) >= 4096 { // commits never heard (rolled back, or the listener gone): forget them
		clear(l.mine)
	}
	l.mine[v] = nonce
	if others == 0 {
		l.ended(l.alone.v, l.alone.nonce)
		l.alone = aloneCommit{v: v, nonce: nonce, want: l.want.Add(1), done: make(chan struct{})}
		l.heard = max(l.heard, v)
		l.broadcast()
		l.mu.Unlock()
		return nil
	}
	if len(l.own) >= 4096 { // prepares never heard (the listener gone meanwhile): forget them
		clear(l.own)
	}
	l.own[v] = ownCommit{nonce: nonce}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.own, v)
		l.mu.Unlock()
	}()
	rows, err := l.q(ctx, l.prepareSQL(), v, l.channel, "p "+strconv.FormatInt(v, 10)+" "+strconv.FormatInt(nonce, 10))
	if err == nil {
		for rows.Next() {
		}
		err = errors.Join(rows.Err(), rows.Close())
	}
	if err != nil {
		return fmt.Errorf("prepare the commit: %w", err)
	}
	fallback := l.now() + int64(l.opts.Lease+leaseMargin)
	l.mu.Lock()
	conn := l.conn
	for {
		now := l.now()
		if now >= fallback {
			l.mu.Unlock()
			return nil
		}
		next := fallback
		if l.conn != 0 && l.conn == conn {
			if at := l.own[v].heard; at != 0 {
				// An instance first heard after the prepare came back heard
				// it, or read it from the prepared table, before its first
				// lease began.
				next = -1
				for id, p := range l.others {
					switch {
					case p.until <= now:
						delete(l.others, id)
					case p.acked < v && p.since < at && (next < 0 || p.until < next):
						next = p.until
					}
				}
				if next < 0 {
					l.mu.Unlock()
					return nil
				}
			}
		}
		wake := l.wake
		l.mu.Unlock()
		t := time.NewTimer(time.Duration(next - now))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("prepare the commit: %w", ctx.Err())
		}
		t.Stop()
		l.mu.Lock()
	}
}

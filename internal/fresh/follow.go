package fresh

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mattn/go-sqlite3"
)

// How the cache asks the change log what changed (cache.go): on SQLite, on
// a connection of its own; on PostgreSQL, in rounds on the read pool.

// FollowNothing is for a database migrated short of the change log (tests
// of a migration): every question starts over, so nothing outlives a
// request.
func (c *Cache) FollowNothing() {
	c.follow = func(context.Context) error {
		c.apply(delta{reset: true})
		return nil
	}
}

// FollowSQLite starts the cache at the log's position now and has it ask
// the SQLite file at dsn (read-only), whose wal-index is the file shm,
// one question at a time. counter counts its statements.
func (c *Cache) FollowSQLite(dsn, shm string, counter *atomic.Int64) error {
	l, err := openSQLiteLog(dsn, shm, counter, c.tracer)
	if err != nil {
		return err
	}
	c.sqliteLog = l
	p, err := l.start()
	if err != nil {
		return fmt.Errorf("read the change log: %w", err)
	}
	c.pos = p
	var mu sync.Mutex // one question at a time: the connection serves one statement at a time
	c.follow = func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		c.mu.Lock()
		from := c.pos
		c.mu.Unlock()
		d, err := l.next(ctx, from)
		if err != nil {
			return err
		}
		c.apply(d)
		return nil
	}
	return nil
}

// FollowPostgres starts the cache at the log's position now and has it ask
// through q, in rounds that concurrent reads share. With lo, it listens
// for prepares and commits and holds a lease (lease.go): while the lease
// runs and nothing was heard since the last round, reads ask nothing.
func (c *Cache) FollowPostgres(ctx context.Context, q QueryFunc, pg Postgres, lo *LeaseOptions) error {
	d, err := pgNext(ctx, q, position{v: -1})
	if err != nil {
		return fmt.Errorf("read the change log: %w", err)
	}
	c.pos = d.to
	c.lockWritesSQL = "SELECT x.v, x.nonce FROM " + quoteIdent(pg.Schema) + ".lock_writes(?, ?, ?) x"
	var l *leases
	if lo != nil {
		l = newLeases(*lo, pg)
		l.q = q
		l.at = func(v, nonce int64) bool { return c.at(position{v: v, nonce: nonce}) }
	}
	r := &rounds{ask: func(ctx context.Context) error {
		var want uint64
		var floor int64
		if l != nil {
			// Before the question: what it answers is at least as new.
			want, floor = l.roundStart()
		}
		c.mu.Lock()
		from := c.pos
		c.mu.Unlock()
		d, err := pgNext(ctx, q, from)
		if err != nil {
			return err
		}
		c.apply(d)
		if l != nil && d.to.v >= floor {
			// A version prepared and not yet committed (or not yet visible
			// here) keeps the reads asking.
			l.have.Store(want)
		}
		return nil
	}}
	r.traced = c.tracer != nil
	c.follow = r.follow
	c.rounds = r
	if l != nil {
		c.lease = l
		l.start()
	}
	return nil
}

// Prepare returns once a write transaction of this instance that bumped
// version v (with nonce), and holds the write lock, may commit: no
// instance will answer a read from a memory older than v (lease.go).
// others is what CommitVersionSQL read with them. An error means it must
// not commit. Without leases it returns at once.
func (c *Cache) Prepare(ctx context.Context, v, nonce, others int64) error {
	if c.lease == nil {
		return nil
	}
	return c.lease.prepare(ctx, v, nonce, others)
}

// at reports whether the cache stands at p: it has followed every change
// up to p's version, of p's history.
func (c *Cache) at(p position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos.v == p.v && c.pos.nonce == p.nonce
}

// LockWritesSQL takes the write lock and then reads the data version, in
// one statement: the lock's key, and the transaction's bounds in
// milliseconds on the wait for the lock and on each of its statements,
// are its three arguments; it selects v and nonce (NULLs without a
// version). A transaction gives them to TxScopeAt. Only for a cache that
// follows PostgreSQL.
func (c *Cache) LockWritesSQL() string { return c.lockWritesSQL }

// CommitVersionSQL selects the version and nonce of the transaction it
// runs in (v, nonce), NULLs when the transaction bumped none; others,
// what Prepare needs besides; and own, what Ended needs (NULL when
// the transaction logged too much to follow it by itself): the
// statement a writer runs last (it fires the logging triggers still
// pending first, commit_changes in registry_pg.go, so nothing the
// transaction changes after it is logged before the commit). Only for a
// cache that follows PostgreSQL with leases.
func (c *Cache) CommitVersionSQL() string { return c.lease.versionSQL() }

// Close closes SQLite's log connection, and stops PostgreSQL's listener.
func (c *Cache) Close() error {
	if c.lease != nil {
		c.lease.close()
	}
	if c.sqliteLog == nil {
		return nil
	}
	return c.sqliteLog.close()
}

// ReleaseWALIndex gives the wal-index's file back, once the store's
// connections are closed (walindex_unix.go says why not before).
func (c *Cache) ReleaseWALIndex() {
	if c.sqliteLog != nil {
		c.sqliteLog.releaseWALIndex()
	}
}

// RoundsSent is how many questions PostgreSQL's rounds sent.
func (c *Cache) RoundsSent() int64 {
	if c.rounds == nil {
		return 0
	}
	return c.rounds.sent.Load()
}

// sqliteLog reads SQLite's change log on a connection that never writes:
// PRAGMA data_version on it moves whenever any other connection commits,
// this process's writer or another process on the same file (a second
// instance, the CLI, sqlite3), so while it holds, nothing changed and the
// log is not read. Asking it is one statement in SQLite's memory, no query
// plan, a few microseconds. Where the wal-index header can be read
// (walindex.go) it stands in for data_version, at no statement at all: the
// log is read only when the header moved since it was last read.
type sqliteLog struct {
	mu      sync.Mutex // the connection serves one statement at a time
	conn    driver.Conn
	shm     string      // the wal-index's file
	wal     *walIndex   // nil: not mapped, the statement is asked every time
	release func()      // gives the wal-index's file back (releaseWALIndex)
	seen    walHeader   // the header read just before the log was last read
	seenAt  position    // where that read left the cache
	seenOK  bool        // seen and seenAt hold
	version driver.Stmt // PRAGMA data_version
	since   driver.Stmt // the changes after a version
	latest  driver.Stmt // the last version
	counter *atomic.Int64
	tracer  *tracer // nil: tracing off
}

const (
	sqliteDataVersion = "PRAGMA data_version"
	// sqliteChangesAfter returns the last version ever logged (the
	// AUTOINCREMENT's mark, which deleting rows leaves alone) first, then
	// the changes after a version.
	sqliteChangesAfter = "SELECT seq, NULL, NULL FROM sqlite_sequence WHERE name = 'change_log' UNION ALL " +
		"SELECT * FROM (SELECT v, tbl, key FROM change_log WHERE v > ? ORDER BY v LIMIT +?)" // +?: internal/sqldb's Dialect.Limit
	sqliteLastChange = "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'change_log'), 0)"
)

// openSQLiteLog opens the connection on the SQLite file at dsn, whose
// wal-index is the file shm.
func openSQLiteLog(dsn, shm string, counter *atomic.Int64, t *tracer) (*sqliteLog, error) {
	conn, err := (&sqlite3.SQLiteDriver{}).Open(dsn)
	if err != nil {
		return nil, fmt.Errorf("open the change log's connection: %w", err)
	}
	l := &sqliteLog{conn: conn, shm: shm, counter: counter, tracer: t}
	for _, p := range []struct {
		st  *driver.Stmt
		sql string
	}{{&l.version, sqliteDataVersion}, {&l.since, sqliteChangesAfter}, {&l.latest, sqliteLastChange}} {
		if *p.st, err = conn.Prepare(p.sql); err != nil {
			_ = l.close()
			return nil, fmt.Errorf("prepare %q: %w", p.sql, err)
		}
	}
	return l, nil
}

// close finalizes the statements, then closes the connection: SQLite only
// closes a connection whose statements are all finalized (closing it first
// leaves it, its file descriptors and the WAL behind).
func (l *sqliteLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	errs := []error{l.wal.close()} // unmapped while the connection holds the file
	l.wal = nil
	for _, st := range []driver.Stmt{l.version, l.since, l.latest} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	errs = append(errs, l.conn.Close())
	l.conn = nil
	return errors.Join(errs...)
}

// query runs a statement of the connection and reads its rows. A context
// that is never done: the driver then starts no goroutine to watch it (ctx
// only says which span the statement belongs to, when traced).
func (l *sqliteLog) query(ctx context.Context, query string, st driver.Stmt, args []driver.NamedValue,
	each func(dest []driver.Value) error, width int) (err error) {
	l.counter.Add(1)
	if sp := l.tracer.statement(ctx, query); sp != nil {
		defer func() { l.tracer.end(sp, err) }()
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), args)
	if err != nil {
		return err
	}
	defer rows.Close()
	dest := make([]driver.Value, width)
	for {
		switch err := rows.Next(dest); {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		if err := each(dest); err != nil {
			return err
		}
	}
}

// next returns what changed after from.
func (l *sqliteLog) next(ctx context.Context, from position) (delta, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return delta{}, errors.New("store closed")
	}
	d := delta{to: from}
	var h walHeader
	hok := false
	if l.wal != nil {
		h, hok = l.wal.header()
		if hok && l.seenOK && h == l.seen && l.seenAt == from {
			return d, nil // nothing committed since the log was read at from
		}
	}
	// Any error leaves nothing seen: the next question reads the log.
	l.seenOK = false
	if !hok {
		// No header to go by: data_version says whether to read the log.
		var dv int64
		err := l.query(ctx, sqliteDataVersion, l.version, nil, func(d []driver.Value) error {
			dv, _ = d[0].(int64)
			return nil
		}, 1)
		if err != nil {
			return delta{}, err
		}
		if dv == from.dv {
			return d, nil
		}
		d.to.dv = dv
	}
	args := []driver.NamedValue{{Ordinal: 1, Value: from.v}, {Ordinal: 2, Value: int64(maxChangesFollowed + 1)}}
	latest, first := int64(0), true
	err := l.query(ctx, sqliteChangesAfter, l.since, args, func(row []driver.Value) error {
		v, _ := row[0].(int64)
		if first && row[1] == nil {
			latest, first = v, false
			return nil
		}
		first = false
		if v != d.to.v+1 {
			d.reset = true // a hole: pruned (or deleted) past where the cache stood
		}
		d.to.v = v
		d.changes = append(d.changes, Change{Table: text(row[1]), Key: text(row[2])})
		return nil
	}, 3)
	if err != nil {
		return delta{}, err
	}
	if latest > d.to.v && len(d.changes) <= maxChangesFollowed {
		// Logged, then deleted: what changed is not known.
		d.reset, d.to.v = true, latest
	}
	if len(d.changes) > maxChangesFollowed {
		// Not all were read: start over at the last version. It is read
		// before the cache drops its entries, so what is read after that
		// is at least as new.
		d.reset = true
		err = l.query(ctx, sqliteLastChange, l.latest, nil, func(row []driver.Value) error {
			d.to.v, _ = row[0].(int64)
			return nil
		}, 1)
		if err != nil {
			return delta{}, err
		}
	}
	if d.reset {
		d.changes = nil
	}
	if hok {
		// The header was read before the log: a commit between the two
		// moved it, and the next question reads the log again.
		l.seen, l.seenAt, l.seenOK = h, d.to, true
	}
	return d, nil
}

// start is the position of the log now (the cache starts empty there).
func (l *sqliteLog) start() (position, error) {
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	var p position
	err := l.query(ctx, sqliteDataVersion, l.version, nil, func(row []driver.Value) error {
		p.dv, _ = row[0].(int64)
		return nil
	}, 1)
	if err == nil {
		err = l.query(ctx, sqliteLastChange, l.latest, nil, func(row []driver.Value) error {
			p.v, _ = row[0].(int64)
			return nil
		}, 1)
	}
	if err == nil && l.release == nil {
		// The connection has read the database, so it holds the wal-index
		// open: mapped from now on, it is not reset under the mapping.
		l.wal, l.release = openWALIndex(l.shm)
	}
	return p, err
}

// releaseWALIndex gives the wal-index's file back, once the store's
// connections are closed (walindex_unix.go says why not before).
func (l *sqliteLog) releaseWALIndex() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.release != nil {
		l.release()
		l.release = func() {}
	}
}

func text(v driver.Value) string {
	switch t := v.(type) {
	case string:
		return t
	case []byte:
		return string(t)
	}
	return ""
}

// pgChangesAfter returns the data version and what was logged after a
// version, in one statement: one row with NULL changes when nothing was,
// none when the data_version row is missing (someone deleted it: nothing is
// cached until a write puts it back).
const pgChangesAfter = `SELECT d.v, d.nonce, c.v, c.prev, c.tbl, c.key FROM data_version d
LEFT JOIN LATERAL (SELECT v, prev, tbl, key FROM change_log WHERE v > $1 AND v <= d.v ORDER BY v LIMIT $2) c ON true
WHERE d.id = 1`

// QueryFunc runs a statement on the read pool (the store's, with its
// deadlines, counting and tracing).
type QueryFunc func(ctx context.Context, query string, args ...any) (*sql.Rows, error)

// pgNext returns what changed after from, read through q (the read pool).
func pgNext(ctx context.Context, q QueryFunc, from position) (delta, error) {
	rows, err := q(ctx, pgChangesAfter, from.v, maxChangesFollowed+1)
	if err != nil {
		return delta{}, err
	}
	defer rows.Close()
	var d delta
	found := false
	var last int64
	for rows.Next() {
		var dv, dn int64
		var v, prev sql.NullInt64
		var tbl, key sql.NullString
		if err := rows.Scan(&dv, &dn, &v, &prev, &tbl, &key); err != nil {
			return delta{}, err
		}
		found = true
		d.to = position{v: dv, nonce: dn}
		if !v.Valid {
			continue
		}
		switch {
		case len(d.changes) == 0 && (v.Int64 != from.v+1 || prev.Int64 != from.nonce):
			// A hole where the cache stood, or a history that is not the
			// one it followed.
			d.reset = true
		case v.Int64 != last && last != 0 && v.Int64 != last+1:
			d.reset = true
		}
		last = v.Int64
		d.changes = append(d.changes, Change{Table: tbl.String, Key: key.String})
	}
	if err := rows.Close(); err != nil {
		return delta{}, err
	}
	switch {
	case !found:
		return delta{reset: true}, nil
	case d.to.v == from.v:
		d.reset = d.to.nonce != from.nonce
	case d.to.v < from.v, len(d.changes) == 0, len(d.changes) > maxChangesFollowed:
		d.reset = true
	}
	if d.reset {
		d.changes = nil
	}
	return d, nil
}

package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mattn/go-sqlite3"

	"github.com/guildhall/guildhall/internal/model"
)

// The read cache. The hottest reads outside a write (a user, a page of
// users, a channel, a channel's overwrites, what a user's permissions are
// computed from, the versions) are kept in memory as of one data version of
// the database, and answered from memory while that data version is
// current.
//
// The data version moves with every commit that changes what these reads
// read, whoever commits: this process's writer, another instance, the CLI,
// a hand-made change. Every cached read asks for it first, with a question
// that starts after the read arrived, so an entry never outlives a commit
// acknowledged before the read, and there is no time to live: a revoked
// token, a suspended user or a removed permission holds on the very next
// request, on every instance, as without the cache. A read that misses is
// kept as of the data version probed before it: it saw at least that state,
// and a commit it saw beyond it (or any later one) moves the data version
// past the entry's.
//
// Where the data version comes from is the database's (versionSource):
// SQLite's PRAGMA data_version, asked locally in microseconds
// (sqliteVersion); on PostgreSQL a row that triggers bump in every
// transaction that writes, read in one round trip that every read waiting
// at the time shares (pgVersion, dataversion.go).
type readCache struct {
	src versionSource

	// afterRead, when set (tests), runs between a missed read and its
	// keeping.
	afterRead func()

	emu     sync.RWMutex
	version dataVersion // the data version the entries are of
	m       map[cacheKey]cached
	bytes   int // estimated size of the entries

	hits, misses atomic.Int64
}

// dataVersion is what a question for the data version learned: the state
// of the database, and when this instance learned it.
type dataVersion struct {
	state dbState
	// seq orders the questions of this instance: a later one has a higher
	// seq and an answer at least as recent. Entries are ordered by it, not
	// by the state's n, which a database put back (a restore, a lost
	// commit) may show lower than before.
	seq int64
}

// dbState names a state of the database: equal states hold equal data.
// SQLite: the data version (n) of the watch connection, which only grows
// while it is open. PostgreSQL: the data_version row, whose nonce is new at
// every bump.
type dbState struct {
	n, nonce int64
}

// versionSource tells the data version as of now.
type versionSource interface {
	// current returns the data version as of a moment after the call
	// began. ok is false, with a nil error, when the database has none to
	// tell (the cache is emptied and the read goes to the database); an
	// error is the database's, and the read fails with it.
	current(ctx context.Context) (v dataVersion, ok bool, err error)
	// probes counts the questions asked.
	probes() int64
	close() error
}

func newReadCache(src versionSource) *readCache { return &readCache{src: src} }

// maxCacheBytes bounds the estimated size of the entries; past it the cache
// starts over. A user costs a few hundred bytes: 10,000 users and a
// thousand pages of 50 fit.
const maxCacheBytes = 32 << 20

type cacheKind uint8

const (
	cacheUser cacheKind = iota + 1
	cacheChannel
	cacheSubject
	cacheUserPage
	cacheVersions
	cacheOverwrites
)

// cacheKey names one read: its kind and its arguments.
type cacheKey struct {
	kind       cacheKind
	a, b, c, d string
	n          int
	flag       bool
}

type cached struct {
	value any
	bytes int
}

// sqliteVersion is SQLite's data version (PRAGMA data_version), read on a
// connection of its own that never writes: it moves whenever any other
// connection commits, this process's writer or another process on the same
// file (a second instance, the CLI). Asking is one statement in SQLite's
// memory, no query plan, a few microseconds.
type sqliteVersion struct {
	mu      sync.Mutex // the connection serves one statement at a time
	conn    driver.Conn
	stmt    driver.Stmt
	dest    []driver.Value
	counter *atomic.Int64 // the store's statements (QueryCount)
	asked   atomic.Int64  // questions; a question's number is its seq
}

func (c *sqliteVersion) probes() int64 { return c.asked.Load() }

// openSQLiteVersion opens the watch connection on the SQLite file at dsn.
func openSQLiteVersion(dsn string, counter *atomic.Int64) (*sqliteVersion, error) {
	conn, err := (&sqlite3.SQLiteDriver{}).Open(dsn)
	if err != nil {
		return nil, fmt.Errorf("open the read cache's connection: %w", err)
	}
	st, err := conn.Prepare("PRAGMA data_version")
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("prepare data_version: %w", err)
	}
	if _, ok := st.(driver.StmtQueryContext); !ok {
		_ = st.Close()
		_ = conn.Close()
		return nil, fmt.Errorf("prepare data_version: %T cannot query with a context", st)
	}
	return &sqliteVersion{conn: conn, stmt: st, dest: make([]driver.Value, 1), counter: counter}, nil
}

// close finalizes the statement, then closes the connection: SQLite only
// closes a connection whose statements are all finalized (closing the
// connection first leaves it, its file descriptors and the WAL behind).
func (c *sqliteVersion) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := errors.Join(c.stmt.Close(), c.conn.Close())
	c.conn, c.stmt = nil, nil
	return err
}

// current reads the data version; when it cannot (a closed store, a file
// another process holds), the read goes to the database, which tells what
// is wrong.
func (c *sqliteVersion) current(context.Context) (dataVersion, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return dataVersion{}, false, nil
	}
	c.counter.Add(1) // the data version is a statement too
	seq := c.asked.Add(1)
	// A context that is never done: the driver then starts no goroutine to
	// watch it.
	rows, err := c.stmt.(driver.StmtQueryContext).QueryContext(context.Background(), nil)
	if err != nil {
		return dataVersion{}, false, nil
	}
	defer rows.Close()
	if err := rows.Next(c.dest); err != nil {
		return dataVersion{}, false, nil
	}
	n, ok := c.dest[0].(int64)
	return dataVersion{state: dbState{n: n}, seq: seq}, ok, nil
}

func (c *readCache) close() error { return c.src.close() }

// clear drops every entry: the database had no data version to tell, so
// none of them can be vouched for again (a row put back by hand could show
// a state they were kept at).
func (c *readCache) clear() {
	c.emu.Lock()
	defer c.emu.Unlock()
	c.m, c.bytes = nil, 0
}

func (c *readCache) get(version dataVersion, key cacheKey) (any, bool) {
	c.emu.RLock()
	defer c.emu.RUnlock()
	if c.version.state != version.state {
		return nil, false
	}
	e, ok := c.m[key]
	return e.value, ok
}

func (c *readCache) put(version dataVersion, key cacheKey, value any, bytes int) {
	c.emu.Lock()
	defer c.emu.Unlock()
	switch {
	case version.state == c.version.state && c.m != nil && c.bytes+bytes <= maxCacheBytes:
		// Of the state the entries are of.
	case version.seq < c.version.seq:
		return // of a state older than the entries'
	default:
		c.version, c.m, c.bytes = version, make(map[cacheKey]cached), 0
	}
	if old, ok := c.m[key]; ok {
		c.bytes -= old.bytes
	}
	c.m[key] = cached{value: value, bytes: bytes}
	c.bytes += bytes
}

// ReadCacheStats counts the reads the cache answered and the ones it sent
// to the database, and the times it asked the database for its data version
// (on PostgreSQL, concurrent reads share one question).
type ReadCacheStats struct {
	Hits, Misses, Probes int64
}

// ReadCacheStats returns the read cache's counters since the store was opened.
func (s *Store) ReadCacheStats() ReadCacheStats {
	if s.cache == nil {
		return ReadCacheStats{}
	}
	return ReadCacheStats{Hits: s.cache.hits.Load(), Misses: s.cache.misses.Load(), Probes: s.cache.src.probes()}
}

// cachedRead answers read from the cache when q has one and the data
// version allows, else runs it and keeps what it read. bytes estimates what
// a value costs to keep. A value is shared by every request that reads it:
// callers must not change it (copy what they change).
func cachedRead[T any](ctx context.Context, q queries, key cacheKey, bytes func(T) int, read func() (T, error)) (T, error) {
	c := q.cache
	if c == nil {
		return read()
	}
	version, ok, err := c.src.current(q.ctx(ctx))
	if err != nil {
		var zero T
		return zero, fmt.Errorf("read the data version: %w", err)
	}
	if !ok {
		c.clear()
		return read()
	}
	if v, hit := c.get(version, key); hit {
		c.hits.Add(1)
		return v.(T), nil
	}
	c.misses.Add(1)
	v, err := read()
	if err != nil {
		return v, err
	}
	if c.afterRead != nil {
		c.afterRead()
	}
	// Kept as of the version probed before the read: the read saw at least
	// that state, and if a commit made it see more (or came after it), the
	// data version has moved past the entry's, which is then never
	// answered.
	c.put(version, key, v, bytes(v))
	return v, nil
}

// withVersions is a value read with the versions it was read at.
type withVersions[T any] struct {
	value    T
	versions Versions
}

// cachedWithVersions is cachedRead for a read that returns the versions
// beside its value.
func cachedWithVersions[T any](ctx context.Context, q queries, key cacheKey, bytes func(*T) int, read func() (T, Versions, error)) (T, Versions, error) {
	r, err := cachedRead(ctx, q, key, func(r withVersions[T]) int { return bytes(&r.value) }, func() (withVersions[T], error) {
		v, versions, err := read()
		return withVersions[T]{v, versions}, err
	})
	return r.value, r.versions, err
}

// userBytes estimates what keeping a user costs.
func userBytes(u *model.User) int {
	n := 256 + len(u.ID) + len(u.Username) + len(u.DisplayName)
	if u.Email != nil {
		n += len(*u.Email)
	}
	for _, r := range u.Roles {
		n += 16 + len(r)
	}
	return n
}

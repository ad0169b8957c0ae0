package fresh

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/guildhall/guildhall/internal/model"
)

// The read cache: the one place that decides whether a value read before
// may be served again. Its rule:
//
//	A cached read is answered from memory only after the cache has
//	followed the change log (registry.go) up to a moment after the
//	request arrived; following it drops every entry that depends on what
//	changed. A value read from the database is kept only if no change was
//	followed while it was read.
//
// So a commit acknowledged before a request arrives (by any instance, the
// CLI, or an operator's psql or sqlite3) governs that request, with no
// time to live, and a commit drops only what it changed: a user created
// leaves every other user's entry, and everyone's credentials, alone.
//
// Following the log costs one question per request, not per read: the
// request's reads share a scope (Scope) whose first cached read asks,
// and a write that commits in the scope makes the next read check again
// (on PostgreSQL under a lease, asking nothing once the cache has
// followed that commit itself: Ended).
// Asking is SQLite's PRAGMA data_version, a few microseconds, and a read of
// the log only when it moved; on PostgreSQL, one statement that returns the
// data version and what was logged since, which every read waiting when it
// is sent shares (rounds).
//
// What is cached: users by ID, packed outside the collector's view
// (packed.go); credentials by token hash and pages of users (their IDs,
// lookupPage), as entries on the heap; and views (view.go), values built
// from several tables and refreshed part by part, as the store's
// authorization state is. Values handed out are the caller's own (copies)
// or immutable (a view's). The users and the entries share the cache's
// bound (splitBound); past their share, users are dropped oldest first and
// entries at random, as few as make room.

// Dep is what a cached value depends on: a key of a logged table, or the
// whole table (key "").
type Dep struct{ Table, Key string }

// Change is one entry of the change log; the table "*" is everything.
type Change = Dep

// position is how far the cache has followed the log.
type position struct {
	v     int64 // the last version followed
	nonce int64 // PostgreSQL: the nonce of version v
	dv    int64 // SQLite without a readable wal-index: PRAGMA data_version when v was read
}

// delta is what one question to the log learned: the changes after the
// position asked from, up to the position to; or, with reset, that the log
// cannot tell (a hole where the cache stood, a rewritten history, more
// changes than are worth following one by one), and the cache must start
// over at to.
type delta struct {
	to      position
	changes []Change
	reset   bool
}

// maxChangesFollowed bounds one question's changes: past it, starting over
// is cheaper than following them.
const maxChangesFollowed = 10_000

// DefaultCacheBytes bounds the cache's estimated size when Options say
// nothing.
const DefaultCacheBytes = 128 << 20

// maxEntryBytes bounds the entries' share of the cache (credentials,
// pages): entries are objects on the heap, which every collection marks,
// so a bigger share costs more than its hits where it fills (searches
// spread over a big community), while packed users cost the collector
// nothing.
const maxEntryBytes = 16 << 20

// splitBound shares a cache's bound between its entries (a quarter, at
// most maxEntryBytes and capEntries when it is not 0) and its packed users
// (the rest).
func splitBound(max, capEntries int) (entries, users int) {
	entries = min(max/4, maxEntryBytes)
	if capEntries > 0 {
		entries = min(entries, capEntries)
	}
	return entries, max - entries
}

type Kind uint8

const (
	Credentials Kind = iota + 1
	User
	UserPage
)

// Key names one read: its kind and its arguments.
type Key struct {
	Kind       Kind
	A, B, C, D string
	N          int
	Flag       bool
}

type entry struct {
	key   Key
	value any
	deps  []Dep
	bytes int
}

// entrySet is the entries that depend on one dep. Most deps have one (a
// user's key: that user's entry; a token's: its credentials), which is
// held inline; a map is made only for a second.
type entrySet struct {
	one  *entry
	more map[*entry]struct{}
}

func (s *entrySet) add(e *entry) {
	switch {
	case s.more != nil:
		s.more[e] = struct{}{}
	case s.one == nil:
		s.one = e
	default:
		s.more = map[*entry]struct{}{s.one: {}, e: {}}
		s.one = nil
	}
}

// remove removes e, and says whether the set is now empty.
func (s *entrySet) remove(e *entry) bool {
	if s.one == e {
		s.one = nil
	} else {
		delete(s.more, e)
	}
	return s.one == nil && len(s.more) == 0
}

type Cache struct {
	// follow asks the log what changed and applies it (SQLite: one
	// question at a time; PostgreSQL: rounds).
	follow func(ctx context.Context) error
	rounds *rounds // PostgreSQL: how follow shares questions

	mu    sync.Mutex
	pos   position
	gen   uint64 // moves with every change followed: a read kept at another gen is not kept
	m     map[Key]*entry
	byDep map[Dep]entrySet
	bytes int // the entries' estimate
	max   int // the entries' bound
	users *packedUsers
	// removed counts the entries removed since the maps were compacted.
	removed int
	views   []*view // values built from several tables (View)
	// userDeps are what a kept user depends on (Options.Users).
	userDeps UserDeps

	// afterRead, when set (tests), runs between a read that missed and
	// its keeping.
	afterRead func()

	hits, misses, questions, resets atomic.Int64
	leased                          atomic.Int64 // scopes answered under the lease, without a question
	lockedAt                        atomic.Int64 // write transactions that found the cache at the version under the lock
	ownFollowed                     atomic.Int64 // own commits followed with no question, reads then answered under the lease (Ended)
	keptSearches                    atomic.Int64 // pages of searches whose users were kept (NoteKeptSearch)
	changes                         atomic.Int64 // changes followed (for tracing)
	tracer                          *tracer      // nil: tracing off
	sqliteLog                       *sqliteLog   // SQLite: the log's own connection (FollowSQLite)
	lease                           *leases      // PostgreSQL with a listener: when reads need not ask (lease.go)
	lockWritesSQL                   string       // PostgreSQL: LockWritesSQL
}

// Options size a cache and say what its users depend on.
type Options struct {
	// MaxBytes bounds the cache's estimated size; DefaultCacheBytes when 0.
	MaxBytes int
	// MaxEntryBytes, when not 0, caps the share of MaxBytes that the
	// entries on the heap get (splitBound).
	MaxEntryBytes int
	// Users says which logged tables a kept user depends on.
	Users UserDeps
	// Tracing, when its Tracer is set, traces the cache's decisions.
	Tracing Tracing
}

// UserDeps are the logged tables a kept user depends on: Table by the
// user's ID, and every table of Whole as a whole (any role's position
// orders every user's role IDs).
type UserDeps struct {
	Table string
	Whole []string
}

// pageDeps: a page of users changes with any user, and with what every
// user depends on.
func (u UserDeps) pageDeps() []Dep {
	out := []Dep{{u.Table, ""}}
	for _, t := range u.Whole {
		out = append(out, Dep{t, ""})
	}
	return out
}

// New returns an empty cache; it follows nothing until one of the Follow
// methods says how.
func New(opts Options) *Cache {
	max := opts.MaxBytes
	if max <= 0 {
		max = DefaultCacheBytes
	}
	entries, users := splitBound(max, opts.MaxEntryBytes)
	return &Cache{max: entries, users: newPackedUsers(users), m: map[Key]*entry{}, byDep: map[Dep]entrySet{},
		userDeps: opts.Users, tracer: newTracer(opts.Tracing)}
}

// apply follows a delta: it drops what depends on the changes and moves
// the position.
func (c *Cache) apply(d delta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.reset {
		c.resets.Add(1)
		c.clearLocked()
	}
	for _, ch := range d.changes {
		if ch.Table == "*" {
			c.clearLocked()
			continue
		}
		c.dropLocked(ch)
		if ch.Key != "" {
			c.dropLocked(Dep{ch.Table, ""})
		}
		c.dropUsersLocked(ch)
		for _, v := range c.views {
			v.mark(ch, c.gen+1)
		}
	}
	if d.reset || len(d.changes) > 0 {
		c.gen++
		c.changes.Add(int64(len(d.changes)))
	}
	c.pos = d.to
}

func (c *Cache) clearLocked() {
	c.m, c.byDep, c.bytes, c.removed = map[Key]*entry{}, map[Dep]entrySet{}, 0, 0
	c.users.clear()
	for _, v := range c.views {
		v.markAll(c.gen + 1)
	}
}

// dropLocked drops the entries that depend on d.
func (c *Cache) dropLocked(d Dep) {
	set, ok := c.byDep[d]
	if !ok {
		return
	}
	if set.one != nil {
		c.removeLocked(set.one)
	}
	for e := range set.more {
		c.removeLocked(e)
	}
}

func (c *Cache) removeLocked(e *entry) {
	delete(c.m, e.key)
	c.bytes -= e.bytes
	c.removed++
	for _, d := range e.deps {
		set := c.byDep[d]
		if set.remove(e) {
			delete(c.byDep, d)
		} else {
			c.byDep[d] = set
		}
	}
}

// lookup returns an entry's value, and the gen a read that misses must be
// kept at.
func (c *Cache) lookup(k Key) (any, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false, c.gen
	}
	return e.value, true, c.gen
}

// What keeping an entry costs beside its value's own estimate: its slot
// in the map of entries (the key inline) with the entry and the value's
// box; per dependency, the set's slot in the map of dependencies when it
// is the first to depend on it (a user's key; it is then held inline),
// the set's map when it is the second (a user's credentials beside the
// user), and its slot in that map after. Set from heap profiles of a
// cache filled with users, credentials and search pages
// (TestCacheRealSize), with a margin: the bound holds what the heap holds.
const (
	entryOverhead  = 400
	depOverhead    = 48
	newSetOverhead = 150
	setMapOverhead = 300
)

// entryBytes is what keeping a value of the given estimate under k, with
// deps, costs in all.
func (c *Cache) entryBytesLocked(k Key, deps []Dep, value int) int {
	n := value + entryOverhead + AllocBytes(len(k.A)) + AllocBytes(len(k.B)) + AllocBytes(len(k.C)) + AllocBytes(len(k.D))
	for _, d := range deps {
		switch set, ok := c.byDep[d]; {
		case !ok:
			n += newSetOverhead + AllocBytes(len(d.Key))
		case set.more == nil:
			n += depOverhead + setMapOverhead
		default:
			n += depOverhead
		}
	}
	return n
}

// keep stores a value read at gen, unless a change was followed since (the
// read may predate it). bytes is the value's own estimate.
func (c *Cache) keep(gen uint64, k Key, deps []Dep, value any, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.keepLocked(k, deps, value, bytes)
	}
}

func (c *Cache) keepLocked(k Key, deps []Dep, value any, bytes int) {
	if e, ok := c.m[k]; ok {
		c.removeLocked(e)
	}
	if c.removed > max(len(c.m), 1024) {
		c.compactLocked() // entries dropped by changes followed, as many as are kept
	}
	valueBytes := bytes
	bytes = c.entryBytesLocked(k, deps, valueBytes)
	if bytes > c.max/4 {
		return // one value that large would crowd out the rest
	}
	for c.bytes+bytes > c.max && len(c.m) > 0 {
		c.evictLocked(c.max - bytes)
		// Evicting may have removed a set this entry would have joined.
		bytes = c.entryBytesLocked(k, deps, valueBytes)
	}
	e := &entry{key: k, value: value, deps: deps, bytes: bytes}
	c.m[k] = e
	c.bytes += bytes
	for _, d := range deps {
		set := c.byDep[d]
		set.add(e)
		c.byDep[d] = set
	}
}

// evictLocked drops entries (in the map's random order) until the estimate
// is at most target: as few as make room, so that reads spread over more
// than the cache holds pay one removal per miss, not a sweep of a quarter
// of the cache. The maps are compacted once as many entries were removed
// as are kept (keep).
func (c *Cache) evictLocked(target int) {
	for _, e := range c.m {
		if c.bytes <= target {
			break
		}
		c.removeLocked(e)
	}
}

// compactLocked copies the map of entries, the map of dependencies and
// every large set of entries into maps of their size. A Go map never
// shrinks, and one that entries keep entering and leaving holds the
// deleted slots too, several times what a fresh copy holds.
func (c *Cache) compactLocked() {
	c.removed = 0
	m := make(map[Key]*entry, len(c.m))
	for k, e := range c.m {
		m[k] = e
	}
	c.m = m
	byDep := make(map[Dep]entrySet, len(c.byDep))
	for d, set := range c.byDep {
		if len(set.more) > 8 {
			fresh := make(map[*entry]struct{}, len(set.more))
			for e := range set.more {
				fresh[e] = struct{}{}
			}
			set.more = fresh
		}
		byDep[d] = set
	}
	c.byDep = byDep
}

// scopeKey keys a request's read scope in its context.
type scopeKey struct{}

// readScope is a request's: once one of its reads has followed the log,
// the others need not.
type readScope struct {
	followed atomic.Bool
	tx       bool // a write transaction's: it asks under the write lock, lease or not, unless locked says it need not
	// locked is the data version a write transaction read once it held
	// the write lock (TxScopeAt): a cache already there has nothing to
	// ask.
	locked *position
}

// Scope returns a context for one request: its cached reads are all
// answered as of one moment after this call, which its first cached read
// asks for. A write committed through it (AskAgain) makes the next read
// ask again, so the request reads its own writes.
func Scope(ctx context.Context) context.Context {
	sc := &readScope{}
	if testOnlySkipFreshness != "" {
		sc.followed.Store(true)
	}
	return context.WithValue(ctx, scopeKey{}, sc)
}

// TxScope returns a scope of its own for a write transaction: the cache
// follows the log once per transaction, under the write lock, so what it
// holds is what the transaction started from (its own changes aside: Own).
func TxScope(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, &readScope{tx: true})
}

// TxScopeAt is TxScope for a transaction that read the data version, v
// and nonce, in the statement that took the write lock (after the lock,
// so with every commit before it; LockWritesSQL): when the cache stands
// at that version, what a question would answer then is what it holds,
// and the transaction asks nothing.
func TxScopeAt(ctx context.Context, v, nonce int64) context.Context {
	return context.WithValue(ctx, scopeKey{}, &readScope{tx: true, locked: &position{v: v, nonce: nonce}})
}

// WithScopeOf returns ctx in the read scope of scoped.
func WithScopeOf(ctx, scoped context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, scopeOf(scoped))
}

// AskAgain makes the next cached read of ctx's scope follow the log again:
// a write committed in the scope is then read back.
func AskAgain(ctx context.Context) {
	if sc := scopeOf(ctx); sc != nil {
		sc.followed.Store(false)
	}
}

// testOnlySkipFreshness, when not empty, breaks the rule above on purpose:
// every read scope starts as though it had asked already, so a request's
// cached reads are answered from whatever the cache holds (it still
// follows the log inside write transactions). Only a test's own build sets
// it, at link time:
//
//	go build -ldflags "-X github.com/guildhall/guildhall/internal/fresh.testOnlySkipFreshness=yes"
//
// cmd/guildhall's linearizability test does, to show that its checker
// finds the stale reads of a cache that does not ask. Nothing else sets it.
var testOnlySkipFreshness string

func scopeOf(ctx context.Context) *readScope {
	sc, _ := ctx.Value(scopeKey{}).(*readScope)
	return sc
}

// Fresh makes sure the cache has followed the log up to a moment after the
// request's scope began (after now, without a scope).
func (c *Cache) Fresh(ctx context.Context) error {
	sc := scopeOf(ctx)
	if sc != nil && sc.followed.Load() {
		return nil
	}
	if sc != nil && sc.locked != nil && c.at(*sc.locked) {
		c.lockedAt.Add(1)
		sc.followed.Store(true)
		return nil
	}
	if c.lease != nil && (sc == nil || !sc.tx) && c.lease.current(ctx) {
		// Nothing was committed since the last round that this instance
		// has not heard of, and every writer waits for it to hear.
		c.leased.Add(1)
		if sc != nil {
			sc.followed.Store(true)
		}
		return nil
	}
	c.questions.Add(1)
	var ft *followTrace
	if c.tracer != nil {
		ctx, ft = c.tracer.followSpan(ctx, c)
	}
	err := c.follow(ctx)
	ft.end(c, err)
	if err != nil {
		return fmt.Errorf("follow the change log: %w", err)
	}
	if sc != nil {
		sc.followed.Store(true)
	}
	return nil
}

// Read answers a read from the cache when it may, else runs it and keeps
// what it read. deps are what the value depends on; bytes estimates what
// keeping it costs; copyOut gives the caller a value of its own.
func Read[T any](ctx context.Context, c *Cache, k Key, deps func(T) []Dep, bytes func(T) int,
	copyOut func(T) T, read func() (T, error)) (T, error) {
	if err := c.Fresh(ctx); err != nil {
		var zero T
		return zero, err
	}
	v, hit, gen := c.lookup(k)
	c.decided(ctx, k.Kind, hit)
	if hit {
		return copyOut(v.(T)), nil
	}
	value, err := read()
	if err != nil {
		return value, err
	}
	if c.afterRead != nil {
		c.afterRead()
	}
	c.keep(gen, k, deps(value), value, bytes(value))
	return copyOut(value), nil
}

// decided counts (and traces) a read answered from memory or not.
func (c *Cache) decided(ctx context.Context, kind Kind, hit bool) {
	if c.tracer != nil {
		c.tracer.decided(ctx, cacheReads[kind], hit)
	}
	if hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
}

// lookupUser returns a kept user, and the gen a read that misses must be
// kept at.
func (c *Cache) lookupUser(id string) (model.User, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.users.user(id)
	return u, ok, c.gen
}

// lookupPage returns a kept page of users, and the gen a read that misses
// must be kept at. A page is kept as its users' IDs and versions
// (keepPage), and served only while each of its users is kept too, as the
// page read them: a user kept again since, read after a change that was
// not followed yet, would mix two moments in one answer.
func (c *Cache) lookupPage(k Key) ([]model.User, string, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, "", false, c.gen
	}
	p := e.value.(userPage)
	recs := make([][]byte, 0, p.n)
	versions := make([]int64, 0, p.n)
	ok = p.each(func(id []byte, v int64) bool {
		rec, ok := c.users.getEncoded(id)
		recs, versions = append(recs, rec), append(versions, v)
		return ok
	})
	var users []model.User
	if ok {
		users, ok = c.users.decodeAt(recs, versions)
	}
	if !ok {
		return nil, "", false, c.gen // a user gave way or changed: the page is read again
	}
	return users, p.next, true, c.gen
}

// keptUsers returns the kept users of ids, each at its version of
// versions, or false when one of them is not kept at it.
func (c *Cache) keptUsers(ids []string, versions []int64) ([]model.User, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs := make([][]byte, len(ids))
	for i, id := range ids {
		rec, ok := c.users.get(id)
		if !ok {
			return nil, false
		}
		recs[i] = rec
	}
	return c.users.decodeAt(recs, versions)
}

// decodeAt decodes the records of users (the arena's, under the cache's
// lock) into one buffer, unless one is not of its version in versions.
func (p *packedUsers) decodeAt(recs [][]byte, versions []int64) ([]model.User, bool) {
	room := 0
	for _, rec := range recs {
		room += userRoom(rec)
	}
	users := make([]model.User, len(recs))
	buf := make([]byte, 0, room) // the strings of the users
	for i := range users {
		users[i], buf = p.decode(buf, recs[i])
		if users[i].Version != versions[i] {
			return nil, false
		}
	}
	return users, true
}

// keepPage keeps a page of users read at gen, unless a change was followed
// since: its users, and their IDs as the page.
func (c *Cache) keepPage(gen uint64, k Key, users []model.User, next string) {
	p := newUserPage(users, next)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	for _, u := range users {
		c.users.put(u)
	}
	c.keepLocked(k, c.userDeps.pageDeps(), p, p.bytes())
}

// keepUser keeps a user read at gen, unless a change was followed since.
func (c *Cache) keepUser(gen uint64, u model.User) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.users.put(u)
	}
}

// dropUsersLocked drops the users a change may have changed: a user
// changes with their row and their roles (logged as theirs), and with any
// role's position, which orders their role IDs.
func (c *Cache) dropUsersLocked(ch Change) {
	switch {
	case ch.Table == c.userDeps.Table && ch.Key != "":
		c.users.drop(ch.Key)
	case ch.Table == c.userDeps.Table || slices.Contains(c.userDeps.Whole, ch.Table):
		c.users.clear()
	}
}

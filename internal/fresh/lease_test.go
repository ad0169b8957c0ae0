package fresh_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	. "github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/testenv"
)

// leaseWorld is a PostgreSQL schema with a logged table, gadgets, and how
// caches with leases follow it.
type leaseWorld struct {
	url string
	db  *sql.DB
	pg  Postgres
}

func newLeaseWorld(t *testing.T) leaseWorld {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.FreshPostgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	// The write lock is the schema's own: the tests run side by side in
	// one database, and a write waiting out a lease holds it.
	key := fnv.New64a()
	key.Write([]byte(schema))
	pg := Postgres{Schema: schema, Tag: schema, WriteKey: int64(key.Sum64() >> 1)}
	for _, q := range []string{
		"CREATE TABLE settings (id INTEGER PRIMARY KEY, auth_version BIGINT NOT NULL DEFAULT 0, credentials_version BIGINT NOT NULL DEFAULT 0)",
		"CREATE TABLE gadgets (id TEXT PRIMARY KEY, n INTEGER NOT NULL)",
		"INSERT INTO gadgets VALUES ('g', 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := CreateLog(ctx, db, Registry{Logged: []Table{{Name: "gadgets", LogAs: "gadgets", Key: "id"}}}, &pg); err != nil {
		t.Fatal(err)
	}
	return leaseWorld{url: dbURL, db: db, pg: pg}
}

// cache starts an instance's cache with a lease.
func (w leaseWorld) cache(t *testing.T, name string, lease time.Duration) *Cache {
	t.Helper()
	c := New(Options{})
	if err := c.FollowPostgres(context.Background(), w.db.QueryContext, w.pg,
		&LeaseOptions{URL: w.url, Instance: name, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// held waits until c holds its lease, having asked once.
func held(t *testing.T, c *Cache) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !c.LeaseCurrent(); {
		if time.Now().After(deadline) {
			t.Fatal("no lease within 10 s")
		}
		if err := c.Fresh(Scope(context.Background())); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// write changes gadgets as the service's writer does, through c: its
// version prepared before the commit.
func (w leaseWorld) write(t *testing.T, c *Cache, n int) {
	t.Helper()
	if err := w.tryWrite(c, n); err != nil {
		t.Fatal(err)
	}
}

func (w leaseWorld) tryWrite(c *Cache, n int) error {
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range []string{w.pg.LockWrites(), fmt.Sprintf("UPDATE gadgets SET n = %d WHERE id = 'g'", n)} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	v, nonce, own, err := commit(ctx, c, tx)
	if err != nil {
		return err
	}
	c.Ended(v, nonce, own, true)
	return nil
}

// begin starts a write transaction as the service's writer does: the
// write lock taken, then stmt. It is rolled back at the end of the test
// unless committed.
func (w leaseWorld) begin(t *testing.T, stmt string) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	for _, q := range []string{w.pg.LockWrites(), stmt} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return tx
}

// commit ends tx as the service's writer does, through c: its version
// read last, prepared, committed. It returns what the writer then gives
// Cache.Ended.
func commit(ctx context.Context, c *Cache, tx *sql.Tx) (v, nonce int64, own string, err error) {
	var others int64
	var o sql.NullString
	if err := tx.QueryRowContext(ctx, c.CommitVersionSQL()).Scan(&v, &nonce, &others, &o); err != nil {
		return 0, 0, "", err
	}
	if err := c.Prepare(ctx, v, nonce, others); err != nil {
		return 0, 0, "", err
	}
	return v, nonce, o.String, tx.Commit()
}

// TestLeaseAnswersWithoutAsking: a cache that holds its lease asks nothing
// while nothing is committed; its own commit, prepared alone, makes its
// next read ask until the cache has followed that commit by itself.
func TestLeaseAnswersWithoutAsking(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	held(t, c)
	before := c.Stats().Questions
	for range 100 {
		if err := c.Fresh(Scope(context.Background())); err != nil {
			t.Fatal(err)
		}
	}
	if asked := c.Stats().Questions - before; asked != 0 {
		t.Fatalf("%d questions for 100 reads under the lease, want 0", asked)
	}
	ctx := context.Background()
	tx := w.begin(t, "UPDATE gadgets SET n = 1 WHERE id = 'g'")
	v, nonce, own, err := commit(ctx, c, tx)
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseCurrent() {
		t.Fatal("after its own commit, before following it, the cache still answers from memory")
	}
	followed := c.Stats().OwnFollowed
	c.Ended(v, nonce, own, true)
	if !c.LeaseCurrent() || c.At() != v || c.Stats().OwnFollowed != followed+1 {
		t.Fatalf("after following its own commit of %d: lease current %v, at %d, followed %d; want true, %d, 1",
			v, c.LeaseCurrent(), c.At(), c.Stats().OwnFollowed-followed, v)
	}
	before = c.Stats().Questions
	if err := c.Fresh(Scope(ctx)); err != nil {
		t.Fatal(err)
	}
	if asked := c.Stats().Questions - before; asked != 0 {
		t.Fatalf("%d questions after its own commit was followed, want 0", asked)
	}
	// A write transaction's scope asks, lease or not.
	held(t, c)
	before = c.Stats().Questions
	if err := c.Fresh(TxScope(context.Background())); err != nil {
		t.Fatal(err)
	}
	if c.Stats().Questions == before {
		t.Fatal("a write transaction's read did not ask")
	}
}

// TestLeaseCommitGovernsTheOtherInstance: once a write of one instance is
// answered, the other instance's next read asks, every time; and the
// writer waits for nobody it has not heard of.
func TestLeaseCommitGovernsTheOtherInstance(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	one, two := w.cache(t, "one", DefaultLease), w.cache(t, "two", DefaultLease)
	for i := range 200 {
		held(t, two)
		w.write(t, one, i+1)
		if two.LeaseCurrent() {
			t.Fatalf("write %d: answered while the other instance still answers from memory", i)
		}
	}
}

// TestLeaseCommitInvisibleUntilHeard: a commit becomes visible to readers
// of the database only once every instance that answers from memory has
// heard of it. Waiting after the commit would not do: anyone who read the
// database meanwhile (a read that missed, a write that waited for the
// row) could be answered before the other instance, answering from an
// older memory, heard of it. Here the other instance's listener lags: the
// write waits for its lease to run out.
func TestLeaseCommitInvisibleUntilHeard(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	one, two := w.cache(t, "one", DefaultLease), w.cache(t, "two", DefaultLease)
	for round := range 3 {
		held(t, one)
		held(t, two)
		release := two.HoldNotices()
		defer release() // a listener held would hold Close
		done := make(chan error, 1)
		began := time.Now()
		go func() { done <- w.tryWrite(one, round+1) }()
		for {
			var n int
			if err := w.db.QueryRow("SELECT n FROM gadgets WHERE id = 'g'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == round+1 {
				if two.LeaseCurrent() {
					t.Fatalf("round %d: the commit is visible while an instance that has not heard of it answers from memory", round)
				}
				break
			}
			time.Sleep(time.Millisecond)
		}
		took := time.Since(began)
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The held instance's heartbeats wait for the write's lock
		// meanwhile: the write still waits a lease at most after its
		// prepare (with a second of slack for a busy machine: the
		// protocol's bound, not a speed target).
		if took > DefaultLease+LeaseMargin+time.Second {
			t.Fatalf("round %d: the write waited %v for an instance whose listener hangs, lease %v", round, took, DefaultLease)
		}
	}
}

// TestLeasePreparedNeverGoesBack: a prepare the server runs late (its
// writer gave up on it) does not take the prepared table back below a
// later one, which an instance that connects then would miss.
func TestLeasePreparedNeverGoesBack(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	for _, v := range []int64{7, 5} {
		if _, err := w.db.Exec(c.PrepareSQL(), v, "guildhall_test_unheard", "p"); err != nil {
			t.Fatal(err)
		}
	}
	var v int64
	if err := w.db.QueryRow("SELECT v FROM fresh_prepared WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 7 {
		t.Fatalf("fresh_prepared holds %d after prepares of 7 then 5, want 7", v)
	}
}

// TestLeaseOfAStoppedInstanceRunsOut: an instance that stops hearing
// (its listener gone, as in a crash) holds the other's writes until its
// lease runs out, no longer; and it answers nothing from memory meanwhile.
// An instance that starts meanwhile knows of that lease from the table. A
// goodbye (Close) holds no write at all.
func TestLeaseOfAStoppedInstanceRunsOut(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	w := newLeaseWorld(t)
	one, two := w.cache(t, "one", lease), w.cache(t, "two", lease)
	held(t, one)
	held(t, two)
	w.write(t, one, 1)  // two acknowledges
	two.StopListening() // stopped: no goodbye, its lease in the table
	if two.LeaseCurrent() {
		t.Fatal("a cache that stopped listening answers from memory")
	}
	three := w.cache(t, "three", lease)
	if got := three.LeaseHolders(); !slices.Contains(got, "two") {
		t.Errorf("an instance started beside a stopped one's lease knows of %v, want two among them", got)
	}
	began := time.Now()
	w.write(t, one, 2)
	// The bound is the lease's, with a second of slack for a busy machine:
	// the requirement of the protocol, not a speed target.
	if took := time.Since(began); took > lease+LeaseMargin+time.Second {
		t.Fatalf("the write waited %v for a stopped instance, lease %v", took, lease)
	}
	held(t, three)
	_ = three.Close()
	began = time.Now()
	w.write(t, one, 3)
	if took := time.Since(began); took > lease/2 {
		t.Fatalf("the write waited %v for an instance that said goodbye", took)
	}
}

// TestLeaseHearsChangesByHand: a change made behind the service's back
// notifies too, and governs the cache's reads within a heartbeat at most.
func TestLeaseHearsChangesByHand(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	held(t, c)
	if _, err := w.db.Exec("UPDATE gadgets SET n = 7 WHERE id = 'g'"); err != nil {
		t.Fatal(err)
	}
	// The bound is a heartbeat (a quarter of the lease), with a second of
	// slack for a busy machine.
	for deadline := time.Now().Add(DefaultLease/4 + time.Second); c.LeaseCurrent(); {
		if time.Now().After(deadline) {
			t.Fatal("a change by hand did not reach the lease within a heartbeat")
		}
		time.Sleep(time.Millisecond)
	}
}

// prepared is the highest version the prepared table holds (0: none).
func (w leaseWorld) prepared(t *testing.T) int64 {
	t.Helper()
	var v int64
	if err := w.db.QueryRow("SELECT COALESCE((SELECT v FROM fresh_prepared WHERE id = 1), 0)").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLeaseAloneSendsNoPrepare: a write while no other instance holds a
// lease prepares nothing (its writer's cache follows it by itself); once
// another instance holds one, writes prepare again.
func TestLeaseAloneSendsNoPrepare(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t)
	one := w.cache(t, "one", DefaultLease)
	held(t, one)
	w.write(t, one, 1)
	if one.Stats().OwnFollowed != 1 || !one.LeaseCurrent() {
		t.Fatalf("a write alone: %d commits followed by the writer's cache, lease current %v; want 1, true",
			one.Stats().OwnFollowed, one.LeaseCurrent())
	}
	if got := w.prepared(t); got != 0 {
		t.Fatalf("a write alone prepared version %d", got)
	}
	two := w.cache(t, "two", DefaultLease)
	held(t, two)
	w.write(t, one, 2)
	held(t, one)
	if got := w.prepared(t); got != one.At() {
		t.Fatalf("a write beside another instance's lease prepared version %d, want %d", got, one.At())
	}
}

// TestLeaseHeartbeatWaitsForTheWrite: a write that saw no other lease
// run commits without a prepare, so no lease may be granted while it can
// still commit. The other instance's heartbeats wait for it: that
// instance gets its lease back only after it heard the commit, and never
// answers from a memory older than it.
func TestLeaseHeartbeatWaitsForTheWrite(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	w := newLeaseWorld(t)
	one, two := w.cache(t, "one", lease), w.cache(t, "two", lease)
	held(t, one)
	held(t, two)
	ctx := context.Background()
	tx := w.begin(t, "UPDATE gadgets SET n = 1 WHERE id = 'g'")
	// Every lease granted before the lock runs out, and the lease after
	// it that a write still counts it for; no heartbeat renews one.
	time.Sleep(2*(lease+LeaseMargin) + 100*time.Millisecond)
	var v, nonce, others int64
	var own sql.NullString
	if err := tx.QueryRowContext(ctx, one.CommitVersionSQL()).Scan(&v, &nonce, &others, &own); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Fatalf("%d other leases seen running after every lease ran out under the write lock", others)
	}
	if err := one.Prepare(ctx, v, nonce, others); err != nil {
		t.Fatal(err)
	}
	// Heartbeats come every quarter of a lease: two of them would have
	// renewed the lease by now, had they not waited.
	for until := time.Now().Add(lease / 2); time.Now().Before(until); time.Sleep(10 * time.Millisecond) {
		if err := two.Fresh(Scope(ctx)); err != nil {
			t.Fatal(err)
		}
		if two.LeaseCurrent() {
			t.Fatal("an instance got a lease while a write that prepared nothing could still commit")
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !two.LeaseCurrent() || two.At() < v; {
		if two.LeaseCurrent() && two.At() < v {
			t.Fatalf("the other instance answers from memory at version %d after the commit of %d", two.At(), v)
		}
		if time.Now().After(deadline) {
			t.Fatal("the other instance held no lease at the commit within 10 s")
		}
		if err := two.Fresh(Scope(ctx)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLeaseOwnCommitFollowedOnlyFromWhereItBegan: a cache follows its own
// commit by itself only from the version just before it, and ends the
// asking only when nothing was heard since its prepare. psql's commit
// between the write's lock and its first change (its notification held
// back) leaves a version the cache has not followed; psql's commit heard
// after the prepare is a change the commit does not carry. Either way the
// next read asks, and finds everything.
func TestLeaseOwnCommitFollowedOnlyFromWhereItBegan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	begin := func() *sql.Tx {
		t.Helper()
		held(t, c)
		tx, err := w.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		if _, err := tx.ExecContext(ctx, w.pg.LockWrites()); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	asks := func(what string, want int64) {
		t.Helper()
		before := c.Stats().Questions
		if err := c.Fresh(Scope(ctx)); err != nil {
			t.Fatal(err)
		}
		if c.Stats().Questions == before || c.At() != want {
			t.Fatalf("%s: the next read asked %d times and stands at %d; want a question, and %d",
				what, c.Stats().Questions-before, c.At(), want)
		}
	}

	// A version committed behind the write's back, before its change.
	tx := begin()
	release := c.HoldNotices()
	t.Cleanup(release) // a listener held would hold Close
	if _, err := w.db.ExecContext(ctx, "INSERT INTO gadgets VALUES ('h', 1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE gadgets SET n = 1 WHERE id = 'g'"); err != nil {
		t.Fatal(err)
	}
	v, nonce, own, err := commit(ctx, c, tx)
	if err != nil {
		t.Fatal(err)
	}
	at := c.At()
	c.Ended(v, nonce, own, true)
	if c.LeaseCurrent() || c.At() != at {
		t.Fatalf("a commit of %d followed from %d, past a version in between: lease current %v, at %d", v, at, c.LeaseCurrent(), c.At())
	}
	release()
	asks("after a version committed in between", v)

	// A change heard between the prepare and the following.
	tx = begin()
	if _, err := tx.ExecContext(ctx, "UPDATE gadgets SET n = 2 WHERE id = 'g'"); err != nil {
		t.Fatal(err)
	}
	v, nonce, own, err = commit(ctx, c, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.db.ExecContext(ctx, "UPDATE gadgets SET n = 3 WHERE id = 'h'"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.Heard() < v+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("psql's commit not heard within 10 s")
		}
	}
	c.Ended(v, nonce, own, true)
	if c.LeaseCurrent() {
		t.Fatal("the cache answers from memory after following its own commit, with a later one heard")
	}
	asks("after a change heard meanwhile", v+1)
}

// TestLeaseOwnCommitFollowedOnlyWhenItCan: a commit that logged more
// changes than commit_changes hands back, or whose version before is of
// another history than the one the cache followed (the same version, a
// different nonce), is not followed by the writer's cache: its next read
// asks.
func TestLeaseOwnCommitFollowedOnlyWhenItCan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	write := func(stmt string) (v, nonce int64, own string) {
		t.Helper()
		held(t, c)
		v, nonce, own, err := commit(ctx, c, w.begin(t, stmt))
		if err != nil {
			t.Fatal(err)
		}
		return v, nonce, own
	}
	notFollowed := func(what string, v, nonce int64, own string) {
		t.Helper()
		followed := c.Stats().OwnFollowed
		c.Ended(v, nonce, own, true)
		if c.LeaseCurrent() || c.Stats().OwnFollowed != followed {
			t.Fatalf("%s: followed by the writer's cache (lease current %v)", what, c.LeaseCurrent())
		}
		before := c.Stats().Questions
		if err := c.Fresh(Scope(ctx)); err != nil {
			t.Fatal(err)
		}
		if c.Stats().Questions == before || c.At() != v {
			t.Fatalf("%s: the next read asked %d times and stands at %d; want a question, and %d", what, c.Stats().Questions-before, c.At(), v)
		}
	}

	v, nonce, own := write("INSERT INTO gadgets SELECT 'many' || i, i FROM generate_series(1, 300) i")
	if own != "" {
		t.Fatalf("a commit of 300 changes handed back %d bytes of them, want none", len(own))
	}
	notFollowed("300 changes", v, nonce, own)

	v, nonce, own = write("UPDATE gadgets SET n = 1 WHERE id = 'g'")
	var o map[string]any
	if err := json.Unmarshal([]byte(own), &o); err != nil {
		t.Fatal(err)
	}
	o["prev"] = o["prev"].(float64) + 1
	other, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	notFollowed("another history before it", v, nonce, string(other))
}

// TestLeaseReadWaitsForItsOwnWrite: a read that arrives while a write of
// its instance, prepared alone, has not ended waits for its end rather
// than ask (a question could only answer the version before it). Once the
// write committed and the cache followed it, the read is answered from
// memory at its version; when it ended without committing, the read asks.
func TestLeaseReadWaitsForItsOwnWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newLeaseWorld(t)
	c := w.cache(t, "one", DefaultLease)
	for _, commits := range []bool{true, false} {
		held(t, c)
		at := c.At()
		tx := w.begin(t, "UPDATE gadgets SET n = n + 1 WHERE id = 'g'")
		var v, nonce, others int64
		var own sql.NullString
		if err := tx.QueryRowContext(ctx, c.CommitVersionSQL()).Scan(&v, &nonce, &others, &own); err != nil {
			t.Fatal(err)
		}
		if err := c.Prepare(ctx, v, nonce, others); err != nil {
			t.Fatal(err)
		}
		type read struct {
			asked int64
			at    int64
			err   error
		}
		done := make(chan read, 1)
		go func() {
			before := c.Stats().Questions
			err := c.Fresh(Scope(ctx))
			done <- read{c.Stats().Questions - before, c.At(), err}
		}()
		time.Sleep(50 * time.Millisecond) // the read arrives before the write ends
		var err error
		if commits {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Ended(v, nonce, own.String, commits)
		r := <-done
		switch {
		case r.err != nil:
			t.Fatal(r.err)
		case commits && (r.asked != 0 || r.at != v):
			t.Fatalf("a read during its instance's write asked %d times and stands at %d; want none, at the commit's %d", r.asked, r.at, v)
		case !commits && (r.asked != 1 || r.at != at):
			t.Fatalf("a read during a write that rolled back asked %d times and stands at %d; want one question, at %d", r.asked, r.at, at)
		}
	}
}

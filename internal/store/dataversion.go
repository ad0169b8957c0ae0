package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
)

// PostgreSQL's data version: the read cache's (readcache.go) on PostgreSQL.
//
// The row data_version (v, xid) moves in every transaction that writes a
// table the cached reads read: triggers on those tables bump v once per
// transaction (xid remembers which transaction did, so the next row finds
// nothing to do). The bump commits with the change, atomically, so a
// snapshot that sees the change sees the new v, and one that does not, the
// old. Triggers rather than the writer's own code, so that every writer
// counts: other instances, older versions during a rolling upgrade, a
// hand-made UPDATE.
//
// The row triggers are deferred to the commit: the row of data_version is
// then the last lock a transaction takes, after every row it changed, so a
// transaction waiting for it holds nothing the holder waits for (bumping at
// the first write would lock it first, and a hand-made statement locking
// the same rows the other way round could deadlock with the writer).
//
// Asking is a round trip, which is what a read costs already; what makes
// the cache pay is that concurrent reads share one (pgVersion.current): a
// read waits for the next question to be sent, which answers every read
// that arrived before it was sent, so each still sees every commit
// acknowledged before it arrived (PostgreSQL makes a commit visible before
// it acknowledges it). Under load, one round trip answers many reads; alone,
// a read costs one round trip to learn the version plus, on a miss, one to
// read.

// cachedTables are the tables whose writes move the data version: every
// table a cached read reads, and those a cached read's answer depends on
// (a token's deletion changes no cached row, but it moves
// credentials_version in settings with it). A new table must be added here
// or to uncachedTables (TestDataVersionTriggers checks that every table is
// in one).
var cachedTables = []string{"settings", "users", "roles", "user_roles", "channels", "overwrites", "tokens", "attachments", "profiles"}

// uncachedTables are the tables no cached read reads: their writes (an event
// appended, a ticket consumed, a blob swept) leave the cache alone.
var uncachedTables = []string{"events", "event_tickets", "blob_chunks", "blob_trash", "schema_migrations", "data_version"}

// migrateDataVersion creates the data_version row, the function that bumps
// it and a trigger on each of cachedTables (PostgreSQL; nothing on SQLite,
// whose PRAGMA data_version needs nothing stored).
func migrateDataVersion(tx *gorm.DB, d dialect) error {
	if d.name() != "postgres" {
		return nil
	}
	var schema string
	if err := tx.Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return fmt.Errorf("read the current schema: %w", err)
	}
	// The function names its table with the schema, so that a write made
	// with another search_path (a hand-made change) bumps this schema's row.
	table := quoteIdent(schema) + ".data_version"
	// A setting local to the transaction remembers that it bumped, so the
	// trigger of every later row costs a comparison instead of an UPDATE
	// (1.7 instead of 5.5 µs a row written). Its name is the schema's, so a
	// transaction writing two deployments' tables bumps both rows.
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	bumped := fmt.Sprintf("'guildhall.data_version_%016x'", h.Sum64())
	stmts := []string{
		`CREATE TABLE data_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  v BIGINT NOT NULL,
  xid BIGINT NOT NULL
)`,
		"INSERT INTO data_version (id, v, xid) VALUES (1, 1, 0)",
		// Once per transaction: the setting, then the row, already carry
		// this transaction's ID after its first bump (a savepoint rolled
		// back takes the bump and the setting back with it, and the next
		// row bumps again).
		`CREATE FUNCTION ` + quoteIdent(schema) + `.bump_data_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting(` + bumped + `, true) IS DISTINCT FROM txid_current()::text THEN
    UPDATE ` + table + ` SET v = v + 1, xid = txid_current() WHERE id = 1 AND xid <> txid_current();
    PERFORM set_config(` + bumped + `, txid_current()::text, true);
  END IF;
  RETURN NULL;
END
$$`,
	}
	fn := quoteIdent(schema) + ".bump_data_version()"
	for _, t := range cachedTables {
		stmts = append(stmts,
			"CREATE CONSTRAINT TRIGGER "+t+"_data_version AFTER INSERT OR UPDATE OR DELETE ON "+t+
				" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "+fn,
			// TRUNCATE has no row triggers (and no deferred ones); it locks
			// the whole table first anyway.
			"CREATE TRIGGER "+t+"_data_version_truncate AFTER TRUNCATE ON "+t+" FOR EACH STATEMENT EXECUTE FUNCTION "+fn,
			// ALWAYS: also in sessions with session_replication_role =
			// replica (a logical replication subscriber applying changes).
			"ALTER TABLE "+t+" ENABLE ALWAYS TRIGGER "+t+"_data_version",
			"ALTER TABLE "+t+" ENABLE ALWAYS TRIGGER "+t+"_data_version_truncate")
	}
	for _, s := range stmts {
		if err := tx.Exec(s).Error; err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// probeDataVersion reads the data version.
const probeDataVersion = "SELECT v, xid FROM data_version WHERE id = 1"

// pgVersion asks PostgreSQL for the data version, one question for all the
// reads that wait at the time it is sent.
type pgVersion struct {
	stmts   *stmtCache    // the read pool's
	counter *atomic.Int64 // the store's statements (QueryCount)
	// ask sends the question (p.query; tests put their own).
	ask func(context.Context) (dataVersion, bool, error)

	mu   sync.Mutex
	next *versionRound // the round arriving reads join; nil when none is open
	// send is held by the round whose question is in flight: the next
	// round's first read (its leader) waits for it, while the reads that
	// arrive meanwhile join its round.
	send sync.Mutex

	rounds atomic.Int64 // questions sent
}

func (p *pgVersion) probes() int64 { return p.rounds.Load() }

type versionRound struct {
	done chan struct{}
	v    dataVersion
	ok   bool
	err  error
}

func newPGVersion(stmts *stmtCache, counter *atomic.Int64) *pgVersion {
	p := &pgVersion{stmts: stmts, counter: counter}
	p.ask = p.query
	return p
}

func (p *pgVersion) close() error { return nil } // its statement is the read pool's

// current joins the open round, or opens one and leads it. A round is open
// until its leader sends its question, so every read of a round arrived
// before the question was sent, and the answer is of a moment after each
// of them arrived.
func (p *pgVersion) current(ctx context.Context) (dataVersion, bool, error) {
	p.mu.Lock()
	r := p.next
	lead := r == nil
	if lead {
		r = &versionRound{done: make(chan struct{})}
		p.next = r
	}
	p.mu.Unlock()
	if !lead {
		select {
		case <-r.done:
			return r.v, r.ok, r.err
		case <-ctx.Done():
			return dataVersion{}, false, ctx.Err()
		}
	}
	p.send.Lock()
	p.mu.Lock()
	p.next = nil // closed: later reads open the next round
	p.mu.Unlock()
	// The round answers others too: the leader's cancellation must not fail
	// them (the statement keeps its own deadline).
	p.rounds.Add(1)
	r.v, r.ok, r.err = p.ask(context.WithoutCancel(ctx))
	p.send.Unlock()
	close(r.done)
	return r.v, r.ok, r.err
}

func (p *pgVersion) query(ctx context.Context) (dataVersion, bool, error) {
	ctx, cancel := p.stmts.bound(ctx)
	defer cancel()
	st, err := p.stmts.get(ctx, probeDataVersion)
	if err != nil {
		return dataVersion{}, false, err
	}
	p.counter.Add(1)
	var v dataVersion
	switch err := st.QueryRowContext(ctx).Scan(&v.n, &v.id); {
	case errors.Is(err, sql.ErrNoRows):
		return dataVersion{}, false, nil // a row someone deleted: no cache until it is back
	case err != nil:
		return dataVersion{}, false, err
	}
	return v, true, nil
}

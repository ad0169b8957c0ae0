package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
)

// PostgreSQL's data version: the read cache's (readcache.go) on PostgreSQL.
//
// The row data_version (v, nonce) moves in every transaction that writes a
// table the caches depend on: triggers on those tables bump it once per
// transaction, with a new random nonce. The bump commits with the change,
// atomically, so a snapshot that sees the change sees the new row, and one
// that does not, the old. The nonce makes each bump's row unlike any
// before it, even where v repeats: a commit that was visible and then lost
// (a crash with synchronous_commit off, a failover to an asynchronous
// standby), a restore of an older dump. Triggers rather than the writer's
// own code, so that every writer counts: other instances, older versions
// during a rolling upgrade, a hand-made change (from any search_path: the
// function names its schema; in a replica session: the triggers fire
// ALWAYS).
//
// A writer other than Guildhall's own (which bumps the versions in settings
// exactly where its changes need it, see Tx.BumpCredentials) also has the
// trigger bump both versions in settings, so that the credentials and
// authorization caches, which those versions key, see a token deleted or a
// user suspended with psql on the next request too. Guildhall's writer marks
// its transactions in the statement that takes the write lock
// (postgresDialect.lockWrites).
//
// The row triggers are deferred to the commit: the rows of settings and
// data_version are then the last locks a transaction takes, after every row
// it changed, so a transaction waiting for them holds nothing their holder
// waits for. TRUNCATE has no deferred triggers (its own fires at once), nor
// do triggers made immediate with SET CONSTRAINTS: a hand-made transaction
// doing either, then more, may deadlock with Guildhall's writer, and
// PostgreSQL then aborts one of the two.
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
// table a cached read reads, and those the credentials and authorization
// caches depend on (tokens: a token deleted by hand moves the credentials
// version through the trigger). A new table must be added here or to
// uncachedTables (TestDataVersionCoversEveryTable checks that every table is
// in one; TestReadCacheSeesHandMadeChangesPerTable that a change to each of
// these reaches the reads and caches that depend on it).
var cachedTables = []string{"settings", "users", "roles", "user_roles", "channels", "overwrites", "tokens"}

// uncachedTables are the tables no cache depends on: their writes (an event
// appended, a ticket consumed, an attachment or a profile changed, a blob
// swept) leave the caches alone.
var uncachedTables = []string{"events", "event_tickets", "attachments", "profiles", "blob_chunks", "blob_trash",
	"schema_migrations", "data_version"}

// migrateDataVersion creates the data_version row, the function that bumps
// it and a trigger on each of cachedTables (PostgreSQL; nothing on SQLite,
// whose PRAGMA data_version needs nothing stored).
func migrateDataVersion(tx *gorm.DB, d dialect) error {
	pg, ok := d.(postgresDialect)
	if !ok {
		return nil
	}
	// Writers of an older version may be running: take their lock first,
	// so that locking the tables (CREATE TRIGGER) cannot close a cycle
	// with one of their transactions, which lock them row by row.
	if err := tx.Exec(pg.lockWrites()).Error; err != nil {
		return fmt.Errorf("take the write lock: %w", err)
	}
	schema, err := currentSchema(tx)
	if err != nil {
		return err
	}
	stmts := []string{
		`CREATE TABLE data_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  v BIGINT NOT NULL,
  nonce BIGINT NOT NULL
)`,
		"INSERT INTO data_version (id, v, nonce) VALUES (1, 1, " + randomNonce + ")",
		bumpFunction(schema, pg.tag),
	}
	fn := quoteIdent(schema) + ".bump_data_version()"
	for _, t := range cachedTables {
		stmts = append(stmts,
			"CREATE CONSTRAINT TRIGGER "+t+"_data_version AFTER INSERT OR UPDATE OR DELETE ON "+t+
				" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "+fn,
			"CREATE TRIGGER "+t+"_data_version_truncate AFTER TRUNCATE ON "+t+" FOR EACH STATEMENT EXECUTE FUNCTION "+fn,
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

// installBumpFunction replaces the trigger function when it is not the one
// this version writes for the current schema: after an upgrade that
// changed it, or a schema renamed since (the function names its schema).
// It runs at every start, under the migration lock.
func installBumpFunction(db *gorm.DB, d dialect) error {
	pg, ok := d.(postgresDialect)
	if !ok {
		return nil
	}
	schema, err := currentSchema(db)
	if err != nil {
		return err
	}
	var have *string
	err = db.Raw("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(?)", quoteIdent(schema)+".bump_data_version()").Scan(&have).Error
	if err != nil {
		return fmt.Errorf("read the data version's function: %w", err)
	}
	if have == nil || *have == bumpBody(schema, pg.tag) {
		return nil // as it should be, or not there yet (a test that stops short of migration 0011)
	}
	if err := db.Exec(bumpFunction(schema, pg.tag)).Error; err != nil {
		return fmt.Errorf("replace the data version's function: %w", err)
	}
	return nil
}

// bumpFunction is the trigger function of a schema, whose settings are
// named after tag.
//
// Once per transaction: a setting local to the transaction remembers that
// it bumped, so the trigger of every later row costs a comparison, not a
// write (1.7 instead of 5.5 µs a row written); it holds the transaction's
// ID, and a savepoint rolled back takes the bump and the setting back
// together. The row is upserted, so a row deleted by hand comes back at the
// next write.
func bumpFunction(schema, tag string) string {
	return `CREATE OR REPLACE FUNCTION ` + quoteIdent(schema) + `.bump_data_version() RETURNS trigger LANGUAGE plpgsql AS $$` +
		bumpBody(schema, tag) + `$$`
}

// bumpBody is the body of bumpFunction, as pg_proc.prosrc keeps it.
func bumpBody(schema, tag string) string {
	q := quoteIdent(schema)
	bumped := "'guildhall.data_version_" + tag + "'"
	return `
BEGIN
  IF current_setting(` + bumped + `, true) IS NOT DISTINCT FROM txid_current()::text THEN
    RETURN NULL;
  END IF;
  PERFORM set_config(` + bumped + `, txid_current()::text, true);
  IF current_setting(` + writerSetting(tag) + `, true) IS DISTINCT FROM 'on' THEN
    UPDATE ` + q + `.settings SET auth_version = auth_version + 1, credentials_version = credentials_version + 1 WHERE id = 1;
  END IF;
  INSERT INTO ` + q + `.data_version AS d (id, v, nonce) VALUES (1, 1, ` + randomNonce + `)
    ON CONFLICT (id) DO UPDATE SET v = d.v + 1, nonce = excluded.nonce;
  RETURN NULL;
END
`
}

// randomNonce is a random BIGINT of 53 bits.
const randomNonce = "floor(random() * 9007199254740992)::bigint"

// writerSetting names the setting by which Guildhall's writer marks its
// transactions in a schema.
func writerSetting(tag string) string { return "'guildhall.writer_" + tag + "'" }

func currentSchema(db *gorm.DB) (string, error) {
	var schema string
	if err := db.Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return "", fmt.Errorf("read the current schema: %w", err)
	}
	return schema, nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// probeDataVersion reads the data version.
const probeDataVersion = "SELECT v, nonce FROM data_version WHERE id = 1"

// pgVersion asks PostgreSQL for the data version, one question for all the
// reads that wait at the time it is sent.
type pgVersion struct {
	stmts   *stmtCache    // the read pool's
	counter *atomic.Int64 // the store's statements (QueryCount)
	// ask sends the question (p.query; tests put their own).
	ask func(context.Context) (dbState, bool, error)

	mu   sync.Mutex
	next *versionRound // the round arriving reads join; nil when none is open
	// inflight is held by the round whose question is in flight: the next
	// round waits for it, while the reads that arrive meanwhile join it.
	inflight sync.Mutex

	rounds atomic.Int64 // questions sent; a round's number is its seq
}

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

func (p *pgVersion) probes() int64 { return p.rounds.Load() }

func (p *pgVersion) close() error { return nil } // its statement is the read pool's

// current joins the open round, or opens one. A round is open until its
// question is sent, so every read of a round arrived before the question
// was sent, and the answer is of a moment after each of them arrived. Each
// read waits for its round under its own context.
func (p *pgVersion) current(ctx context.Context) (dataVersion, bool, error) {
	p.mu.Lock()
	r := p.next
	if r == nil {
		r = &versionRound{done: make(chan struct{})}
		p.next = r
		go p.send(r)
	}
	p.mu.Unlock()
	select {
	case <-r.done:
		return r.v, r.ok, r.err
	case <-ctx.Done():
		return dataVersion{}, false, ctx.Err()
	}
}

// send waits for the round before r, closes r to new reads and asks. The
// question runs under no read's context (it answers them all) but with the
// statement deadline.
func (p *pgVersion) send(r *versionRound) {
	p.inflight.Lock()
	defer p.inflight.Unlock()
	defer close(r.done)
	p.mu.Lock()
	p.next = nil // closed: later reads open the next round
	p.mu.Unlock()
	// Rounds are sent one after the other: a later seq is a later answer.
	seq := p.rounds.Add(1)
	defer func() {
		if v := recover(); v != nil {
			r.ok, r.err = false, fmt.Errorf("panic asking for the data version: %v\n%s", v, debug.Stack())
		}
	}()
	state, ok, err := p.ask(context.Background())
	r.v, r.ok, r.err = dataVersion{state: state, seq: seq}, ok, err
}

func (p *pgVersion) query(ctx context.Context) (dbState, bool, error) {
	ctx, cancel := p.stmts.bound(ctx)
	defer cancel()
	st, err := p.stmts.get(ctx, probeDataVersion)
	if err != nil {
		return dbState{}, false, err
	}
	p.counter.Add(1)
	var s dbState
	switch err := st.QueryRowContext(ctx).Scan(&s.n, &s.nonce); {
	case errors.Is(err, sql.ErrNoRows):
		return dbState{}, false, nil // a row someone deleted: no cache until a write puts it back
	case err != nil:
		return dbState{}, false, err
	}
	return s, true, nil
}

// Package store keeps Guildhall's state on SQLite (the embedded default) or
// PostgreSQL: each resource's rows, reads and writes, the read cache's
// freshness registry (freshness.go), the authorization state
// (authstate.go) and the migrations (internal/store/schema). It and the
// packages under it are the only ones that know the tables: the webhooks'
// delivery queue is internal/store/webhookq's, on the store's writer and
// read pool (WebhookQueue). It takes and returns the domain types of internal/model
// and reports expected failures as internal/apperr kinds. How it talks to
// the database (pools, statements, dialects, faults, the single writer) is
// internal/sqldb's.
//
// Every write runs through Store.Write, which serializes writers
// (sqldb.DB.Write): event sequence numbers follow commit order, and the
// authorization rules are checked against the state the write commits on.
package store

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Options say where the store lives.
type Options struct {
	// DatabaseURL selects PostgreSQL when it starts with postgres:// or postgresql://.
	DatabaseURL string
	// DataDir holds guildhall.db when DatabaseURL is empty.
	DataDir string
	// MaxOpenConns bounds the PostgreSQL pool (and the SQLite read pool).
	MaxOpenConns int
	// StatementTimeout bounds each statement (a transaction gets four
	// times that); sqldb.DefaultStatementTimeout when 0.
	StatementTimeout time.Duration
	// CacheBytes bounds the read cache's estimated size (internal/fresh);
	// fresh.DefaultCacheBytes when 0.
	CacheBytes int
	// MaxCacheEntryBytes, when not 0, caps the share of CacheBytes that
	// the cache's entries on the heap get.
	MaxCacheEntryBytes int
	// Tracer, when set, traces what the store does for a caller whose
	// context carries a recording span (internal/sqldb's trace.go); nil:
	// no tracing.
	Tracer trace.TracerProvider
	// NoLeases makes a PostgreSQL store's every request ask the change log
	// (one shared statement), as when the database cannot notify: no
	// listener, no lease (internal/fresh's lease.go).
	NoLeases    bool
	migrateUpTo int // see Store.migrateUpTo
}

// Store is the database.
type Store struct {
	db      *sqldb.DB // how the store talks to the database
	queries           // on the read pool
	// searches: the searches' reads, on PostgreSQL on a pool of their own
	// (sqldb.DB.Searches).
	searches  queries
	cache     *fresh.Cache // the read cache (internal/fresh)
	auth      *fresh.View[*AuthState]
	cursorKey []byte // seals list cursors (CursorKey)

	// userBatches: PostgreSQL's reads of users that miss the cache, shared
	// (internal/fresh's batch.go); nil on SQLite, where a read is no round
	// trip.
	userBatches *fresh.Batches[model.User]

	// migrateUpTo, when positive, applies only the first migrations (tests
	// of a migration build the database it starts from).
	migrateUpTo int
	// leases: PostgreSQL's reads hold a lease rather than ask (Options.NoLeases),
	// listening through databaseURL.
	leases      bool
	databaseURL string
}

// Open connects, applies the migrations and returns the store.
func Open(ctx context.Context, opts Options) (*Store, error) {
	db, err := sqldb.Open(ctx, sqldb.Options{DatabaseURL: opts.DatabaseURL, DataDir: opts.DataDir,
		MaxOpenConns: opts.MaxOpenConns, StatementTimeout: opts.StatementTimeout, Tracer: opts.Tracer})
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, queries: queries{db.Reads()}, searches: queries{db.Searches()}, migrateUpTo: opts.migrateUpTo,
		leases: !opts.NoLeases, databaseURL: opts.DatabaseURL}
	s.cache = fresh.New(fresh.Options{MaxBytes: opts.CacheBytes, MaxEntryBytes: opts.MaxCacheEntryBytes,
		Users: userDeps, Tracing: cacheTracing(db)})
	s.auth = newAuthView(s.cache)
	if db.Postgres() {
		s.userBatches = fresh.NewBatches(s.queries.getUsers, db.Tracer() != nil)
	}
	if err := s.start(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// start applies the migrations, then starts what reads the tables they
// make: the change log the cache follows, and the cursors' key.
func (s *Store) start(ctx context.Context) error {
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := s.followChangeLog(ctx); err != nil {
		return err
	}
	if s.db.WritePool().Migrator().HasTable("deployment_keys") {
		key, err := s.queries.deploymentKey(ctx, "cursor")
		if err != nil {
			return err
		}
		s.cursorKey = key
	}
	return nil
}

// followChangeLog starts the read cache at the change log's position now
// and sets how it asks what changed since.
func (s *Store) followChangeLog(ctx context.Context) error {
	switch {
	case !s.db.WritePool().Migrator().HasTable("change_log"):
		s.cache.FollowNothing()
		return nil
	case s.Postgres():
		pg := s.freshPG()
		if !s.leases {
			if err := s.cache.FollowPostgres(ctx, s.queries.query, *pg, nil); err != nil {
				return err
			}
			s.db.SetCommitHooks(sqldb.CommitHooks{LockSQL: s.cache.LockWritesSQL()})
			return nil
		}
		lo := &fresh.LeaseOptions{URL: s.databaseURL, Instance: rand.Text()}
		if err := s.cache.FollowPostgres(ctx, s.queries.query, *pg, lo); err != nil {
			return err
		}
		s.db.SetCommitHooks(sqldb.CommitHooks{LockSQL: s.cache.LockWritesSQL(),
			VersionSQL: s.cache.CommitVersionSQL(), Prepare: s.cache.Prepare, Ended: s.cache.Ended})
		return nil
	default:
		dsn, shm := s.db.SQLiteFiles()
		return s.cache.FollowSQLite(dsn, shm, s.db.Counter())
	}
}

// IsPostgresURL reports whether url selects the PostgreSQL store.
func IsPostgresURL(u string) bool { return sqldb.IsPostgresURL(u) }

// CursorKey is the deployment's key for sealing list cursors: the same on
// every instance, secret, drawn once (nil on a store migrated short of it).
func (s *Store) CursorKey() []byte { return s.cursorKey }

// Postgres reports whether the store is PostgreSQL.
func (s *Store) Postgres() bool { return s.db.Postgres() }

// Ping checks that the database answers (sqldb.DB.Ping).
func (s *Store) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

// Classify turns the errors that say "the database does not answer" or
// "the disk is full" into their apperr kinds (sqldb.DB.Classify).
func (s *Store) Classify(err error) error { return s.db.Classify(err) }

// QueryCount is the number of SQL statements the store has sent since it
// was opened (sqldb.DB.QueryCount).
func (s *Store) QueryCount() int64 { return s.db.QueryCount() }

// EventChannel is the PostgreSQL NOTIFY channel that carries the seqs of
// committed events ("" on SQLite).
func (s *Store) EventChannel() string { return s.db.EventChannel() }

// Close stops the writer (after the writes already queued), releases the
// connections, and then the read cache's.
func (s *Store) Close() error {
	errs := []error{s.db.Close()}
	if s.cache != nil {
		errs = append(errs, s.cache.Close())
		s.cache.ReleaseWALIndex() // after every connection of the store
	}
	return errors.Join(errs...)
}

// Package store keeps Guildhall's state with GORM, on SQLite (the embedded
// default) or PostgreSQL. It is the only package that knows SQL or GORM; it
// takes and returns the domain types of internal/model and reports expected
// failures as internal/apperr kinds.
//
// Every write runs through Store.Write, which serializes writers: on SQLite a
// single writer connection with BEGIN IMMEDIATE, on PostgreSQL a
// transaction-scoped advisory lock. Event sequence numbers therefore follow
// commit order, and the authorization rules are checked against the state the
// write commits on.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/mattn/go-sqlite3"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
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
	// times that); DefaultStatementTimeout when 0.
	StatementTimeout time.Duration
	// CacheBytes bounds the read cache's estimated size (internal/fresh);
	// fresh.DefaultCacheBytes when 0.
	CacheBytes int
	// MaxCacheEntryBytes, when not 0, caps the share of CacheBytes that
	// the cache's entries on the heap get.
	MaxCacheEntryBytes int
	// Tracer, when set, traces what the store does for a caller whose
	// context carries a recording span (trace.go); nil: no tracing.
	Tracer      trace.TracerProvider
	migrateUpTo int // see Store.migrateUpTo
}

// Store is the database.
type Store struct {
	dialect dialect
	write   *gorm.DB // SQLite: one connection; PostgreSQL: the pool
	read    *gorm.DB // SQLite: a read-only pool; PostgreSQL: the pool
	queries
	wstmts       *stmtCache   // prepared statements of the write pool
	cache        *fresh.Cache // the read cache (internal/fresh)
	auth         *fresh.View[*AuthState]
	sqliteLogDSN string       // where the cache's connection to the change log opens
	sqliteShm    string       // the SQLite file's wal-index
	statements   atomic.Int64 // see QueryCount
	tracer       *tracer      // nil: tracing off (trace.go)
	cursorKey    []byte       // seals list cursors (CursorKey)

	// searchStmts: PostgreSQL's prepared statements of searches, on a pool
	// of their own (openSearchPool); nil on SQLite.
	searchStmts *stmtCache
	// userBatches: PostgreSQL's reads of users that miss the cache, shared
	// (batch.go); nil on SQLite, where a read is no round trip.
	userBatches *fresh.Batches[model.User]

	writer *writer
	// migrateUpTo, when positive, applies only the first migrations (tests
	// of a migration build the database it starts from).
	migrateUpTo int
	faults      faultState // see Classify
	ns          namespace  // PostgreSQL: lock keys and NOTIFY channel of the schema
	// statementTimeout bounds each statement (deadline.go).
	statementTimeout time.Duration
}

// Open connects, applies the migrations and returns the store. It is the only
// place that calls gorm.Open.
func Open(ctx context.Context, opts Options) (*Store, error) {
	cfg := &gorm.Config{
		TranslateError:         true,
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
	}
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 16
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	s := &Store{migrateUpTo: opts.migrateUpTo, statementTimeout: opts.StatementTimeout}
	switch {
	case IsPostgresURL(opts.DatabaseURL):
		dialector := postgres.New(postgres.Config{DSN: opts.DatabaseURL, OptionOpenDB: []stdlib.OptionOpenDB{
			stdlib.OptionBeforeConnect(keepOnCancel), stdlib.OptionAfterConnect(sessionSettings)}})
		db, err := gorm.Open(pgDialector{dialector.(*postgres.Dialector)}, cfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		if s.ns, err = loadNamespace(ctx, db); err != nil {
			if sqlDB, derr := db.DB(); derr == nil {
				_ = sqlDB.Close()
			}
			return nil, err
		}
		s.dialect = postgresDialect{writeKey: s.ns.writeKey, tag: s.ns.tag}
		sqlDB, err := db.DB()
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		sqlDB.SetMaxOpenConns(opts.MaxOpenConns)
		sqlDB.SetMaxIdleConns(opts.MaxOpenConns)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
		s.write, s.read = db, db
	case opts.DatabaseURL != "":
		return nil, fmt.Errorf("unsupported database URL %q: only postgres:// URLs are supported", redact(opts.DatabaseURL))
	default:
		s.dialect = sqliteDialect{}
		if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		path := filepath.Join(opts.DataDir, "guildhall.db")
		// WAL lets readers run beside the writer; synchronous=FULL makes an
		// acknowledged commit durable across a crash; foreign keys enforce the
		// cascades; the busy timeout covers checkpoints and other processes.
		common := "_journal_mode=WAL&_synchronous=FULL&_foreign_keys=on&_busy_timeout=10000"
		w, err := gorm.Open(sqliteOpen("file:"+path+"?"+common+"&_txlock=immediate"), cfg)
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		wdb, err := w.DB()
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		// One writer connection: concurrent writers queue in the pool instead
		// of failing with "database is locked".
		wdb.SetMaxOpenConns(1)
		wdb.SetMaxIdleConns(1)
		wdb.SetConnMaxLifetime(0)
		wdb.SetConnMaxIdleTime(0)
		r, err := gorm.Open(sqliteOpen("file:"+path+"?"+common+"&_query_only=true"), cfg)
		if err != nil {
			_ = wdb.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		rdb, err := r.DB()
		if err != nil {
			_ = wdb.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		rdb.SetMaxOpenConns(opts.MaxOpenConns)
		rdb.SetMaxIdleConns(opts.MaxOpenConns)
		s.write, s.read = w, r
		s.sqliteLogDSN = "file:" + path + "?" + common + "&_query_only=true"
		// SQLite names the wal-index after the database's path with its
		// symbolic links resolved.
		s.sqliteShm = path + "-shm"
		if real, err := filepath.EvalSymlinks(path); err == nil {
			s.sqliteShm = real + "-shm"
		}
	}
	rdb, err := s.read.DB()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	wdb, err := s.write.DB()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	s.tracer = newTracer(opts.Tracer, s.dialect)
	s.cache = fresh.New(fresh.Options{MaxBytes: opts.CacheBytes, MaxEntryBytes: opts.MaxCacheEntryBytes,
		Users: userDeps, Tracing: s.tracer.forCache()})
	s.auth = newAuthView(s.cache)
	s.queries = queries{db: s.read, dialect: s.dialect, stmts: newStmtCache(rdb, s.dialect).withTimeout(s.statementTimeout),
		counter: &s.statements, tracer: s.tracer}
	s.wstmts = s.queries.stmts
	if s.dialect.name() == "postgres" {
		s.userBatches = fresh.NewBatches(s.queries.getUsers, s.tracer != nil)
		sdb, err := openSearchPool(opts.DatabaseURL, max(2, opts.MaxOpenConns/4))
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.searchStmts = newStmtCache(sdb, s.dialect).withTimeout(s.statementTimeout)
		if err := sdb.PingContext(ctx); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("open postgres (search pool): %w", err)
		}
	}
	if wdb != rdb {
		s.wstmts = newStmtCache(wdb, s.dialect).withTimeout(s.statementTimeout)
	}
	for _, db := range []*gorm.DB{s.write, s.read} {
		if err := s.countStatements(db); err != nil {
			_ = s.Close()
			return nil, err
		}
		if err := s.boundStatements(db, s.statementTimeout); err != nil {
			_ = s.Close()
			return nil, err
		}
		if err := s.traceStatements(db); err != nil {
			_ = s.Close()
			return nil, err
		}
		if s.write == s.read {
			break
		}
	}
	if err := s.migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	// After the migrations: the change log and the keys are tables of theirs.
	if err := s.followChangeLog(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	if s.write.Migrator().HasTable("deployment_keys") {
		if s.cursorKey, err = s.queries.deploymentKey(ctx, "cursor"); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	s.writer = startWriter(s)
	return s, nil
}

// followChangeLog starts the read cache at the change log's position now
// and sets how it asks what changed since.
func (s *Store) followChangeLog(ctx context.Context) error {
	switch {
	case !s.write.Migrator().HasTable("change_log"):
		s.cache.FollowNothing()
		return nil
	case s.Postgres():
		return s.cache.FollowPostgres(ctx, s.queries.query)
	default:
		return s.cache.FollowSQLite(s.sqliteLogDSN, s.sqliteShm, &s.statements)
	}
}

// sqliteDriver is the SQLite driver with what every connection needs beyond
// its DSN: temporary storage in memory. Each write of a group commit runs in
// a savepoint, and SQLite keeps a savepoint's page images in a
// sub-journal: in a temporary file by default, which cost a create a third
// of its time in write system calls.
const sqliteDriver = "sqlite3_guildhall"

func init() {
	sql.Register(sqliteDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec("PRAGMA temp_store = MEMORY", nil)
		return err
	}})
}

func sqliteOpen(dsn string) gorm.Dialector {
	return sqliteDialector{sqlite.New(sqlite.Config{DriverName: sqliteDriver, DSN: dsn}).(*sqlite.Dialector)}
}

// The drivers' dialectors, whose translation of errors (TranslateError:
// a duplicate key becomes gorm.ErrDuplicatedKey) keeps the driver's error
// beside it: which unique index failed tells which field is taken
// (uniqueViolation).
type (
	sqliteDialector struct{ *sqlite.Dialector }
	pgDialector     struct{ *postgres.Dialector }
)

func (d sqliteDialector) Translate(err error) error {
	return keepCause(d.Dialector.Translate(err), err)
}
func (d pgDialector) Translate(err error) error { return keepCause(d.Dialector.Translate(err), err) }

func keepCause(translated, err error) error {
	if translated == err || translated == nil {
		return translated
	}
	return fmt.Errorf("%w: %w", translated, err)
}

// IsPostgresURL reports whether url selects the PostgreSQL store.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// CursorKey is the deployment's key for sealing list cursors: the same on
// every instance, secret, drawn once (nil on a store migrated short of it).
func (s *Store) CursorKey() []byte { return s.cursorKey }

// Postgres reports whether the store is PostgreSQL.
func (s *Store) Postgres() bool { return s.dialect.name() == "postgres" }

// Ping checks that the database answers (on the read pool: SQLite's one
// writer connection may be busy with a write for a while), and on
// PostgreSQL on the searches' pool too, whose connections are its own.
func (s *Store) Ping(ctx context.Context) error {
	db, err := s.read.DB()
	if err != nil {
		return err
	}
	if err := ping(ctx, db); err != nil {
		return err
	}
	if s.searchStmts != nil {
		if err := ping(ctx, s.searchStmts.db); err != nil {
			return fmt.Errorf("the searches' pool: %w", err)
		}
	}
	return nil
}

// ping pings a pool past its stale connections: database/sql retries
// getting a connection, not the ping on it, so after the database
// restarted each idle connection that has not been used since fails one
// ping (and is closed) before a fresh one answers.
func ping(ctx context.Context, db *sql.DB) error {
	err := db.PingContext(ctx)
	for range db.Stats().Idle + 1 {
		if !errors.Is(err, driver.ErrBadConn) {
			break
		}
		err = db.PingContext(ctx)
	}
	return err
}

// Close stops the writer (after the writes already queued) and releases
// the connections.
func (s *Store) Close() error {
	if s.writer != nil {
		s.writer.stop()
	}
	for _, c := range []*stmtCache{s.queries.stmts, s.wstmts, s.searchStmts} {
		if c != nil {
			c.close()
		}
	}
	var errs []error
	if s.searchStmts != nil {
		errs = append(errs, s.searchStmts.db.Close())
	}
	if s.cache != nil {
		errs = append(errs, s.cache.Close())
	}
	for _, g := range []*gorm.DB{s.write, s.read} {
		if g == nil {
			continue
		}
		if db, err := g.DB(); err == nil {
			errs = append(errs, db.Close())
		}
		if s.write == s.read {
			break
		}
	}
	if s.cache != nil {
		s.cache.ReleaseWALIndex() // after every connection of the store
	}
	return errors.Join(errs...)
}

// openSearchPool opens the connections PostgreSQL's searches run on, with
// generic plans forced. A search's statement is prepared, but with its
// bounds unknown the generic plan's estimate is far above a custom plan's,
// so PostgreSQL would plan it anew at every run, and planning it costs
// more than running it; the generic plan walks the same indexes. The
// setting is the pool's, so it reaches no other statement. It is SET once
// a connection is open, not sent at startup, which a pooler may refuse;
// a server that lacks it (before PostgreSQL 12) plans as the read pool
// does.
func openSearchPool(databaseURL string, conns int) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	cfg.BuildContextWatcherHandler = newCancelHandler
	db := stdlib.OpenDB(*cfg, stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		if err := sessionSettings(ctx, c); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42704" { // undefined_object
			return nil
		}
		return err
	}))
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable)"
	}
	return p.Redacted()
}

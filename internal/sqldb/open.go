// Package sqldb is how the service talks to its database, SQLite (the
// embedded default) or PostgreSQL: it opens the pools, runs statements
// (prepared once and reused, each with a deadline, counted and traced),
// tells the two dialects apart, names the faults of the database
// (Classify), and runs every write through one writer.
//
// Every write runs through DB.Write, which serializes writers: on SQLite a
// single writer connection with BEGIN IMMEDIATE, on PostgreSQL a
// transaction-scoped advisory lock. Event sequence numbers therefore follow
// commit order, and a write reads the state it commits on.
//
// It knows no table but the audit events', which the writer numbers at
// commit; internal/store keeps the rows of every resource on it.
package sqldb

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
)

// Options say where the database lives and how it is used.
type Options struct {
	// DatabaseURL selects PostgreSQL when it starts with postgres:// or postgresql://.
	DatabaseURL string
	// DataDir holds guildhall.db when DatabaseURL is empty.
	DataDir string
	// MaxOpenConns bounds the PostgreSQL pool (and the SQLite read pool);
	// 16 when 0.
	MaxOpenConns int
	// StatementTimeout bounds each statement (a transaction gets four
	// times that); DefaultStatementTimeout when 0.
	StatementTimeout time.Duration
	// Tracer, when set, traces what the database does for a caller whose
	// context carries a recording span (trace.go); nil: no tracing.
	Tracer trace.TracerProvider
}

// DB is the database: its pools, its prepared statements, and its writer.
type DB struct {
	dialect Dialect
	write   *gorm.DB   // SQLite: one connection; PostgreSQL: the pool
	read    *gorm.DB   // SQLite: a read-only pool; PostgreSQL: the pool
	reads   Queries    // on the read pool
	wstmts  *stmtCache // prepared statements of the write pool
	// searchStmts: PostgreSQL's prepared statements of searches, on a pool
	// of their own (openSearchPool); nil on SQLite.
	searchStmts *stmtCache
	statements  atomic.Int64 // see QueryCount
	tracer      *tracer      // nil: tracing off (trace.go)
	writer      *writer
	faults      faultState // see Classify
	ns          Namespace  // PostgreSQL: lock keys and NOTIFY channel of the schema
	// statementTimeout bounds each statement (deadline.go).
	statementTimeout time.Duration
	commits          CommitHooks
	sqliteLogDSN     string // see SQLiteFiles
	sqliteShm        string
}

// gormConfig is every pool's: GORM's translated errors (a duplicate key
// is gorm.ErrDuplicatedKey), no log, no transaction around a single
// statement, and timestamps as they are kept (UTC, microseconds).
func gormConfig() *gorm.Config {
	return &gorm.Config{
		TranslateError:         true,
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
	}
}

// Open connects and starts the writer. It is the only place that calls
// gorm.Open.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 16
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	db := &DB{statementTimeout: opts.StatementTimeout}
	var err error
	switch {
	case IsPostgresURL(opts.DatabaseURL):
		err = db.openPostgres(ctx, opts)
	case opts.DatabaseURL != "":
		return nil, fmt.Errorf("unsupported database URL %q: only postgres:// URLs are supported", redact(opts.DatabaseURL))
	default:
		err = db.openSQLite(opts)
	}
	if err != nil {
		return nil, err
	}
	if err := db.prepare(ctx, opts); err != nil {
		_ = db.Close()
		return nil, err
	}
	db.writer = startWriter(db)
	return db, nil
}

// openPostgres opens the PostgreSQL pool, which reads and writes share,
// and reads the schema's namespace.
func (db *DB) openPostgres(ctx context.Context, opts Options) error {
	dialector := postgres.New(postgres.Config{DSN: opts.DatabaseURL, OptionOpenDB: []stdlib.OptionOpenDB{
		stdlib.OptionBeforeConnect(keepOnCancel), stdlib.OptionAfterConnect(sessionSettings)}})
	g, err := gorm.Open(pgDialector{dialector.(*postgres.Dialector)}, gormConfig())
	if err != nil {
		return fmt.Errorf("open postgres: %w", err)
	}
	if db.ns, err = loadNamespace(ctx, g); err != nil {
		if sqlDB, derr := g.DB(); derr == nil {
			_ = sqlDB.Close()
		}
		return err
	}
	db.dialect = postgresDialect{writeKey: db.ns.WriteKey}
	sqlDB, err := g.DB()
	if err != nil {
		return fmt.Errorf("open postgres: %w", err)
	}
	sqlDB.SetMaxOpenConns(opts.MaxOpenConns)
	sqlDB.SetMaxIdleConns(opts.MaxOpenConns)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	db.write, db.read = g, g
	return nil
}

// openSQLite opens the file of opts.DataDir: one writer connection, and a
// read-only pool beside it.
func (db *DB) openSQLite(opts Options) error {
	db.dialect = sqliteDialect{}
	if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(opts.DataDir, "guildhall.db")
	// WAL lets readers run beside the writer; synchronous=FULL makes an
	// acknowledged commit durable across a crash; foreign keys enforce the
	// cascades; the busy timeout covers checkpoints and other processes.
	common := "_journal_mode=WAL&_synchronous=FULL&_foreign_keys=on&_busy_timeout=10000"
	cfg := gormConfig()
	w, err := gorm.Open(sqliteOpen("file:"+path+"?"+common+"&_txlock=immediate"), cfg)
	if err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	wdb, err := w.DB()
	if err != nil {
		return fmt.Errorf("open sqlite: %w", err)
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
		return fmt.Errorf("open sqlite: %w", err)
	}
	rdb, err := r.DB()
	if err != nil {
		_ = wdb.Close()
		return fmt.Errorf("open sqlite: %w", err)
	}
	rdb.SetMaxOpenConns(opts.MaxOpenConns)
	rdb.SetMaxIdleConns(opts.MaxOpenConns)
	db.write, db.read = w, r
	db.sqliteLogDSN = "file:" + path + "?" + common + "&_query_only=true"
	// SQLite names the wal-index after the database's path with its
	// symbolic links resolved.
	db.sqliteShm = path + "-shm"
	if real, err := filepath.EvalSymlinks(path); err == nil {
		db.sqliteShm = real + "-shm"
	}
	return nil
}

// prepare sets up what runs statements on the pools once they are open:
// the prepared statements of each pool (and PostgreSQL's searches' pool),
// and the statements' counting, deadlines and tracing.
func (db *DB) prepare(ctx context.Context, opts Options) error {
	rdb, err := db.read.DB()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	wdb, err := db.write.DB()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	db.tracer = newTracer(opts.Tracer, db.dialect)
	db.reads = Queries{db: db.read, dialect: db.dialect, stmts: newStmtCache(rdb, db.dialect).withTimeout(db.statementTimeout),
		counter: &db.statements, tracer: db.tracer}
	db.wstmts = db.reads.stmts
	if db.Postgres() {
		sdb, err := openSearchPool(opts.DatabaseURL, max(2, opts.MaxOpenConns/4))
		if err != nil {
			return err
		}
		db.searchStmts = newStmtCache(sdb, db.dialect).withTimeout(db.statementTimeout)
		if err := sdb.PingContext(ctx); err != nil {
			return fmt.Errorf("open postgres (search pool): %w", err)
		}
	}
	if wdb != rdb {
		db.wstmts = newStmtCache(wdb, db.dialect).withTimeout(db.statementTimeout)
	}
	for _, g := range []*gorm.DB{db.write, db.read} {
		if err := db.countStatements(g); err != nil {
			return err
		}
		if err := db.boundStatements(g, db.statementTimeout); err != nil {
			return err
		}
		if err := db.traceStatements(g); err != nil {
			return err
		}
		if db.write == db.read {
			break
		}
	}
	return nil
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
// (UniqueViolation).
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

// IsPostgresURL reports whether url selects PostgreSQL.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// Postgres reports whether the database is PostgreSQL.
func (db *DB) Postgres() bool { return db.dialect.Name() == "postgres" }

// Dialect is the database's.
func (db *DB) Dialect() Dialect { return db.dialect }

// Reads run statements on the read pool.
func (db *DB) Reads() Queries { return db.reads }

// Searches run statements on the pool of PostgreSQL's searches, which
// plans them once (openSearchPool); on SQLite they are Reads.
func (db *DB) Searches() Queries {
	q := db.reads
	if db.searchStmts != nil {
		q.stmts = db.searchStmts
	}
	return q
}

// WritePool is GORM on the write pool (SQLite: its one writer connection)
// for what runs outside the writer: the migrations, the blobs' chunks.
func (db *DB) WritePool() *gorm.DB { return db.write }

// ReadPool is GORM on the read pool.
func (db *DB) ReadPool() *gorm.DB { return db.read }

// SQLiteFiles are where a connection of its own to the SQLite database
// opens (read-only), and the database's wal-index file ("" on PostgreSQL).
func (db *DB) SQLiteFiles() (dsn, shm string) { return db.sqliteLogDSN, db.sqliteShm }

// Ping checks that the database answers (on the read pool: SQLite's one
// writer connection may be busy with a write for a while), and on
// PostgreSQL on the searches' pool too, whose connections are its own.
func (db *DB) Ping(ctx context.Context) error {
	rdb, err := db.read.DB()
	if err != nil {
		return err
	}
	if err := ping(ctx, rdb); err != nil {
		return err
	}
	if db.searchStmts != nil {
		if err := ping(ctx, db.searchStmts.db); err != nil {
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
func (db *DB) Close() error {
	if db.writer != nil {
		db.writer.stop()
	}
	for _, c := range []*stmtCache{db.reads.stmts, db.wstmts, db.searchStmts} {
		if c != nil {
			c.close()
		}
	}
	var errs []error
	if db.searchStmts != nil {
		errs = append(errs, db.searchStmts.db.Close())
	}
	for _, g := range []*gorm.DB{db.write, db.read} {
		if g == nil {
			continue
		}
		if sqlDB, err := g.DB(); err == nil {
			errs = append(errs, sqlDB.Close())
		}
		if db.write == db.read {
			break
		}
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

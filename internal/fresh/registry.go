package fresh

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// The change log. Every row written to a table that a cached read depends
// on logs what it changed in change_log, through triggers, in the
// transaction that writes it: whoever writes, this instance, another one,
// an older version during a rolling upgrade, the CLI, or an operator with
// psql or sqlite3. The cache follows the log to drop exactly what each
// commit changed, and a write transaction reads the entries it logged
// itself to know what of the cache it no longer sees (Own).
//
// A change names a table and, within it, the key of what changed: the
// cached reads depend on such (table, key) pairs, or on a whole table
// (key ""). The rows of several tables count as their parent's: a user's
// roles are part of the user, a channel's overwrites are logged under the
// overwrites of that channel.
//
// Order. On SQLite a change's v is its row's AUTOINCREMENT key: one writer
// at a time commits, so v follows commit order, and, since a rolled-back
// transaction takes its rows and the sequence's advance back with it, the
// committed rows are numbered without a hole. On PostgreSQL writers commit
// concurrently, so v is the transaction's: its first logged change bumps
// the data_version row, and every change of the transaction carries the v
// and nonce of that bump, and the nonce of the bump before (prev). The
// row's lock, held to the commit, orders the bumps as the commits, so the
// versions committed are numbered without a hole too, and prev chains each
// to the one before it: a history that was rewritten (a commit lost in a
// crash without synchronous_commit, a failover to an asynchronous standby,
// a restore) breaks the chain where the cache stood, and the cache starts
// over.
//
// When a PostgreSQL change is logged (registry_pg.go). The triggers are
// deferred: a transaction of another program (psql, an older instance)
// logs at its commit, so the data_version row is the last lock it takes
// and cannot close a deadlock cycle with the row locks it took before.
// The service's own write transactions, which take a lock of their own
// first and so run one at a time, fire the pending triggers themselves:
// when they read what they changed so far (Own, own_changes), and as their
// last statement, which reads their version for the prepare
// (CommitVersionSQL, commit_changes). Holding the version row from then
// on, such a write can close a cycle with another program's transaction
// that holds a row the write waits for and commits meanwhile: PostgreSQL
// then ends one of the two, and the service's writer runs its batch again
// (sqldb).

// Table declares how the writes of one table are logged.
type Table struct {
	// Name is the table's.
	Name string
	// LogAs is the name its changes are logged under: a table that holds
	// parts of another's rows (a user's roles) logs as that other.
	LogAs string
	// Key is the column whose value keys a change; "" logs every change
	// as a change of the whole table.
	Key string
	// Columns, when set, limits the updates logged to those of these
	// columns (a comma-separated list).
	Columns string
}

// Registry is what a database logs: every table whose writes a cached
// read depends on, and the tables that no cached read depends on (a test
// holds that every table is in one list or the other). The triggers
// (Install) and what the cache drops (Cache.apply) both follow from it.
type Registry struct {
	Logged   []Table
	Unlogged []string
}

// Postgres says how a PostgreSQL database logs: its schema, the tag of
// the setting that remembers a transaction's bump, and the key of the
// service's write lock, an advisory lock every write transaction holds
// (the triggers are changed under it, so that locking a table cannot close
// a cycle with a writer that locks its rows one by one; the leases'
// heartbeats wait for it, lease.go). nil means SQLite.
type Postgres struct {
	Schema, Tag string
	WriteKey    int64
}

// LockWrites is the statement that takes the write lock for the rest of
// the transaction.
func (pg Postgres) LockWrites() string {
	return "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(pg.WriteKey, 10) + ")"
}

// Conn runs the statements that install the log.
type Conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// CreateLog creates change_log and the triggers of r (on PostgreSQL, the
// data_version row and its table too, when they are not there yet). The functions
// the triggers call also move the version counters of a settings table
// (LogChangeBody), which must exist.
func CreateLog(ctx context.Context, c Conn, r Registry, pg *Postgres) error {
	var stmts []string
	if pg != nil {
		stmts = append(stmts, pg.LockWrites(), `CREATE TABLE IF NOT EXISTS data_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  v BIGINT NOT NULL,
  nonce BIGINT NOT NULL
)`, "INSERT INTO data_version (id, v, nonce) VALUES (1, 1, "+RandomNonce+") ON CONFLICT (id) DO NOTHING",
			instancesTableSQL(pg.Schema), preparedTableSQL(pg.Schema),
			`CREATE TABLE change_log (
  v BIGINT NOT NULL,
  nonce BIGINT NOT NULL,
  prev BIGINT NOT NULL,
  tbl VARCHAR(32) NOT NULL,
  key VARCHAR(128) NOT NULL,
  PRIMARY KEY (v, tbl, key)
)`)
		stmts = append(stmts, r.pgFunctions(pg)...)
		for _, t := range r.Logged {
			stmts = append(stmts, pgTriggers(pg, t)...)
		}
	} else {
		stmts = append(stmts, `CREATE TABLE change_log (
  v INTEGER PRIMARY KEY AUTOINCREMENT,
  tbl TEXT NOT NULL,
  key TEXT NOT NULL
)`)
		for _, t := range r.Logged {
			stmts = append(stmts, sqliteTriggers(t, false)...)
		}
	}
	return execAll(ctx, c, stmts)
}

// Install makes the database log what r declares, at every start: a table
// added to the registry gets its triggers, and PostgreSQL's functions are
// replaced when they are not the ones this version writes (after an
// upgrade that changed them, or a schema renamed since: they name their
// schema). A database without change_log yet (migrated short of it) is
// left alone.
func Install(ctx context.Context, c Conn, r Registry, pg *Postgres) error {
	if pg == nil {
		if ok, err := exists(ctx, c, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'change_log'"); err != nil || !ok {
			return err
		}
		var stmts []string
		for _, t := range r.Logged {
			stmts = append(stmts, sqliteTriggers(t, true)...)
		}
		return execAll(ctx, c, stmts)
	}
	if ok, err := exists(ctx, c, "SELECT 1 FROM pg_class WHERE oid = to_regclass($1)", quoteIdent(pg.Schema)+".change_log"); err != nil || !ok {
		return err
	}
	var stmts []string
	// The leases' tables (lease.go), which a database written by an
	// earlier release lacks.
	for _, t := range [][2]string{{instancesTable(pg.Schema), instancesTableSQL(pg.Schema)},
		{preparedTable(pg.Schema), preparedTableSQL(pg.Schema)}} {
		ok, err := exists(ctx, c, "SELECT 1 FROM pg_class WHERE oid = to_regclass($1)", t[0])
		if err != nil {
			return err
		}
		if !ok {
			stmts = append(stmts, t[1])
		}
	}
	same, err := r.pgFunctionsInstalled(ctx, c, pg)
	if err != nil {
		return err
	}
	if !same {
		stmts = append(stmts, r.pgFunctions(pg)...)
	}
	for _, t := range r.Logged {
		ok, err := pgTriggersInstalled(ctx, c, pg, t)
		if err != nil {
			return err
		}
		if !ok {
			stmts = append(stmts, pgTriggers(pg, t)...)
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	return execAll(ctx, c, append([]string{pg.LockWrites()}, stmts...))
}

func exists(ctx context.Context, c Conn, query string, args ...any) (bool, error) {
	rows, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("read the change log's installation: %w", err)
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Close()
}

func execAll(ctx context.Context, c Conn, stmts []string) error {
	for _, s := range stmts {
		if s == "" {
			continue
		}
		if _, err := c.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

func firstLine(q string) string {
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i]
	}
	return q
}

// keyOf is the logged key of a row (row is NEW or OLD).
func keyOf(row, column string) string {
	if column == "" {
		return "''"
	}
	return row + "." + column
}

// sqliteTriggers log every row inserted, updated or deleted in t. An
// update logs the key before and, when it moved, after.
func sqliteTriggers(t Table, ifNotExists bool) []string {
	create := "CREATE TRIGGER "
	if ifNotExists {
		create += "IF NOT EXISTS "
	}
	ins := func(row string) string {
		return "INSERT INTO change_log (tbl, key) VALUES ('" + t.LogAs + "', " + keyOf(row, t.Key) + ");"
	}
	upd := "UPDATE"
	if t.Columns != "" {
		upd = "UPDATE OF " + t.Columns
	}
	moved := ""
	if t.Key != "" {
		moved = "INSERT INTO change_log (tbl, key) SELECT '" + t.LogAs + "', NEW." + t.Key +
			" WHERE NEW." + t.Key + " IS NOT OLD." + t.Key + ";"
	}
	return []string{
		create + t.Name + "_log_insert AFTER INSERT ON " + t.Name + " BEGIN " + ins("NEW") + " END",
		create + t.Name + "_log_update AFTER " + upd + " ON " + t.Name + " BEGIN " + ins("OLD") + moved + " END",
		create + t.Name + "_log_delete AFTER DELETE ON " + t.Name + " BEGIN " + ins("OLD") + " END",
	}
}

// QuoteIdent quotes a PostgreSQL identifier.
func QuoteIdent(s string) string { return quoteIdent(s) }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// RandomNonce is a random BIGINT of 53 bits, in SQL.
const RandomNonce = "floor(random() * 9007199254740992)::bigint"

// changeLogKeep is how many versions of the log the pruning keeps: an
// instance that fell further behind (it answered nothing for that long)
// finds a hole where it stood, and its cache starts over.
const changeLogKeep = 100_000

// PruneSQL deletes the oldest entries of the change log, keeping the
// newest changeLogKeep versions.
var PruneSQL = fmt.Sprintf("DELETE FROM change_log WHERE v < (SELECT MAX(v) - %d FROM change_log)", changeLogKeep)

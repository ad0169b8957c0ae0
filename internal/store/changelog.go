package store

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// The change log. Every row written to a table that a cached read depends
// on logs what it changed in change_log, through triggers, in the
// transaction that writes it: whoever writes, this instance, another one,
// an older version during a rolling upgrade, the CLI, or an operator with
// psql or sqlite3. The read cache (cache.go) follows the log to drop
// exactly what each commit changed.
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
// concurrently, so v is the transaction's: a deferred trigger bumps the
// data_version row once per writing transaction, at its commit, and every
// change of the transaction carries the v and nonce of that bump, and the
// nonce of the bump before (prev). The row's lock orders the bumps as the
// commits, so the versions committed are numbered without a hole too, and
// prev chains each to the one before it: a history that was rewritten (a
// commit lost in a crash without synchronous_commit, a failover to an
// asynchronous standby, a restore) breaks the chain where the cache stood,
// and the cache starts over. Deferred to the commit, the data_version row
// is the last lock a transaction takes, so it cannot close a deadlock
// cycle with locks the transaction took before.

// changeLogTables are the tables whose writes are logged, the name each
// is logged under, and the column that keys it.
var changeLogTables = []struct {
	table, logged, key string
}{
	{"settings", "settings", ""},
	{"users", "users", "id"},
	{"user_roles", "users", "user_id"},
	{"tokens", "tokens", "hash"},
	{"roles", "roles", "id"},
	{"channels", "channels", "id"},
	{"overwrites", "overwrites", "channel_id"},
}

// unloggedTables are the tables no cached read depends on: writing them
// (an event appended, a ticket consumed, an attachment or a profile
// changed, a blob swept) logs nothing. TestChangeLogCoversEveryTable
// checks that every table is in one list or the other.
var unloggedTables = []string{"events", "event_tickets", "attachments", "profiles", "blob_chunks", "blob_trash",
	"schema_migrations", "data_version", "change_log", "deployment_keys", "names_checked"}

// settingsLoggedColumns are the columns of settings a cached read reads:
// the version counters beside them belong to instances of older versions,
// and their moves are not logged.
const settingsLoggedColumns = "global_permissions, global_version"

// migrateChangeLog creates change_log and its triggers, and on PostgreSQL
// replaces the data_version triggers of migration 0011 with the ones that
// log.
func migrateChangeLog(tx *gorm.DB, d dialect) error {
	var stmts []string
	switch pg := d.(type) {
	case postgresDialect:
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
		stmts = append(stmts, `CREATE TABLE change_log (
  v BIGINT NOT NULL,
  nonce BIGINT NOT NULL,
  prev BIGINT NOT NULL,
  tbl VARCHAR(32) NOT NULL,
  key VARCHAR(128) NOT NULL,
  PRIMARY KEY (v, tbl, key)
)`)
		stmts = append(stmts, pgChangeFunctions(schema, pg.tag)...)
		for _, t := range cachedTablesOf0011 {
			stmts = append(stmts, "DROP TRIGGER IF EXISTS "+t+"_data_version ON "+t,
				"DROP TRIGGER IF EXISTS "+t+"_data_version_truncate ON "+t)
		}
		stmts = append(stmts, "DROP FUNCTION IF EXISTS "+quoteIdent(schema)+".bump_data_version()")
		stmts = append(stmts, pgChangeTriggers(schema)...)
	default:
		stmts = append(stmts, `CREATE TABLE change_log (
  v INTEGER PRIMARY KEY AUTOINCREMENT,
  tbl TEXT NOT NULL,
  key TEXT NOT NULL
)`)
		stmts = append(stmts, sqliteChangeTriggers()...)
	}
	for _, s := range stmts {
		if err := tx.Exec(s).Error; err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// cachedTablesOf0011 are the tables migration 0011 put data_version
// triggers on.
var cachedTablesOf0011 = []string{"settings", "users", "roles", "user_roles", "channels", "overwrites", "tokens"}

// keyOf is the logged key of a row (row is NEW or OLD).
func keyOf(row, column string) string {
	if column == "" {
		return "''"
	}
	return row + "." + column
}

// sqliteChangeTriggers log every row inserted, updated or deleted in the
// logged tables. An update logs the key before and, when it moved, after.
func sqliteChangeTriggers() []string {
	var out []string
	for _, t := range changeLogTables {
		ins := func(row string) string {
			return "INSERT INTO change_log (tbl, key) VALUES ('" + t.logged + "', " + keyOf(row, t.key) + ");"
		}
		upd := "UPDATE"
		if t.table == "settings" {
			upd = "UPDATE OF " + settingsLoggedColumns
		}
		moved := ""
		if t.key != "" {
			moved = "INSERT INTO change_log (tbl, key) SELECT '" + t.logged + "', NEW." + t.key +
				" WHERE NEW." + t.key + " IS NOT OLD." + t.key + ";"
		}
		out = append(out,
			"CREATE TRIGGER "+t.table+"_log_insert AFTER INSERT ON "+t.table+" BEGIN "+ins("NEW")+" END",
			"CREATE TRIGGER "+t.table+"_log_update AFTER "+upd+" ON "+t.table+" BEGIN "+ins("OLD")+moved+" END",
			"CREATE TRIGGER "+t.table+"_log_delete AFTER DELETE ON "+t.table+" BEGIN "+ins("OLD")+" END")
	}
	return out
}

// pgChangeFunctions are the functions the PostgreSQL triggers call:
// log_change, which bumps the data version once per transaction and logs
// one change, and a trigger function per logged table.
func pgChangeFunctions(schema, tag string) []string {
	q := quoteIdent(schema)
	out := []string{`CREATE OR REPLACE FUNCTION ` + q + `.log_change(t TEXT, k TEXT) RETURNS void LANGUAGE plpgsql AS $$` +
		logChangeBody(schema, tag) + `$$`}
	for _, t := range changeLogTables {
		body := "\nBEGIN\n"
		if t.table == "settings" {
			body += "  PERFORM " + q + ".log_change('settings', '');\n"
		} else {
			body += "  IF TG_OP <> 'INSERT' THEN PERFORM " + q + ".log_change('" + t.logged + "', OLD." + t.key + "::text); END IF;\n" +
				"  IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW." + t.key + " IS DISTINCT FROM OLD." + t.key + ") THEN\n" +
				"    PERFORM " + q + ".log_change('" + t.logged + "', NEW." + t.key + "::text);\n  END IF;\n"
		}
		body += "  RETURN NULL;\nEND\n"
		out = append(out, `CREATE OR REPLACE FUNCTION `+q+`.log_`+t.table+`() RETURNS trigger LANGUAGE plpgsql AS $$`+body+`$$`)
	}
	out = append(out, `CREATE OR REPLACE FUNCTION `+q+`.log_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM `+q+`.log_change('*', '');
  RETURN NULL;
END
$$`)
	return out
}

// logChangeBody is the body of log_change, as pg_proc.prosrc keeps it.
//
// The first change of a transaction bumps data_version (upserting the
// row, so that a row deleted by hand comes back, with a prev of 0 that
// matches no cache) and remembers the bump in
// a setting local to the transaction, keyed by its ID: a savepoint rolled
// back takes the bump and the setting back together. It also moves the
// version counters of settings that instances of earlier versions key
// their caches by, so that they stay right during a rolling upgrade.
func logChangeBody(schema, tag string) string {
	q := quoteIdent(schema)
	setting := "'guildhall.change_" + tag + "'"
	return `
DECLARE
  cur TEXT := current_setting(` + setting + `, true);
  me TEXT := txid_current()::text;
  nv BIGINT;
  nn BIGINT;
  np BIGINT;
BEGIN
  IF cur IS NOT NULL AND split_part(cur, ':', 1) = me THEN
    nv := split_part(cur, ':', 2)::bigint;
    nn := split_part(cur, ':', 3)::bigint;
    np := split_part(cur, ':', 4)::bigint;
  ELSE
    SELECT d.nonce INTO np FROM ` + q + `.data_version d WHERE d.id = 1 FOR UPDATE;
    nn := ` + randomNonce + `;
    INSERT INTO ` + q + `.data_version AS d (id, v, nonce) VALUES (1, 1, nn)
      ON CONFLICT (id) DO UPDATE SET v = d.v + 1, nonce = excluded.nonce RETURNING d.v INTO nv;
    np := COALESCE(np, 0);
    UPDATE ` + q + `.settings SET auth_version = auth_version + 1, credentials_version = credentials_version + 1 WHERE id = 1;
    PERFORM set_config(` + setting + `, me || ':' || nv || ':' || nn || ':' || np, true);
  END IF;
  INSERT INTO ` + q + `.change_log (v, nonce, prev, tbl, key) VALUES (nv, nn, np, t, k) ON CONFLICT DO NOTHING;
END
`
}

// pgChangeTriggers put the logging triggers on the logged tables: deferred
// row triggers (see the order above), fired ALWAYS (in replica sessions
// too), and a TRUNCATE trigger that logs the whole store as changed.
func pgChangeTriggers(schema string) []string {
	q := quoteIdent(schema)
	var out []string
	for _, t := range changeLogTables {
		events := "INSERT OR UPDATE OR DELETE"
		if t.table == "settings" {
			events = "INSERT OR UPDATE OF " + settingsLoggedColumns + " OR DELETE"
		}
		out = append(out,
			"CREATE CONSTRAINT TRIGGER "+t.table+"_log AFTER "+events+" ON "+t.table+
				" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "+q+".log_"+t.table+"()",
			"CREATE TRIGGER "+t.table+"_log_truncate AFTER TRUNCATE ON "+t.table+" FOR EACH STATEMENT EXECUTE FUNCTION "+q+".log_truncate()",
			"ALTER TABLE "+t.table+" ENABLE ALWAYS TRIGGER "+t.table+"_log",
			"ALTER TABLE "+t.table+" ENABLE ALWAYS TRIGGER "+t.table+"_log_truncate")
	}
	return out
}

// installChangeFunctions replaces the PostgreSQL functions of the change
// log when they are not the ones this version writes for the current
// schema: after an upgrade that changed them, or a schema renamed since
// (they name their schema). It runs at every start, under the migration
// lock.
func installChangeFunctions(db *gorm.DB, d dialect) error {
	pg, ok := d.(postgresDialect)
	if !ok {
		return nil
	}
	schema, err := currentSchema(db)
	if err != nil {
		return err
	}
	var have *string
	err = db.Raw("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(?)", quoteIdent(schema)+".log_change(text,text)").Scan(&have).Error
	if err != nil {
		return fmt.Errorf("read the change log's function: %w", err)
	}
	if have == nil || *have == logChangeBody(schema, pg.tag) {
		return nil // as it should be, or not there yet (a test that stops short of the migration)
	}
	for _, s := range pgChangeFunctions(schema, pg.tag) {
		if err := db.Exec(s).Error; err != nil {
			return fmt.Errorf("replace the change log's functions: %w", err)
		}
	}
	return nil
}

// changeLogKeep is how many versions of the log the pruning keeps: an
// instance that fell further behind (it answered nothing for that long)
// finds a hole where it stood, and its cache starts over.
const changeLogKeep = 100_000

// PruneChangeLog deletes the oldest entries of the change log, keeping the
// newest changeLogKeep versions, and returns how many it deleted.
func (s *Store) PruneChangeLog(ctx context.Context) (int64, error) {
	var n int64
	_, err := s.Write(ctx, func(tx *Tx) error {
		db := tx.with(ctx)
		res := db.Where("v < (?)", db.Model(&changeLogRow{}).Select("MAX(v) - ?", changeLogKeep)).Delete(&changeLogRow{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("prune the change log: %w", err)
	}
	return n, nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// randomNonce is a random BIGINT of 53 bits.
const randomNonce = "floor(random() * 9007199254740992)::bigint"

func currentSchema(db *gorm.DB) (string, error) {
	var schema string
	if err := db.Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return "", fmt.Errorf("read the current schema: %w", err)
	}
	return schema, nil
}

// changeLogRow is an entry of the change log (the version's nonces are
// PostgreSQL's alone, and read by the hot statement of follow.go).
type changeLogRow struct {
	V   int64 `gorm:"primaryKey;autoIncrement:false"`
	Tbl string
	Key string
}

func (changeLogRow) TableName() string { return "change_log" }

// lastChange is the last version of SQLite's change log, as the
// transaction sees it.
func (tx *Tx) lastChange(ctx context.Context) (int64, error) {
	var v int64
	if err := tx.with(ctx).Model(&changeLogRow{}).Select("COALESCE(MAX(v), 0)").Scan(&v).Error; err != nil {
		return 0, fmt.Errorf("read the change log: %w", err)
	}
	return v, nil
}

// verifyMarks checks that the write marked every change the triggers
// logged for it since the version from (Options.VerifyChangeMarks).
func (tx *Tx) verifyMarks(ctx context.Context, from int64) error {
	var logged []changeLogRow
	if err := tx.with(ctx).Where("v > ?", from).Find(&logged).Error; err != nil {
		return fmt.Errorf("read the change log: %w", err)
	}
	for _, c := range logged {
		if !tx.batch.dirty(c.Tbl, c.Key) {
			return fmt.Errorf("store: a write changed %s %q without marking it (Tx.mark)", c.Tbl, c.Key)
		}
	}
	return nil
}

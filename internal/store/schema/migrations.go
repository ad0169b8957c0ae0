package schema

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Migrations are versioned and append-only: never edit one that has shipped,
// add the next. They are written once for both databases; the placeholders
// {{SERIAL_PK}}, {{TIMESTAMP}}, {{BLOB}} and {{BIGINT}} are the only dialect
// differences (see sqldb.Dialect.DDL).
var Migrations = []Migration{
	{ID: "0001_initial", SQL: `
CREATE TABLE settings (
  id INTEGER PRIMARY KEY,
  global_permissions {{BIGINT}} NOT NULL,
  global_version {{BIGINT}} NOT NULL,
  auth_version {{BIGINT}} NOT NULL,
  created_at {{TIMESTAMP}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE users (
  id VARCHAR(36) PRIMARY KEY,
  username VARCHAR(32) NOT NULL,
  username_key VARCHAR(32) NOT NULL UNIQUE,
  display_name VARCHAR(400) NOT NULL,
  email VARCHAR(254),
  email_key VARCHAR(254) UNIQUE,
  status VARCHAR(16) NOT NULL,
  is_owner BOOLEAN NOT NULL,
  version {{BIGINT}} NOT NULL,
  created_at {{TIMESTAMP}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE roles (
  id VARCHAR(64) PRIMARY KEY,
  name VARCHAR(400) NOT NULL,
  position INTEGER NOT NULL UNIQUE,
  color VARCHAR(7),
  permissions {{BIGINT}} NOT NULL,
  version {{BIGINT}} NOT NULL,
  created_at {{TIMESTAMP}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE user_roles (
  user_id VARCHAR(36) NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role_id VARCHAR(64) NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
  created_at {{TIMESTAMP}} NOT NULL,
  PRIMARY KEY (user_id, role_id)
);
CREATE INDEX user_roles_role ON user_roles(role_id);
CREATE TABLE channels (
  id VARCHAR(64) PRIMARY KEY,
  name VARCHAR(400) NOT NULL,
  topic TEXT,
  version {{BIGINT}} NOT NULL,
  overwrites_version {{BIGINT}} NOT NULL,
  created_at {{TIMESTAMP}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE overwrites (
  channel_id VARCHAR(64) NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
  target_type VARCHAR(16) NOT NULL,
  target_id VARCHAR(64) NOT NULL,
  allow_bits {{BIGINT}} NOT NULL,
  deny_bits {{BIGINT}} NOT NULL,
  PRIMARY KEY (channel_id, target_type, target_id)
);
CREATE INDEX overwrites_target ON overwrites(target_type, target_id);
CREATE TABLE tokens (
  id VARCHAR(36) PRIMARY KEY,
  user_id VARCHAR(36) NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  name VARCHAR(400) NOT NULL,
  hash VARCHAR(64) NOT NULL UNIQUE,
  created_at {{TIMESTAMP}} NOT NULL,
  expires_at {{TIMESTAMP}}
);
CREATE INDEX tokens_user ON tokens(user_id);
CREATE TABLE attachments (
  channel_id VARCHAR(64) NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
  id VARCHAR(128) NOT NULL,
  content_type VARCHAR(255) NOT NULL,
  size {{BIGINT}} NOT NULL,
  sha256 VARCHAR(64) NOT NULL,
  blob_key VARCHAR(64) NOT NULL,
  created_by VARCHAR(36) REFERENCES users(id) ON DELETE SET NULL,
  updated_by VARCHAR(36) REFERENCES users(id) ON DELETE SET NULL,
  created_at {{TIMESTAMP}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL,
  PRIMARY KEY (channel_id, id)
);
CREATE TABLE profiles (
  user_id VARCHAR(36) PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
  links TEXT NOT NULL,
  version {{BIGINT}} NOT NULL,
  updated_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE events (
  seq {{SERIAL_PK}},
  type VARCHAR(64) NOT NULL,
  actor_id VARCHAR(36),
  subject VARCHAR(256) NOT NULL,
  data TEXT NOT NULL,
  reason TEXT,
  created_at {{TIMESTAMP}} NOT NULL
);
CREATE INDEX events_created ON events(created_at);
CREATE INDEX events_actor ON events(actor_id, seq);
CREATE INDEX events_subject ON events(subject, seq);
CREATE INDEX events_type ON events(type, seq);
CREATE TABLE event_tickets (
  hash VARCHAR(64) PRIMARY KEY,
  user_id VARCHAR(36) NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  expires_at {{TIMESTAMP}} NOT NULL
);
CREATE TABLE blob_chunks (
  blob_key VARCHAR(64) NOT NULL,
  chunk INTEGER NOT NULL,
  data {{BLOB}} NOT NULL,
  PRIMARY KEY (blob_key, chunk)
);
`},
	// Database blobs are deleted after a grace period, not at once, so that
	// a download in flight when its attachment is replaced or deleted still
	// reads every chunk (DBBlobs.Delete and Sweep).
	{ID: "0002_blob_trash", SQL: `
CREATE TABLE blob_trash (
  blob_key VARCHAR(64) PRIMARY KEY,
  deleted_at {{TIMESTAMP}} NOT NULL
);
CREATE INDEX blob_trash_deleted ON blob_trash(deleted_at);
`},
	// User search: a lower-cased display name beside the username and email
	// keys, each indexed for prefix ranges; users by status in ID order; a
	// role's holders in user-ID order. On PostgreSQL the keys compare byte by
	// byte (COLLATE "C"), so a prefix is one contiguous index range.
	{ID: "0003_user_search", SQL: `
ALTER TABLE users ADD COLUMN display_name_key VARCHAR(400) NOT NULL DEFAULT '';
CREATE INDEX users_status ON users(status, id);
DROP INDEX user_roles_role;
CREATE INDEX user_roles_role ON user_roles(role_id, user_id);
`, Run: migrateUserSearch},
	// Timestamps become BIGINT microseconds since the Unix epoch (UTC) on
	// both databases: reading one is an integer scan, where a SQLite
	// DATETIME was a text parse per value (a tenth of a list request).
	// settings gains credentials_version, which moves whenever a token, a
	// user's status or a user's roles change, so cached credentials are
	// checked by one number.
	{ID: "0004_integer_timestamps", Run: migrateMicros},
	// An event-stream ticket belongs to the token that minted it: revoking
	// the token deletes its tickets. Tickets from before (a minute's worth at
	// most) are dropped.
	{ID: "0010_ticket_token", SQL: `
DELETE FROM event_tickets;
ALTER TABLE event_tickets ADD COLUMN token_id VARCHAR(36) REFERENCES tokens(id) ON DELETE CASCADE;
`},
	// PostgreSQL's data version, by which instances keep a read cache
	// (dataversion.go): a row that every transaction writing a cached table
	// bumps, through triggers. Nothing on SQLite (PRAGMA data_version). The
	// triggers' function is installed again at every start when it differs
	// (installBumpFunction).
	{ID: "0011_data_version", Run: migrateDataVersion},
	// The change log (internal/fresh): triggers on every table a cached
	// read depends on log the key of each row written, so that caches drop
	// what changed and nothing else. On PostgreSQL its triggers replace
	// 0011's and bump the same data_version row. The triggers of tables
	// logged since are installed at every start (fresh.Install).
	{ID: "0012_change_log", Run: migrateChangeLog},
	// Categories (a channel's kind, its category and its position among its
	// siblings; deleting a category leaves its channels outside any) and
	// member timeouts.
	{ID: "0013_categories_timeouts", SQL: `
ALTER TABLE channels ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'text';
ALTER TABLE channels ADD COLUMN parent_id VARCHAR(64) REFERENCES channels(id) ON DELETE SET NULL;
ALTER TABLE channels ADD COLUMN position INTEGER NOT NULL DEFAULT 0;
CREATE INDEX channels_parent ON channels(parent_id);
ALTER TABLE users ADD COLUMN timeout_until {{BIGINT}};
`},
	// The deployment's secret keys, drawn once here and shared by every
	// instance: the key that seals list cursors (so a cursor tells nothing
	// of what it points past).
	{ID: "0014_deployment_keys", SQL: `
CREATE TABLE deployment_keys (
  name VARCHAR(32) PRIMARY KEY,
  key_hex VARCHAR(128) NOT NULL
);
`, Run: func(tx *gorm.DB, _ sqldb.Dialect, _ *fresh.Postgres) error {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		return tx.Exec("INSERT INTO deployment_keys (name, key_hex) VALUES ('cursor', ?)", hex.EncodeToString(key)).Error
	}},
	// A search lists its matches in key order, then ID order (store/users_list.go): the
	// display-name key's index carries the ID, so equal display names are
	// in order in it too and a page starts where the last one ended. The
	// username and email keys are unique: their own indexes are in order.
	// On PostgreSQL the ID is ordered byte by byte (COLLATE "C"), as the
	// keys are and as the store compares positions.
	{ID: "0015_user_search_order", Run: func(tx *gorm.DB, d sqldb.Dialect, _ *fresh.Postgres) error {
		if err := tx.Exec("DROP INDEX users_display_name_key").Error; err != nil {
			return err
		}
		return tx.Exec("CREATE INDEX users_display_name_key ON users(display_name_key, " + d.Bytewise("id") + ")").Error
	}},
	// Up to which event the stored names were last checked, and under
	// which rule (names.Rule): a start checks only what changed since
	// (store.EachNameToCheck).
	{ID: "0016_names_checked", SQL: `
CREATE TABLE names_checked (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  rule VARCHAR(64) NOT NULL,
  seq {{BIGINT}} NOT NULL
);
`},
	// Webhooks (store/webhooks.go) and their deliveries (store/webhooks.go
	// lists them; store/webhookq makes, claims and records them).
	// A webhook gets the events with seq > after_seq that its patterns
	// match; webhook_dispatch holds up to which event deliveries were made.
	// Times are Unix microseconds. A delivery's lease says which instance
	// attempts it until when, so that one instance attempts it at a time.
	{ID: "0017_webhooks", SQL: `
CREATE TABLE webhooks (
  id VARCHAR(36) PRIMARY KEY,
  url VARCHAR(2048) NOT NULL,
  events TEXT NOT NULL,
  description VARCHAR(400) NOT NULL,
  enabled BOOLEAN NOT NULL,
  disabled_reason VARCHAR(32),
  creator_id VARCHAR(36) NOT NULL,
  secret VARCHAR(128) NOT NULL,
  previous_secret VARCHAR(128),
  previous_until {{BIGINT}},
  after_seq {{BIGINT}} NOT NULL,
  version {{BIGINT}} NOT NULL,
  created_at {{BIGINT}} NOT NULL,
  updated_at {{BIGINT}} NOT NULL
);
CREATE TABLE webhook_deliveries (
  id VARCHAR(64) PRIMARY KEY,
  webhook_id VARCHAR(36) NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  event_seq {{BIGINT}} NOT NULL,
  state VARCHAR(16) NOT NULL,
  attempts INTEGER NOT NULL,
  last_status INTEGER,
  last_error VARCHAR(400),
  next_attempt_at {{BIGINT}},
  lease_owner VARCHAR(64),
  lease_until {{BIGINT}},
  created_at {{BIGINT}} NOT NULL,
  updated_at {{BIGINT}} NOT NULL,
  UNIQUE (webhook_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_attempt_at);
CREATE INDEX webhook_deliveries_of ON webhook_deliveries(webhook_id, created_at, id);
CREATE TABLE webhook_dispatch (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  seq {{BIGINT}} NOT NULL
);
`},
	// PostgreSQL: room in each page of the tables whose rows big writes
	// update by the hundred (a role's members move their users' versions,
	// a reorder or an import their channels'), so that the new version of
	// a row fits in its page and its indexes are not written again (a HOT
	// update): a change of 1,000 members writes about a sixth of the WAL
	// and touches a fifth of the buffers it did at the default of 100.
	// Pages written from now on keep the room; existing ones gain it as
	// they are rewritten.
	{ID: "0018_fillfactor", Run: func(tx *gorm.DB, d sqldb.Dialect, _ *fresh.Postgres) error {
		if d.Name() != "postgres" {
			return nil
		}
		for _, t := range []string{"users", "channels", "roles"} {
			if err := tx.Exec("ALTER TABLE " + t + " SET (fillfactor = 70)").Error; err != nil {
				return err
			}
		}
		return nil
	}},
	// Each role's holders in the order of their usernames
	// (migration0019.go): who holds a permission in a channel is read a
	// page at a time from the roles that can grant it.
	{ID: "0019_holders_by_name", Run: migrateHoldersByName},
	// A webhook's deliveries are listed on the (webhook, event) index
	// (store.ListWebhookDeliveries): the index by creation was one more
	// to write for every delivery made and, on PostgreSQL, for every
	// outcome recorded (a state that changes is never a HOT update).
	{ID: "0020_deliveries_by_event", SQL: `
DROP INDEX IF EXISTS webhook_deliveries_of;
`},
	// The due index holds only the pending deliveries, the queue's, by
	// when each is due (webhookq's duePending): an outcome that ends a
	// delivery leaves it, on PostgreSQL without writing a new entry into
	// it, and the deliveries of the past no longer grow it.
	{ID: "0021_due_pending", SQL: `
DROP INDEX IF EXISTS webhook_deliveries_due;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) WHERE state = 'pending';
`},
}

// timestampColumns are the columns migrateMicros converts, by table.
var timestampColumns = []struct {
	table   string
	columns []string
}{
	{"settings", []string{"created_at", "updated_at"}},
	{"users", []string{"created_at", "updated_at"}},
	{"roles", []string{"created_at", "updated_at"}},
	{"user_roles", []string{"created_at"}},
	{"channels", []string{"created_at", "updated_at"}},
	{"tokens", []string{"created_at", "expires_at"}},
	{"attachments", []string{"created_at", "updated_at"}},
	{"profiles", []string{"updated_at"}},
	{"events", []string{"created_at"}},
	{"event_tickets", []string{"expires_at"}},
	{"blob_trash", []string{"deleted_at"}},
}

// migrateMicros converts every timestamp column to BIGINT microseconds.
// PostgreSQL converts in place. SQLite cannot change a column's declared
// type (which decides how the driver reads it), so each table is rebuilt
// the way SQLite documents: values converted in place, a copy created from
// the table's own DDL with DATETIME replaced, rows copied, the old table
// dropped and the copy renamed, its indexes recreated; foreign keys are off
// meanwhile (migrate turns them off around the migrations) and checked at
// the end.
func migrateMicros(tx *gorm.DB, d sqldb.Dialect, _ *fresh.Postgres) error {
	if d.Name() == "postgres" {
		if err := tx.Exec("ALTER TABLE settings ADD COLUMN credentials_version BIGINT NOT NULL DEFAULT 1").Error; err != nil {
			return err
		}
		for _, t := range timestampColumns {
			for _, c := range t.columns {
				stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE BIGINT USING (EXTRACT(EPOCH FROM %s) * 1000000)::BIGINT", t.table, c, c)
				if err := tx.Exec(stmt).Error; err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := tx.Exec("ALTER TABLE settings ADD COLUMN credentials_version INTEGER NOT NULL DEFAULT 1").Error; err != nil {
		return err
	}
	var eventSeq *int64
	if err := tx.Raw("SELECT seq FROM sqlite_sequence WHERE name = 'events'").Scan(&eventSeq).Error; err != nil {
		return err
	}
	for _, t := range timestampColumns {
		if err := rebuildSQLiteTable(tx, t.table, t.columns); err != nil {
			return fmt.Errorf("table %s: %w", t.table, err)
		}
	}
	if eventSeq != nil {
		// AUTOINCREMENT's high-water mark survives the rebuild, so an event
		// seq is never reused even when the newest events were purged.
		if err := tx.Exec("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'events'", *eventSeq).Error; err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO sqlite_sequence (name, seq) SELECT 'events', ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')", *eventSeq).Error; err != nil {
			return err
		}
	}
	var broken []map[string]any
	if err := tx.Raw("PRAGMA foreign_key_check").Scan(&broken).Error; err != nil {
		return err
	}
	if len(broken) > 0 {
		return fmt.Errorf("foreign keys broken by the rebuild: %v", broken)
	}
	return nil
}

func rebuildSQLiteTable(tx *gorm.DB, table string, columns []string) error {
	for _, c := range columns {
		var rows []struct {
			ID    int64  `gorm:"column:rid"`
			Value string `gorm:"column:v"`
		}
		q := fmt.Sprintf("SELECT rowid AS rid, %s AS v FROM %s WHERE typeof(%s) = 'text'", c, table, c)
		if err := tx.Raw(q).Scan(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			t, err := parseSQLiteTime(r.Value)
			if err != nil {
				return fmt.Errorf("%s.%s of row %d: %w", table, c, r.ID, err)
			}
			if err := tx.Exec(fmt.Sprintf("UPDATE %s SET %s = ? WHERE rowid = ?", table, c), t.UnixMicro(), r.ID).Error; err != nil {
				return err
			}
		}
	}
	var ddl string
	if err := tx.Raw("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&ddl).Error; err != nil {
		return err
	}
	var indexes []string
	if err := tx.Raw("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL", table).Scan(&indexes).Error; err != nil {
		return err
	}
	head := "CREATE TABLE " + table
	if !strings.HasPrefix(ddl, head) {
		return fmt.Errorf("unexpected DDL %q", ddl)
	}
	newDDL := "CREATE TABLE " + table + "__new" + strings.ReplaceAll(ddl[len(head):], "DATETIME", "INTEGER")
	for _, stmt := range []string{
		newDDL,
		fmt.Sprintf("INSERT INTO %s__new SELECT * FROM %s", table, table),
		"DROP TABLE " + table,
		fmt.Sprintf("ALTER TABLE %s__new RENAME TO %s", table, table),
	} {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	for _, idx := range indexes {
		if err := tx.Exec(idx).Error; err != nil {
			return err
		}
	}
	return nil
}

// parseSQLiteTime reads a timestamp as the SQLite driver wrote time.Time
// values before migration 0004.
func parseSQLiteTime(s string) (time.Time, error) {
	s = strings.TrimSuffix(s, "Z")
	for _, layout := range sqlite3.SQLiteTimestampFormats {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC().Truncate(time.Microsecond), nil
		}
	}
	return time.Time{}, fmt.Errorf("unreadable timestamp %q", s)
}

// migrateUserSearch fills the display-name key the way the store writes it
// (Go's strings.ToLower: SQLite's lower() knows only ASCII) and indexes the
// three keys for prefix ranges. On PostgreSQL the keys compare byte by byte
// (COLLATE "C"), as on SQLite, so a prefix is one contiguous index range;
// equality, and so uniqueness, is the same under both collations.
func migrateUserSearch(tx *gorm.DB, d sqldb.Dialect, _ *fresh.Postgres) error {
	var rows []struct{ ID, DisplayName string }
	if err := tx.Raw("SELECT id, display_name FROM users").Scan(&rows).Error; err != nil {
		return err
	}
	for _, r := range rows {
		if err := tx.Exec("UPDATE users SET display_name_key = ? WHERE id = ?", strings.ToLower(r.DisplayName), r.ID).Error; err != nil {
			return err
		}
	}
	stmts := []string{"CREATE INDEX users_display_name_key ON users(display_name_key)"}
	if d.Name() == "postgres" {
		stmts = []string{
			`ALTER TABLE users ALTER COLUMN username_key TYPE VARCHAR(32) COLLATE "C"`,
			`ALTER TABLE users ALTER COLUMN email_key TYPE VARCHAR(254) COLLATE "C"`,
			`ALTER TABLE users ALTER COLUMN display_name_key TYPE VARCHAR(400) COLLATE "C"`,
			"CREATE INDEX users_display_name_key ON users(display_name_key)",
		}
	}
	for _, stmt := range stmts {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// migrations are versioned and append-only: never edit one that has shipped,
// add the next. They are written once for both databases; the placeholders
// {{SERIAL_PK}}, {{TIMESTAMP}}, {{BLOB}} and {{BIGINT}} are the only dialect
// differences (see dialect.ddl).
var migrations = []struct {
	id  string
	sql string
	// run, when set, runs after sql in the same transaction: what SQL alone
	// cannot do the same way on both databases.
	run func(tx *gorm.DB, d dialect) error
}{
	{id: "0001_initial", sql: `
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
	{id: "0002_blob_trash", sql: `
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
	{id: "0003_user_search", sql: `
ALTER TABLE users ADD COLUMN display_name_key VARCHAR(400) NOT NULL DEFAULT '';
CREATE INDEX users_status ON users(status, id);
DROP INDEX user_roles_role;
CREATE INDEX user_roles_role ON user_roles(role_id, user_id);
`, run: migrateUserSearch},
}

// migrateUserSearch fills the display-name key the way the store writes it
// (Go's strings.ToLower: SQLite's lower() knows only ASCII) and indexes the
// three keys for prefix ranges. On PostgreSQL the keys compare byte by byte
// (COLLATE "C"), as on SQLite, so a prefix is one contiguous index range;
// equality, and so uniqueness, is the same under both collations.
func migrateUserSearch(tx *gorm.DB, d dialect) error {
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
	if d.name() == "postgres" {
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

// migrate applies the migrations that have not run yet, holding a lock so
// that instances starting together on one PostgreSQL database take turns.
func (s *Store) migrate(ctx context.Context) error {
	list := make([]*gormigrate.Migration, 0, len(migrations))
	for _, m := range migrations {
		m := m
		list = append(list, &gormigrate.Migration{
			ID: m.id,
			Migrate: func(tx *gorm.DB) error {
				for _, stmt := range splitStatements(s.dialect.ddl(m.sql)) {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("migration %s: %w", m.id, err)
					}
				}
				if m.run != nil {
					if err := m.run(tx, s.dialect); err != nil {
						return fmt.Errorf("migration %s: %w", m.id, err)
					}
				}
				return nil
			},
		})
	}
	return s.write.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		if s.Postgres() {
			if err := conn.Exec("SELECT pg_advisory_lock(?)", writeLockKey+1).Error; err != nil {
				return fmt.Errorf("migration lock: %w", err)
			}
			defer conn.Exec("SELECT pg_advisory_unlock(?)", writeLockKey+1)
		}
		opts := *gormigrate.DefaultOptions
		opts.TableName = "schema_migrations"
		opts.UseTransaction = true
		if err := gormigrate.New(conn, &opts, list).Migrate(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		return nil
	})
}

func splitStatements(sql string) []string {
	var out []string
	for _, part := range strings.Split(sql, ";") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

package schema

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Migration 0011 as it shipped: PostgreSQL's data_version row, and
// triggers that bumped it once per writing transaction. Migration 0012
// replaced its triggers and function with the change log's
// (internal/fresh), which bumps the same row; this code only runs on the
// way there.

func migrateDataVersion(tx *gorm.DB, _ sqldb.Dialect, pg *fresh.Postgres) error {
	if pg == nil {
		return nil
	}
	if err := tx.Exec(pg.LockWrites()).Error; err != nil {
		return fmt.Errorf("take the write lock: %w", err)
	}
	schema := pg.Schema
	stmts := []string{
		`CREATE TABLE data_version (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  v BIGINT NOT NULL,
  nonce BIGINT NOT NULL
)`,
		"INSERT INTO data_version (id, v, nonce) VALUES (1, 1, " + fresh.RandomNonce + ")",
		bumpFunction0011(schema, pg.Tag),
	}
	fn := fresh.QuoteIdent(schema) + ".bump_data_version()"
	for _, t := range cachedTablesOf0011 {
		stmts = append(stmts,
			"CREATE CONSTRAINT TRIGGER "+t+"_data_version AFTER INSERT OR UPDATE OR DELETE ON "+t+
				" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "+fn,
			"CREATE TRIGGER "+t+"_data_version_truncate AFTER TRUNCATE ON "+t+" FOR EACH STATEMENT EXECUTE FUNCTION "+fn,
			"ALTER TABLE "+t+" ENABLE ALWAYS TRIGGER "+t+"_data_version",
			"ALTER TABLE "+t+" ENABLE ALWAYS TRIGGER "+t+"_data_version_truncate")
	}
	for _, s := range stmts {
		if err := tx.Exec(s).Error; err != nil {
			return fmt.Errorf("%s: %w", sqldb.FirstLine(s), err)
		}
	}
	return nil
}

func bumpFunction0011(schema, tag string) string {
	q := fresh.QuoteIdent(schema)
	bumped := "'guildhall.data_version_" + tag + "'"
	return `CREATE OR REPLACE FUNCTION ` + q + `.bump_data_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting(` + bumped + `, true) IS NOT DISTINCT FROM txid_current()::text THEN
    RETURN NULL;
  END IF;
  PERFORM set_config(` + bumped + `, txid_current()::text, true);
  IF current_setting('guildhall.writer_` + tag + `', true) IS DISTINCT FROM 'on' THEN
    UPDATE ` + q + `.settings SET auth_version = auth_version + 1, credentials_version = credentials_version + 1 WHERE id = 1;
  END IF;
  INSERT INTO ` + q + `.data_version AS d (id, v, nonce) VALUES (1, 1, ` + fresh.RandomNonce + `)
    ON CONFLICT (id) DO UPDATE SET v = d.v + 1, nonce = excluded.nonce;
  RETURN NULL;
END
$$`
}

// cachedTablesOf0011 are the tables migration 0011 put data_version
// triggers on.
var cachedTablesOf0011 = []string{"settings", "users", "roles", "user_roles", "channels", "overwrites", "tokens"}

// migrateChangeLog is migration 0012: the change log, with the triggers
// of the tables logged then (registryOf0012); on PostgreSQL they replace
// the data_version triggers of 0011, bumping the same row.
func migrateChangeLog(tx *gorm.DB, _ sqldb.Dialect, pg *fresh.Postgres) error {
	ctx := context.Background()
	if err := fresh.CreateLog(ctx, tx.Statement.ConnPool, registryOf0012, pg); err != nil {
		return err
	}
	if pg == nil {
		return nil
	}
	for _, t := range cachedTablesOf0011 {
		for _, s := range []string{"DROP TRIGGER IF EXISTS " + t + "_data_version ON " + t,
			"DROP TRIGGER IF EXISTS " + t + "_data_version_truncate ON " + t} {
			if err := tx.Exec(s).Error; err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
	}
	return tx.Exec("DROP FUNCTION IF EXISTS " + fresh.QuoteIdent(pg.Schema) + ".bump_data_version()").Error
}

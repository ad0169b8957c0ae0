package schema

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// migrateHoldersByName gives each role's holders an order by username: a
// copy of the holder's lower-cased username in user_roles, indexed after
// the role, so that the holders of a few roles are read in the order of
// their names a page at a time (AccessPage), whatever the roles' size. The
// database keeps the copy, with triggers, so that no write of the service,
// of a tool or by hand can leave it behind: a new membership takes its
// user's key, and a user's new key goes to their memberships. On
// PostgreSQL the copy compares byte by byte (COLLATE "C"), as the users'
// keys do, and the triggers fire in replica sessions too. A membership
// inserted with its key (the service's bulk change of members, where a
// trigger call per row would cost as much as the insert) keeps it. The
// owner, who holds every permission, is found by an index of one entry.
func migrateHoldersByName(tx *gorm.DB, _ sqldb.Dialect, pg *fresh.Postgres) error {
	var stmts []string
	if pg == nil {
		stmts = []string{
			"ALTER TABLE user_roles ADD COLUMN username_key VARCHAR(32) NOT NULL DEFAULT ''",
			`CREATE TRIGGER user_roles_username_key AFTER INSERT ON user_roles WHEN NEW.username_key = '' BEGIN
  UPDATE user_roles SET username_key = (SELECT username_key FROM users WHERE id = NEW.user_id)
  WHERE user_id = NEW.user_id AND role_id = NEW.role_id;
END`,
			`CREATE TRIGGER users_username_key_holders AFTER UPDATE OF username_key ON users
WHEN OLD.username_key IS NOT NEW.username_key BEGIN
  UPDATE user_roles SET username_key = NEW.username_key WHERE user_id = NEW.id;
END`,
		}
	} else {
		if err := tx.Exec(pg.LockWrites()).Error; err != nil {
			return fmt.Errorf("take the write lock: %w", err)
		}
		q := fresh.QuoteIdent(pg.Schema)
		stmts = []string{
			`ALTER TABLE user_roles ADD COLUMN username_key VARCHAR(32) COLLATE "C" NOT NULL DEFAULT ''`,
			"CREATE FUNCTION " + q + `.holder_username_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.username_key := COALESCE((SELECT u.username_key FROM ` + q + `.users u WHERE u.id = NEW.user_id), '');
  RETURN NEW;
END
$$`,
			"CREATE FUNCTION " + q + `.holders_username_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE ` + q + `.user_roles SET username_key = NEW.username_key WHERE user_id = NEW.id;
  RETURN NULL;
END
$$`,
			"CREATE TRIGGER user_roles_username_key BEFORE INSERT ON user_roles FOR EACH ROW " +
				"WHEN (NEW.username_key = '') EXECUTE FUNCTION " + q + ".holder_username_key()",
			"CREATE TRIGGER user_roles_username_key_moved BEFORE UPDATE OF user_id ON user_roles FOR EACH ROW EXECUTE FUNCTION " +
				q + ".holder_username_key()",
			"CREATE TRIGGER users_username_key_holders AFTER UPDATE OF username_key ON users FOR EACH ROW " +
				"WHEN (OLD.username_key IS DISTINCT FROM NEW.username_key) EXECUTE FUNCTION " + q + ".holders_username_key()",
			"ALTER TABLE user_roles ENABLE ALWAYS TRIGGER user_roles_username_key",
			"ALTER TABLE user_roles ENABLE ALWAYS TRIGGER user_roles_username_key_moved",
			"ALTER TABLE users ENABLE ALWAYS TRIGGER users_username_key_holders",
		}
	}
	// The copies last: on PostgreSQL, the change log's deferred triggers
	// they fire forbid any index creation after them in the transaction.
	stmts = append(stmts,
		"CREATE INDEX user_roles_role_username ON user_roles(role_id, username_key, user_id)",
		"CREATE INDEX users_owner ON users(id) WHERE is_owner",
		"UPDATE user_roles SET username_key = (SELECT u.username_key FROM users u WHERE u.id = user_roles.user_id)")
	for _, stmt := range stmts {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

package store

import (
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// The user search index (migration 0015_user_search_index). A prefix
// search (GET /api/users?q=) answers the users whose lower-cased username
// or display name (or email, for holders of MANAGE_USERS) starts with the
// query, in user-ID order, a page at a time. No index of users fits that:
// one on a key is in the key's order, so a page in ID order had to read
// every match and sort it, a cost that grew with the community.
//
// user_search holds a row (source, prefix, user_id) for every prefix of
// every key of every user, up to SearchPrefixMax characters: source 'n'
// for the prefixes of the username and the display name (once each when
// both share one), 'e' for those of the email. Its primary key is the
// index of the search: one prefix of one source is one contiguous range,
// in user-ID order, so a page reads its rows and one more, from where the
// cursor stands (SQLite: WITHOUT ROWID, the table is that index; the
// search's plan is pinned by TestUserSearchPlanUsesTheIndex).
//
// Triggers on users keep it, in the transaction that writes the user,
// whoever writes (the store, the bench's bulk copy, an operator's psql):
// a user inserted adds their rows, a key changed replaces them, a user
// deleted takes theirs. A delete finds its rows by the prefixes of the
// old keys, through the primary key, so no second index (by user) is
// needed. No read of the index is cached under its own name: it changes
// only with users, whose changes every cached page depends on.

// SearchPrefixMax is the longest prefix the index holds, and so the
// longest query a search takes: the contract's maxLength of q.
const SearchPrefixMax = 100

// searchKeys are the keys of users searched, by source.
var searchKeys = []struct {
	source string
	keys   []string
}{
	{"n", []string{"username_key", "display_name_key"}},
	{"e", []string{"email_key"}},
}

// searchPrefixes is a SELECT of (source, prefix, user_id) for the prefixes
// of row's keys of one source (row is NEW or OLD): lengths is a relation of
// the lengths 1..SearchPrefixMax as column n.
func searchPrefixes(row, source string, keys []string, lengths func(key string) string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = "SELECT '" + source + "' AS source, substr(" + row + "." + k + ", 1, n) AS prefix, " + row + ".id AS user_id FROM " +
			lengths(row+"."+k)
	}
	return strings.Join(parts, " UNION ")
}

// searchSync are the statements that keep user_search for one user: the
// old row's prefixes deleted (unless insert), the new row's inserted
// (unless del). tbl is the table's name as the statements name it.
func searchSync(tbl string, insert, del bool, lengths func(key string) string) []string {
	var out []string
	for _, s := range searchKeys {
		if !insert {
			olds := make([]string, len(s.keys))
			for i, k := range s.keys {
				olds[i] = "SELECT substr(OLD." + k + ", 1, n) FROM " + lengths("OLD."+k)
			}
			out = append(out, "DELETE FROM "+tbl+" WHERE source = '"+s.source+"' AND user_id = OLD.id AND prefix IN ("+
				strings.Join(olds, " UNION ")+")")
		}
		if !del {
			out = append(out, "INSERT INTO "+tbl+" (source, prefix, user_id) "+searchPrefixes("NEW", s.source, s.keys, lengths))
		}
	}
	return out
}

// searchKeysChanged is the condition under which an update of users
// touches the index.
func searchKeysChanged(distinct string) string {
	var conds []string
	for _, s := range searchKeys {
		for _, k := range s.keys {
			conds = append(conds, "OLD."+k+" "+distinct+" NEW."+k)
		}
	}
	conds = append(conds, "OLD.id "+distinct+" NEW.id")
	return strings.Join(conds, " OR ")
}

// searchColumns are the columns of users whose update may move the index.
var searchColumns = "id, username_key, display_name_key, email_key"

// sqliteSearchLengths counts 1..SearchPrefixMax from search_lengths (a
// trigger cannot hold a WITH clause, and SQLite has no generate_series).
func sqliteSearchLengths(key string) string {
	return "search_lengths WHERE n <= length(" + key + ")"
}

func pgSearchLengths(key string) string {
	return fmt.Sprintf("generate_series(1, least(COALESCE(length(%s), 0), %d)) AS n", key, SearchPrefixMax)
}

// pgSearchFunction is the trigger function of user_search on PostgreSQL,
// naming its schema (it runs from any search_path).
func pgSearchFunction(schema string) string {
	return `CREATE OR REPLACE FUNCTION ` + quoteIdent(schema) + `.user_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$` +
		pgSearchBody(schema) + `$$`
}

// pgSearchBody is the body of user_search_sync, as pg_proc.prosrc keeps it.
func pgSearchBody(schema string) string {
	tbl := quoteIdent(schema) + ".user_search"
	var b strings.Builder
	b.WriteString("\nBEGIN\n  IF TG_OP = 'TRUNCATE' THEN\n    DELETE FROM " + tbl + ";\n    RETURN NULL;\n  END IF;\n")
	b.WriteString("  IF TG_OP <> 'INSERT' THEN\n")
	for _, s := range searchSync(tbl, false, true, pgSearchLengths) {
		b.WriteString("    " + s + ";\n")
	}
	b.WriteString("  END IF;\n  IF TG_OP <> 'DELETE' THEN\n")
	for _, s := range searchSync(tbl, true, false, pgSearchLengths) {
		b.WriteString("    " + s + ";\n")
	}
	b.WriteString("  END IF;\n  RETURN NULL;\nEND\n")
	return b.String()
}

// migrateSearchIndex creates user_search, its triggers, and fills it
// from the users there are.
func migrateSearchIndex(tx *gorm.DB, d dialect) error {
	var stmts []string
	if pg, ok := d.(postgresDialect); ok {
		// Writers of an older version may be running: take their lock
		// first, so that locking users (CREATE TRIGGER) cannot close a
		// cycle with one of their transactions.
		if err := tx.Exec(pg.lockWrites()).Error; err != nil {
			return fmt.Errorf("take the write lock: %w", err)
		}
		schema, err := currentSchema(tx)
		if err != nil {
			return err
		}
		stmts = []string{
			`CREATE TABLE user_search (
  source CHAR(1) NOT NULL,
  prefix VARCHAR(` + fmt.Sprint(SearchPrefixMax) + `) COLLATE "C" NOT NULL,
  user_id VARCHAR(36) NOT NULL,
  PRIMARY KEY (source, prefix, user_id)
)`,
			pgSearchFunction(schema),
		}
		q := quoteIdent(schema) + ".user_search_sync()"
		stmts = append(stmts,
			"CREATE TRIGGER users_search_insert AFTER INSERT ON users FOR EACH ROW EXECUTE FUNCTION "+q,
			"CREATE TRIGGER users_search_update AFTER UPDATE OF "+searchColumns+" ON users FOR EACH ROW WHEN ("+
				searchKeysChanged("IS DISTINCT FROM")+") EXECUTE FUNCTION "+q,
			"CREATE TRIGGER users_search_delete AFTER DELETE ON users FOR EACH ROW EXECUTE FUNCTION "+q,
			"CREATE TRIGGER users_search_truncate AFTER TRUNCATE ON users FOR EACH STATEMENT EXECUTE FUNCTION "+q,
			"ALTER TABLE users ENABLE ALWAYS TRIGGER users_search_insert",
			"ALTER TABLE users ENABLE ALWAYS TRIGGER users_search_update",
			"ALTER TABLE users ENABLE ALWAYS TRIGGER users_search_delete",
			"ALTER TABLE users ENABLE ALWAYS TRIGGER users_search_truncate",
			"INSERT INTO user_search (source, prefix, user_id) "+searchRowsOfAll(pgSearchLengths))
	} else {
		stmts = []string{
			`CREATE TABLE user_search (
  source TEXT NOT NULL,
  prefix TEXT NOT NULL,
  user_id TEXT NOT NULL,
  PRIMARY KEY (source, prefix, user_id)
) WITHOUT ROWID`,
			"CREATE TABLE search_lengths (n INTEGER PRIMARY KEY)",
			fmt.Sprintf("INSERT INTO search_lengths (n) SELECT value FROM json_each('[%s]')", lengthsList()),
			"CREATE TRIGGER users_search_insert AFTER INSERT ON users BEGIN " +
				joinStatements(searchSync("user_search", true, false, sqliteSearchLengths)) + " END",
			"CREATE TRIGGER users_search_update AFTER UPDATE OF " + searchColumns + " ON users WHEN " +
				searchKeysChanged("IS NOT") + " BEGIN " +
				joinStatements(searchSync("user_search", false, false, sqliteSearchLengths)) + " END",
			"CREATE TRIGGER users_search_delete AFTER DELETE ON users BEGIN " +
				joinStatements(searchSync("user_search", false, true, sqliteSearchLengths)) + " END",
			"INSERT INTO user_search (source, prefix, user_id) " + searchRowsOfAll(sqliteSearchLengths),
		}
	}
	for _, s := range stmts {
		if err := tx.Exec(s).Error; err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// searchRowsOfAll is a SELECT of the index's rows for every user there is.
func searchRowsOfAll(lengths func(key string) string) string {
	var parts []string
	for _, s := range searchKeys {
		for _, k := range s.keys {
			parts = append(parts, "SELECT '"+s.source+"', substr(u."+k+", 1, n), u.id FROM users u CROSS JOIN "+lengths("u."+k))
		}
	}
	return strings.Join(parts, " UNION ")
}

func lengthsList() string {
	parts := make([]string, SearchPrefixMax)
	for i := range parts {
		parts[i] = fmt.Sprint(i + 1)
	}
	return strings.Join(parts, ",")
}

func joinStatements(stmts []string) string { return strings.Join(stmts, "; ") + ";" }

// installSearchFunction replaces the PostgreSQL trigger function of the
// search index when it is not the one this version writes for the current
// schema (a schema renamed since: it names its schema). It runs at every
// start, under the migration lock.
func installSearchFunction(db *gorm.DB, d dialect) error {
	if d.name() != "postgres" {
		return nil
	}
	schema, err := currentSchema(db)
	if err != nil {
		return err
	}
	var have *string
	err = db.Raw("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure(?)", quoteIdent(schema)+".user_search_sync()").Scan(&have).Error
	if err != nil {
		return fmt.Errorf("read the search index's function: %w", err)
	}
	if have == nil || *have == pgSearchBody(schema) {
		return nil
	}
	if err := db.Exec(pgSearchFunction(schema)).Error; err != nil {
		return fmt.Errorf("replace the search index's function: %w", err)
	}
	return nil
}

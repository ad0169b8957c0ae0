package store

import (
	"context"
	"fmt"
)

// StoredName is a name the store holds: a channel's, a role's, a token's,
// or a user's display name.
type StoredName struct {
	Table    string // channels, roles, tokens or users
	ID       string
	UserID   string // a token's user
	Name     string
	Fallback string // what the name becomes when nothing of it is left: the ID, a user's username
}

// namesToCheck select, table by table, the names that may break the rule
// of internal/names: those holding a character outside printable ASCII, or
// none but spaces. Any other name passes it, so the database alone reads
// those (most names, at every start) and none of them leaves it.
var namesToCheck = []struct{ table, sql string }{
	{"channels", "SELECT id, '' AS user_id, name, id AS fallback FROM channels WHERE %s"},
	{"roles", "SELECT id, '' AS user_id, name, id AS fallback FROM roles WHERE %s"},
	{"tokens", "SELECT id, user_id, name, id AS fallback FROM tokens WHERE %s"},
	{"users", "SELECT id, '' AS user_id, display_name AS name, username AS fallback FROM users WHERE %s"},
}

// mayBreakNameRule is the WHERE clause of namesToCheck for a column.
func (q queries) mayBreakNameRule(col string) string {
	if q.dialect.name() == "postgres" {
		return col + " ~ '[^ -~]' OR " + col + " !~ '[!-~]'"
	}
	return col + " GLOB '*[^ -~]*' OR " + col + " NOT GLOB '*[!-~]*'"
}

// EachNameToCheck calls fn with every stored name that may break the rule
// of names (see namesToCheck), one row at a time.
func (q queries) EachNameToCheck(ctx context.Context, fn func(StoredName) error) error {
	for _, t := range namesToCheck {
		col := "name"
		if t.table == "users" {
			col = "display_name"
		}
		rows, err := q.with(ctx).Raw(fmt.Sprintf(t.sql, q.mayBreakNameRule(col))).Rows()
		if err != nil {
			return fmt.Errorf("names of %s: %w", t.table, err)
		}
		for rows.Next() {
			n := StoredName{Table: t.table}
			if err := rows.Scan(&n.ID, &n.UserID, &n.Name, &n.Fallback); err != nil {
				_ = rows.Close()
				return fmt.Errorf("names of %s: %w", t.table, err)
			}
			if err := fn(n); err != nil {
				_ = rows.Close()
				return err
			}
		}
		err = rows.Err()
		_ = rows.Close()
		if err != nil {
			return fmt.Errorf("names of %s: %w", t.table, err)
		}
	}
	return nil
}

// RenameToken stores a token's name.
func (tx *Tx) RenameToken(ctx context.Context, userID, tokenID, name string) error {
	tx.mark("tokens", "") // logged by hash
	err := tx.with(ctx).Model(&tokenRow{}).Where("id = ? AND user_id = ?", tokenID, userID).Update("name", name).Error
	if err != nil {
		return fmt.Errorf("rename token: %w", err)
	}
	return nil
}

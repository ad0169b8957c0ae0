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
// of internal/names or the names' length: those holding a character
// outside printable ASCII, or none but spaces, or longer than the length.
// Any other name passes, so the database alone reads those and none of
// them leaves it. %[1]s is that condition on the name's
// column, %[2]s the condition that limits the rows to the subjects of the
// events after a seq (or nothing).
var namesToCheck = []struct{ table, col, sql, subjects string }{
	{"channels", "name", "SELECT id, '' AS user_id, name, id AS fallback FROM channels WHERE (%[1]s)%[2]s", "id IN (%s)"},
	{"roles", "name", "SELECT id, '' AS user_id, name, id AS fallback FROM roles WHERE (%[1]s)%[2]s", "id IN (%s)"},
	{"tokens", "name", "SELECT id, user_id, name, id AS fallback FROM tokens WHERE (%[1]s)%[2]s", "user_id IN (%s)"},
	{"users", "display_name", "SELECT id, '' AS user_id, display_name AS name, username AS fallback FROM users WHERE (%[1]s)%[2]s", "id IN (%s)"},
}

// subjectsAfter selects the IDs of a kind of subject ("channel:", "role:",
// "user:") of the events after a seq.
const subjectsAfter = "SELECT substr(subject, %d) FROM events WHERE seq > %d AND subject LIKE '%s%%'"

// subjectKind is the prefix of the subjects whose events may change a
// table's names (a token's events are its user's).
var subjectKind = map[string]string{"channels": "channel:", "roles": "role:", "tokens": "user:", "users": "user:"}

// mayBreakNameRule is the condition of namesToCheck on a column, names
// being at most maxLen characters (length counts characters on both).
func (q queries) mayBreakNameRule(col string, maxLen int) string {
	tooLong := fmt.Sprintf(" OR length(%s) > %d", col, maxLen)
	if q.dialect().Name() == "postgres" {
		return col + " ~ '[^ -~]' OR " + col + " !~ '[!-~]'" + tooLong
	}
	return col + " GLOB '*[^ -~]*' OR " + col + " NOT GLOB '*[!-~]*'" + tooLong
}

// EachNameToCheck calls fn with every stored name that may break the rule
// of names or be longer than maxLen characters (see namesToCheck), one row
// at a time: with after < 0 among all
// the names; else only among those of the subjects of the events after
// that seq (every write of a name, by any release, writes one).
func (q queries) EachNameToCheck(ctx context.Context, after int64, maxLen int, fn func(StoredName) error) error {
	for _, t := range namesToCheck {
		limit := ""
		if after >= 0 {
			kind := subjectKind[t.table]
			limit = " AND " + fmt.Sprintf(t.subjects, fmt.Sprintf(subjectsAfter, len(kind)+1, after, kind))
		}
		rows, err := q.with(ctx).Raw(fmt.Sprintf(t.sql, q.mayBreakNameRule(t.col, maxLen), limit)).Rows()
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

// NamesChecked says under which rule, and up to which event, the stored
// names were last checked ("" and 0: never), and the seq of the oldest
// event kept (0: none).
func (q queries) NamesChecked(ctx context.Context) (rule string, seq, oldest int64, err error) {
	var row struct {
		Rule string
		Seq  int64
	}
	res := q.with(ctx).Raw("SELECT rule, seq FROM names_checked WHERE id = 1").Scan(&row)
	if res.Error != nil {
		return "", 0, 0, fmt.Errorf("read names_checked: %w", res.Error)
	}
	var first *int64
	if err := q.with(ctx).Model(&eventRow{}).Select("MIN(seq)").Scan(&first).Error; err != nil {
		return "", 0, 0, fmt.Errorf("read first event: %w", err)
	}
	if first != nil {
		oldest = *first
	}
	return row.Rule, row.Seq, oldest, nil
}

// SetNamesChecked records that the stored names were checked under a rule
// up to an event.
func (tx *Tx) SetNamesChecked(ctx context.Context, rule string, seq int64) error {
	db := tx.with(ctx)
	res := db.Exec("UPDATE names_checked SET rule = ?, seq = ? WHERE id = 1", rule, seq)
	if res.Error == nil && res.RowsAffected == 0 {
		res = db.Exec("INSERT INTO names_checked (id, rule, seq) VALUES (1, ?, ?)", rule, seq)
	}
	if res.Error != nil {
		return fmt.Errorf("write names_checked: %w", res.Error)
	}
	return nil
}

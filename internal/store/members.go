package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/model"
)

// Statements over a list of users of any length: the list travels as one
// JSON array parameter (dialect.jsonTexts), so each is one constant
// statement, prepared once, whatever the list's length.

// UsersByID reads the users of ids; an unknown ID is absent from the map.
func (q queries) UsersByID(ctx context.Context, ids []string) (map[string]model.User, error) {
	out := make(map[string]model.User, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	rows, err := q.query(ctx, "SELECT "+userColumns(q.dialect)+" FROM users u WHERE u.id IN ("+q.dialect.jsonTexts()+")", string(list))
	if err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	defer rows.Close()
	scan := newUserScanner()
	for rows.Next() {
		u, err := scan.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("read users: %w", err)
		}
		out[u.ID] = u
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("read users: %w", err)
	}
	return out, nil
}

// ChangeRoleMembers gives a role to the users of add and takes it from
// those of remove, moving each changed user's version. It reports how many
// of each changed (a user of add who holds the role, or of remove who does
// not, is no change).
func (tx *Tx) ChangeRoleMembers(ctx context.Context, roleID string, add, remove []string, now time.Time) (added, removed int, err error) {
	ids := tx.dialect.jsonTexts()
	at := int64(microsOf(now))
	if len(add) > 0 {
		list, _ := json.Marshal(add)
		res, err := tx.exec(ctx, "INSERT INTO user_roles (user_id, role_id, created_at) SELECT x.id, ?, ? FROM ("+
			ids+") x WHERE true ON CONFLICT DO NOTHING", roleID, at, string(list))
		if err != nil {
			return 0, 0, fmt.Errorf("assign role: %w", err)
		}
		n, _ := res.RowsAffected()
		added = int(n)
	}
	if len(remove) > 0 {
		list, _ := json.Marshal(remove)
		res, err := tx.exec(ctx, "DELETE FROM user_roles WHERE role_id = ? AND user_id IN ("+ids+")", roleID, string(list))
		if err != nil {
			return 0, 0, fmt.Errorf("remove role: %w", err)
		}
		n, _ := res.RowsAffected()
		removed = int(n)
	}
	return added, removed, nil
}

// TouchUsers moves the versions of users whose representation changed.
func (tx *Tx) TouchUsers(ctx context.Context, userIDs []string, now time.Time) error {
	if len(userIDs) == 0 {
		return nil
	}
	list, _ := json.Marshal(userIDs)
	_, err := tx.exec(ctx, "UPDATE users SET version = version + 1, updated_at = ? WHERE id IN ("+tx.dialect.jsonTexts()+")",
		int64(microsOf(now)), string(list))
	if err != nil {
		return fmt.Errorf("touch users: %w", err)
	}
	return nil
}

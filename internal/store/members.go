package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm/clause"
)

// Statements over a list of users of any length: the list travels as one
// JSON array parameter (sqldb.Dialect.JSONTexts), so each is one constant
// statement, prepared once, whatever the list's length.

// ChangeRoleMembers gives a role to the users of add and takes it from
// those of remove, moving each changed user's version. It reports how many
// of each changed (a user of add who holds the role, or of remove who does
// not, is no change).
func (tx *Tx) ChangeRoleMembers(ctx context.Context, roleID string, add, remove []string, now time.Time) (added, removed int, err error) {
	ids := tx.dialect().JSONTexts()
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

type userRoleRow struct {
	UserID    string `gorm:"primaryKey"`
	RoleID    string `gorm:"primaryKey"`
	CreatedAt micros `gorm:"autoCreateTime:false"`
}

func (userRoleRow) TableName() string { return "user_roles" }

// AddUserRole gives a user a role; it reports whether anything changed.
func (tx *Tx) AddUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&userRoleRow{UserID: userID, RoleID: roleID, CreatedAt: microsOf(now)})
	if res.Error != nil {
		return false, fmt.Errorf("assign role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

// RemoveUserRole takes a role from a user; it reports whether anything changed.
func (tx *Tx) RemoveUserRole(ctx context.Context, userID, roleID string, now time.Time) (bool, error) {
	res := tx.with(ctx).Where("user_id = ? AND role_id = ?", userID, roleID).Delete(&userRoleRow{})
	if res.Error != nil {
		return false, fmt.Errorf("remove role: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	return true, tx.touchUser(ctx, userID, now)
}

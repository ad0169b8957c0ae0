package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"gorm.io/gorm"
)

type roleRow struct {
	ID          string `gorm:"primaryKey"`
	Name        string
	Position    int
	Color       *string
	Permissions int64
	Version     int64
	CreatedAt   micros `gorm:"autoCreateTime:false"`
	UpdatedAt   micros `gorm:"autoUpdateTime:false"`
}

func (roleRow) TableName() string { return "roles" }

func (r roleRow) model() model.Role {
	return model.Role{ID: r.ID, Name: r.Name, Position: r.Position, Color: r.Color,
		Permissions: permissions.Set(r.Permissions) & permissions.All, Version: r.Version,
		CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
}

// InsertRole creates a role at position 1, moving every other role up one.
func (tx *Tx) InsertRole(ctx context.Context, r model.Role) (model.Role, error) {
	if _, err := tx.GetRole(ctx, r.ID); err == nil {
		return model.Role{}, apperr.Conflict("Role %q already exists.", r.ID)
	} else if !errors.Is(err, apperr.ErrNotFound) {
		return model.Role{}, err
	}
	if err := tx.shiftRoles(ctx, 1, 1<<30, +1, r.CreatedAt); err != nil {
		return model.Role{}, err
	}
	row := roleRow{ID: r.ID, Name: r.Name, Position: 1, Color: r.Color, Permissions: int64(r.Permissions),
		Version: 1, CreatedAt: microsOf(r.CreatedAt), UpdatedAt: microsOf(r.UpdatedAt)}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return model.Role{}, duplicate(err, "Role %q already exists.", r.ID)
	}
	return row.model(), nil
}

// InsertRolesOnTop creates roles above all the others, in the order given
// (the first lowest), in one statement and without moving any role; the
// positions they are given are ignored. An import creates its roles so and
// then puts every role in place with one SetRolePositions.
func (tx *Tx) InsertRolesOnTop(ctx context.Context, rs []model.Role) error {
	if len(rs) == 0 {
		return nil
	}
	var top int
	if err := tx.with(ctx).Model(&roleRow{}).Select("COALESCE(MAX(position), 0)").Scan(&top).Error; err != nil {
		return fmt.Errorf("read role positions: %w", err)
	}
	rows := make([]roleRow, len(rs))
	for i, r := range rs {
		rows[i] = roleRow{ID: r.ID, Name: r.Name, Position: top + 1 + i, Color: r.Color, Permissions: int64(r.Permissions),
			Version: 1, CreatedAt: microsOf(r.CreatedAt), UpdatedAt: microsOf(r.UpdatedAt)}
	}
	if err := tx.with(ctx).Create(&rows).Error; err != nil {
		return duplicate(err, "A role of the import already exists.")
	}
	return nil
}

// UpdateRole stores a role's name, color and permissions and moves its version.
func (tx *Tx) UpdateRole(ctx context.Context, r model.Role) (model.Role, error) {
	err := tx.with(ctx).Model(&roleRow{}).Where("id = ?", r.ID).Updates(map[string]any{
		"name": r.Name, "color": r.Color, "permissions": int64(r.Permissions),
		"version": gorm.Expr("version + 1"), "updated_at": microsOf(r.UpdatedAt)}).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("update role: %w", err)
	}
	return tx.GetRole(ctx, r.ID)
}

// MoveRole places a role at a position, shifting the roles in between.
func (tx *Tx) MoveRole(ctx context.Context, id string, from, to int, now time.Time) (model.Role, error) {
	db := tx.with(ctx)
	if err := db.Model(&roleRow{}).Where("id = ?", id).Update("position", 0).Error; err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	var err error
	if from < to {
		err = tx.shiftRoles(ctx, from+1, to, -1, now)
	} else {
		err = tx.shiftRoles(ctx, to, from-1, +1, now)
	}
	if err != nil {
		return model.Role{}, err
	}
	err = db.Model(&roleRow{}).Where("id = ?", id).Updates(map[string]any{
		"position": to, "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	// Lists ordered by role position change when the moved role passes
	// another one they hold: a channel's overwrites and a user's roles. Their
	// versions (ETags) must move with their representation.
	lo, hi := min(from, to), max(from, to)
	passed := db.Model(&roleRow{}).Select("id").Where("position >= ? AND position <= ? AND id <> ?", lo, hi, id)
	var channels []string
	err = db.Model(&overwriteRow{}).Distinct("channel_id").
		Where("target_type = 'role' AND target_id = ?", id).
		Where("channel_id IN (?)", db.Model(&overwriteRow{}).Select("channel_id").
			Where("target_type = 'role' AND target_id IN (?)", passed)).
		Pluck("channel_id", &channels).Error
	if err == nil {
		err = tx.bumpOverwriteLists(ctx, channels)
	}
	if err == nil {
		err = db.Model(&userRow{}).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id = ?", id)).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id IN (?)", passed)).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return model.Role{}, fmt.Errorf("move role: %w", err)
	}
	return tx.GetRole(ctx, id)
}

// DeleteRole deletes a role, takes it from every user and overwrite, and
// moves the roles above it down one. It returns the users who had it.
func (tx *Tx) DeleteRole(ctx context.Context, r model.Role, now time.Time) ([]string, error) {
	db := tx.with(ctx)
	holders := []string{}
	if err := db.Model(&userRoleRow{}).Where("role_id = ?", r.ID).Order("user_id").Pluck("user_id", &holders).Error; err != nil {
		return nil, fmt.Errorf("delete role: %w", err)
	}
	if len(holders) > 0 {
		// The users' representation (their role list) changes.
		err := db.Model(&userRow{}).Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id = ?", r.ID)).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
		if err != nil {
			return nil, fmt.Errorf("delete role: %w", err)
		}
	}
	if err := tx.deleteOverwritesOf(ctx, model.TargetRole, r.ID); err != nil {
		return nil, err
	}
	// user_roles rows go with the role (ON DELETE CASCADE).
	if err := db.Where("id = ?", r.ID).Delete(&roleRow{}).Error; err != nil {
		return nil, fmt.Errorf("delete role: %w", err)
	}
	if err := tx.shiftRoles(ctx, r.Position+1, 1<<30, -1, now); err != nil {
		return nil, err
	}
	return holders, nil
}

// holderAtOrAbove is the condition on a user (row of users) who holds a
// role (the first parameter), is not a given user (the second), and is the
// owner or holds a role at a position (the third) or above.
const holderAtOrAbove = "id IN (SELECT user_id FROM user_roles WHERE role_id = ?) AND id <> ? AND " +
	"(is_owner OR EXISTS (SELECT 1 FROM user_roles ur JOIN roles r ON r.id = ur.role_id WHERE ur.user_id = users.id AND r.position >= ?))"

// RoleHolderAtOrAbove finds a holder of role roleID, other than exceptUserID,
// who is the owner or holds a role at position top or above: one whom a
// caller of that top position may not take the role from. The owner is
// named first. found is false when there is none.
func (tx *Tx) RoleHolderAtOrAbove(ctx context.Context, roleID, exceptUserID string, top int) (u model.User, found bool, err error) {
	var rows []userRow
	err = tx.with(ctx).Model(&userRow{}).Select("id", "username", "is_owner").
		Where(holderAtOrAbove, roleID, exceptUserID, top).
		Order("is_owner DESC").Order("id").Limit(1).Find(&rows).Error
	if err != nil {
		return model.User{}, false, fmt.Errorf("read role holders: %w", err)
	}
	if len(rows) == 0 {
		return model.User{}, false, nil
	}
	return model.User{ID: rows[0].ID, Username: rows[0].Username, IsOwner: rows[0].IsOwner}, true, nil
}

// SetRolePositions moves roles to new positions at once (the positions of
// all roles after it must be 1..N, each once), in two steps like
// shiftRoles. The lists ordered by role position that hold a moved role
// move their versions: the overwrite lists with an overwrite of one, and
// the users holding one among other roles.
func (tx *Tx) SetRolePositions(ctx context.Context, to map[string]int, now time.Time) error {
	if len(to) == 0 {
		return nil
	}
	db := tx.with(ctx)
	// Each role is parked at its negated position, so the unique index on
	// position holds throughout, by one statement of constant text (one
	// prepared statement however many roles move; a statement naming them
	// all would take a place in the statement cache per call).
	ids := make([]string, 0, len(to))
	for id, p := range to {
		ids = append(ids, id)
		if err := db.Model(&roleRow{}).Where("id = ?", id).Update("position", -p).Error; err != nil {
			return fmt.Errorf("move roles: %w", err)
		}
	}
	err := db.Model(&roleRow{}).Where("position < 0").
		Updates(map[string]any{"position": gorm.Expr("-position"), "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return fmt.Errorf("move roles: %w", err)
	}
	var channels []string
	err = db.Model(&overwriteRow{}).Distinct("channel_id").Where("target_type = 'role' AND target_id IN ?", ids).
		Pluck("channel_id", &channels).Error
	if err == nil {
		err = tx.bumpOverwriteLists(ctx, channels)
	}
	if err == nil {
		err = db.Model(&userRow{}).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Where("role_id IN ?", ids)).
			Where("id IN (?)", db.Model(&userRoleRow{}).Select("user_id").Group("user_id").Having("COUNT(*) > 1")).
			Updates(map[string]any{"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return fmt.Errorf("move roles: %w", err)
	}
	return nil
}

// shiftRoles moves the roles at positions lo..hi by delta in two steps
// (negate, then renumber) so the unique index on position holds after every
// single-row update, on SQLite and PostgreSQL alike.
func (tx *Tx) shiftRoles(ctx context.Context, lo, hi, delta int, now time.Time) error {
	if lo > hi {
		return nil
	}
	db := tx.with(ctx)
	err := db.Model(&roleRow{}).Where("position >= ? AND position <= ?", lo, hi).
		Update("position", gorm.Expr("-(position + ?)", delta)).Error
	if err == nil {
		err = db.Model(&roleRow{}).Where("position < 0").
			Updates(map[string]any{"position": gorm.Expr("-position"), "version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	}
	if err != nil {
		return fmt.Errorf("shift roles: %w", err)
	}
	return nil
}

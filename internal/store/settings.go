package store

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

type settingsRow struct {
	ID                 int64 `gorm:"primaryKey"`
	GlobalPermissions  int64
	GlobalVersion      int64
	AuthVersion        int64 // for instances of earlier versions (changelog.go)
	CredentialsVersion int64
	CreatedAt          micros `gorm:"autoCreateTime:false"`
	UpdatedAt          micros `gorm:"autoUpdateTime:false"`
}

func (settingsRow) TableName() string { return "settings" }

// EnsureSettings creates the settings row of a fresh store.
func (tx *Tx) EnsureSettings(ctx context.Context, global permissions.Set) error {
	now := microsOf(model.Now())
	row := settingsRow{ID: 1, GlobalPermissions: int64(global), GlobalVersion: 1, AuthVersion: 1, CredentialsVersion: 1,
		CreatedAt: now, UpdatedAt: now}
	if err := tx.with(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return fmt.Errorf("create settings: %w", err)
	}
	return nil
}

// SetGlobal replaces the global permissions.
func (tx *Tx) SetGlobal(ctx context.Context, global permissions.Set) error {
	err := tx.with(ctx).Model(&settingsRow{}).Where("id = 1").Updates(map[string]any{
		"global_permissions": int64(global), "global_version": gorm.Expr("global_version + 1"),
		"updated_at": microsOf(model.Now())}).Error
	if err != nil {
		return fmt.Errorf("set global permissions: %w", err)
	}
	return nil
}

// deploymentKey reads one of the deployment's secret keys.
func (q queries) deploymentKey(ctx context.Context, name string) ([]byte, error) {
	var row struct{ KeyHex string }
	if err := q.with(ctx).Table("deployment_keys").Select("key_hex").Where("name = ?", name).Take(&row).Error; err != nil {
		return nil, fmt.Errorf("read the %s key: %w", name, err)
	}
	return hex.DecodeString(row.KeyHex)
}

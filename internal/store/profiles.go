package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

type profileRow struct {
	UserID    string `gorm:"primaryKey"`
	Links     string
	Version   int64
	UpdatedAt micros `gorm:"autoUpdateTime:false"`
}

func (profileRow) TableName() string { return "profiles" }

// PutProfile replaces a user's links and returns the new version. The row
// stays when the links are emptied, so versions never repeat.
func (tx *Tx) PutProfile(ctx context.Context, p model.ProfileLinks, now time.Time) (int64, error) {
	db := tx.with(ctx)
	if p.Links == nil {
		p.Links = map[string]string{}
	}
	links, err := json.Marshal(p.Links)
	if err != nil {
		return 0, fmt.Errorf("encode links: %w", err)
	}
	row := profileRow{UserID: p.UserID, Links: string(links), Version: p.Version + 1, UpdatedAt: microsOf(now)}
	err = db.Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "user_id"}},
		DoUpdates: clause.AssignmentColumns([]string{"links", "version", "updated_at"}),
	}).Create(&row).Error
	if err != nil {
		return 0, fmt.Errorf("put profile: %w", err)
	}
	return row.Version, nil
}

// GetProfile returns a user's links (empty, version 0, when they have none).
func (q queries) GetProfile(ctx context.Context, userID string) (model.ProfileLinks, error) {
	var r profileRow
	err := q.with(ctx).Where("user_id = ?", userID).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return model.ProfileLinks{UserID: userID, Links: map[string]string{}}, nil
	}
	if err != nil {
		return model.ProfileLinks{}, fmt.Errorf("read profile: %w", err)
	}
	p := model.ProfileLinks{UserID: userID, Version: r.Version, Links: map[string]string{}}
	if err := jsonUnmarshal(r.Links, &p.Links); err != nil {
		return model.ProfileLinks{}, fmt.Errorf("decode profile links: %w", err)
	}
	return p, nil
}

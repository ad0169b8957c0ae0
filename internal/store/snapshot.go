package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Snapshot is the authorization state: global permissions, every role and
// every overwrite, as of AuthVersion.
type Snapshot struct {
	AuthVersion int64
	Global      permissions.Set
	Roles       []model.Role
	Overwrites  []model.Overwrite
}

// Snapshot reads the authorization state in one consistent view.
func (q queries) Snapshot(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	err := q.with(ctx).Transaction(func(db *gorm.DB) error {
		in, err := q.inTransaction(db, nil)
		if err != nil {
			return err
		}
		st, err := in.Settings(ctx)
		if err != nil {
			return err
		}
		snap.AuthVersion, snap.Global = st.AuthVersion, st.Global
		if snap.Roles, err = in.ListRoles(ctx); err != nil {
			return err
		}
		var rows []overwriteRow
		if err := db.Find(&rows).Error; err != nil {
			return fmt.Errorf("read overwrites: %w", err)
		}
		snap.Overwrites = make([]model.Overwrite, len(rows))
		for i, r := range rows {
			snap.Overwrites[i] = r.model()
		}
		return nil
	}, q.dialect.snapshotTx())
	if err != nil {
		return Snapshot{}, fmt.Errorf("read snapshot: %w", err)
	}
	return snap, nil
}

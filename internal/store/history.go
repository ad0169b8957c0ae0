package store

import (
	"context"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/model"
)

// EventsAfterInstant returns the events of the given types created after
// at, up to seq upTo, newest first: what a history answer undoes from the
// state as of upTo. It reads the range of the created_at index past at.
func (s *Store) EventsAfterInstant(ctx context.Context, at time.Time, upTo int64, types []string) ([]model.Event, error) {
	var rows []eventRow
	if err := s.queries.with(ctx).Where("created_at > ? AND seq <= ? AND type IN ?", microsOf(at), upTo, types).
		Order("seq DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
	}
	return eventModels(rows), nil
}

// OldestEventTime is when the oldest event kept was written; ok is false
// when there is none.
func (s *Store) OldestEventTime(ctx context.Context) (t time.Time, ok bool, err error) {
	var m *micros
	if err := s.queries.with(ctx).Model(&eventRow{}).Select("MIN(created_at)").Scan(&m).Error; err != nil {
		return time.Time{}, false, fmt.Errorf("read the oldest event: %w", err)
	}
	if m == nil {
		return time.Time{}, false, nil
	}
	return m.time(), true, nil
}

// RoleHolderIDs lists the users who hold a role (a deleted role's event
// names them, so that history can give it back).
func (tx *Tx) RoleHolderIDs(ctx context.Context, roleID string) ([]string, error) {
	var ids []string
	if err := tx.with(ctx).Model(&userRoleRow{}).Where("role_id = ?", roleID).Order("user_id").Pluck("user_id", &ids).Error; err != nil {
		return nil, fmt.Errorf("list the holders of role %q: %w", roleID, err)
	}
	return ids, nil
}

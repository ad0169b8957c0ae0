package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/model"
)

// EventFilter selects audit-log entries.
type EventFilter struct {
	ActorID    string
	Type       string // exact type
	TypePrefix string // e.g. "role." for "role.*"
	Subject    string
	Since      *time.Time // inclusive
	Until      *time.Time // exclusive
	BeforeSeq  int64      // keyset: only seq < BeforeSeq (0 = no bound)
}

// ListEvents returns up to limit events, newest first, and whether more follow.
func (q queries) ListEvents(ctx context.Context, f EventFilter, limit int) ([]model.Event, bool, error) {
	db := q.with(ctx).Model(&eventRow{})
	if f.ActorID != "" {
		db = db.Where("actor_id = ?", f.ActorID)
	}
	if f.Type != "" {
		db = db.Where("type = ?", f.Type)
	}
	if f.TypePrefix != "" {
		db = db.Where("type LIKE ? "+q.dialect.likeEscape(), escapeLike(f.TypePrefix)+"%")
	}
	if f.Subject != "" {
		db = db.Where("subject = ?", f.Subject)
	}
	if f.Since != nil {
		db = db.Where("created_at >= ?", microsOf(*f.Since))
	}
	if f.Until != nil {
		db = db.Where("created_at < ?", microsOf(*f.Until))
	}
	if f.BeforeSeq > 0 {
		db = db.Where("seq < ?", f.BeforeSeq)
	}
	var rows []eventRow
	if err := db.Order("seq DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Event, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// EventsAfter returns up to limit events with seq > after, oldest first.
func (q queries) EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error) {
	var rows []eventRow
	if err := q.with(ctx).Where("seq > ?", after).Order("seq").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	out := make([]model.Event, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// LastEventSeq is the newest event's seq (0 when there are none).
func (q queries) LastEventSeq(ctx context.Context) (int64, error) {
	var seq *int64
	if err := q.with(ctx).Model(&eventRow{}).Select("MAX(seq)").Scan(&seq).Error; err != nil {
		return 0, fmt.Errorf("read last event: %w", err)
	}
	if seq == nil {
		return 0, nil
	}
	return *seq, nil
}

// PurgeEvents deletes events created before the given time and reports how many.
func (s *Store) PurgeEvents(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	_, err := s.Write(ctx, func(tx *Tx) error {
		res := tx.with(ctx).Where("created_at < ?", microsOf(before)).Delete(&eventRow{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	return n, nil
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// ExistingChannels returns which of the given channel IDs exist.
func (q queries) ExistingChannels(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var found []string
	if err := q.with(ctx).Model(&channelRow{}).Where("id IN ?", ids).Pluck("id", &found).Error; err != nil {
		return nil, fmt.Errorf("find channels: %w", err)
	}
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

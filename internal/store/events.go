package store

import (
	"context"
	"errors"
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

// ListEvents returns up to limit events that pass the filter, newest
// first, and the seq to go on before (0 when no more follow).
//
// A page reads at most maxEventsRead events, whatever the filters pass:
// one index range in seq order (a subject's, else an actor's, else an
// exact type's, else the whole log's), its other filters checked on each
// event read, so that a filter few recent events pass (a type prefix, a
// time range) does not read the log to its start. A page that reaches the
// bound ends short, even empty, with the seq of the last event it read.
func (q queries) ListEvents(ctx context.Context, f EventFilter, limit int) ([]model.Event, int64, error) {
	drive := q.with(ctx).Model(&eventRow{})
	var rest []string
	var args []any
	check := func(cond string, arg any) {
		rest = append(rest, cond)
		args = append(args, arg)
	}
	driven := false
	by := func(col, v string) {
		switch {
		case v == "":
		case !driven:
			drive, driven = drive.Where(col+" = ?", v), true
		default:
			check(col+" = ?", v)
		}
	}
	by("subject", f.Subject)
	by("actor_id", f.ActorID)
	by("type", f.Type)
	if f.TypePrefix != "" {
		check("type LIKE ? "+q.dialect.likeEscape(), escapeLike(f.TypePrefix)+"%")
	}
	if f.Since != nil {
		check("created_at >= ?", microsOf(*f.Since))
	}
	if f.Until != nil {
		check("created_at < ?", microsOf(*f.Until))
	}
	if f.BeforeSeq > 0 {
		drive = drive.Where("seq < ?", f.BeforeSeq)
	}
	drive = drive.Order("seq DESC").Limit(maxEventsRead)
	passes := "1 = 1"
	if len(rest) > 0 {
		passes = strings.Join(rest, " AND ")
	}
	rows, err := q.with(ctx).Table("(?) AS e", drive).Select("e.*, ("+passes+") AS passes", args...).Order("e.seq DESC").Rows()
	if err != nil {
		return nil, 0, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []model.Event
	var last int64
	read := 0
	for rows.Next() {
		var r eventListRow
		if err := q.db.ScanRows(rows, &r); err != nil {
			return nil, 0, fmt.Errorf("list events: %w", err)
		}
		read++
		last = r.Event.Seq
		if !r.Passes {
			continue
		}
		if len(out) == limit { // one more than the page: it goes on
			return out, out[limit-1].Seq, nil
		}
		out = append(out, r.Event.model())
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, 0, fmt.Errorf("list events: %w", err)
	}
	if read == maxEventsRead {
		return out, last, nil
	}
	return out, 0, nil
}

// eventListRow is an event a page read, and whether it passes the filters.
type eventListRow struct {
	Event  eventRow `gorm:"embedded"`
	Passes bool
}

// maxEventsRead bounds the events a page of the audit log reads.
const maxEventsRead = 1000

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

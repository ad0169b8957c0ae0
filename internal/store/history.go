package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/history"
)

// EventsAfterInstant returns the events of the given history.Types
// created after at, up to seq upTo, newest first: what a history answer
// undoes from the state as of upTo. The first seq after at is found on the
// created_at index, then the primary key's range from it is read (a scan
// down the keys from upTo, filtered on created_at, would read the whole
// log), by a prepared statement scanned by hand: thousands of rows, whose
// data history decodes itself.
func (s *Store) EventsAfterInstant(ctx context.Context, at time.Time, upTo int64) ([]history.Event, error) {
	var from *int64
	if err := s.queries.with(ctx).Model(&eventRow{}).Select("MIN(seq)").Where("created_at > ?", microsOf(at)).Scan(&from).Error; err != nil {
		return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
	}
	if from == nil {
		return nil, nil
	}
	var out []history.Event
	err := scanAll(ctx, s.queries, historyEvents, []any{*from, upTo, microsOf(at)}, func(r *sql.Rows) error {
		var ev history.Event
		var created micros
		if err := r.Scan(&ev.Seq, &ev.Type, &ev.Subject, &ev.Data, &created); err != nil {
			return err
		}
		ev.CreatedAt = created.time()
		out = append(out, ev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
	}
	return out, nil
}

// historyEvents reads the events of history.Types in a range of seqs
// after an instant, newest first.
var historyEvents = func() string {
	types := make([]string, len(history.Types))
	for i, t := range history.Types {
		types[i] = "'" + t + "'" // constants of history's: no quote in them
	}
	return "SELECT seq, type, subject, data, created_at FROM events WHERE seq >= ? AND seq <= ? AND created_at > ? AND type IN (" +
		strings.Join(types, ", ") + ") ORDER BY seq DESC"
}()

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

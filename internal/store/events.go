package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
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
// A page reads one index range in seq order: a subject's, else an
// actor's, else an exact type's, else the whole log's. The other filters
// (a type prefix, a time range, the other exact ones) are checked on each
// event read, in rounds of limit+1 events, then twice, four times as many
// … while the page is unfinished, and on at most maxEventsRead events a
// page, so that a filter few recent events pass does not read the
// log to its start: such a page may end short, even empty, with the seq of
// the last event it checked.
func (q queries) ListEvents(ctx context.Context, f EventFilter, limit int) ([]model.Event, int64, error) {
	var driver, value string
	var rest []string
	var args []any
	for _, c := range []struct{ col, v string }{{"subject", f.Subject}, {"actor_id", f.ActorID}, {"type", f.Type}} {
		switch {
		case c.v == "":
		case driver == "":
			driver, value = c.col, c.v
		default:
			rest, args = append(rest, c.col+" = ?"), append(args, c.v)
		}
	}
	if f.TypePrefix != "" {
		rest, args = append(rest, "type LIKE ? "+q.dialect().LikeEscape()), append(args, escapeLike(f.TypePrefix)+"%")
	}
	if f.Since != nil {
		rest, args = append(rest, "created_at >= ?"), append(args, microsOf(*f.Since))
	}
	if f.Until != nil {
		rest, args = append(rest, "created_at < ?"), append(args, microsOf(*f.Until))
	}
	// Never NULL: a nullable column compared (actor_id) may be; CASE makes
	// that 0.
	passes := gorm.Expr("1")
	if len(rest) > 0 {
		passes = gorm.Expr("CASE WHEN "+strings.Join(rest, " AND ")+" THEN 1 ELSE 0 END", args...)
	}
	rows, next, err := filteredPage(limit, maxEventsRead, f.BeforeSeq, func(r eventRow) int64 { return r.Seq },
		func(before int64, n int) ([]eventRow, []bool, error) {
			span := q.with(ctx).Model(&eventRow{})
			if driver != "" {
				span = span.Where(driver+" = ?", value)
			}
			if before > 0 {
				span = span.Where("seq < ?", before)
			}
			var read []eventListRow
			if err := q.with(ctx).Table("(?) AS e", span.Order("seq DESC").Limit(n)).
				Select("e.*, ? AS passes", passes).Order("e.seq DESC").Find(&read).Error; err != nil {
				return nil, nil, err
			}
			rows, pass := make([]eventRow, len(read)), make([]bool, len(read))
			for i, r := range read {
				rows[i], pass[i] = r.Event, r.Passes
			}
			return rows, pass, nil
		})
	if err != nil {
		return nil, 0, fmt.Errorf("list events: %w", err)
	}
	return eventModels(rows), next, nil
}

// eventListRow is an event a page read, and whether it passes the filters
// its index does not serve.
type eventListRow struct {
	Event  eventRow `gorm:"embedded"`
	Passes bool
}

// maxEventsRead bounds the events a page of the audit log checks against
// the filters its index does not serve.
const maxEventsRead = 1000

func eventModels(rows []eventRow) []model.Event {
	out := make([]model.Event, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out
}

// EventsAfter returns up to limit events with seq > after, oldest first.
func (q queries) EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error) {
	var rows []eventRow
	if err := q.with(ctx).Where("seq > ?", after).Order("seq").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return eventModels(rows), nil
}

// EventsAfterInstant returns the events of history.Types created after at,
// up to seq upTo, newest first: what a history answer undoes from the state
// as of upTo. The first seq after at is found on the created_at index, then
// the primary key's range from it is read (a scan down the keys from upTo,
// filtered on created_at, would read the whole log), scanned by hand:
// thousands of rows, whose data history decodes itself.
func (s *Store) EventsAfterInstant(ctx context.Context, at time.Time, upTo int64) ([]history.Event, error) {
	rows, err := s.queries.query(ctx, historyEvents, at.UnixMicro(), upTo, at.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
	}
	defer rows.Close()
	var out []history.Event
	for rows.Next() {
		var ev history.Event
		var created int64
		if err := rows.Scan(&ev.Seq, &ev.Type, &ev.Subject, &ev.Data, &created); err != nil {
			return nil, fmt.Errorf("read events after %s: %w", at.Format(time.RFC3339Nano), err)
		}
		ev.CreatedAt = time.UnixMicro(created).UTC()
		out = append(out, ev)
	}
	return out, rows.Err()
}

// historyEvents reads the events of history.Types in the range of seqs
// from the first after an instant, newest first.
var historyEvents = func() string {
	types := make([]string, len(history.Types))
	for i, t := range history.Types {
		types[i] = "'" + t + "'" // constants of history's: no quote in them
	}
	return "SELECT seq, type, subject, data, created_at FROM events " +
		"WHERE seq >= (SELECT MIN(seq) FROM events WHERE created_at > ?) AND seq <= ? AND created_at > ? " +
		"AND type IN (" + strings.Join(types, ", ") + ") ORDER BY seq DESC"
}()

// eventsBySeqSQL reads the events of a list of seqs in one statement,
// prepared once whatever their number: PostgreSQL's is an array,
// SQLite's a JSON array.
var eventsBySeqSQL = sqldb.ByDialect(func(d sqldb.Dialect) string {
	const read = "SELECT seq, type, actor_id, subject, data, reason, created_at FROM events WHERE seq "
	if d.Name() == "postgres" {
		return read + "= ANY(?)"
	}
	return read + "IN (SELECT value FROM json_each(?))"
})

// eventsBySeq reads the events with these seqs (those still kept): the
// webhooks' deliveries' (webhookq.Queue.Claim), a few hundred at a time
// under a stream of deliveries, scanned by hand: GORM's scan by
// reflection cost more than the statement.
func (q queries) eventsBySeq(ctx context.Context, seqs []int64) (map[int64]model.Event, error) {
	var arg any = seqs
	if q.dialect().Name() != "postgres" {
		b := make([]byte, 0, 8*len(seqs)+2)
		b = append(b, '[')
		for i, s := range seqs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, s, 10)
		}
		arg = string(append(b, ']'))
	}
	rows, err := q.query(ctx, eventsBySeqSQL[q.dialect().Name()], arg)
	if err != nil {
		return nil, fmt.Errorf("read the deliveries' events: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]model.Event, len(seqs))
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.Seq, &r.Type, &r.ActorID, &r.Subject, &r.Data, &r.Reason, &r.CreatedAt); err != nil {
			return nil, fmt.Errorf("read the deliveries' events: %w", err)
		}
		out[r.Seq] = r.model()
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		// An event left out would read as purged, and its delivery fail.
		return nil, fmt.Errorf("read the deliveries' events: %w", err)
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

type eventRow struct {
	Seq       int64 `gorm:"primaryKey;autoIncrement"`
	Type      string
	ActorID   *string
	Subject   string
	Data      string
	Reason    *string
	CreatedAt micros `gorm:"autoCreateTime:false"`
}

func (eventRow) TableName() string { return "events" }

func (r eventRow) model() model.Event {
	ev := model.Event{Seq: r.Seq, Type: r.Type, ActorID: r.ActorID, Subject: r.Subject,
		Reason: r.Reason, CreatedAt: r.CreatedAt.time(), Data: map[string]any{}}
	_ = json.Unmarshal([]byte(r.Data), &ev.Data) // written by us as a JSON object
	return ev
}

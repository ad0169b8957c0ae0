package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

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
		rest, args = append(rest, "type LIKE ? "+q.dialect.likeEscape()), append(args, escapeLike(f.TypePrefix)+"%")
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

// AppendEvent records an event of the request. Its seq is assigned when
// the transaction writes the events of all its requests, after the last
// (insertEvents): Write returns them with it.
func (tx *Tx) AppendEvent(_ context.Context, ev model.Event) error {
	if ev.Data == nil {
		ev.Data = map[string]any{}
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return fmt.Errorf("encode event data: %w", err)
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = model.Now()
	}
	tx.events = append(tx.events, ev)
	tx.eventData = append(tx.eventData, string(data))
	return nil
}

// eventChunk bounds the rows of one events INSERT: a transaction's events
// (one or more per request) go in statements of at most this many rows, so
// that at most eventChunk texts are prepared (one per number of rows), and
// a few thousand events (an import, a bulk change) stay far within
// SQLite's and PostgreSQL's bounds on parameters. A group commit of
// creates (a request, an event) fits one statement.
const eventChunk = 64

// eventsInsert holds the INSERT of n events (index n), RETURNING their
// seqs: built once.
var eventsInsert = func() [eventChunk + 1]string {
	var out [eventChunk + 1]string
	for n := 1; n <= eventChunk; n++ {
		out[n] = "INSERT INTO events (type, actor_id, subject, data, reason, created_at) VALUES " +
			strings.Repeat("(?, ?, ?, ?, ?, ?), ", n-1) + "(?, ?, ?, ?, ?, ?) RETURNING seq"
	}
	return out
}()

// insertEvents writes the events of the requests that succeeded, in their
// order, and assigns their seqs; it returns the last seq (0 when there are
// none). The write lock keeps other transactions from taking seqs
// meanwhile, so the rows are numbered in the order of the statements'
// values; RETURNING is not promised to list them in that order, so the seqs
// are sorted.
//
// It is the other hot write (queries.go): every write appends its events,
// and GORM's builder reflects over each row.
func (q queries) insertEvents(ctx context.Context, results []writeResult) (int64, error) {
	n := 0
	for _, r := range results {
		n += len(r.events)
	}
	if n == 0 {
		return 0, nil
	}
	seqs := make([]int64, 0, n)
	args := make([]any, 0, 6*min(n, eventChunk))
	flush := func() error {
		rows, err := q.query(ctx, eventsInsert[len(args)/6], args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		args = args[:0]
		return rows.Err()
	}
	for _, r := range results {
		for k, ev := range r.events {
			args = append(args, ev.Type, ev.ActorID, ev.Subject, r.eventData[k], ev.Reason, int64(microsOf(ev.CreatedAt)))
			if len(args) == 6*eventChunk {
				if err := flush(); err != nil {
					return 0, fmt.Errorf("append events: %w", err)
				}
			}
		}
	}
	if len(args) > 0 {
		if err := flush(); err != nil {
			return 0, fmt.Errorf("append events: %w", err)
		}
	}
	if len(seqs) != n {
		return 0, fmt.Errorf("append events: %d seqs returned for %d events", len(seqs), n)
	}
	slices.Sort(seqs)
	i := 0
	for _, r := range results {
		for k := range r.events {
			r.events[k].Seq = seqs[i]
			i++
		}
	}
	return seqs[n-1], nil
}

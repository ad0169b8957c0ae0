package sqldb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/guildhall/guildhall/internal/model"
)

// The audit events are numbered at commit: a request appends its events to
// its Tx, and the transaction writes the events of all its requests after
// the last one ran, numbered in commit order (the write lock), then on
// PostgreSQL tells the listeners of the schema's event channel (Write).

// AppendEvent records an event of the request. Its seq is assigned when
// the transaction writes the events of all its requests, after the last
// (insertEvents): Write returns them with it.
func (tx *Tx) AppendEvent(ev model.Event) error {
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

// EventChunk bounds the rows of one events INSERT: a transaction's events
// (one or more per request) go in statements of at most this many rows, so
// that at most EventChunk texts are prepared (one per number of rows), and
// a few thousand events (an import, a bulk change) stay far within
// SQLite's and PostgreSQL's bounds on parameters. A group commit of
// creates (a request, an event) fits one statement.
const EventChunk = 64

// eventsInsert holds the INSERT of n events (index n), RETURNING their
// seqs: built once.
var eventsInsert = func() [EventChunk + 1]string {
	var out [EventChunk + 1]string
	for n := 1; n <= EventChunk; n++ {
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
// are sorted. created_at is in microseconds since the Unix epoch, as the
// store keeps its timestamps.
//
// It is a hot write (internal/store's queries.go): every write appends its
// events, and GORM's builder reflects over each row.
func (q Queries) insertEvents(ctx context.Context, results []writeResult) (int64, error) {
	n := 0
	for _, r := range results {
		n += len(r.events)
	}
	if n == 0 {
		return 0, nil
	}
	seqs := make([]int64, 0, n)
	args := make([]any, 0, 6*min(n, EventChunk))
	flush := func() error {
		rows, err := q.Query(ctx, eventsInsert[len(args)/6], args...)
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
			args = append(args, ev.Type, ev.ActorID, ev.Subject, r.eventData[k], ev.Reason, ev.CreatedAt.UnixMicro())
			if len(args) == 6*EventChunk {
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

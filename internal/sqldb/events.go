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

// EventChunk bounds the rows of an events INSERT with a parameter per
// value: a transaction's events (one or more per request) up to this many
// go in one such statement, so that at most EventChunk texts are prepared
// (one per number of rows); a group commit of creates (a request, an
// event each) fits one. More (an import, a reorder, a bulk change of
// members) go as one JSON list in one statement (insertManyEvents).
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
	if n > EventChunk {
		return q.insertManyEvents(ctx, results, n)
	}
	// A few rows held go in the same statement, before the events
	// (held.go): a create committed alone makes one round trip for both.
	text, args := q.held.withEvents(q.dialect.Name() == "postgres", n)
	if text == "" {
		text = eventsInsert[n]
	}
	for _, r := range results {
		for k, ev := range r.events {
			args = append(args, ev.Type, ev.ActorID, ev.Subject, r.eventData[k], ev.Reason, ev.CreatedAt.UnixMicro())
		}
	}
	seqs, err := q.insertedSeqs(ctx, n, text, args...)
	if err != nil {
		if text != eventsInsert[n] {
			q.held.failed(err)
		}
		return 0, err
	}
	return numberEvents(results, seqs)
}

// eventRecords is the subquery of insertManyEvents' list.
var eventRecords = []JSONColumn{{Name: "type", Type: "text"}, {Name: "actor_id", Type: "text"},
	{Name: "subject", Type: "text"}, {Name: "data", Type: "text"}, {Name: "reason", Type: "text"},
	{Name: "created_at", Type: "bigint"}}

// eventsInsertMany writes any number of events, given as one JSON array,
// in one statement of one constant text.
var eventsInsertMany = ByDialect(func(d Dialect) string {
	return "INSERT INTO events (type, actor_id, subject, data, reason, created_at) " +
		"SELECT type, actor_id, subject, data, reason, created_at FROM (" + d.JSONRecords(eventRecords...) + ") AS x RETURNING seq"
})

// insertManyEvents is insertEvents for a transaction of more than
// EventChunk events (an import, a reorder, a bulk change of members): one
// statement, where rows of parameters would take a round trip every
// EventChunk events.
func (q Queries) insertManyEvents(ctx context.Context, results []writeResult, n int) (int64, error) {
	type record struct {
		Type      string  `json:"type"`
		ActorID   *string `json:"actor_id"`
		Subject   string  `json:"subject"`
		Data      string  `json:"data"`
		Reason    *string `json:"reason"`
		CreatedAt int64   `json:"created_at"`
	}
	list := make([]record, 0, n)
	for _, r := range results {
		for k, ev := range r.events {
			list = append(list, record{ev.Type, ev.ActorID, ev.Subject, r.eventData[k], ev.Reason, ev.CreatedAt.UnixMicro()})
		}
	}
	body, err := json.Marshal(list)
	if err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	seqs, err := q.insertedSeqs(ctx, n, eventsInsertMany[q.dialect.Name()], string(body))
	if err != nil {
		return 0, err
	}
	return numberEvents(results, seqs)
}

// insertedSeqs runs an INSERT of n events and returns their seqs.
func (q Queries) insertedSeqs(ctx context.Context, n int, sql string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	defer rows.Close()
	seqs := make([]int64, 0, n)
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	return seqs, nil
}

// numberEvents gives the events of results the seqs their statement
// returned, in their order.
func numberEvents(results []writeResult, seqs []int64) (int64, error) {
	n := 0
	for _, r := range results {
		n += len(r.events)
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

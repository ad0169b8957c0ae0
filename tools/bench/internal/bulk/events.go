package bulk

import (
	"context"
	"fmt"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// EventsPerTransaction is how many events one write transaction of the
// store appends (on PostgreSQL they go as one statement).
const EventsPerTransaction = 5000

// Events appends n copies of ev (each created now) to the audit log of the
// store in dataDir (SQLite), or at databaseURL when it is a postgres://
// URL, which no server may be using, through the product's store
// (Store.Write, Tx.AppendEvent), and returns the newest event's seq
// afterwards: how many events the log holds, as nothing is purged and no
// write rolled back. It is how a history benchmark makes a long log in
// seconds, where the API would write it one request at a time.
func Events(ctx context.Context, dataDir, databaseURL string, n int, ev model.Event) (int64, error) {
	s, err := store.Open(ctx, store.Options{DataDir: dataDir, DatabaseURL: databaseURL})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	for n > 0 {
		k := min(n, EventsPerTransaction)
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			for range k {
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("bulk events: %w", err)
		}
		n -= k
	}
	last, err := s.LastEventSeq(ctx)
	if err != nil {
		return 0, fmt.Errorf("bulk events: %w", err)
	}
	return last, nil
}

// HistoryEvents counts the events a history answer as of at undoes (the
// permission-relevant events after at, Store.EventsAfterInstant) in the
// store in dataDir or at databaseURL, which no server may be using.
func HistoryEvents(ctx context.Context, dataDir, databaseURL string, at time.Time) (int, error) {
	s, err := store.Open(ctx, store.Options{DataDir: dataDir, DatabaseURL: databaseURL})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	events, err := s.EventsAfterInstant(ctx, at, 1<<62)
	if err != nil {
		return 0, fmt.Errorf("bulk history events: %w", err)
	}
	return len(events), nil
}

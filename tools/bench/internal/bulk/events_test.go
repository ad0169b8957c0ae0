package bulk

import (
	"context"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

func TestEvents(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		opts := store.Options{DataDir: t.TempDir()}
		if kind == testenv.Postgres {
			opts = store.Options{DatabaseURL: testenv.FreshPostgres(t)}
		}
		filler := model.Event{Type: "user.token.created", Subject: "user:u1", Data: map[string]any{"token_id": "t", "name": "filler"}}
		// Two transactions, the second short.
		n := EventsPerTransaction + 7
		last, err := Events(ctx, opts.DataDir, opts.DatabaseURL, n, filler)
		if err != nil || last != int64(n) {
			t.Fatalf("Events = %d, %v; want the newest seq %d", last, err, n)
		}
		time.Sleep(2 * time.Millisecond)
		at := time.Now().UTC()
		time.Sleep(2 * time.Millisecond)
		if got, err := HistoryEvents(ctx, opts.DataDir, opts.DatabaseURL, at); err != nil || got != 0 {
			t.Fatalf("HistoryEvents with nothing after the instant = %d, %v; want 0", got, err)
		}
		// What a history answer undoes counts; the filler after the
		// instant does not.
		relevant := model.Event{Type: "user.role.assigned", Subject: "user:u1", Data: map[string]any{"role_id": "r1"}}
		if last, err = Events(ctx, opts.DataDir, opts.DatabaseURL, 3, relevant); err != nil || last != int64(n+3) {
			t.Fatalf("Events = %d, %v; want the newest seq %d", last, err, n+3)
		}
		if last, err = Events(ctx, opts.DataDir, opts.DatabaseURL, 5, filler); err != nil || last != int64(n+8) {
			t.Fatalf("Events = %d, %v; want the newest seq %d", last, err, n+8)
		}
		if got, err := HistoryEvents(ctx, opts.DataDir, opts.DatabaseURL, at); err != nil || got != 3 {
			t.Fatalf("HistoryEvents = %d, %v; want the 3 relevant events after the instant", got, err)
		}
		s, err := store.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		evs, err := s.EventsAfter(ctx, 0, 1)
		if err != nil || len(evs) != 1 || evs[0].Type != filler.Type || evs[0].Subject != filler.Subject || evs[0].Data["name"] != "filler" {
			t.Fatalf("the first event: %+v, %v", evs, err)
		}
	})
}

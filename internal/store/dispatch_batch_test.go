package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/store/webhookq"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestADispatchMeetingItsDeliveriesInASharedTransaction: a dispatch whose
// cursor was set back by hand inserts, unchecked, deliveries that exist.
// When it shares its transaction with another write, the unique violation
// sends the batch round again with savepoints: the other write commits,
// the dispatch alone is undone, and its checked second run makes nothing
// twice and moves the cursor on.
func TestADispatchMeetingItsDeliveriesInASharedTransaction(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		q := s.WebhookQueue()
		now := time.Now()
		if _, err := s.Write(ctx, func(tx *store.Tx) error {
			return tx.InsertWebhook(ctx, model.Webhook{ID: "h", URL: "https://example.com/h", Events: []string{"role.*"},
				Enabled: true, CreatorID: "owner", Secret: "whsec_h", CreatedAt: now, UpdatedAt: now})
		}); err != nil {
			t.Fatal(err)
		}
		appendEvent := func(typ, subject string) (model.Event, error) {
			evs, err := s.Write(ctx, func(tx *store.Tx) error {
				return tx.AppendEvent(ctx, model.Event{Type: typ, Subject: subject})
			})
			if err != nil || len(evs) != 1 {
				return model.Event{}, fmt.Errorf("append %s: %v, %d events", typ, err, len(evs))
			}
			return evs[0], nil
		}
		for _, typ := range []string{"role.created", "role.updated"} {
			if _, err := appendEvent(typ, "role:r"); err != nil {
				t.Fatal(err)
			}
		}
		lease := webhookq.Lease{Owner: "maker", Until: now.Add(time.Minute), Max: 10}
		if first, err := q.DispatchLeased(ctx, 100, lease); err != nil || first.Made != 2 {
			t.Fatalf("first dispatch: %+v, %v; want 2 made", first, err)
		}
		if err := s.ExecForTest("UPDATE webhook_dispatch SET seq = 0"); err != nil {
			t.Fatal(err)
		}

		release := holdWriter(t, s)
		before := s.WriterStats()
		type dispatched struct {
			out webhookq.Dispatched
			err error
		}
		type appended struct {
			event model.Event
			err   error
		}
		dispatch, other := make(chan dispatched, 1), make(chan appended, 1)
		go func() {
			out, err := q.DispatchLeased(ctx, 100, lease)
			dispatch <- dispatched{out, err}
		}()
		waitQueued(t, s, 1)
		go func() {
			ev, err := appendEvent("user.created", "user:u")
			other <- appended{ev, err}
		}()
		waitQueued(t, s, 2)
		release()

		d, o := <-dispatch, <-other
		if o.err != nil {
			t.Fatalf("the write beside the dispatch: %v", o.err)
		}
		if d.err != nil || d.out.Made != 0 || len(d.out.Claimed) != 0 {
			t.Fatalf("dispatch behind its deliveries: %+v, %v; want nothing made, no error", d.out, d.err)
		}
		if after := s.WriterStats(); after.Reruns-before.Reruns < 1 {
			t.Fatalf("writer stats %+v after %+v: the shared transaction never ran again with savepoints", after, before)
		}
		var types []string
		if err := s.ScanForTest(&types, "SELECT type FROM events ORDER BY seq"); err != nil ||
			fmt.Sprint(types) != "[role.created role.updated user.created]" {
			t.Fatalf("events %v, %v; want the write beside the dispatch committed after the role events", types, err)
		}
		var deliveries []string
		if err := s.ScanForTest(&deliveries, "SELECT id FROM webhook_deliveries"); err != nil || len(deliveries) != 2 {
			t.Fatalf("deliveries %v, %v; want the 2 made before, no other", deliveries, err)
		}
		// The checked run is a write of its own, after the shared
		// transaction committed the write beside it: it dispatched that too.
		var cursor int64
		if err := s.ScanForTest(&cursor, "SELECT seq FROM webhook_dispatch WHERE id = 1"); err != nil || cursor != o.event.Seq {
			t.Fatalf("cursor at %d, %v; want it at the newest event, %d", cursor, err, o.event.Seq)
		}
	})
}

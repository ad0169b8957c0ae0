package webhookq_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/store/webhookq"
	"github.com/guildhall/guildhall/internal/testenv"
)

func storeOptions(t testing.TB, kind string) store.Options {
	t.Helper()
	if kind == testenv.Postgres {
		return store.Options{DatabaseURL: testenv.FreshPostgres(t)}
	}
	return store.Options{DataDir: t.TempDir()}
}

func openStore(t testing.TB, kind string) *store.Store {
	t.Helper()
	return openStoreAt(t, storeOptions(t, kind))
}

// openStoreAt opens the store o names, closed when the test ends.
func openStoreAt(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// insertWebhook stores a webhook as its management does (the management
// owns the table; the queue only reads it).
func insertWebhook(t testing.TB, s *store.Store, id string, events []string, afterSeq int64, enabled bool) {
	t.Helper()
	ctx, now := context.Background(), time.Now()
	_, err := s.Write(ctx, func(tx *store.Tx) error {
		return tx.InsertWebhook(ctx, model.Webhook{ID: id, URL: "https://example.com/" + id, Events: events,
			Enabled: enabled, CreatorID: "owner", Secret: "whsec_" + id, AfterSeq: afterSeq, CreatedAt: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// appendEvents commits one event per type and returns their seqs.
func appendEvents(t testing.TB, s *store.Store, types ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	evs, err := s.Write(ctx, func(tx *store.Tx) error {
		for i, typ := range types {
			if err := tx.AppendEvent(ctx, model.Event{Type: typ, Subject: fmt.Sprintf("x:%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	return seqs
}

// claimAll claims every due delivery for owner, in pages of n.
func claimAll(t *testing.T, s *store.Store, owner string, n int) []webhookq.ClaimedDelivery {
	t.Helper()
	var out []webhookq.ClaimedDelivery
	for {
		got, err := s.WebhookQueue().Claim(context.Background(), owner, time.Now(), time.Minute, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return out
		}
		out = append(out, got...)
	}
}

func pairs(ds []webhookq.ClaimedDelivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s@%d", d.WebhookID, d.EventSeq))
	}
	slices.Sort(out)
	return out
}

// TestDispatchMakesADeliveryPerMatchingEvent: a dispatch makes one
// delivery per enabled webhook and event its patterns match (a type, or a
// prefix ending in ".*") with a seq above the webhook's after_seq, none for
// a disabled webhook, and never twice; a batch smaller than the events
// says more wait, and the next dispatch goes on from where it stopped.
func TestDispatchMakesADeliveryPerMatchingEvent(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		before := appendEvents(t, s, "role.created")
		insertWebhook(t, s, "roles", []string{"role.*"}, before[0], true)
		insertWebhook(t, s, "users", []string{"user.created", "channel.deleted"}, before[0], true)
		insertWebhook(t, s, "off", []string{"role.*"}, before[0], false)
		seqs := appendEvents(t, s, "role.created", "role.permissions.set", "user.created", "user.updated", "channel.deleted", "rolex.created")
		made, more, err := s.WebhookQueue().Dispatch(ctx, 4)
		if err != nil || made != 3 || !more {
			t.Fatalf("first batch: made %d, more %v, err %v; want 3 (two roles, a user), more", made, more, err)
		}
		made, more, err = s.WebhookQueue().Dispatch(ctx, 4)
		if err != nil || made != 1 || more {
			t.Fatalf("second batch: made %d, more %v, err %v; want 1 (the channel), no more", made, more, err)
		}
		if made, _, err = s.WebhookQueue().Dispatch(ctx, 4); err != nil || made != 0 {
			t.Fatalf("nothing new: made %d, err %v", made, err)
		}
		got := pairs(claimAll(t, s, "i1", 10))
		want := []string{fmt.Sprintf("roles@%d", seqs[0]), fmt.Sprintf("roles@%d", seqs[1]),
			fmt.Sprintf("users@%d", seqs[2]), fmt.Sprintf("users@%d", seqs[4])}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries %v, want %v", got, want)
		}
	})
}

// TestClaimersNeverShareADelivery: two claimers (two instances on
// PostgreSQL, two goroutines of one on SQLite) claiming concurrently in
// small pages lease every due delivery exactly once between them.
func TestClaimersNeverShareADelivery(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		opts := storeOptions(t, kind)
		a, err := store.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		b := a
		if kind == testenv.Postgres {
			if b, err = store.Open(ctx, opts); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
		}
		insertWebhook(t, a, "h1", []string{"*"}, 0, true)
		insertWebhook(t, a, "h2", []string{"user.*"}, 0, true)
		types := make([]string, 150)
		for i := range types {
			types[i] = "user.created"
		}
		appendEvents(t, a, types...)
		for {
			_, more, err := a.WebhookQueue().Dispatch(ctx, 64)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
		}
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for i, s := range []*store.Store{a, b} {
			owner := fmt.Sprintf("claimer-%d", i)
			wg.Go(func() {
				for {
					got, err := s.WebhookQueue().Claim(ctx, owner, time.Now(), time.Minute, 7)
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, d := range got {
						if prev, ok := seen[d.ID]; ok {
							t.Errorf("delivery %s claimed by %s and %s", d.ID, prev, owner)
						}
						seen[d.ID] = owner
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != 300 {
			t.Fatalf("%d deliveries claimed, want 300", len(seen))
		}
	})
}

// TestRecordHoldsOnlyWhileTheLeaseIs: an attempt's outcome is recorded
// only while its lease is still its claimer's: after the lease ended and
// another instance claimed the delivery, the first one's record changes
// nothing, and the second's does. A retry comes back due at its time with
// the attempt counted; a hold does not count one; a drop deletes the
// delivery; a 410 fails it and disables its webhook once, with a
// webhook.updated event by the system.
func TestRecordHoldsOnlyWhileTheLeaseIs(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		insertWebhook(t, s, "h", []string{"role.*"}, 0, true)
		appendEvents(t, s, "role.created", "role.updated", "role.deleted", "role.moved")
		if _, _, err := s.WebhookQueue().Dispatch(ctx, 100); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		first, err := s.WebhookQueue().Claim(ctx, "one", now, time.Millisecond, 1)
		if err != nil || len(first) != 1 {
			t.Fatalf("claim: %v, %v", first, err)
		}
		if first[0].Event == nil || first[0].Event.Type != "role.created" || first[0].Secrets[0] != "whsec_h" {
			t.Fatalf("claimed %+v", first[0])
		}
		time.Sleep(5 * time.Millisecond)
		second, err := s.WebhookQueue().Claim(ctx, "two", time.Now(), time.Minute, 1)
		if err != nil || len(second) != 1 || second[0].ID != first[0].ID {
			t.Fatalf("the expired lease's delivery is claimed again: %v, %v", second, err)
		}
		rec := func(owner string, d webhookq.ClaimedDelivery, r webhookq.DeliveryRecord) []model.Event {
			r.ID, r.LeaseUntil, r.WebhookID = d.ID, d.LeaseUntil, d.WebhookID
			evs, err := s.WebhookQueue().Record(ctx, owner, []webhookq.DeliveryRecord{r})
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		rec("one", first[0], webhookq.DeliveryRecord{Step: webhookq.StepDelivered, Attempted: true, Status: 200})
		st, err := s.WebhookQueue().Stats(ctx)
		if err != nil || st.Pending != 4 {
			t.Fatalf("the stale record changed the queue: %+v, %v", st, err)
		}
		retryAt := time.Now().Add(time.Hour)
		rec("two", second[0], webhookq.DeliveryRecord{Step: webhookq.StepRetry, Attempted: true, Status: 500, NextAttemptAt: retryAt})
		// Three are due now, one in an hour: the next attempt scheduled
		// after now is the retry's.
		if next, err := s.WebhookQueue().NextAttempt(ctx, time.Now()); err != nil || next.Sub(retryAt).Abs() > time.Millisecond {
			t.Fatalf("the next attempt at %v (%v), want the retry's, at %v", next, err, retryAt)
		}
		if next, err := s.WebhookQueue().NextAttempt(ctx, retryAt); err != nil || !next.IsZero() {
			t.Fatalf("an attempt scheduled after the retry: %v (%v), want none", next, err)
		}

		rest := claimAll(t, s, "one", 10)
		if len(rest) != 3 {
			t.Fatalf("claimed %d, want the 3 others (the retry is due in an hour)", len(rest))
		}
		holdUntil := retryAt.Add(-30 * time.Minute)
		rec("one", rest[0], webhookq.DeliveryRecord{Step: webhookq.StepHold, NextAttemptAt: holdUntil})
		rec("one", rest[1], webhookq.DeliveryRecord{Step: webhookq.StepDrop})
		ev := func(before, after model.Webhook) model.Event {
			if !before.Enabled || after.Enabled || after.DisabledReason != "gone" || before.URL != "https://example.com/h" {
				t.Errorf("disabled from %+v to %+v", before, after)
			}
			return model.Event{Type: "webhook.updated", Subject: "webhook:" + before.ID}
		}
		gone := webhookq.DeliveryRecord{Step: webhookq.StepFailed, Attempted: true, Status: 410, Disable: model.WebhookDisabledGone, DisableEvent: ev}
		evs := rec("one", rest[2], gone)
		if len(evs) != 1 || evs[0].Type != "webhook.updated" || evs[0].ActorID != nil || evs[0].Seq == 0 {
			t.Fatalf("the 410 appended %+v, want one webhook.updated by the system", evs)
		}
		if evs := rec("one", rest[2], gone); len(evs) != 0 {
			t.Fatalf("a record repeated after its lease ended appended %+v", evs)
		}
		st, err = s.WebhookQueue().Stats(ctx)
		if err != nil || st.Pending != 0 {
			t.Fatalf("a disabled webhook's deliveries count as pending: %+v, %v", st, err)
		}
		if next, err := s.WebhookQueue().NextAttempt(ctx, time.Now()); err != nil || !next.IsZero() {
			t.Fatalf("a disabled webhook's retry is the queue's next attempt: %v, %v", next, err)
		}
		_, err = s.Write(ctx, func(tx *store.Tx) error { // enabled again, as its management does
			w, err := tx.GetWebhook(ctx, "h")
			if err != nil {
				return err
			}
			w.Enabled, w.DisabledReason = true, ""
			return tx.UpdateWebhook(ctx, w)
		})
		if err != nil {
			t.Fatal(err)
		}
		st, err = s.WebhookQueue().Stats(ctx)
		// Pending: the retry (due in an hour) and the hold (in half an
		// hour); the drop is gone, the 410 failed.
		if err != nil || st.Pending != 2 || st.OldestPending.IsZero() {
			t.Fatalf("queue %+v (%v), want 2 pending", st, err)
		}
		// The next attempt: the hold's end, then the retry.
		if next, err := s.WebhookQueue().NextAttempt(ctx, time.Now()); err != nil || next.Sub(holdUntil).Abs() > time.Millisecond {
			t.Fatalf("the next attempt at %v (%v), want the hold's end, at %v", next, err, holdUntil)
		}
		if next, err := s.WebhookQueue().NextAttempt(ctx, holdUntil); err != nil || next.Sub(retryAt).Abs() > time.Millisecond {
			t.Fatalf("the next attempt after the hold's end at %v (%v), want the retry's, at %v", next, err, retryAt)
		}
		if got := claimAll(t, s, "one", 10); len(got) != 0 {
			t.Fatalf("claimed %v before their time", pairs(got))
		}
		later, err := s.WebhookQueue().Claim(ctx, "one", retryAt.Add(time.Second), time.Minute, 10)
		if err != nil || len(later) != 2 {
			t.Fatalf("due in an hour: %v, %v", later, err)
		}
		for _, d := range later {
			want := map[string]int{second[0].ID: 1, rest[0].ID: 0}[d.ID]
			if d.Attempts != want {
				t.Errorf("delivery %s: %d attempts, want %d", d.ID, d.Attempts, want)
			}
		}
	})
}

// TestDispatchSkipsAWebhooksOwnCreation: a webhook never receives its own
// webhook.created, even while its after_seq is still below it; another
// webhook's creation it receives like any event.
func TestDispatchSkipsAWebhooksOwnCreation(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testenv.SQLite)
	insertWebhook(t, s, "self", []string{"webhook.*"}, 0, true)
	evs, err := s.Write(ctx, func(tx *store.Tx) error {
		for _, sub := range []string{"webhook:self", "webhook:other"} {
			if err := tx.AppendEvent(ctx, model.Event{Type: "webhook.created", Subject: sub}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.WebhookQueue().Dispatch(ctx, 100); err != nil {
		t.Fatal(err)
	}
	got := claimAll(t, s, "i", 10)
	if len(got) != 1 || got[0].EventSeq != evs[1].Seq {
		t.Fatalf("deliveries %v, want only the other webhook's creation (%d)", pairs(got), evs[1].Seq)
	}
}

// On PostgreSQL, Stats has the deliveries' statistics refreshed when the
// backlog grows past 1,000 and four times what it was at the last
// refresh, and not again while it stays: statistics taken when hardly
// anything was pending would have every claim read and sort the whole
// backlog. They are refreshed again once the backlog drains, and at an
// instance's first Stats (a backlog may have drained while none ran):
// statistics that still said most deliveries are pending would have
// every Stats read the whole table.
func TestStatsRefreshesPostgresStatisticsOfABacklog(t *testing.T) {
	testenv.RequirePostgres(t)
	o := storeOptions(t, testenv.Postgres)
	s, err := store.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	db := rawDB(t, testenv.Postgres, o)
	// What the table's statistics say it holds: the rows it held at the
	// last ANALYZE (pg_class is updated by the ANALYZE itself, unlike the
	// activity counters, which reach other sessions late). The test's own
	// schema: other tests' tables share the name.
	analyzedRows := func() int64 {
		t.Helper()
		var n float64
		if err := db.Raw("SELECT reltuples FROM pg_class WHERE oid = 'webhook_deliveries'::regclass").
			Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return max(int64(n), 0) // -1: never analyzed
	}
	// Only Stats analyzes the table while the test runs.
	if err := db.Exec("ALTER TABLE webhook_deliveries SET (autovacuum_enabled = false)").Error; err != nil {
		t.Fatal(err)
	}
	q := s.WebhookQueue()
	ctx := context.Background()
	pending := func(want int64) {
		t.Helper()
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending != want {
			t.Fatalf("%d pending; want %d", st.Pending, want)
		}
	}
	makeDeliveries := func(n int) {
		t.Helper()
		appendEvents(t, s, slices.Repeat([]string{"role.created"}, n)...)
		for {
			_, more, err := q.Dispatch(ctx, 500)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				return
			}
		}
	}
	// What the statistics say of the deliveries' states, and whether
	// Stats's question reads the pending ones on the due index.
	states := func() string {
		t.Helper()
		var v string
		if err := db.Raw("SELECT COALESCE(most_common_vals::text, '') FROM pg_stats WHERE schemaname = current_schema() " +
			"AND tablename = 'webhook_deliveries' AND attname = 'state'").Scan(&v).Error; err != nil {
			t.Fatal(err)
		}
		return v
	}
	onDueIndex := func() bool {
		t.Helper()
		var plan []string
		if err := db.Raw("EXPLAIN SELECT COUNT(*), MIN(d.created_at) FROM webhook_deliveries AS d " +
			"JOIN webhooks w ON w.id = d.webhook_id WHERE d.state = 'pending' AND w.enabled").Scan(&plan).Error; err != nil {
			t.Fatal(err)
		}
		return strings.Contains(strings.Join(plan, "\n"), "webhook_deliveries_due")
	}
	insertWebhook(t, s, "w1", []string{"role.*"}, 0, true)
	// The instance's first Stats: refreshed (never analyzed before).
	pending(0)
	var tuples float64
	if err := db.Raw("SELECT reltuples FROM pg_class WHERE oid = 'webhook_deliveries'::regclass").Scan(&tuples).Error; err != nil {
		t.Fatal(err)
	}
	if tuples != 0 {
		t.Fatalf("after the first Stats the statistics count %v rows (-1: never analyzed); want 0", tuples)
	}

	for _, step := range []struct {
		add      int
		pending  int64
		analyzed int64 // the rows the statistics count
		why      string
	}{
		{999, 999, 0, "none below 1,000"},
		{1, 1000, 1000, "one at 1,000"},
		{2999, 3999, 1000, "none more below four times the last (1,000)"},
		{2, 4001, 4001, "one past four times the last"},
	} {
		makeDeliveries(step.add)
		pending(step.pending)
		if n := analyzedRows(); n != step.analyzed {
			t.Fatalf("at %d pending the statistics count %d rows; want %d: %s", step.pending, n, step.analyzed, step.why)
		}
	}
	// Drained: refreshed again. Statistics that still said nearly every
	// delivery is pending would have each Stats read the whole table
	// rather than the pending deliveries on the due index.
	if err := db.Exec("UPDATE webhook_deliveries SET state = 'delivered', next_attempt_at = NULL").Error; err != nil {
		t.Fatal(err)
	}
	pending(0)
	if v := states(); v != "{delivered}" || !onDueIndex() {
		t.Fatalf("drained, the statistics say the deliveries' states are mostly %s, and the pending are read "+
			"on the due index: %v; want {delivered}, true", v, onDueIndex())
	}
	// A backlog of 1,000 builds again: refreshed again (4,001 delivered
	// rows and 1,000 pending).
	makeDeliveries(1000)
	pending(1000)
	if n := analyzedRows(); n != 5001 {
		t.Fatalf("at 1,000 pending after the queue drained the statistics count %d rows; want 5,001", n)
	}
	// The instance stops with its backlog in the statistics; the backlog
	// drains behind its back. The next instance's first Stats refreshes
	// them.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("UPDATE webhook_deliveries SET state = 'delivered', next_attempt_at = NULL").Error; err != nil {
		t.Fatal(err)
	}
	if v := states(); v == "{delivered}" {
		t.Fatalf("the statistics say %s before the next instance asks; the test proves nothing", v)
	}
	if s, err = store.Open(ctx, o); err != nil { // closed by the cleanup above
		t.Fatal(err)
	}
	q = s.WebhookQueue()
	pending(0)
	if v := states(); v != "{delivered}" || !onDueIndex() {
		t.Fatalf("after a restart, the statistics say the deliveries' states are mostly %s, and the pending are "+
			"read on the due index: %v; want {delivered}, true", v, onDueIndex())
	}
}

// rawDB opens the store's database behind its back.
func rawDB(t *testing.T, kind string, o store.Options) *gorm.DB {
	t.Helper()
	dial := sqlite.Open("file:" + filepath.Join(o.DataDir, "guildhall.db") + "?_busy_timeout=10000")
	if kind == testenv.Postgres {
		dial = postgres.Open(o.DatabaseURL)
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db
}

// TestADispatchLeasesWhatItHasRoomFor: a dispatch asked to lease two of
// the three deliveries it makes returns those two claimed, as a claim
// would (the event, the destination, the secret, the lease), and leaves
// the third to claims; its outcome is recorded under that lease. A
// dispatch that finds a delivery made already (its cursor lost) returns
// it not claimed: it was not made under this lease.
func TestADispatchLeasesWhatItHasRoomFor(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		o := storeOptions(t, kind)
		s := openStoreAt(t, o)
		q := s.WebhookQueue()
		insertWebhook(t, s, "h", []string{"role.*"}, 0, true)
		seqs := appendEvents(t, s, "role.created", "role.updated", "role.deleted")
		until := time.Now().Add(time.Minute)
		out, err := q.DispatchLeased(ctx, 100, webhookq.Lease{Owner: "maker", Until: until, Max: 2})
		if err != nil || out.Made != 3 || out.More || len(out.Claimed) != 2 {
			t.Fatalf("dispatch: %+v, %v; want 3 made, 2 claimed", out, err)
		}
		for i, c := range out.Claimed {
			if c.EventSeq != seqs[i] || c.Event == nil || c.Event.Seq != seqs[i] || c.URL != "https://example.com/h" ||
				!slices.Equal(c.Secrets, []string{"whsec_h"}) || c.CreatorID != "owner" || c.Attempts != 0 ||
				!c.LeaseUntil.Equal(until.Truncate(time.Microsecond)) {
				t.Fatalf("claimed %d: %+v", i, c)
			}
		}
		if rest := claimAll(t, s, "other", 10); len(rest) != 1 || rest[0].EventSeq != seqs[2] {
			t.Fatalf("left to claims: %v; want the third event's delivery alone", pairs(rest))
		}
		c := out.Claimed[0]
		if _, err := q.Record(ctx, "maker", []webhookq.DeliveryRecord{{ID: c.ID, LeaseUntil: c.LeaseUntil,
			Step: webhookq.StepDelivered, Attempted: true, Status: 204}}); err != nil {
			t.Fatal(err)
		}
		db := rawDB(t, kind, o)
		var state string
		if err := db.Raw("SELECT state FROM webhook_deliveries WHERE id = ?", c.ID).Scan(&state).Error; err != nil || state != "delivered" {
			t.Fatalf("the leased delivery recorded: %q, %v; want delivered", state, err)
		}
		if err := db.Exec("DELETE FROM webhook_dispatch").Error; err != nil {
			t.Fatal(err)
		}
		again, err := q.DispatchLeased(ctx, 100, webhookq.Lease{Owner: "maker", Until: until, Max: 10})
		if err != nil || len(again.Claimed) != 0 {
			t.Fatalf("dispatch of deliveries made already: %+v, %v; want none claimed", again, err)
		}
		var n int64
		if err := db.Raw("SELECT COUNT(*) FROM webhook_deliveries").Scan(&n).Error; err != nil || n != 3 {
			t.Fatalf("%d deliveries, %v; want the same 3", n, err)
		}
	})
}

// TestADispatchBehindItsDeliveriesLeavesThemAsTheyAre: the deliveries a
// dispatch makes go in without a check of each row against those made
// already, since none are past a cursor that stood. A cursor whose row
// stands but was set back by hand breaks that: the dispatches still
// succeed, batch after batch, make the deliveries missing, leave those
// made already as they were (delivered stays delivered, no second row),
// and count and lease only what they made.
func TestADispatchBehindItsDeliveriesLeavesThemAsTheyAre(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		o := storeOptions(t, kind)
		s := openStoreAt(t, o)
		q := s.WebhookQueue()
		insertWebhook(t, s, "h", []string{"role.*"}, 0, true)
		seqs := appendEvents(t, s, "role.created", "role.updated")
		until := time.Now().Add(time.Minute)
		first, err := q.DispatchLeased(ctx, 100, webhookq.Lease{Owner: "maker", Until: until, Max: 10})
		if err != nil || first.Made != 2 || len(first.Claimed) != 2 {
			t.Fatalf("first dispatch: %+v, %v; want 2 made and claimed", first, err)
		}
		c := first.Claimed[0]
		if _, err := q.Record(ctx, "maker", []webhookq.DeliveryRecord{{ID: c.ID, LeaseUntil: c.LeaseUntil,
			Step: webhookq.StepDelivered, Attempted: true, Status: 204}}); err != nil {
			t.Fatal(err)
		}
		db := rawDB(t, kind, o)
		if err := db.Exec("UPDATE webhook_dispatch SET seq = 0").Error; err != nil {
			t.Fatal(err)
		}
		third := appendEvents(t, s, "role.deleted")[0]
		// A batch of one event a dispatch: the cursor passes the
		// deliveries made already over several dispatches.
		made, more := 0, true
		var claimed []webhookq.ClaimedDelivery
		for i := 0; more; i++ {
			again, err := q.DispatchLeased(ctx, 1, webhookq.Lease{Owner: "maker", Until: until, Max: 10})
			if err != nil || i > 3 {
				t.Fatalf("dispatch %d behind its deliveries: %+v, %v", i, again, err)
			}
			made, more, claimed = made+again.Made, again.More, append(claimed, again.Claimed...)
		}
		if got := pairs(claimed); made != 1 || !slices.Equal(got, []string{fmt.Sprintf("h@%d", third)}) {
			t.Fatalf("made %d, leased %v; want the new event's delivery alone", made, got)
		}
		var rows []struct {
			EventSeq int64
			State    string
			Attempts int
		}
		if err := db.Raw("SELECT event_seq, state, attempts FROM webhook_deliveries ORDER BY event_seq").Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("[{%d delivered 1} {%d pending 0} {%d pending 0}]", seqs[0], seqs[1], third)
		if got := fmt.Sprint(rows); got != want {
			t.Fatalf("deliveries %s; want %s", got, want)
		}
		var cursor int64
		if err := db.Raw("SELECT seq FROM webhook_dispatch WHERE id = 1").Scan(&cursor).Error; err != nil || cursor != third {
			t.Fatalf("cursor at %d, %v; want %d", cursor, err, third)
		}
	})
}

// TestClaimedDeliveriesCarryTheirEvents: a dispatch that leases
// deliveries, and a claim, return each delivery's event whole, as the
// audit log reads it (actor, reason, data, time); a claim returns none
// for an event no longer kept (the deliverer fails its delivery).
func TestClaimedDeliveriesCarryTheirEvents(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		o := storeOptions(t, kind)
		s := openStoreAt(t, o)
		q := s.WebhookQueue()
		insertWebhook(t, s, "h", []string{"role.*"}, 0, true)
		actor, reason := "owner", "tidy up"
		_, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range 300 {
				ev := model.Event{Type: "role.updated", Subject: fmt.Sprintf("role:%d", i),
					Data: map[string]any{"name": fmt.Sprintf("r%d", i), "position": float64(i)}}
				if i%2 == 0 {
					ev.ActorID, ev.Reason = &actor, &reason
				}
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		log, err := s.EventsAfter(ctx, 0, 1000)
		if err != nil || len(log) != 300 {
			t.Fatalf("the audit log holds %d events, %v; want 300", len(log), err)
		}
		// A dispatch leases the first 100 as it makes them, with their
		// events as it read them.
		out, err := q.DispatchLeased(ctx, 500, webhookq.Lease{Owner: "maker", Until: time.Now().Add(time.Minute), Max: 100})
		if err != nil || out.Made != 300 || out.More || len(out.Claimed) != 100 {
			t.Fatalf("dispatch: %d made, more %v, %d leased, %v; want 300 made, 100 leased", out.Made, out.More, len(out.Claimed), err)
		}
		for i, c := range out.Claimed {
			if want := log[i]; c.Event == nil || !reflect.DeepEqual(*c.Event, want) {
				t.Errorf("event %d: leased with %+v; the audit log reads %+v", want.Seq, c.Event, want)
			}
		}
		// Purged by the audit log's retention after its delivery was made.
		purged := log[150].Seq // one left to the claims
		if err := rawDB(t, kind, o).Exec("DELETE FROM events WHERE seq = ?", purged).Error; err != nil {
			t.Fatal(err)
		}
		got := map[int64]*model.Event{}
		for _, c := range out.Claimed {
			got[c.EventSeq] = c.Event
		}
		for _, c := range claimAll(t, s, "i", 256) {
			got[c.EventSeq] = c.Event
		}
		if len(got) != 300 {
			t.Fatalf("%d deliveries leased or claimed; want 300", len(got))
		}
		for _, want := range log {
			switch e, ok := got[want.Seq]; {
			case !ok:
				t.Errorf("event %d: not claimed", want.Seq)
			case want.Seq == purged:
				if e != nil {
					t.Errorf("event %d was purged, yet claimed with it: %+v", purged, *e)
				}
			case e == nil:
				t.Errorf("event %d: claimed with no event", want.Seq)
			case !reflect.DeepEqual(*e, want):
				t.Errorf("event %d: claimed with %+v; the audit log reads %+v", want.Seq, *e, want)
			}
		}
	})
}

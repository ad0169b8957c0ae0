package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

func openStore(t *testing.T, kind string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), storeOptions(t, kind))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// holdWriter occupies the writer with a write that waits for release, so
// that the writes submitted meanwhile queue up for one transaction.
func holdWriter(t *testing.T, s *store.Store) (release func()) {
	t.Helper()
	started, done := make(chan struct{}), make(chan error, 1)
	ch := make(chan struct{})
	go func() {
		_, err := s.Write(context.Background(), func(*store.Tx) error {
			close(started)
			<-ch
			return nil
		})
		done <- err
	}()
	<-started
	return func() {
		close(ch)
		if err := <-done; err != nil {
			t.Errorf("the holding write: %v", err)
		}
	}
}

// waitQueued waits until n writes wait for the writer.
func waitQueued(t *testing.T, s *store.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.QueuedWrites() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes queued", s.QueuedWrites(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommitFailuresStayTheirOwn: writes that queue while a transaction
// commits share the next one; the write that fails (an error after it
// changed something, a unique-key violation the database itself raises, a
// panic) undoes only its own changes, and every other write of the same
// transaction commits with its events in submission order.
func TestGroupCommitFailuresStayTheirOwn(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 8
		failing := map[int]string{2: "error after a change", 4: "duplicate key", 6: "panic"}
		release := holdWriter(t, s)
		before := s.WriterStats()

		type result struct {
			events []model.Event
			err    error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("c%d", i)
				if failing[i] == "duplicate key" {
					id = "c0" // raised by the primary key, not by a check of ours
				}
				evs, err := s.Write(ctx, func(tx *store.Tx) error {
					now := model.Now()
					if _, err := tx.InsertChannel(ctx, model.Channel{ID: id, Name: id, CreatedAt: now, UpdatedAt: now}); err != nil {
						return err
					}
					if err := tx.AppendEvent(ctx, model.Event{Type: "channel.created", Subject: "channel:" + id}); err != nil {
						return err
					}
					switch failing[i] {
					case "error after a change":
						return errors.New("refused after writing")
					case "panic":
						panic("boom")
					}
					return nil
				})
				results[i] = result{evs, err}
			}()
			// Submit in order, so the transaction runs them in this order.
			waitQueued(t, s, i+1)
		}
		release()
		wg.Wait()

		after := s.WriterStats()
		if got := after.Transactions - before.Transactions; got != 1 {
			t.Fatalf("the %d queued writes took %d batches, want 1", n, got)
		}
		if got := after.Reruns - before.Reruns; got != 1 {
			t.Fatalf("the batch with failing writes ran again %d times, want once (with savepoints)", got)
		}
		var lastSeq int64
		for i, r := range results {
			id := fmt.Sprintf("c%d", i)
			_, getErr := s.GetChannel(ctx, id)
			switch failing[i] {
			case "":
				if r.err != nil || len(r.events) != 1 || getErr != nil {
					t.Fatalf("write %d: %v, %d events, channel: %v", i, r.err, len(r.events), getErr)
				}
				if r.events[0].Seq <= lastSeq {
					t.Fatalf("write %d has seq %d after %d: not in submission order", i, r.events[0].Seq, lastSeq)
				}
				lastSeq = r.events[0].Seq
			case "duplicate key":
				if r.err == nil || len(r.events) != 0 {
					t.Fatalf("write %d (%s): %v, %d events", i, failing[i], r.err, len(r.events))
				}
				if !errors.Is(r.err, apperr.ErrConflict) {
					t.Fatalf("write %d (%s): %v, want a conflict", i, failing[i], r.err)
				}
			default:
				if r.err == nil || len(r.events) != 0 || !apperr.IsNotFound(getErr) {
					t.Fatalf("write %d (%s): %v, %d events, channel: %v", i, failing[i], r.err, len(r.events), getErr)
				}
			}
		}
		evs, _, err := s.ListEvents(ctx, store.EventFilter{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != n-len(failing) {
			t.Fatalf("%d events committed, want %d (failed writes leave none)", len(evs), n-len(failing))
		}
	})
}

// TestGroupCommitWithoutFailuresRunsOnce: a batch in which every write
// succeeds runs once, with no savepoint: n writes of one insert and one
// event each cost n inserts and the batch's events, in one statement on
// PostgreSQL, with seqs in submission order.
func TestGroupCommitWithoutFailuresRunsOnce(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 6
		release := holdWriter(t, s)
		before, statements := s.WriterStats(), s.QueryCount()
		events := make([][]model.Event, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("c%d", i)
				events[i], errs[i] = s.Write(ctx, func(tx *store.Tx) error {
					now := model.Now()
					if _, err := tx.InsertChannel(ctx, model.Channel{ID: id, Name: id, CreatedAt: now, UpdatedAt: now}); err != nil {
						return err
					}
					// Two events for the odd ones: seqs follow the order of
					// the writes, then of the events within one.
					// An actor and a reason on some: NULLs and values in
					// one statement on PostgreSQL.
					for k := range 1 + i%2 {
						ev := model.Event{Type: "channel.created", Subject: fmt.Sprintf("channel:%s/%d", id, k)}
						if k == 1 {
							actor, reason := "u-"+id, "because "+id
							ev.ActorID, ev.Reason = &actor, &reason
						}
						if err := tx.AppendEvent(ctx, ev); err != nil {
							return err
						}
					}
					return nil
				})
			}()
			waitQueued(t, s, i+1)
		}
		release()
		wg.Wait()
		used := s.QueryCount() - statements
		after := s.WriterStats()
		if got := after.Reruns - before.Reruns; got != 0 {
			t.Fatalf("a batch without failures ran again %d times", got)
		}
		var seq int64
		var subjects []string
		for i := range n {
			if errs[i] != nil || len(events[i]) != 1+i%2 {
				t.Fatalf("write %d: %v, %d events", i, errs[i], len(events[i]))
			}
			for _, ev := range events[i] {
				if ev.Seq <= seq {
					t.Fatalf("write %d: event seq %d after %d: not in order", i, ev.Seq, seq)
				}
				seq = ev.Seq
				subjects = append(subjects, ev.Subject)
			}
		}
		listed, _, err := s.ListEvents(ctx, store.EventFilter{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != len(subjects) {
			t.Fatalf("%d events stored, want %d", len(listed), len(subjects))
		}
		for k, ev := range listed { // newest first
			if want := subjects[len(subjects)-1-k]; ev.Subject != want || (kind == testenv.SQLite && ev.Seq != seq-int64(k)) {
				t.Fatalf("stored event %d: seq %d %s, want %s", k, ev.Seq, ev.Subject, want)
			}
			second := strings.HasSuffix(ev.Subject, "/1")
			id := strings.TrimSuffix(strings.TrimPrefix(ev.Subject, "channel:"), "/1")
			if second != (ev.ActorID != nil && *ev.ActorID == "u-"+id && ev.Reason != nil && *ev.Reason == "because "+id) ||
				!second && (ev.ActorID != nil || ev.Reason != nil) {
				t.Fatalf("stored event %s: actor %v, reason %v", ev.Subject, ev.ActorID, ev.Reason)
			}
		}
		// The holding write sent nothing after it took the write lock.
		want := int64(n + 1) // the events in one statement
		if kind == testenv.Postgres {
			// The write lock, the events in one statement, the NOTIFY with
			// the transaction's version (no prepare before the commit: no
			// other instance holds a lease, internal/fresh's lease.go); the
			// holding write, which has no event, asks its version alone.
			want = int64(1 + n + 1 + 1 + 1)
		}
		if used != want {
			t.Fatalf("%d statements for %d writes in one batch, want %d (no savepoints)", used, n, want)
		}
	})
}

// TestEventsOfOneBigWriteInOneStatement: more events than a statement of
// parameter rows holds (a bulk change) go in one statement, and are all
// stored, numbered in their order, with their NULLs and values (data with
// quotes, backslashes and non-ASCII text included).
func TestEventsOfOneBigWriteInOneStatement(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 2*store.EventChunk + 22
		statements := s.QueryCount()
		events, err := s.Write(ctx, func(tx *store.Tx) error {
			for i := range n {
				ev := model.Event{Type: "role.member_added", Subject: fmt.Sprintf("role:r/%03d", i),
					Data: map[string]any{"name": fmt.Sprintf("\"Zoë\" \\ %d", i)}}
				if i%3 == 0 {
					actor, reason := fmt.Sprintf("u%03d", i), fmt.Sprintf("why %03d", i)
					ev.ActorID, ev.Reason = &actor, &reason
				}
				if err := tx.AppendEvent(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || len(events) != n {
			t.Fatalf("%d events, %v", len(events), err)
		}
		want := int64(1) // the INSERT
		if kind == testenv.Postgres {
			want = 1 + 1 + 1 // the write lock, the INSERT and the NOTIFY
		}
		if used := s.QueryCount() - statements; used != want {
			t.Fatalf("%d statements for %d events, want %d", used, n, want)
		}
		for i, ev := range events {
			if i > 0 && ev.Seq <= events[i-1].Seq {
				t.Fatalf("event %d: seq %d after %d", i, ev.Seq, events[i-1].Seq)
			}
		}
		listed, _, err := s.ListEvents(ctx, store.EventFilter{}, n+10)
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != n {
			t.Fatalf("%d events stored, want %d", len(listed), n)
		}
		for k, ev := range listed { // newest first
			i := n - 1 - k
			if ev.Seq != events[i].Seq || ev.Subject != fmt.Sprintf("role:r/%03d", i) ||
				ev.Data["name"] != fmt.Sprintf("\"Zoë\" \\ %d", i) {
				t.Fatalf("stored event %d: seq %d %s %v, want seq %d of event %d", k, ev.Seq, ev.Subject, ev.Data, events[i].Seq, i)
			}
			if withActor := ev.ActorID != nil && *ev.ActorID == fmt.Sprintf("u%03d", i) &&
				ev.Reason != nil && *ev.Reason == fmt.Sprintf("why %03d", i); withActor != (i%3 == 0) ||
				i%3 != 0 && (ev.ActorID != nil || ev.Reason != nil) {
				t.Fatalf("stored event %d: actor %v, reason %v", i, ev.ActorID, ev.Reason)
			}
		}
	})
}

// TestGroupCommitDatabaseFailureIsNotRunAgain: when a write of a batch fails
// because the database did (a statement's deadline, a lost connection),
// the batch fails as a whole at once: running it again, with savepoints,
// would only wait as long again on a frozen database.
func TestGroupCommitDatabaseFailureIsNotRunAgain(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		release := holdWriter(t, s)
		before := s.WriterStats()
		errs := make(chan error, 3)
		for i, fail := range []bool{false, true, false} {
			go func() {
				id := fmt.Sprintf("d%d", i)
				_, err := s.Write(ctx, func(tx *store.Tx) error {
					now := model.Now()
					if _, err := tx.InsertChannel(ctx, model.Channel{ID: id, Name: id, CreatedAt: now, UpdatedAt: now}); err != nil {
						return err
					}
					if fail {
						return fmt.Errorf("read something: %w", context.DeadlineExceeded)
					}
					return nil
				})
				errs <- err
			}()
			waitQueued(t, s, i+1)
		}
		release()
		for range 3 {
			if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a write of a batch whose database failed: %v, want the failure", err)
			}
		}
		after := s.WriterStats()
		if after.Transactions-before.Transactions != 1 || after.Reruns != before.Reruns {
			t.Fatalf("writer stats went from %+v to %+v: want one batch, not run again", before, after)
		}
		for i := range 3 {
			if _, err := s.GetChannel(ctx, fmt.Sprintf("d%d", i)); !apperr.IsNotFound(err) {
				t.Fatalf("channel d%d of the failed batch: %v", i, err)
			}
		}
	})
}

// TestGroupCommitCanceledBeforeStart: a write whose request went away while
// it waited does nothing and says so; the others of its transaction commit.
func TestGroupCommitCanceledBeforeStart(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		release := holdWriter(t, s)
		gone, cancel := context.WithCancel(ctx)
		errs := make(chan error, 2)
		write := func(ctx context.Context, id string) {
			_, err := s.Write(ctx, func(tx *store.Tx) error {
				now := model.Now()
				_, err := tx.InsertChannel(ctx, model.Channel{ID: id, Name: id, CreatedAt: now, UpdatedAt: now})
				return err
			})
			errs <- err
		}
		go write(gone, "gone")
		waitQueued(t, s, 1)
		go write(ctx, "kept")
		waitQueued(t, s, 2)
		cancel()
		release()
		for range 2 {
			if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		}
		if _, err := s.GetChannel(ctx, "gone"); !apperr.IsNotFound(err) {
			t.Fatalf("the canceled write committed: %v", err)
		}
		if _, err := s.GetChannel(ctx, "kept"); err != nil {
			t.Fatalf("the write beside a canceled one: %v", err)
		}
	})
}

// TestWriteBoundedByItsDeadline: a write waits no longer than its
// context's deadline (a request's database budget), however long the
// transactions before it take: queued behind one that does not end (a
// database that does not answer), it returns at its deadline and never
// runs; in a transaction that runs past its deadline, it returns within a
// moment, saying that it may or may not have been done (a 503 that says
// so), rather than waiting for every transaction queued before its own.
// The bounds are those of a fault's answer, a correctness requirement,
// with slack for a busy machine; not a speed target.
func TestWriteBoundedByItsDeadline(t *testing.T) {
	const budget, bound = 300 * time.Millisecond, 300*time.Millisecond + 2*time.Second
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		bg := context.Background()
		s := openStore(t, kind)
		write := func(ctx context.Context, fn func(*store.Tx) error) (took time.Duration, err error) {
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				_, err := s.Write(ctx, fn)
				done <- err
			}()
			select {
			case err := <-done:
				return time.Since(start), err
			case <-time.After(10 * time.Second):
				t.Fatal("a write with a deadline did not return")
				return 0, nil
			}
		}

		release := holdWriter(t, s)
		ctx, cancel := context.WithTimeout(bg, budget)
		defer cancel()
		var ran atomic.Bool
		took, err := write(ctx, func(*store.Tx) error { ran.Store(true); return nil })
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrOutcomeUnknown) || took > bound {
			t.Fatalf("a write queued behind a transaction that does not end: %v after %v; want its deadline's error within %v", err, took, bound)
		}
		if e, ok := apperr.As(s.Classify(err)); !ok || e.Kind != apperr.ErrUnavailable || strings.Contains(e.Detail, "may or may not") {
			t.Fatalf("classified as %v, want unavailable, not carried out", s.Classify(err))
		}
		release()
		if _, err := s.Write(bg, func(*store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if ran.Load() {
			t.Fatal("a write whose request stopped waiting ran")
		}

		hold := make(chan struct{})
		ctx, cancel = context.WithTimeout(bg, budget)
		defer cancel()
		took, err = write(ctx, func(*store.Tx) error { <-hold; return nil })
		close(hold)
		if !errors.Is(err, store.ErrOutcomeUnknown) || took > bound {
			t.Fatalf("a write whose transaction runs past its deadline: %v after %v; want ErrOutcomeUnknown within %v", err, took, bound)
		}
		if e, ok := apperr.As(s.Classify(err)); !ok || e.Kind != apperr.ErrUnavailable || !strings.Contains(e.Detail, "may or may not") {
			t.Fatalf("classified as %v, want unavailable, outcome unknown", s.Classify(err))
		}
		if _, err := s.Write(bg, func(*store.Tx) error { return nil }); err != nil {
			t.Fatalf("the writer after a write ran past its deadline: %v", err)
		}
	})
}

// A small write queued behind a large one (LargeWrite) commits before it,
// in a transaction without it: it waits for at most the large transaction
// already running, not for the ones queued beside it.
func TestLargeWritesRunAloneAfterSmallOnes(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		s := openStore(t, kind)
		release := holdWriter(t, s)
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		write := func(ctx context.Context, name string) {
			wg.Go(func() {
				if _, err := s.Write(ctx, func(*store.Tx) error {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					return nil
				}); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			})
		}
		before := s.WriterStats()
		write(store.LargeWrite(context.Background()), "large 1")
		waitQueued(t, s, 1)
		write(store.LargeWrite(context.Background()), "large 2")
		waitQueued(t, s, 2)
		write(context.Background(), "small")
		waitQueued(t, s, 3)
		release()
		wg.Wait()
		if want := []string{"small", "large 1", "large 2"}; fmt.Sprint(order) != fmt.Sprint(want) {
			t.Errorf("the writes ran in the order %q, want %q", order, want)
		}
		// The held write's, then one each.
		if got := s.WriterStats().Transactions - before.Transactions; got != 3 {
			t.Errorf("%d transactions after the held one, want 3 (each large write alone)", got)
		}
	})
}

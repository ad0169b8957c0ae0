package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// queueWrites submits fns as writes in their order, all waiting behind a
// held writer, so that they share one transaction; it returns their
// errors once the transaction ended.
func queueWrites(t *testing.T, s *store.Store, fns []func(tx *store.Tx) error) []error {
	t.Helper()
	release := holdWriter(t, s)
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { _, errs[i] = s.Write(context.Background(), fn) })
		waitQueued(t, s, i+1)
	}
	release()
	wg.Wait()
	return errs
}

func insertsUser(u model.User) func(tx *store.Tx) error {
	return func(tx *store.Tx) error {
		_, err := tx.InsertUser(context.Background(), u)
		return err
	}
}

// TestGroupCommitWritesNewUsersTogether: the users a transaction of
// several requests creates are written by one INSERT of all their rows,
// and every one of them is stored.
func TestGroupCommitWritesNewUsersTogether(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		const n = 5
		users := make([]model.User, n)
		fns := make([]func(tx *store.Tx) error, n)
		for i := range users {
			users[i] = newUser(fmt.Sprintf("held%d", i))
			fns[i] = insertsUser(users[i])
		}
		// Measured around the batch alone: the holding write's statements
		// are the same whatever it holds.
		release := holdWriter(t, s)
		before, statements := s.WriterStats(), s.QueryCount()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, fn := range fns {
			wg.Go(func() { _, errs[i] = s.Write(ctx, fn) })
			waitQueued(t, s, i+1)
		}
		release()
		wg.Wait()
		used, after := s.QueryCount()-statements, s.WriterStats()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
		}
		if after.Transactions-before.Transactions != 1 || after.Reruns != before.Reruns {
			t.Fatalf("writer stats went from %+v to %+v: want one batch, run once", before, after)
		}
		for _, u := range users {
			got, err := s.User(ctx, u.ID)
			if err != nil || got.Username != u.Username {
				t.Fatalf("user %s after the batch: %+v, %v", u.Username, got, err)
			}
		}
		// TestGroupCommitWithoutFailuresRunsOnce counts one statement per
		// row inserted; here the rows take one.
		want := int64(1)
		if kind == testenv.Postgres {
			// The holding write's version; the batch's lock, rows and
			// version. No prepare: no other instance holds a lease.
			want = 1 + 1 + 1 + 1
		}
		if used != want {
			t.Fatalf("%d statements for %d creates without events, want %d", used, n, want)
		}
	})
}

// TestGroupCommitHeldRowsAreRead: a request that reads a row an earlier
// request of its transaction inserted finds it, and the batch runs once.
func TestGroupCommitHeldRowsAreRead(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		first, second := newUser("first"), newUser("second")
		before := s.WriterStats()
		errs := queueWrites(t, s, []func(tx *store.Tx) error{
			insertsUser(first),
			func(tx *store.Tx) error {
				if _, err := tx.InsertUser(ctx, second); err != nil {
					return err
				}
				got, err := tx.GetUser(ctx, first.ID)
				if err != nil || got.Username != first.Username {
					return fmt.Errorf("the user an earlier write created: %+v, %w", got, err)
				}
				return nil
			},
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// One batch (the holding write's transaction, then theirs), whose
		// rows are held (TestGroupCommitWritesNewUsersTogether). A read
		// that missed the row would fail the batch, which would then pass
		// with savepoints: it must not have run again.
		if after := s.WriterStats(); after.Transactions-before.Transactions != 2 || after.Reruns != before.Reruns {
			t.Fatalf("writer stats went from %+v to %+v: want one batch, run once", before, after)
		}
		if _, err := s.User(ctx, second.ID); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGroupCommitHeldRowConflictStaysItsOwn: a name taken in a batch whose
// rows are written together fails that create alone with a 409, even
// when a later request of the batch ignored the failure it met (its read
// wrote the rows): every other create is stored.
func TestGroupCommitHeldRowConflictStaysItsOwn(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		a, b, c, d := newUser("a0"), newUser("a1"), newUser("a3"), newUser("a4")
		dup := newUser("A0") // the name a0 takes, in another case
		before := s.WriterStats()
		errs := queueWrites(t, s, []func(tx *store.Tx) error{
			insertsUser(a),
			insertsUser(b),
			insertsUser(dup),
			func(tx *store.Tx) error {
				_, _ = tx.GetUser(ctx, a.ID) // what it read does not matter to it
				_, err := tx.InsertUser(ctx, c)
				return err
			},
			insertsUser(d),
		})
		for i, err := range errs {
			if i == 2 {
				if !errors.Is(err, apperr.ErrConflict) {
					t.Fatalf("the create of a name taken: %v, want a conflict", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
		}
		// Two transactions: the holding write's and the batch's.
		if after := s.WriterStats(); after.Transactions-before.Transactions != 2 || after.Reruns-before.Reruns != 1 {
			t.Fatalf("writer stats went from %+v to %+v: want one batch, run again once", before, after)
		}
		for _, u := range []model.User{a, b, c, d} {
			if got, err := s.User(ctx, u.ID); err != nil || got.Username != u.Username {
				t.Fatalf("user %s, whose create succeeded: %+v, %v", u.Username, got, err)
			}
		}
		if _, err := s.User(ctx, dup.ID); !apperr.IsNotFound(err) {
			t.Fatalf("the user whose create failed: %v", err)
		}
	})
}

// TestLoneCreateWritesItsRowWithItsEvent: on PostgreSQL a create committed
// alone writes its row in the statement of its event (one round trip for
// both), and a create of a name taken still fails alone with a 409,
// storing nothing.
func TestLoneCreateWritesItsRowWithItsEvent(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, kind)
		create := func(u model.User) ([]model.Event, error) {
			return s.Write(ctx, func(tx *store.Tx) error {
				if _, err := tx.InsertUser(ctx, u); err != nil {
					return err
				}
				return tx.AppendEvent(ctx, model.Event{Type: "user.created", Subject: "user:" + u.ID})
			})
		}
		u := newUser("lone")
		before, statements := s.WriterStats(), s.QueryCount()
		evs, err := create(u)
		if err != nil || len(evs) != 1 || evs[0].Seq == 0 {
			t.Fatalf("the create: %v, events %+v", err, evs)
		}
		used := s.QueryCount() - statements
		want := int64(2) // the row, the event
		if kind == testenv.Postgres {
			// The lock, the row with its event, the version; no prepare,
			// no other instance holding a lease (internal/fresh's lease.go).
			want = 1 + 1 + 1
		}
		if used != want {
			t.Fatalf("%d statements for a create committed alone, want %d", used, want)
		}
		if got, err := s.User(ctx, u.ID); err != nil || got.Username != u.Username {
			t.Fatalf("the user created: %+v, %v", got, err)
		}
		listed, _, err := s.ListEvents(ctx, store.EventFilter{}, 10)
		if err != nil || len(listed) != 1 || listed[0].Seq != evs[0].Seq || listed[0].Subject != "user:"+u.ID {
			t.Fatalf("the events stored: %+v, %v", listed, err)
		}

		dup := newUser("LONE")
		if evs, err := create(dup); !errors.Is(err, apperr.ErrConflict) || len(evs) != 0 {
			t.Fatalf("the create of a name taken: %v, events %+v; want a conflict", err, evs)
		}
		after := s.WriterStats()
		if reruns := after.Reruns - before.Reruns; kind == testenv.Postgres && reruns != 1 || kind == testenv.SQLite && reruns != 0 {
			t.Fatalf("%d reruns: a held row's failure runs its batch again once, on PostgreSQL only", reruns)
		}
		if _, err := s.User(ctx, dup.ID); !apperr.IsNotFound(err) {
			t.Fatalf("the user whose create failed: %v", err)
		}
		if listed, _, err := s.ListEvents(ctx, store.EventFilter{}, 10); err != nil || len(listed) != 1 {
			t.Fatalf("the events after a failed create: %+v, %v", listed, err)
		}
	})
}

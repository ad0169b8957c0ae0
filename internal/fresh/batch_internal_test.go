package fresh

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// The batches in which PostgreSQL's reads of users that miss the cache
// share their statements (batch.go). A statement here blocks until the
// test answers it, and answers each key it was sent with the key and the
// statement's number.

type scriptedBatches struct {
	*Batches[string]
	sent    chan []string // the keys of a statement sent
	answers chan error    // its outcome: nil answers every key but "missing"
}

func newScriptedBatches() *scriptedBatches {
	s := &scriptedBatches{Batches: &Batches[string]{}, sent: make(chan []string, 16), answers: make(chan error)}
	n := 0
	s.read = func(_ context.Context, keys []string) (map[string]string, error) {
		s.sent <- slices.Clone(keys)
		if err := <-s.answers; err != nil {
			return nil, err
		}
		n++
		got := map[string]string{}
		for _, k := range keys {
			if k != "missing" {
				got[k] = k + "@" + string(rune('0'+n))
			}
		}
		return got, nil
	}
	return s
}

type batchResult struct {
	v   string
	ok  bool
	err error
}

func (s *scriptedBatches) getAsync(ctx context.Context, key string) chan batchResult {
	out := make(chan batchResult, 1)
	go func() {
		v, ok, err := s.Get(ctx, key)
		out <- batchResult{v, ok, err}
	}()
	return out
}

func (s *scriptedBatches) waitSent(t *testing.T, want ...string) {
	t.Helper()
	select {
	case keys := <-s.sent:
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Fatalf("a statement was sent with %q; want %q", keys, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no statement was sent")
	}
}

// waitJoined waits until n reads have joined the open batch.
func (s *scriptedBatches) waitJoined(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		joined := s.next != nil && len(s.next.keys) >= n
		s.mu.Unlock()
		if joined {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads did not join the open batch", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func expectBatch(t *testing.T, what string, ch chan batchResult, want batchResult) {
	t.Helper()
	select {
	case r := <-ch:
		if r.v != want.v || r.ok != want.ok || !errors.Is(r.err, want.err) {
			t.Fatalf("%s: got %+v; want %+v", what, r, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
}

// TestBatchesShareAStatementSentAfterEachRead: the reads that arrive while
// a statement is in flight are not answered by it (a commit acknowledged
// before they arrived may be missing from it); they go together in the
// next, each key once, and each read gets its own key's value, or none.
func TestBatchesShareAStatementSentAfterEachRead(t *testing.T) {
	ctx := context.Background()
	s := newScriptedBatches()

	first := s.getAsync(ctx, "a")
	s.waitSent(t, "a") // statement 1 in flight

	b := s.getAsync(ctx, "b")
	s.waitJoined(t, 1)
	c := s.getAsync(ctx, "c")
	b2 := s.getAsync(ctx, "b")
	missing := s.getAsync(ctx, "missing")
	a2 := s.getAsync(ctx, "a") // a again: statement 1 may predate a commit it must see
	s.waitJoined(t, 5)         // b twice: each read joins, the statement sends b once
	select {
	case r := <-b:
		t.Fatalf("a read arriving during statement 1 was answered (%+v) before it", r)
	case <-time.After(20 * time.Millisecond):
	}

	s.answers <- nil
	expectBatch(t, "the read that sent statement 1", first, batchResult{v: "a@1", ok: true})
	s.waitSent(t, "a", "b", "c", "missing")
	s.answers <- nil
	for _, r := range []struct {
		what string
		ch   chan batchResult
		want batchResult
	}{
		{"b", b, batchResult{v: "b@2", ok: true}},
		{"b again", b2, batchResult{v: "b@2", ok: true}},
		{"c", c, batchResult{v: "c@2", ok: true}},
		{"a again", a2, batchResult{v: "a@2", ok: true}},
		{"a key with no value", missing, batchResult{}},
	} {
		expectBatch(t, r.what, r.ch, r.want)
	}
}

// TestBatchesErrorsAndContexts: a statement's error reaches every read of
// its batch; a read that goes away returns at once, and the statement
// still answers the others.
func TestBatchesErrorsAndContexts(t *testing.T) {
	s := newScriptedBatches()
	blocker := s.getAsync(context.Background(), "x")
	s.waitSent(t, "x")

	gone, cancel := context.WithCancel(context.Background())
	leaver := s.getAsync(gone, "a")
	s.waitJoined(t, 1)
	stayer := s.getAsync(context.Background(), "b")
	s.waitJoined(t, 2)
	cancel()
	expectBatch(t, "the read that went away", leaver, batchResult{err: context.Canceled})

	failed := errors.New("the database went away")
	s.answers <- failed
	expectBatch(t, "the read of the failed statement", blocker, batchResult{err: failed})
	s.waitSent(t, "a", "b")
	s.answers <- nil
	expectBatch(t, "the read that stayed", stayer, batchResult{v: "b@1", ok: true})
}

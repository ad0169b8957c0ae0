package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedVersion is a pgVersion whose questions block until the test
// answers them, one at a time.
type scriptedVersion struct {
	*pgVersion
	asked   chan struct{} // a question was sent
	answers chan dbState  // the answer to the question in flight
}

func newScriptedVersion() *scriptedVersion {
	s := &scriptedVersion{pgVersion: newPGVersion(nil, &atomic.Int64{}),
		asked: make(chan struct{}, 16), answers: make(chan dbState)}
	s.ask = func(context.Context) (dbState, bool, error) {
		s.asked <- struct{}{}
		return <-s.answers, true, nil
	}
	return s
}

type readResult struct {
	v   dbState
	err error
}

// read asks for the version in the background.
func (s *scriptedVersion) read(ctx context.Context) chan readResult {
	out := make(chan readResult, 1)
	go func() {
		v, _, err := s.current(ctx)
		out <- readResult{v.state, err}
	}()
	return out
}

func (s *scriptedVersion) waitAsked(t *testing.T) {
	t.Helper()
	select {
	case <-s.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("no question was sent")
	}
}

// waitJoined waits until the open round (the next question) exists: a read
// arriving after this has joined it or opened it.
func (s *scriptedVersion) waitOpen(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		open := s.next != nil
		s.mu.Unlock()
		if open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no round opened")
		}
		time.Sleep(time.Millisecond)
	}
}

func expect(t *testing.T, what string, ch chan readResult, want dbState) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.v != want {
			t.Fatalf("%s: got %+v, %v; want %+v", what, r.v, r.err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
}

func pending(t *testing.T, what string, ch chan readResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s was answered (%+v, %v) by a question sent before it arrived", what, r.v, r.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestPGVersionAnswersOnlyReadsThatArrivedBeforeTheQuestion: a read that
// arrives while a question is in flight is never answered by it (the
// question may have been answered by the database before a commit that the
// read must see); it waits for the next question, which it shares with
// every read that arrives meanwhile.
func TestPGVersionAnswersOnlyReadsThatArrivedBeforeTheQuestion(t *testing.T) {
	ctx := context.Background()
	s := newScriptedVersion()

	first := s.read(ctx)
	s.waitAsked(t) // question 1 in flight

	// Arriving now: a commit acknowledged just before may be missing from
	// question 1's answer.
	second := s.read(ctx)
	s.waitOpen(t)
	third := s.read(ctx)
	pending(t, "a read arriving during question 1", second)

	s.answers <- dbState{n: 1, nonce: 10}
	expect(t, "the read that sent question 1", first, dbState{n: 1, nonce: 10})
	pending(t, "a read arriving during question 1", second)

	s.waitAsked(t) // question 2, for both reads that arrived during question 1
	s.answers <- dbState{n: 2, nonce: 20}
	expect(t, "the second read", second, dbState{n: 2, nonce: 20})
	expect(t, "the third read", third, dbState{n: 2, nonce: 20})
	if n := s.rounds.Load(); n != 2 {
		t.Fatalf("%d questions for three reads, two of them arriving together; want 2", n)
	}
}

// TestPGVersionReadsShareQuestions: many concurrent reads send far fewer
// questions than there are reads, and each gets an answer.
func TestPGVersionReadsShareQuestions(t *testing.T) {
	p := newPGVersion(nil, &atomic.Int64{})
	var n atomic.Int64
	p.ask = func(context.Context) (dbState, bool, error) {
		time.Sleep(200 * time.Microsecond) // a round trip
		return dbState{n: n.Add(1)}, true, nil
	}
	const readers, each = 32, 50
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range each {
				v, ok, err := p.current(context.Background())
				if err != nil || !ok {
					t.Errorf("current: %v, %v", ok, err)
					return
				}
				if v.state.n <= last || v.seq != v.state.n {
					t.Errorf("a later read of one reader got version %+v after %d (seq and n move together here)", v, last)
					return
				}
				last = v.state.n
			}
		}()
	}
	wg.Wait()
	if q := p.rounds.Load(); q > readers*each/4 {
		t.Fatalf("%d questions for %d reads: reads did not share them", q, readers*each)
	}
	t.Logf("%d questions for %d reads", p.rounds.Load(), readers*each)
}

// TestPGVersionReadsWaitUnderTheirOwnContext: a read that goes away while
// its round waits returns at once, the one that opened the round included;
// the question still answers the others, and runs under no read's context.
func TestPGVersionReadsWaitUnderTheirOwnContext(t *testing.T) {
	s := newScriptedVersion()
	var sawCancel atomic.Bool
	ask := s.ask
	s.ask = func(ctx context.Context) (dbState, bool, error) {
		v, ok, err := ask(ctx)
		sawCancel.Store(sawCancel.Load() || ctx.Err() != nil)
		return v, ok, err
	}
	blocker := s.read(context.Background())
	s.waitAsked(t) // question 1 in flight: the next round waits for it

	openerCtx, cancelOpener := context.WithCancel(context.Background())
	opener := s.read(openerCtx)
	s.waitOpen(t)
	follower := s.read(context.Background())
	time.Sleep(10 * time.Millisecond) // let the follower join the opener's round
	cancelOpener()
	select {
	case r := <-opener:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a cancelled read got %+v, %v", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled read kept waiting for its round")
	}

	s.answers <- dbState{n: 1}
	expect(t, "the first read", blocker, dbState{n: 1})
	s.waitAsked(t) // question 2, for the round the cancelled read opened
	s.answers <- dbState{n: 2}
	expect(t, "a read in the round of a cancelled one", follower, dbState{n: 2})
	if sawCancel.Load() {
		t.Fatal("a question ran under a cancelled context")
	}
}

// TestPGVersionPanicIsAnError: a question that panics fails its round's
// reads with an error, and the next round is asked as usual.
func TestPGVersionPanicIsAnError(t *testing.T) {
	p := newPGVersion(nil, &atomic.Int64{})
	panics := true
	p.ask = func(context.Context) (dbState, bool, error) {
		if panics {
			panics = false
			panic("boom")
		}
		return dbState{n: 7}, true, nil
	}
	if _, _, err := p.current(context.Background()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a question that panicked: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if v, ok, err := p.current(context.Background()); err != nil || !ok || v.state.n != 7 {
			t.Errorf("the next round: %+v, %v, %v", v, ok, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the round after a panic never ran")
	}
}

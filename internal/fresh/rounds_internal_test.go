package fresh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The rounds in which PostgreSQL's reads share their questions to the
// change log (cache.go). A question here answers with its number, carried
// as the round's error (answer), so a read can tell which one answered it.

type answer int64

func (a answer) Error() string { return fmt.Sprint(int64(a)) }

// scripted is rounds whose questions block until the test answers them,
// one at a time.
type scripted struct {
	*rounds
	asked   chan struct{} // a question was sent
	answers chan int64    // the answer to the question in flight
}

func newScripted() *scripted {
	s := &scripted{rounds: &rounds{}, asked: make(chan struct{}, 16), answers: make(chan int64)}
	s.ask = func(context.Context) error {
		s.asked <- struct{}{}
		return answer(<-s.answers)
	}
	return s
}

type readResult struct {
	v   int64 // the question that answered
	err error // another error
}

// read follows in the background.
func (s *scripted) read(ctx context.Context) chan readResult {
	out := make(chan readResult, 1)
	go func() {
		var a answer
		if err := s.follow(ctx); errors.As(err, &a) {
			out <- readResult{v: int64(a)}
		} else {
			out <- readResult{err: err}
		}
	}()
	return out
}

func (s *scripted) waitAsked(t *testing.T) {
	t.Helper()
	select {
	case <-s.asked:
	case <-time.After(5 * time.Second):
		t.Fatal("no question was sent")
	}
}

// waitJoined waits until the open round (the next question) exists: a read
// arriving after this has joined it or opened it.
func (s *scripted) waitOpen(t *testing.T) {
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

func expect(t *testing.T, what string, ch chan readResult, want int64) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.v != want {
			t.Fatalf("%s: got %v, %v; want %v", what, r.v, r.err, want)
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

// TestRoundsAnswersOnlyReadsThatArrivedBeforeTheQuestion: a read that
// arrives while a question is in flight is never answered by it (the
// question may have been answered by the database before a commit that the
// read must see); it waits for the next question, which it shares with
// every read that arrives meanwhile.
func TestRoundsAnswersOnlyReadsThatArrivedBeforeTheQuestion(t *testing.T) {
	ctx := context.Background()
	s := newScripted()

	first := s.read(ctx)
	s.waitAsked(t) // question 1 in flight

	// Arriving now: a commit acknowledged just before may be missing from
	// question 1's answer.
	second := s.read(ctx)
	s.waitOpen(t)
	third := s.read(ctx)
	pending(t, "a read arriving during question 1", second)

	s.answers <- 1
	expect(t, "the read that sent question 1", first, 1)
	pending(t, "a read arriving during question 1", second)

	s.waitAsked(t) // question 2, for both reads that arrived during question 1
	s.answers <- 2
	expect(t, "the second read", second, 2)
	expect(t, "the third read", third, 2)
	if n := s.sent.Load(); n != 2 {
		t.Fatalf("%d questions for three reads, two of them arriving together; want 2", n)
	}
}

// TestRoundsReadsShareQuestions: many concurrent reads send far fewer
// questions than there are reads, and each gets an answer.
func TestRoundsReadsShareQuestions(t *testing.T) {
	var n atomic.Int64
	r := &rounds{ask: func(context.Context) error {
		time.Sleep(200 * time.Microsecond) // a round trip
		return answer(n.Add(1))
	}}
	const readers, each = 32, 50
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			for range each {
				var a answer
				if err := r.follow(context.Background()); !errors.As(err, &a) {
					t.Errorf("follow: %v", err)
					return
				}
				if int64(a) <= last {
					t.Errorf("a later read of one reader was answered by question %d after %d", a, last)
					return
				}
				last = int64(a)
			}
		}()
	}
	wg.Wait()
	if q := r.sent.Load(); q > readers*each/4 {
		t.Fatalf("%d questions for %d reads: reads did not share them", q, readers*each)
	}
	t.Logf("%d questions for %d reads", r.sent.Load(), readers*each)
}

// TestRoundsReadsWaitUnderTheirOwnContext: a read that goes away while
// its round waits returns at once, the one that opened the round included;
// the question still answers the others, and runs under no read's context.
func TestRoundsReadsWaitUnderTheirOwnContext(t *testing.T) {
	s := newScripted()
	var sawCancel atomic.Bool
	ask := s.ask
	s.ask = func(ctx context.Context) error {
		err := ask(ctx)
		sawCancel.Store(sawCancel.Load() || ctx.Err() != nil)
		return err
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
			t.Fatalf("a cancelled read got %v, %v", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled read kept waiting for its round")
	}

	s.answers <- 1
	expect(t, "the first read", blocker, 1)
	s.waitAsked(t) // question 2, for the round the cancelled read opened
	s.answers <- 2
	expect(t, "a read in the round of a cancelled one", follower, 2)
	if sawCancel.Load() {
		t.Fatal("a question ran under a cancelled context")
	}
}

// TestRoundsPanicIsAnError: a question that panics fails its round's
// reads with an error, and the next round is asked as usual.
func TestRoundsPanicIsAnError(t *testing.T) {
	panics := true
	r := &rounds{ask: func(context.Context) error {
		if panics {
			panics = false
			panic("boom")
		}
		return nil
	}}
	if err := r.follow(context.Background()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a question that panicked: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.follow(context.Background()); err != nil {
			t.Errorf("the next round: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the round after a panic never ran")
	}
}

package sqldb_test

import (
	"context"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
)

// TestCanceledStatementKeepsItsConnection: on PostgreSQL, a statement whose
// request went away (its context canceled) finishes and leaves its
// connection open for the next request; one still running a second later
// is cut off, and one past its deadline (the database does not answer) is
// cut off at once. Both pools: the one every read runs on, and the
// searches' own.
func TestCanceledStatementKeepsItsConnection(t *testing.T) {
	testenv.RequirePostgres(t)
	t.Parallel()
	s := openDB(t, testenv.Postgres)
	bg := context.Background()
	// alive reports whether PostgreSQL still has the backend pid a moment
	// later (a closed connection's backend leaves a few milliseconds
	// after), waiting up to two seconds for it to go when want is false.
	alive := func(t *testing.T, pid int, want bool) bool {
		t.Helper()
		if want {
			time.Sleep(300 * time.Millisecond)
		}
		probe, err := s.ConnForTest(bg, false)
		if err != nil {
			t.Fatal(err)
		}
		defer probe.Close()
		for end := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var n int
			if err := probe.QueryRowContext(bg, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 == want || time.Now().After(end) {
				return n == 1
			}
		}
	}
	// sleep runs pg_sleep(seconds) on a connection of the pool under the
	// context ctx makes just before the statement is sent, and returns the
	// connection's backend, how long the statement took, and its error.
	sleep := func(t *testing.T, search bool, ctx func() context.Context, seconds float64) (int, time.Duration, error) {
		t.Helper()
		c, err := s.ConnForTest(bg, search)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var pid int
		if err := c.QueryRowContext(bg, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = c.ExecContext(ctx(), "SELECT pg_sleep($1)", seconds)
		return pid, time.Since(start), err
	}
	canceledAfter := func(d time.Duration) func() context.Context {
		return func() context.Context {
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(d, cancel)
			return ctx
		}
	}
	pastDeadline := func(d time.Duration) func() context.Context {
		return func() context.Context {
			ctx, cancel := context.WithTimeout(bg, d)
			t.Cleanup(cancel)
			return ctx
		}
	}
	for _, pool := range []struct {
		name   string
		search bool
	}{{"read pool", false}, {"search pool", true}} {
		t.Run(pool.name, func(t *testing.T) {
			// A client gone mid-statement: the statement ends as it
			// would have, and its connection stays.
			pid, took, err := sleep(t, pool.search, canceledAfter(20*time.Millisecond), 0.2)
			if err != nil || took < 150*time.Millisecond {
				t.Errorf("a canceled 0.2 s statement: %v after %v; want it left to finish", err, took)
			}
			if !alive(t, pid, true) {
				t.Errorf("the connection of a statement canceled by its client was closed")
			}
			// Still running past the grace: cut off, a second later.
			pid, took, err = sleep(t, pool.search, canceledAfter(20*time.Millisecond), 10)
			if err == nil || took > 5*time.Second {
				t.Errorf("a canceled 10 s statement: %v after %v; want an error within a few seconds", err, took)
			}
			if alive(t, pid, false) {
				t.Errorf("the connection of a canceled statement still running after the grace was kept")
			}
			// Past its deadline: cut off at once.
			pid, took, err = sleep(t, pool.search, pastDeadline(20*time.Millisecond), 10)
			if err == nil || took > 700*time.Millisecond {
				t.Errorf("a statement past its deadline: %v after %v; want an error at once", err, took)
			}
			if alive(t, pid, false) {
				t.Errorf("the connection of a statement past its deadline was kept")
			}
			// Past its deadline, canceled by a timer before the deadline's
			// own: cut off at once too.
			pid, took, err = sleep(t, pool.search, func() context.Context {
				return canceledPastDeadline{Context: canceledAfter(20 * time.Millisecond)(), deadline: time.Now().Add(10 * time.Millisecond)}
			}, 10)
			if err == nil || took > 700*time.Millisecond {
				t.Errorf("a statement canceled past its deadline: %v after %v; want an error at once", err, took)
			}
			if alive(t, pid, false) {
				t.Errorf("the connection of a statement canceled past its deadline was kept")
			}
		})
	}
}

// canceledPastDeadline is a context canceled (not timed out) whose
// deadline has passed by then: what a statement's context is when the timer
// that cancels it at its deadline fires before the deadline's own.
type canceledPastDeadline struct {
	context.Context
	deadline time.Time
}

func (c canceledPastDeadline) Deadline() (time.Time, bool) { return c.deadline, true }

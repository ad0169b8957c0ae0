package store_test

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
	s := openStore(t, testenv.Postgres)
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
	// sleep runs pg_sleep(seconds) on a connection of the pool under ctx,
	// and returns the connection's backend, how long the statement took,
	// and its error.
	sleep := func(t *testing.T, search bool, ctx context.Context, seconds float64) (int, time.Duration, error) {
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
		_, err = c.ExecContext(ctx, "SELECT pg_sleep($1)", seconds)
		return pid, time.Since(start), err
	}
	canceledAfter := func(d time.Duration) context.Context {
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(d, cancel)
		return ctx
	}
	for _, pool := range []struct {
		name   string
		search bool
	}{{"read pool", false}, {"search pool", true}} {
		t.Run(pool.name, func(t *testing.T) {
			// A client gone mid-statement: the statement ends as it
			// would have, and its connection stays.
			pid, took, _ := sleep(t, pool.search, canceledAfter(20*time.Millisecond), 0.2)
			if took < 150*time.Millisecond {
				t.Errorf("a canceled 0.2 s statement returned after %v; want it left to finish", took)
			}
			if !alive(t, pid, true) {
				t.Errorf("the connection of a statement canceled by its client was closed")
			}
			// Still running past the grace: cut off, a second later.
			pid, took, err := sleep(t, pool.search, canceledAfter(20*time.Millisecond), 10)
			if err == nil || took > 5*time.Second {
				t.Errorf("a canceled 10 s statement: %v after %v; want an error within a few seconds", err, took)
			}
			if alive(t, pid, false) {
				t.Errorf("the connection of a canceled statement still running after the grace was kept")
			}
			// Past its deadline: cut off at once.
			ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
			defer cancel()
			pid, took, err = sleep(t, pool.search, ctx, 10)
			if err == nil || took > 700*time.Millisecond {
				t.Errorf("a statement past its deadline: %v after %v; want an error at once", err, took)
			}
			if alive(t, pid, false) {
				t.Errorf("the connection of a statement past its deadline was kept")
			}
		})
	}
}

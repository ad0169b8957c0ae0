package httpapi_test

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// The rate limit holds against hostile clients.
func TestRateLimitHolds(t *testing.T) {
	t.Parallel()
	limited := func(proxies ...string) testenv.Option {
		return testenv.WithConfig(func(c *config.Config) {
			c.RateLimit = 2 // bursts of 4
			c.TrustedProxies = proxies
		})
	}
	count429 := func(e *testenv.Env, n int, req func(i int) testenv.Req) int {
		got := 0
		for i := range n {
			if res := e.Do(req(i)); res.Status == http.StatusTooManyRequests {
				got++
				if res.Header.Get("Retry-After") == "" {
					t.Errorf("a 429 without Retry-After")
				}
			}
		}
		return got
	}
	spoofed := func(i int) testenv.Req {
		return testenv.Req{Method: "GET", Path: "/permissions",
			Headers: map[string]string{"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i%250), "X-Real-IP": fmt.Sprintf("198.51.100.%d", i%250)}}
	}

	t.Run("a rotating X-Forwarded-For from a client gets 429s", func(t *testing.T) {
		e := testenv.Start(t, testenv.SQLite, limited())
		if n := count429(e, 20, spoofed); n < 14 {
			t.Fatalf("%d of 20 spoofed requests were 429, want at least 14 (burst 4, 2/s)", n)
		}
	})
	t.Run("behind a trusted proxy, its X-Forwarded-For names the client", func(t *testing.T) {
		e := testenv.Start(t, testenv.SQLite, limited("127.0.0.1/32"))
		if n := count429(e, 20, spoofed); n != 0 {
			t.Fatalf("%d of 20 requests of 20 different clients were 429", n)
		}
		same := func(int) testenv.Req {
			return testenv.Req{Method: "GET", Path: "/permissions", Headers: map[string]string{"X-Forwarded-For": "203.0.113.7"}}
		}
		if n := count429(e, 20, same); n < 14 {
			t.Fatalf("%d of 20 requests of one client were 429", n)
		}
	})
	t.Run("a bad-token flood costs no store query past the limit", func(t *testing.T) {
		e := testenv.Start(t, testenv.SQLite, limited())
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}) // the owner's token authenticates once
		// The clean-ups that run once at start (app.every) count statements
		// too: wait until they are done.
		for last, deadline := int64(-1), time.Now().Add(10*time.Second); ; {
			time.Sleep(100 * time.Millisecond)
			n := e.App.Store.QueryCount()
			if n == last || time.Now().After(deadline) {
				break
			}
			last = n
		}
		before := e.App.Store.QueryCount()
		n := count429(e, 50, func(int) testenv.Req {
			return testenv.Req{Method: "GET", Path: "/roles", Token: "gh_" + rand.Text()}
		})
		queries := e.App.Store.QueryCount() - before
		if n < 44 { // the address's burst of 4, less the owner's request, plus the refill
			t.Fatalf("%d of 50 bad-token requests were 429", n)
		}
		if queries > int64(50-n)*2 {
			t.Fatalf("%d store queries for %d requests past the limit and %d admitted", queries, n, 50-n)
		}
		t.Logf("50 bad tokens: %d were 429, %d store queries", n, queries)
		// A known token has its own bucket: the flood from its address does
		// not hold it up.
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner})
	})
}

package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// The budgets a user has, whatever credentials they mint: at most 25 tokens
// (tokens_test.go has the rest of the tokens' life), one rate-limit bucket
// for all of them, at most 5 event streams at once.

// A user holds at most 25 live tokens: the 26th is 409 limit_exceeded,
// whoever mints it, and changes nothing; expired tokens do not count (the
// next create removes them), a revoked one frees its place, and other
// users are unaffected.
func TestTokenLimit(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice") // her first token
		bob := e.NewUser("bob")
		tokens := "/users/" + alice.ID + "/tokens"
		create := func(as string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: tokens, Token: as, Body: map[string]any{"name": "more"}})
		}
		count := func() int {
			var l api.TokenList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: tokens, Token: alice.Token}).JSON(t, &l)
			return len(l.Items)
		}

		// An expired token is no longer hers to use: it does not count.
		expired := model.Token{ID: "0192f1a0-0000-7000-8000-0000000000e1", UserID: alice.ID, Name: "old",
			CreatedAt: time.Now().Add(-time.Hour), ExpiresAt: new(time.Now().Add(-time.Minute))}
		if _, err := e.App.Store.Write(context.Background(), func(tx *store.Tx) error {
			return tx.InsertToken(context.Background(), expired, guild.HashToken(guild.NewSecret()))
		}); err != nil {
			t.Fatal(err)
		}

		var last api.TokenCreated
		for i := 2; i <= 25; i++ {
			res := create(alice.Token)
			if res.Status != http.StatusCreated {
				t.Fatalf("token %d: %s", i, res)
			}
			res.JSON(t, &last)
		}
		seq := e2eSeq(t, e)
		for _, as := range []struct{ who, token string }{{"alice", alice.Token}, {"the owner", e.Owner}} {
			p := e2eProblem(t, create(as.token), http.StatusConflict, "limit_exceeded")
			if p.Limit == nil || *p.Limit != "tokens" {
				t.Errorf("the 26th token minted by %s: limit %v, want tokens", as.who, p.Limit)
			}
		}
		if n := count(); n != 25 { // the expired one went with the second
			t.Errorf("%d tokens listed after the refusals, want 25", n)
		}
		if got := e2eSeq(t, e); got != seq {
			t.Errorf("a refused token wrote events (seq %d → %d)", seq, got)
		}

		// Another user's tokens are theirs to count.
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users/" + bob.ID + "/tokens", Token: bob.Token,
			Body: map[string]any{"name": "bob's second"}})

		// A revoked token frees its place, once.
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: tokens + "/" + last.Id, Token: alice.Token})
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: tokens, Token: alice.Token, Body: map[string]any{"name": "again"}})
		e2eProblem(t, create(alice.Token), http.StatusConflict, "limit_exceeded")
	})
}

// Tokens that expire do not pile up: a user minting tokens that expire a
// moment later holds, and lists, at most the limit, because each create
// first removes the user's expired tokens (without an event).
func TestTokenLimitExpiredTokensRemoved(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice") // her first token, which never expires
		bob := e.NewUser("bob")
		tokens := "/users/" + alice.ID + "/tokens"
		list := func() map[string]bool {
			var l api.TokenList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: tokens, Token: alice.Token}).JSON(t, &l)
			ids := map[string]bool{}
			for _, tok := range l.Items {
				ids[tok.Id] = true
			}
			if len(ids) > 25 {
				t.Fatalf("%d tokens listed, more than the limit of 25", len(ids))
			}
			return ids
		}
		// Bob's expired tokens are his: only the creator's are removed.
		bobExpiring := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users/" + bob.ID + "/tokens", Token: bob.Token,
			Body: map[string]any{"name": "bob's brief", "expires_at": time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)}})
		var bobTok api.TokenCreated
		bobExpiring.JSON(t, &bobTok)

		// Two rounds of 24 tokens that expire a moment after they are made:
		// each round fills her places, and each starts once the last round's
		// tokens have expired.
		var expired []string
		for round := range 2 {
			var made []string
			var last time.Time
			for i := range 24 {
				last = time.Now().Add(1500 * time.Millisecond)
				res := e.Do(testenv.Req{Method: "POST", Path: tokens, Token: alice.Token,
					Body: map[string]any{"name": fmt.Sprintf("brief %d.%d", round, i), "expires_at": last.UTC().Format(time.RFC3339Nano)}})
				if res.Status != http.StatusCreated {
					t.Fatalf("round %d, token %d: %s", round, i, res)
				}
				var tok api.TokenCreated
				res.JSON(t, &tok)
				made = append(made, tok.Id)
				list()
			}
			expired = append(expired, made...)
			time.Sleep(time.Until(last) + 10*time.Millisecond)
		}

		// One more: the second round's tokens go as it is made.
		seq := e2eSeq(t, e)
		var kept api.TokenCreated
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: tokens, Token: alice.Token,
			Body: map[string]any{"name": "kept"}}).JSON(t, &kept)
		ids := list()
		if len(ids) != 2 || !ids[kept.Id] {
			t.Errorf("after the expired tokens: %d tokens listed, want 2 (her first and the new one)", len(ids))
		}
		for _, id := range expired {
			if ids[id] {
				t.Errorf("expired token %s still listed", id)
			}
		}
		if got := e2eSeq(t, e); got != seq+1 {
			t.Errorf("the create wrote %d events, want 1 (user.token.created; removing expired tokens writes none)", got-seq)
		}
		var l api.TokenList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/tokens", Token: bob.Token}).JSON(t, &l)
		if len(l.Items) != 2 {
			t.Errorf("bob lists %d tokens, want 2: another user's create removed his expired one", len(l.Items))
		}
	})
}

// Creates racing for the last places of a user's tokens take exactly those
// places: the count and the insert are one serialized write.
func TestTokenLimitConcurrentCreates(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) { c.MaxTokensPerUser = 5 }))
		alice := e.NewUser("alice") // one place taken
		const racers = 12
		statuses := make(chan int, racers)
		errs := make(chan error, racers)
		for range racers {
			go func() {
				status, _, err := sseRawDo(context.Background(), e, alice.Token, "POST", "/users/"+alice.ID+"/tokens", map[string]any{"name": "racer"})
				statuses <- status
				errs <- err
			}()
		}
		created := 0
		for range racers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			switch s := <-statuses; s {
			case http.StatusCreated:
				created++
			case http.StatusConflict:
			default:
				t.Errorf("status %d", s)
			}
		}
		var l api.TokenList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: alice.Token}).JSON(t, &l)
		if created != 4 || len(l.Items) != 5 {
			t.Fatalf("%d of %d racing creates succeeded, %d tokens held; want 4 and the limit, 5", created, racers, len(l.Items))
		}
	})
}

// All of a user's tokens share one rate-limit bucket: ten tokens used in
// turn are refused as one would be, whichever address they come from, and
// another user keeps a bucket of their own.
func TestRateLimitPerUser(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) {
		// Bursts of 1, refilled every 1,000 s: no refill happens during
		// the test, however slow the runner, so what is admitted is
		// exactly the burst of the buckets the requests spend.
		c.RateLimit = 0.001
		// X-Forwarded-For names the client, so each request below can come
		// from an address of its own.
		c.TrustedProxies = []string{"127.0.0.1/32"}
	}))
	addr := 0
	from := func() map[string]string {
		addr++
		return map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.%d.%d", addr/250, addr%250+1)}
	}
	newUser := func(name string) testenv.User {
		res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Headers: from(),
			Body: map[string]any{"username": name}})
		return testenv.User{ID: res.Map(t)["id"].(string), Username: name}
	}
	// Minted outside HTTP, so that making them spends no bucket.
	mint := func(u testenv.User) string {
		_, secret, err := e.App.Service.IssueToken(context.Background(), u.Username, "spare")
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	alice, bob := newUser("alice"), newUser("bob")
	aliceTokens := make([]string, 10)
	for i := range aliceTokens {
		aliceTokens[i] = mint(alice)
	}
	bobToken := mint(bob)
	// Each token's first request is its address's (the limiter knows a
	// token once it authenticated); a fresh address each has room for it.
	for _, tok := range append([]string{bobToken}, aliceTokens...) {
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/me", Token: tok, Headers: from()})
	}

	const n = 20
	refused := 0
	for i := range n {
		res := e.Do(testenv.Req{Method: "GET", Path: "/me", Token: aliceTokens[i%len(aliceTokens)], Headers: from()})
		switch res.Status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			refused++
			e2eProblem(t, res, http.StatusTooManyRequests, "rate_limited")
			if res.Header.Get("Retry-After") == "" {
				t.Errorf("a 429 without Retry-After")
			}
		default:
			t.Fatalf("request %d: %s", i, res)
		}
	}
	// One bucket, its burst of 1 admitted: a bucket per token would admit
	// 10, one per address all 20.
	if want := n - 1; refused != want {
		t.Fatalf("%d of %d requests over ten tokens of one user were 429, want %d: they do not share one budget",
			refused, n, want)
	}
	// Bob's bucket is his own.
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/me", Token: bobToken, Headers: from()})
	if got, want := res.Header.Get("RateLimit-Remaining"), "0"; got != want {
		t.Errorf("bob's RateLimit-Remaining %s, want %s (a full bucket less this request)", got, want)
	}
}

// A token that stops authenticating (revoked) stops spending its user's
// bucket: past its first refusal its requests are its address's, so that
// whoever still holds it cannot keep its user's bucket empty.
func TestRateLimitRevokedTokenSpendsItsAddress(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) {
		c.RateLimit = 0.05 // bursts of 1, refilled every 20 s
		c.TrustedProxies = []string{"127.0.0.1/32"}
	}))
	addr := 0
	from := func() map[string]string {
		addr++
		return map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", addr)}
	}
	res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Headers: from(),
		Body: map[string]any{"username": "alice"}})
	aliceID := res.Map(t)["id"].(string)
	// Minted outside HTTP, so that making it spends no bucket.
	leaked, secret, err := e.App.Service.IssueToken(context.Background(), "alice", "leaked")
	if err != nil {
		t.Fatal(err)
	}
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/me", Token: secret, Headers: from()}) // known from now on
	if _, err := e.App.Store.Write(context.Background(), func(tx *store.Tx) error {
		return tx.DeleteToken(context.Background(), aliceID, leaked.ID)
	}); err != nil {
		t.Fatal(err)
	}
	// Its first request after the revocation still spends alice's bucket
	// (the limiter answers before the credential lookup), and empties it.
	e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/me", Token: secret, Headers: from()}), http.StatusUnauthorized, "unauthenticated")
	for i := range 5 {
		if res := e.Do(testenv.Req{Method: "GET", Path: "/me", Token: secret, Headers: from()}); res.Status != http.StatusUnauthorized {
			t.Fatalf("request %d of the revoked token from a fresh address: %s (its user's empty bucket, not its address's)", i+2, res)
		}
	}
}

// A user has at most 5 event streams open at once on an instance, however
// they open them (tokens, tickets): the 6th is 429 rate_limited with
// Retry-After and leaves its ticket unused; a stream that ends, closed by
// its client or by the server, frees its place.
func TestEventStreamsPerUser(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		var second api.TokenCreated
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users/" + auditor.ID + "/tokens", Token: auditor.Token,
			Body: map[string]any{"name": "second"}}).JSON(t, &second)
		ticket := func(token string) string {
			var tk api.StreamTicket
			e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/events/ticket", Token: token}).JSON(t, &tk)
			return "?ticket=" + url.QueryEscape(tk.Ticket)
		}
		refused := func(token, query, method string) {
			t.Helper()
			var res *testenv.Response
			if method == http.MethodHead {
				res = e.Do(testenv.Req{Method: method, Path: "/events" + query, Token: token})
			} else {
				// A stream that opens is not read to its end.
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				resp, err := sseDial(ctx, e, token, query, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				res = &testenv.Response{Status: resp.StatusCode, Header: resp.Header}
				if res.Status == http.StatusOK {
					t.Fatalf("GET /events%s past the user's streams: opened", query)
				}
				if res.Body, err = io.ReadAll(resp.Body); err != nil {
					t.Fatal(err)
				}
			}
			if res.Status != http.StatusTooManyRequests {
				t.Fatalf("%s /events%s past the user's streams: %s", method, query, res)
			}
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("Retry-After %q", res.Header.Get("Retry-After"))
			}
			if method == http.MethodGet {
				e2eProblem(t, res, http.StatusTooManyRequests, "rate_limited")
			}
		}
		// eventually opens a stream once a place is free: a stream the
		// client closed ends on the server when the server sees it.
		eventually := func(token, query string) *sseStream {
			t.Helper()
			for deadline := time.Now().Add(sseWait); ; {
				ctx, cancel := context.WithCancel(context.Background())
				resp, err := sseDial(ctx, e, token, query, nil)
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
					return sseWrap(t, resp, cancel)
				}
				resp.Body.Close()
				cancel()
				time.Sleep(20 * time.Millisecond)
			}
		}

		open := []*sseStream{
			sseOpen(t, e, auditor.Token, "", nil),
			sseOpen(t, e, auditor.Token, "", nil),
			sseOpen(t, e, second.Token, "", nil),
			sseOpen(t, e, "", ticket(second.Token), nil),
			sseOpen(t, e, second.Token, "", nil),
		}
		refused(auditor.Token, "", http.MethodGet)
		refused(second.Token, "", http.MethodGet)
		refused(auditor.Token, "", http.MethodHead)
		kept := ticket(auditor.Token)
		refused("", kept, http.MethodGet)
		// Another user's streams are theirs.
		sseOpen(t, e, e.Owner, "", nil)

		// Closed by the client: the refused ticket opens the next one.
		open[0].Close()
		open[0] = eventually("", kept)
		refused(auditor.Token, "", http.MethodGet)

		// Ended by the server: revoking a token ends its streams at the
		// next event.
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + auditor.ID + "/tokens/" + second.Id, Token: auditor.Token})
		e.NewChannel("wake")
		for _, s := range open[2:] {
			for {
				if _, ok, _ := s.nextFrame(t, nil); !ok {
					break
				}
			}
		}
		for range 3 {
			open = append(open, eventually(auditor.Token, ""))
		}
		refused(auditor.Token, "", http.MethodGet)
	})
}

package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/testenv"
)

// HTTP itself (docs/design.md §3, §12 "Paths"): a path that matches no operation is
// a 404, whatever the method, never a 405 or a 400; a path parameter is one
// whole, non-empty segment.
func TestUnknownPathsAre404(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	u := e.NewUser("alice")
	tok := e.Do(testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/tokens", Token: e.Owner}).Map(t)["items"].([]any)[0].(map[string]any)["id"].(string)
	for _, path := range []string{
		"/nope",
		"/users/" + u.ID + "/roles/x/y",  // the last parameter would swallow a /
		"/users/" + u.ID + "/tokens/a/b", // ditto
		"/users/" + u.ID + "/tokens/" + tok + "/x",
		"/channels/ops/attachment/x",
		"/roles/mods/create/x",
		"/roles//create", // an empty parameter
		"/users//roles",
		"/roles/", // a trailing slash
		"/channels/ops/",
		"/",
		"",
	} {
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			t.Run(method+" "+path, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: method, Path: path, Token: e.Owner})
				if res.Status != http.StatusNotFound {
					t.Fatalf("%d, want 404; Allow %q; %s", res.Status, res.Header.Get("Allow"), res.Body)
				}
				if method == "HEAD" {
					if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("Content-Type %q", ct)
					}
					return
				}
				if p := res.Problem(t); p.Code != "not_found" {
					t.Errorf("code %s", p.Code)
				}
			})
		}
	}
}

// A path answers the methods it does not take with a 405 whose Allow lists
// exactly the contract's methods for it (and OPTIONS); OPTIONS answers 204
// with the same Allow.
func TestMethodsAPathDoesNotTake(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	u := e.NewUser("alice")
	fill := strings.NewReplacer("{channelID}", "ops", "{roleID}", "mods", "{userID}", u.ID,
		"{tokenID}", "01936f4f-1b2c-7d3e-8f4a-5b6c7d8e9f0a", "{webhookID}", "01937a2c-5d4e-7f60-8a1b-2c3d4e5f6a7b",
		"{deliveryID}", "msg_1")
	all := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
	for path, item := range doc.Paths.Map() {
		allowed := []string{"OPTIONS"}
		for m := range item.Operations() {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		t.Run(path, func(t *testing.T) {
			for _, method := range append(all, "OPTIONS") {
				if item.GetOperation(method) != nil {
					continue
				}
				res := e.Do(testenv.Req{Method: method, Path: fill.Replace(path), Token: e.Owner})
				want := http.StatusMethodNotAllowed
				if method == "OPTIONS" {
					want = http.StatusNoContent
				}
				if res.Status != want {
					t.Fatalf("%s: %d, want %d; %s", method, res.Status, want, res.Body)
				}
				var got []string
				for _, m := range strings.Split(res.Header.Get("Allow"), ",") {
					got = append(got, strings.TrimSpace(m))
				}
				sort.Strings(got)
				if !slices.Equal(got, allowed) {
					t.Errorf("%s: Allow %v, want %v", method, got, allowed)
				}
				if want == http.StatusMethodNotAllowed && method != "HEAD" {
					if p := res.Problem(t); p.Code != "method_not_allowed" {
						t.Errorf("%s: code %s", method, p.Code)
					}
				}
			}
		})
	}
}

// HEAD wherever GET (RFC 9110 §9.3.2): the same status and headers, no
// body. One request per GET operation of the contract, each for a resource
// that exists.
func TestHeadAnswersWhatGetAnswers(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	u := e.NewUser("alice")
	e.NewRole("mods", "MANAGE_MESSAGES")
	e.NewChannel("ops")
	e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/ops/attachment?attachmentID=a.txt", Token: e.Owner, Body: "hello", Type: "text/plain"})
	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/profile/link", Token: e.Owner, Body: map[string]any{"links": map[string]any{"gh": "https://github.com/o"}}})
	tok := e.Do(testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/tokens", Token: e.Owner}).Map(t)["items"].([]any)[0].(map[string]any)["id"].(string)
	hook := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/webhooks", Token: e.Owner,
		Body: map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"role.*"}}}).Map(t)["id"].(string)
	fill := strings.NewReplacer("{channelID}", "ops", "{roleID}", "mods", "{userID}", u.ID, "{tokenID}", tok, "{webhookID}", hook)
	query := map[string]string{"/channels/{channelID}/attachment": "?attachmentID=a.txt", "/users/{userID}/permissions": "?channelID=ops&explain=true"}
	n := 0
	for path, item := range doc.Paths.Map() {
		if item.Get == nil {
			continue
		}
		n++
		t.Run(path, func(t *testing.T) {
			url := fill.Replace(path) + query[path]
			head := e.Do(testenv.Req{Method: "HEAD", Path: url, Token: e.Owner})
			if path == "/events" { // a stream: its GET never ends
				if head.Status != http.StatusOK || head.Header.Get("Content-Type") != "text/event-stream" || len(head.Body) != 0 {
					t.Errorf("HEAD /events: %d %q with %d bytes", head.Status, head.Header.Get("Content-Type"), len(head.Body))
				}
				return
			}
			get := e.Do(testenv.Req{Method: "GET", Path: url, Token: e.Owner})
			if get.Status != http.StatusOK || head.Status != get.Status {
				t.Fatalf("HEAD %d, GET %d; want both 200", head.Status, get.Status)
			}
			if len(head.Body) != 0 {
				t.Errorf("HEAD sent %d bytes of body", len(head.Body))
			}
			for name := range get.Header {
				switch name {
				case "Date", "X-Request-Id", "Ratelimit-Remaining", "Ratelimit-Reset":
					continue // of the message, not the resource
				case "Content-Length":
					// net/http drops it from a HEAD answer whose handler wrote
					// more than it buffers; when present it must agree.
					if v := head.Header.Get(name); v != "" && v != get.Header.Get(name) {
						t.Errorf("Content-Length: HEAD %q, GET %q", v, get.Header.Get(name))
					}
					continue
				}
				if head.Header.Get(name) != get.Header.Get(name) {
					t.Errorf("%s: HEAD %q, GET %q", name, head.Header.Get(name), get.Header.Get(name))
				}
			}
		})
	}
	if n != 28 {
		t.Errorf("%d GET operations; update this test's fixtures when the contract gains one", n)
	}
}

// While rate limiting is on, every answer carries RateLimit-*, refusals
// included; past the limit the answer is 429 with Retry-After. With it off
// (GUILDHALL_RATE_LIMIT=0), no answer carries them, as the contract says.
// Every answer also carries X-Request-Id.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit float64
	}{{"on", 1}, {"off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := testenv.Start(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) { c.RateLimit = tc.limit }))
			var statuses []int
			// The burst is twice the rate: 2 (one bucket for the client's
			// address until its token has authenticated, then the token's).
			for range 5 {
				res := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner})
				statuses = append(statuses, res.Status)
				if res.Header.Get("X-Request-Id") == "" {
					t.Errorf("%d without X-Request-Id", res.Status)
				}
				for _, h := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
					if got := res.Header.Get(h); (got != "") != (tc.limit > 0) {
						t.Errorf("%d: %s %q with the limit %s", res.Status, h, got, tc.name)
					}
				}
				if res.Status == http.StatusTooManyRequests {
					if res.Header.Get("Retry-After") == "" || res.Problem(t).Code != "rate_limited" {
						t.Errorf("429 without Retry-After or rate_limited: %v %s", res.Header, res.Body)
					}
					break
				}
			}
			last := statuses[len(statuses)-1]
			for _, s := range statuses[:len(statuses)-1] {
				if s != http.StatusOK {
					t.Errorf("statuses %v: only 200s before the end", statuses)
				}
			}
			if want := map[bool]int{true: http.StatusTooManyRequests, false: http.StatusOK}[tc.limit > 0]; last != want {
				t.Errorf("statuses %v, want them to end with %d", statuses, want)
			}
		})
	}
}

// HEAD of the event stream answers at once, with the stream's headers.
func TestHeadOfTheEventStreamEnds(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "HEAD", e.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.Owner)
	resp, err := e.HTTP.Do(req)
	if err != nil {
		t.Fatalf("HEAD /events: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("HEAD /events: %d %v", resp.StatusCode, resp.Header)
	}
}

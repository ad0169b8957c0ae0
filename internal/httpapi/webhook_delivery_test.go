package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// Webhooks delivered, end to end: webhooks created over HTTP on an
// instance allowed to reach loopback, changes made over HTTP, a real
// receiver on loopback, deliveries checked with the specification's
// library and against the audit log over HTTP.

// hookCall is one request a receiver got.
type hookCall struct {
	at     time.Time
	id     string
	body   []byte
	header http.Header
}

// hookSink is a webhook's receiver; answer decides each status (n: the
// requests with the same webhook-id so far, this one included).
type hookSink struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []hookCall
	answer func(c hookCall, n int) int
}

func newHookSink(t *testing.T, answer func(c hookCall, n int) int) *hookSink {
	s := &hookSink{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c := hookCall{at: time.Now(), id: r.Header.Get("webhook-id"), body: body, header: r.Header.Clone()}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		n := 0
		for _, o := range s.calls {
			if o.id == c.id {
				n++
			}
		}
		s.mu.Unlock()
		status := http.StatusOK
		if s.answer != nil {
			status = s.answer(c, n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *hookSink) got() []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookCall(nil), s.calls...)
}

func hookEnv(t *testing.T, kind string) *testenv.Env {
	t.Helper()
	return testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) { c.WebhookAllowPrivate = true }))
}

// createHook creates a webhook over HTTP as token's user; it returns its
// ID and secret.
func createHook(t *testing.T, e *testenv.Env, token, url string, events ...string) (string, string) {
	t.Helper()
	res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/webhooks", Token: token,
		Body: map[string]any{"url": url, "events": events}})
	var w struct{ ID, Secret string }
	res.JSON(t, &w)
	return w.ID, w.Secret
}

func hookWait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func hookVerify(t *testing.T, secret string, c hookCall) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh.Verify(c.body, c.header)
}

type hookEvent struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	Subject string `json:"subject"`
}

func hookEventOf(t *testing.T, body []byte) hookEvent {
	t.Helper()
	var e hookEvent
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return e
}

// auditEntries reads the audit log as token's user sees it, by seq.
func auditEntries(t *testing.T, e *testenv.Env, token string) map[int64]json.RawMessage {
	t.Helper()
	out := map[int64]json.RawMessage{}
	cursor := ""
	for {
		path := "/audit-log?limit=200"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"next_cursor"`
		}
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: token}).JSON(t, &page)
		for _, it := range page.Items {
			out[hookEventOf(t, it).Seq] = it
		}
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// sameJSON compares two JSON texts as values.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// hookChanges makes n changes of several kinds over HTTP, as the owner.
func hookChanges(e *testenv.Env, t *testing.T, prefix string, n int) {
	t.Helper()
	for i := range n {
		switch i % 4 {
		case 0:
			e.NewRole(fmt.Sprintf("%sr%d", prefix, i), "MANAGE_MESSAGES")
		case 1:
			e.NewChannel(fmt.Sprintf("%sc%d", prefix, i))
		case 2:
			e.NewUser(fmt.Sprintf("%su%d", prefix, i))
		case 3:
			e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: fmt.Sprintf("/roles/%sr%d", prefix, i-3), Token: e.Owner,
				Type: "application/merge-patch+json", Body: `{"color": "#3498db"}`})
		}
	}
}

// lastSeqOver is the newest event's seq, read over HTTP.
func lastSeqOver(t *testing.T, e *testenv.Env) int64 {
	t.Helper()
	var page struct {
		Items []hookEvent `json:"items"`
	}
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &page)
	return page.Items[0].Seq
}

// TestWebhookDeliversEveryChangeOverHTTP: a webhook created over HTTP
// receives each of 100 mixed changes made after it, once, with a
// signature the specification's library verifies with the secret its
// creation showed, and a body equal to the audit log's entry; its list of
// deliveries says each was delivered.
func TestWebhookDeliversEveryChangeOverHTTP(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := hookEnv(t, kind)
		rc := newHookSink(t, nil)
		id, secret := createHook(t, e, e.Owner, rc.URL+"/in?key=1", "role.*", "channel.*", "user.*")
		from := lastSeqOver(t, e) // the webhook's own creation
		hookChanges(e, t, "", 100)
		to := lastSeqOver(t, e)
		want := int(to - from)
		hookWait(t, 30*time.Second, fmt.Sprintf("%d deliveries", want), func() bool { return len(rc.got()) >= want })
		time.Sleep(200 * time.Millisecond)
		log := auditEntries(t, e, e.Owner)
		seen := map[int64]bool{}
		for _, c := range rc.got() {
			if err := hookVerify(t, secret, c); err != nil {
				t.Errorf("delivery %s does not verify: %v", c.id, err)
			}
			ev := hookEventOf(t, c.body)
			if seen[ev.Seq] || ev.Seq > to || ev.Seq < from {
				t.Errorf("event %d delivered twice, or not written after the webhook", ev.Seq)
			}
			seen[ev.Seq] = true
			if !sameJSON(c.body, log[ev.Seq]) {
				t.Errorf("event %d: delivered %s\n audit log shows %s", ev.Seq, c.body, log[ev.Seq])
			}
		}
		for seq := from + 1; seq <= to; seq++ {
			if !seen[seq] {
				t.Errorf("event %d never delivered", seq)
			}
		}
		var page struct {
			Items []struct {
				ID       string `json:"id"`
				State    string `json:"state"`
				Attempts int    `json:"attempts"`
			} `json:"items"`
		}
		hookWait(t, 10*time.Second, "the deliveries recorded", func() bool {
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/webhooks/" + id + "/deliveries?limit=200", Token: e.Owner}).JSON(t, &page)
			for _, d := range page.Items {
				if d.State != "delivered" {
					return false
				}
			}
			return len(page.Items) >= want
		})
		for _, d := range page.Items {
			if d.Attempts != 1 || !strings.HasPrefix(d.ID, "msg_") {
				t.Errorf("delivery %+v, want delivered at the first attempt", d)
			}
		}
	})
}

// TestWebhookRetriesDisablesAndRotatesOverHTTP: a receiver failing the
// first attempt gets the same webhook-id again about 5 s later; after a
// rotation a delivery carries two signatures, one per secret; a 410
// disables the webhook (reason gone) with a webhook.updated by the system.
func TestWebhookRetriesDisablesAndRotatesOverHTTP(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := hookEnv(t, kind)
		flaky := newHookSink(t, func(_ hookCall, n int) int {
			if n == 1 {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		})
		createHook(t, e, e.Owner, flaky.URL, "role.created")
		e.NewRole("first")
		hookWait(t, 15*time.Second, "the retry", func() bool { return len(flaky.got()) >= 2 })
		got := flaky.got()
		if got[0].id != got[1].id {
			t.Errorf("the retry's webhook-id %s, want %s", got[1].id, got[0].id)
		}
		if gap := got[1].at.Sub(got[0].at); gap < 4400*time.Millisecond || gap > 6*time.Second {
			t.Errorf("the retry came %v later, want about 5 s", gap)
		}

		rc := newHookSink(t, nil)
		id, old := createHook(t, e, e.Owner, rc.URL, "channel.*")
		var rotated struct{ Secret string }
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/webhooks/" + id + "/rotate", Token: e.Owner}).JSON(t, &rotated)
		e.NewChannel("after-rotation")
		hookWait(t, 10*time.Second, "the delivery after the rotation", func() bool { return len(rc.got()) >= 1 })
		c := rc.got()[0]
		if n := len(strings.Fields(c.header.Get("webhook-signature"))); n != 2 {
			t.Errorf("%d signatures during the rotation, want 2", n)
		}
		for name, s := range map[string]string{"old": old, "new": rotated.Secret} {
			if err := hookVerify(t, s, c); err != nil {
				t.Errorf("the %s secret does not verify: %v", name, err)
			}
		}

		gone := newHookSink(t, func(hookCall, int) int { return http.StatusGone })
		goneID, _ := createHook(t, e, e.Owner, gone.URL, "user.created")
		e.NewUser("someone")
		var w struct {
			Enabled        bool    `json:"enabled"`
			DisabledReason *string `json:"disabled_reason"`
		}
		hookWait(t, 10*time.Second, "the webhook disabled", func() bool {
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/webhooks/" + goneID, Token: e.Owner}).JSON(t, &w)
			return !w.Enabled
		})
		if w.DisabledReason == nil || *w.DisabledReason != "gone" {
			t.Errorf("disabled_reason %v, want gone", w.DisabledReason)
		}
		var page struct {
			Items []struct {
				ActorID *string `json:"actor_id"`
				Subject string  `json:"subject"`
				Reason  *string `json:"reason"`
			} `json:"items"`
		}
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=webhook.updated&subject=webhook:" + goneID, Token: e.Owner}).JSON(t, &page)
		if len(page.Items) != 1 || page.Items[0].ActorID != nil || page.Items[0].Reason == nil || !strings.Contains(*page.Items[0].Reason, "410") {
			t.Errorf("the audit log shows %+v, want one webhook.updated by the system saying 410", page.Items)
		}
		e.NewUser("another")
		time.Sleep(500 * time.Millisecond)
		if n := len(gone.got()); n != 1 {
			t.Errorf("the disabled webhook got %d requests, want 1", n)
		}
	})
}

// TestWebhookNeverDisclosesAHiddenChannel: a webhook whose creator
// manages webhooks and reads the audit log but cannot view a channel
// never receives that channel's events, nor lists deliveries of them; it
// receives those of the channels the creator sees, as the creator's audit
// log shows them.
func TestWebhookNeverDisclosesAHiddenChannel(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := hookEnv(t, kind)
		e.NewRole("hooks", "VIEW_AUDIT_LOG", "MANAGE_WEBHOOKS")
		manager := e.NewUser("manager")
		e.Assign(manager.ID, "hooks")
		e.NewChannel("open")
		e.NewChannel("secret")
		e.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		rc := newHookSink(t, nil)
		id, secret := createHook(t, e, manager.Token, rc.URL, "channel.*")
		for i := range 10 {
			for _, ch := range []string{"secret", "open"} {
				e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/" + ch, Token: e.Owner,
					Type: "application/merge-patch+json", Body: fmt.Sprintf(`{"topic": "t%d"}`, i)})
			}
		}
		hookWait(t, 15*time.Second, "the open channel's 10 events", func() bool { return len(rc.got()) >= 10 })
		var page struct {
			Items []struct {
				EventSeq int64  `json:"event_seq"`
				State    string `json:"state"`
			} `json:"items"`
		}
		hookWait(t, 15*time.Second, "every delivery settled", func() bool {
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/webhooks/" + id + "/deliveries?limit=100", Token: manager.Token}).JSON(t, &page)
			for _, d := range page.Items {
				if d.State == "pending" {
					return false
				}
			}
			return true
		})
		log := auditEntries(t, e, manager.Token)
		for _, c := range rc.got() {
			ev := hookEventOf(t, c.body)
			if ev.Subject != "channel:open" || strings.Contains(string(c.body), "secret") {
				t.Errorf("the manager's webhook got %s", c.body)
			}
			if err := hookVerify(t, secret, c); err != nil || !sameJSON(c.body, log[ev.Seq]) {
				t.Errorf("event %d: %v; delivered %s, the manager's audit log shows %s", ev.Seq, err, c.body, log[ev.Seq])
			}
		}
		if len(rc.got()) != 10 || len(page.Items) != 10 {
			t.Errorf("%d delivered, %d listed; want the open channel's 10", len(rc.got()), len(page.Items))
		}
		for _, d := range page.Items {
			if _, ok := log[d.EventSeq]; !ok {
				t.Errorf("a delivery lists event %d, which the manager's audit log does not show", d.EventSeq)
			}
		}
	})
}

// TestWebhookTwoInstancesDeliverEachEventOnce: two instances on one
// PostgreSQL database, changes made through both, deliver 200 events to
// a prompt receiver with no duplicate.
func TestWebhookTwoInstancesDeliverEachEventOnce(t *testing.T) {
	testenv.RequirePostgres(t)
	e1 := hookEnv(t, testenv.Postgres)
	cfg := e1.Config
	cfg.DataDir = t.TempDir()
	e2 := testenv.StartWith(t, testenv.Postgres, cfg)
	rc := newHookSink(t, nil)
	createHook(t, e1, e1.Owner, rc.URL, "role.created")
	var wg sync.WaitGroup
	for k, e := range []*testenv.Env{e1, e2} {
		wg.Go(func() {
			for i := range 100 {
				e.NewRole(fmt.Sprintf("i%dr%d", k, i))
			}
		})
	}
	wg.Wait()
	hookWait(t, 30*time.Second, "200 deliveries", func() bool { return len(rc.got()) >= 200 })
	time.Sleep(time.Second)
	seqs, ids := map[int64]int{}, map[string]int{}
	for _, c := range rc.got() {
		seqs[hookEventOf(t, c.body).Seq]++
		ids[c.id]++
	}
	for seq, n := range seqs {
		if n != 1 {
			t.Errorf("event %d delivered %d times", seq, n)
		}
	}
	if n := len(rc.got()); n != 200 || len(seqs) != 200 || len(ids) != 200 {
		t.Errorf("%d requests, %d events, %d webhook-ids; want 200 of each", n, len(seqs), len(ids))
	}
}

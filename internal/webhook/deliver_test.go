package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store/webhookq"
	"github.com/guildhall/guildhall/internal/testenv"
	"github.com/guildhall/guildhall/internal/webhook"
)

// The deliverer's tests run a real instance (testenv) whose changes are
// made over HTTP, and a real receiver on loopback. The webhooks' rows are
// written straight into the database: the tests judge delivery, not the
// management of webhooks. The instance's own deliverer is replaced by one
// allowed to reach loopback.

// harness is an instance, its database and its deliverer.
type harness struct {
	*testenv.Env
	t     testing.TB
	db    *gorm.DB
	owner string // the owner's user ID
}

func start(t testing.TB, kind string, o webhook.DelivererOptions) *harness {
	t.Helper()
	e := testenv.Start(t, kind)
	var dial gorm.Dialector
	if kind == testenv.Postgres {
		dial = postgres.Open(e.Config.DatabaseURL)
	} else {
		dial = sqlite.Open("file:" + filepath.Join(e.Config.DataDir, "guildhall.db") + "?_busy_timeout=10000")
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	h := &harness{Env: e, t: t, db: db}
	if err := db.Raw("SELECT id FROM users WHERE is_owner").Scan(&h.owner).Error; err != nil || h.owner == "" {
		t.Fatalf("the owner: %q, %v", h.owner, err)
	}
	h.restart(o)
	return h
}

// restart replaces the instance's deliverer with one configured by o
// (allowed to reach loopback), on the store's queue unless o names one.
func (h *harness) restart(o webhook.DelivererOptions) {
	a := h.App
	_ = a.Webhooks.Close()
	if o.Poll == 0 {
		o.Poll = 200 * time.Millisecond // a webhook written behind its back is found at once
	}
	if o.Queue == nil {
		o.Queue = a.Store.WebhookQueue()
	}
	o.Audience, o.Encode, o.Signals, o.AllowPrivate = a.Service, httpapi.EventJSON, a.Broker, true
	a.Webhooks = webhook.NewDeliverer(o)
	a.Webhooks.Start(context.Background())
}

// lastSeq is the newest event's seq.
func (h *harness) lastSeq() int64 {
	h.t.Helper()
	var seq *int64
	if err := h.db.Raw("SELECT MAX(seq) FROM events").Scan(&seq).Error; err != nil {
		h.t.Fatal(err)
	}
	if seq == nil {
		return 0
	}
	return *seq
}

// hook is a webhooks row.
type hook struct {
	id, url, creator string
	events           []string
	secret, previous string
	previousUntil    time.Time
}

// insert writes the webhook, receiving the events written from now on.
func (h *harness) insert(w hook) {
	h.t.Helper()
	if w.secret == "" {
		w.secret = webhook.NewSecret()
	}
	if w.creator == "" {
		w.creator = h.owner
	}
	events, _ := json.Marshal(w.events)
	now := time.Now().UnixMicro()
	var prev, until any
	if w.previous != "" {
		prev, until = w.previous, w.previousUntil.UnixMicro()
	}
	err := h.db.Exec("INSERT INTO webhooks (id, url, events, description, enabled, creator_id, secret, previous_secret, previous_until, "+
		"after_seq, version, created_at, updated_at) VALUES (?, ?, ?, '', ?, ?, ?, ?, ?, ?, 1, ?, ?)",
		w.id, w.url, string(events), true, w.creator, w.secret, prev, until, h.lastSeq(), now, now).Error
	if err != nil {
		h.t.Fatal(err)
	}
}

// webhookState reads a webhook's enabled and disabled_reason.
func (h *harness) webhookState(id string) (bool, string) {
	h.t.Helper()
	var row struct {
		Enabled        bool
		DisabledReason *string
	}
	if err := h.db.Raw("SELECT enabled, disabled_reason FROM webhooks WHERE id = ?", id).Scan(&row).Error; err != nil {
		h.t.Fatal(err)
	}
	if row.DisabledReason == nil {
		return row.Enabled, ""
	}
	return row.Enabled, *row.DisabledReason
}

// auditLog reads the whole audit log as the owner sees it, by seq: each
// entry's JSON exactly as GET /api/audit-log shows it.
func (h *harness) auditLog() map[int64]json.RawMessage {
	h.t.Helper()
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
		h.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: h.Owner}).JSON(h.t, &page)
		for _, it := range page.Items {
			var e struct{ Seq int64 }
			if err := json.Unmarshal(it, &e); err != nil {
				h.t.Fatal(err)
			}
			out[e.Seq] = it
		}
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// received is one request the receiver got.
type received struct {
	at                  time.Time
	id, timestamp, sign string
	body                []byte
	header              http.Header
}

// sink is a webhook's receiver on loopback; answer decides each
// answer's status (nil: 204).
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(r received, n int) int // n: requests with this webhook-id so far, this one included
}

func newSink(t testing.TB, answer func(r received, n int) int) *sink {
	rc := &sink{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got := received{at: time.Now(), id: r.Header.Get("webhook-id"), timestamp: r.Header.Get("webhook-timestamp"),
			sign: r.Header.Get("webhook-signature"), body: body, header: r.Header.Clone()}
		rc.mu.Lock()
		rc.got = append(rc.got, got)
		n := 0
		for _, g := range rc.got {
			if g.id == got.id {
				n++
			}
		}
		rc.mu.Unlock()
		status := http.StatusNoContent
		if rc.answer != nil {
			status = rc.answer(got, n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *sink) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// waitFor waits until cond holds, failing after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verifyReceived checks a request's signature with the specification's library.
func verifyReceived(t *testing.T, secret string, r received) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh.Verify(r.body, r.header)
}

// seqOf is the seq of a delivery's body.
func seqOf(t *testing.T, body []byte) int64 {
	t.Helper()
	var e struct{ Seq int64 }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return e.Seq
}

// mixedChanges makes n changes of several kinds over HTTP, as the owner.
func mixedChanges(h *harness, prefix string, n int) {
	h.t.Helper()
	for i := range n {
		switch i % 4 {
		case 0:
			h.NewRole(fmt.Sprintf("%sr%d", prefix, i), "MANAGE_MESSAGES")
		case 1:
			h.NewChannel(fmt.Sprintf("%sc%d", prefix, i))
		case 2:
			h.NewUser(fmt.Sprintf("%su%d", prefix, i)) // a user and a token: two events
		case 3:
			h.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: fmt.Sprintf("/roles/%sr%d", prefix, i-3), Token: h.Owner,
				Type: "application/merge-patch+json", Body: `{"color": "#3498db"}`})
		}
	}
}

// TestDeliversEveryChangeSignedAsTheAuditLogShows: every event written
// after a webhook's creation that its patterns match reaches its receiver
// once (a prompt receiver), with a signature the specification's library
// accepts, a webhook-id of its own, and a body equal to the audit log's
// entry; events before the webhook, and those its patterns do not match,
// never do.
func TestDeliversEveryChangeSignedAsTheAuditLogShows(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := start(t, kind, webhook.DelivererOptions{})
		mixedChanges(h, "before", 4) // before the webhooks
		rc := newSink(t, nil)
		roles := newSink(t, nil)
		secret := webhook.NewSecret()
		h.insert(hook{id: "all", url: rc.URL + "/hook?token=x", events: []string{"*"}, secret: secret})
		h.insert(hook{id: "roles", url: roles.URL, events: []string{"role.*"}})
		from := h.lastSeq()
		mixedChanges(h, "", 100)
		to := h.lastSeq()
		want := int(to - from)
		waitFor(t, 30*time.Second, fmt.Sprintf("%d deliveries", want), func() bool { return len(rc.requests()) >= want })
		log := h.auditLog()
		ids := map[string]bool{}
		seqs := map[int64]bool{}
		for _, r := range rc.requests() {
			if err := verifyReceived(t, secret, r); err != nil {
				t.Errorf("delivery %s: the signature %q does not verify: %v", r.id, r.sign, err)
			}
			if ts, _ := strconv.ParseInt(r.timestamp, 10, 64); time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
				t.Errorf("delivery %s: webhook-timestamp %s is not the attempt's time", r.id, r.timestamp)
			}
			if ids[r.id] || !strings.HasPrefix(r.id, "msg_") {
				t.Errorf("webhook-id %q repeated or malformed", r.id)
			}
			ids[r.id] = true
			seq := seqOf(t, r.body)
			if seq <= from || seq > to || seqs[seq] {
				t.Errorf("event %d delivered: not after the webhook's creation, or twice", seq)
			}
			seqs[seq] = true
			if !jsonEqual(t, r.body, log[seq]) {
				t.Errorf("event %d: delivered %s\n audit log shows %s", seq, r.body, log[seq])
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		}
		if len(seqs) != want {
			t.Errorf("%d events delivered, want %d", len(seqs), want)
		}
		waitFor(t, 10*time.Second, "the role events", func() bool { return len(roles.requests()) >= 50 })
		for _, r := range roles.requests() {
			var e struct{ Type string }
			_ = json.Unmarshal(r.body, &e)
			if !strings.HasPrefix(e.Type, "role.") {
				t.Errorf("a role.* webhook got %s", e.Type)
			}
		}
		if n := len(roles.requests()); n != 50 {
			t.Errorf("the role.* webhook got %d deliveries, want 50 (25 role.created, 25 role.updated)", n)
		}
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestFailedAttemptComesBackAbout5sLater: a receiver that fails the first
// attempt (a 500) gets the same webhook-id, signed again, about 5 s later
// (the schedule's first delay, jittered by 10%); once it answers 2xx the
// delivery is delivered, and never attempted again.
func TestFailedAttemptComesBackAbout5sLater(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := start(t, kind, webhook.DelivererOptions{})
		rc := newSink(t, func(_ received, n int) int {
			if n == 1 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		secret := webhook.NewSecret()
		h.insert(hook{id: "flaky", url: rc.URL, events: []string{"role.created"}, secret: secret})
		// Poll far beyond the test: the retry is claimed when the queue
		// says it falls due, which the recorded outcome has it read.
		h.restart(webhook.DelivererOptions{Poll: time.Minute})
		h.NewRole("mods")
		waitFor(t, 15*time.Second, "the second attempt", func() bool { return len(rc.requests()) >= 2 })
		time.Sleep(500 * time.Millisecond) // a third would come now if the second had not counted
		got := rc.requests()
		if len(got) != 2 || got[0].id != got[1].id {
			t.Fatalf("%d requests (ids %v), want the same delivery twice", len(got), ids(got))
		}
		if gap := got[1].at.Sub(got[0].at); gap < 4400*time.Millisecond || gap > 6*time.Second {
			t.Errorf("the retry came %v after the first attempt, want about 5 s", gap)
		}
		for _, r := range got {
			if err := verifyReceived(t, secret, r); err != nil {
				t.Errorf("attempt at %v: %v", r.at, err)
			}
		}
		var row struct {
			State      string
			Attempts   int
			LastStatus int
		}
		if err := h.db.Raw("SELECT state, attempts, last_status FROM webhook_deliveries WHERE id = ?", got[0].id).Scan(&row).Error; err != nil {
			t.Fatal(err)
		}
		if row.State != "delivered" || row.Attempts != 2 || row.LastStatus != 200 {
			t.Errorf("delivery %+v, want delivered after 2 attempts, last status 200", row)
		}
	})
}

func ids(rs []received) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.id)
	}
	return out
}

// TestGoneDisablesTheWebhook: a 410 fails the delivery and disables the
// webhook (reason "gone") with a webhook.updated event by the system;
// the webhook then gets nothing more, and another webhook goes on.
func TestGoneDisablesTheWebhook(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := start(t, kind, webhook.DelivererOptions{})
		gone := newSink(t, func(received, int) int { return http.StatusGone })
		other := newSink(t, nil)
		h.insert(hook{id: "gone", url: gone.URL, events: []string{"role.*"}})
		h.insert(hook{id: "other", url: other.URL, events: []string{"role.*"}})
		h.NewRole("a")
		waitFor(t, 10*time.Second, "the webhook disabled", func() bool { on, _ := h.webhookState("gone"); return !on })
		if _, why := h.webhookState("gone"); why != "gone" {
			t.Errorf("disabled_reason %q, want gone", why)
		}
		var ev struct {
			Type    string
			ActorID *string
			Subject string
			Data    string
			Reason  string
		}
		if err := h.db.Raw("SELECT type, actor_id, subject, data, reason FROM events WHERE type = 'webhook.updated'").Scan(&ev).Error; err != nil {
			t.Fatal(err)
		}
		var data struct{ Before, After struct{ Enabled bool } }
		_ = json.Unmarshal([]byte(ev.Data), &data)
		if ev.Subject != "webhook:gone" || ev.ActorID != nil || !data.Before.Enabled || data.After.Enabled || !strings.Contains(ev.Reason, "410") {
			t.Errorf("event %+v, want webhook.updated of webhook:gone by the system, enabled to disabled, saying 410", ev)
		}
		h.NewRole("b")
		waitFor(t, 10*time.Second, "the other webhook's deliveries", func() bool { return len(other.requests()) == 2 })
		time.Sleep(300 * time.Millisecond)
		if n := len(gone.requests()); n != 1 {
			t.Errorf("the disabled webhook got %d requests, want the one answered 410", n)
		}
		var state string
		if err := h.db.Raw("SELECT state FROM webhook_deliveries WHERE webhook_id = 'gone' AND attempts = 1").Scan(&state).Error; err != nil || state != "failed" {
			t.Errorf("the 410's delivery is %q (%v), want failed", state, err)
		}
	})
}

// TestRotationSignsTwice: during a rotation a delivery carries two
// signatures, and a receiver that knows either secret accepts it; once the
// previous secret's time is over, only the new one signs.
func TestRotationSignsTwice(t *testing.T) {
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	rc := newSink(t, nil)
	next, prev, stranger := webhook.NewSecret(), webhook.NewSecret(), webhook.NewSecret()
	h.insert(hook{id: "rotating", url: rc.URL, events: []string{"role.*"}, secret: next, previous: prev,
		previousUntil: time.Now().Add(24 * time.Hour)})
	h.insert(hook{id: "rotated", url: rc.URL, events: []string{"channel.*"}, secret: next, previous: prev,
		previousUntil: time.Now().Add(-time.Second)})
	h.NewRole("a")
	h.NewChannel("c")
	waitFor(t, 10*time.Second, "two deliveries", func() bool { return len(rc.requests()) == 2 })
	for _, r := range rc.requests() {
		var e struct{ Type string }
		_ = json.Unmarshal(r.body, &e)
		rotating := strings.HasPrefix(e.Type, "role.")
		if n := len(strings.Fields(r.sign)); rotating && n != 2 || !rotating && n != 1 {
			t.Errorf("%s: %d signatures (%q)", e.Type, n, r.sign)
		}
		if err := verifyReceived(t, next, r); err != nil {
			t.Errorf("%s: the new secret does not verify: %v", e.Type, err)
		}
		if err := verifyReceived(t, prev, r); rotating != (err == nil) {
			t.Errorf("%s: the previous secret verifies: %v (want it to during the rotation only)", e.Type, err == nil)
		}
		if err := verifyReceived(t, stranger, r); err == nil {
			t.Errorf("%s: another secret verifies", e.Type)
		}
	}
}

// TestHiddenChannelNeverReachesACreatorWhoCannotSeeIt: a webhook whose
// creator holds VIEW_AUDIT_LOG but cannot view a channel never receives
// that channel's events (its deliveries are dropped, so its list never
// names them either), and receives those of the channels its creator
// sees.
func TestHiddenChannelNeverReachesACreatorWhoCannotSeeIt(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := start(t, kind, webhook.DelivererOptions{})
		h.NewRole("auditors", "VIEW_AUDIT_LOG", "MANAGE_WEBHOOKS")
		alice := h.NewUser("alice")
		h.Assign(alice.ID, "auditors")
		h.NewChannel("open")
		h.NewChannel("secret")
		h.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		rc := newSink(t, nil)
		h.insert(hook{id: "alices", url: rc.URL, events: []string{"channel.*"}, creator: alice.ID})
		from := h.lastSeq()
		for i := range 10 {
			for _, c := range []string{"secret", "open"} {
				h.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/" + c, Token: h.Owner,
					Type: "application/merge-patch+json", Body: fmt.Sprintf(`{"topic": "topic %d"}`, i)})
			}
		}
		to := h.lastSeq()
		waitFor(t, 15*time.Second, "the open channel's 10 events", func() bool { return len(rc.requests()) >= 10 })
		waitFor(t, 15*time.Second, "no delivery left pending", func() bool {
			var n int64
			_ = h.db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'").Scan(&n).Error
			return n == 0
		})
		for _, r := range rc.requests() {
			var e struct{ Subject string }
			_ = json.Unmarshal(r.body, &e)
			if e.Subject != "channel:open" || strings.Contains(string(r.body), "secret") {
				t.Errorf("alice's webhook got %s", r.body)
			}
		}
		var listed []int64
		if err := h.db.Raw("SELECT event_seq FROM webhook_deliveries WHERE webhook_id = 'alices' ORDER BY event_seq").Scan(&listed).Error; err != nil {
			t.Fatal(err)
		}
		if len(listed) != 10 || listed[0] <= from || listed[9] > to {
			t.Errorf("deliveries kept for seqs %v, want the open channel's 10", listed)
		}
	})
}

// TestTheCreatorsStandingAtDeliveryTime: while the creator is timed out
// the deliveries wait, and arrive once the timeout ends; a creator who
// loses VIEW_AUDIT_LOG disables the webhook (reason "creator"), which then
// gets nothing.
func TestTheCreatorsStandingAtDeliveryTime(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := start(t, kind, webhook.DelivererOptions{})
		h.NewRole("watch", "VIEW_AUDIT_LOG", "MANAGE_WEBHOOKS")
		bob := h.NewUser("bob")
		h.Assign(bob.ID, "watch")
		rc := newSink(t, nil)
		h.insert(hook{id: "bobs", url: rc.URL, events: []string{"role.created"}, creator: bob.ID})
		until := time.Now().Add(3 * time.Second)
		h.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/users/" + bob.ID, Token: h.Owner, Type: "application/merge-patch+json",
			Body: `{"timeout_until": "` + until.UTC().Format(time.RFC3339Nano) + `"}`})
		h.NewRole("during")
		time.Sleep(time.Until(until) - time.Second)
		if n := len(rc.requests()); n != 0 {
			t.Fatalf("%d deliveries while the creator is timed out", n)
		}
		waitFor(t, 10*time.Second, "the held delivery", func() bool { return len(rc.requests()) == 1 })
		// By the wall clock, as the timeout is kept: a step of the wall
		// clock between the two readings moves it and not the monotonic one.
		if at := rc.requests()[0].at; at.Round(0).Before(until.Round(0)) {
			t.Errorf("delivered at %v, before the timeout's end %v", at, until)
		}
		h.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/watch/permissions", Token: h.Owner,
			Body: map[string]any{"permissions": []string{}}})
		h.NewRole("after")
		waitFor(t, 10*time.Second, "the webhook disabled", func() bool { on, _ := h.webhookState("bobs"); return !on })
		if _, why := h.webhookState("bobs"); why != "creator" {
			t.Errorf("disabled_reason %q, want creator", why)
		}
		time.Sleep(300 * time.Millisecond)
		if n := len(rc.requests()); n != 1 {
			t.Errorf("%d deliveries, want only the one before the creator lost VIEW_AUDIT_LOG", n)
		}
	})
}

// TestAStoppedOrKilledInstanceLosesNothing: attempts cut short by Close
// are released, not counted, and made again by the next deliverer at once;
// deliveries leased by an instance that died (a kill -9: its leases stay)
// are delivered once the leases end.
func TestAStoppedOrKilledInstanceLosesNothing(t *testing.T) {
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	hang := make(chan struct{})
	var once sync.Once
	rc := newSink(t, func(_ received, n int) int {
		if n == 1 {
			<-hang // the first attempt of each hangs until the instance stops
		}
		return http.StatusOK
	})
	t.Cleanup(func() { once.Do(func() { close(hang) }) })
	h.insert(hook{id: "h", url: rc.URL, events: []string{"role.created"}})
	for i := range 5 {
		h.NewRole(fmt.Sprintf("r%d", i))
	}
	waitFor(t, 10*time.Second, "five attempts in flight", func() bool { return len(rc.requests()) == 5 })
	h.restart(webhook.DelivererOptions{}) // Close cuts the five attempts short
	once.Do(func() { close(hang) })
	waitFor(t, 10*time.Second, "the five made again", func() bool { return len(rc.requests()) == 10 })
	var attempts []int
	waitFor(t, 10*time.Second, "the five recorded", func() bool {
		attempts = nil
		if err := h.db.Raw("SELECT attempts FROM webhook_deliveries WHERE state = 'delivered'").Scan(&attempts).Error; err != nil {
			t.Fatal(err)
		}
		return len(attempts) == 5
	})
	if len(attempts) != 5 || slicesMax(attempts) != 1 {
		t.Errorf("attempts of the delivered: %v, want five deliveries of one counted attempt each", attempts)
	}

	// A dead instance's leases: claimed by nobody alive, for 2 s.
	_ = h.App.Webhooks.Close()
	for i := range 5 {
		h.NewRole(fmt.Sprintf("k%d", i))
	}
	if _, _, err := h.App.Store.WebhookQueue().Dispatch(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	dead, err := h.App.Store.WebhookQueue().Claim(context.Background(), "dead", time.Now(), 2*time.Second, 100)
	if err != nil || len(dead) != 5 {
		t.Fatalf("the dead instance's claims: %d, %v", len(dead), err)
	}
	killed := time.Now()
	h.restart(webhook.DelivererOptions{Poll: 200 * time.Millisecond})
	waitFor(t, 10*time.Second, "the dead instance's five", func() bool { return len(rc.requests()) == 15 })
	if took := time.Since(killed); took < 1900*time.Millisecond {
		t.Errorf("the dead instance's deliveries came after %v, before their leases ended", took)
	}
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// TestTwoInstancesDeliverEachEventOnce: two instances on one PostgreSQL
// database, changes made through both, deliver 200 events to a prompt
// receiver, each exactly once.
func TestTwoInstancesDeliverEachEventOnce(t *testing.T) {
	testenv.RequirePostgres(t)
	h1 := start(t, testenv.Postgres, webhook.DelivererOptions{Concurrency: 4})
	cfg := h1.Config
	cfg.DataDir = t.TempDir()
	e2 := testenv.StartWith(t, testenv.Postgres, cfg)
	h2 := &harness{Env: e2, t: t, db: h1.db, owner: h1.owner}
	h2.restart(webhook.DelivererOptions{Concurrency: 4})
	rc := newSink(t, nil)
	h1.insert(hook{id: "both", url: rc.URL, events: []string{"role.created"}})
	var wg sync.WaitGroup
	for k, h := range []*harness{h1, h2} {
		wg.Go(func() {
			for i := range 100 {
				h.NewRole(fmt.Sprintf("i%dr%d", k, i))
			}
		})
	}
	wg.Wait()
	waitFor(t, 30*time.Second, "200 deliveries", func() bool { return len(rc.requests()) >= 200 })
	time.Sleep(500 * time.Millisecond)
	seqs, byID := map[int64]int{}, map[string]int{}
	for _, r := range rc.requests() {
		seqs[seqOf(t, r.body)]++
		byID[r.id]++
	}
	for seq, n := range seqs {
		if n != 1 {
			t.Errorf("event %d delivered %d times", seq, n)
		}
	}
	if len(seqs) != 200 || len(byID) != 200 || len(rc.requests()) != 200 {
		t.Errorf("%d requests, %d events, %d webhook-ids; want 200 of each", len(rc.requests()), len(seqs), len(byID))
	}
}

// BenchmarkBacklogDrain: 10,000 pending deliveries drain to a prompt
// receiver; it reports deliveries a second (the goal, docs/performance.md:
// 500 or more).
//
//	go test -run '^$' -bench BacklogDrain -benchtime 1x ./internal/webhook
func BenchmarkBacklogDrain(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				b.ReportMetric(drainBacklog(b, kind, 10000), "deliveries/s")
			}
		})
	}
}

// drainBacklog makes n deliveries pending, then starts the deliverer and
// returns how many it delivered a second.
func drainBacklog(b *testing.B, kind string, n int) float64 {
	b.StopTimer()
	if kind == testenv.Postgres {
		testenv.RequirePostgres(b)
	}
	h := start(b, kind, webhook.DelivererOptions{})
	rc := newSink(b, nil)
	h.backlog(n, rc.URL)
	b.StartTimer()
	began := time.Now()
	h.restart(webhook.DelivererOptions{})
	waitFor(b, 120*time.Second, "the backlog drained", func() bool { return len(rc.requests()) >= n })
	return float64(n) / time.Since(began).Seconds()
}

// backlog stops the deliverer and makes n deliveries pending, of n events
// written straight into the database, for a webhook whose receiver is at
// url; restart starts a deliverer on them.
func (h *harness) backlog(n int, url string) {
	h.t.Helper()
	_ = h.App.Webhooks.Close()
	h.insert(hook{id: "backlog", url: url, events: []string{"role.*"}})
	type eventRow struct {
		Type, Subject, Data string
		CreatedAt           int64
	}
	rows := make([]eventRow, n)
	for i := range rows {
		rows[i] = eventRow{Type: "role.created", Subject: fmt.Sprintf("role:b%d", i), Data: `{"name":"b"}`, CreatedAt: time.Now().UnixMicro()}
	}
	if err := h.db.Table("events").CreateInBatches(rows, 500).Error; err != nil {
		h.t.Fatal(err)
	}
	for {
		_, more, err := h.App.Store.WebhookQueue().Dispatch(context.Background(), 1000)
		if err != nil {
			h.t.Fatal(err)
		}
		if !more {
			return
		}
	}
}

// A retry that falls due while a claim runs, too late for that claim, is
// claimed at once after it, not left to the next poll: one delivery
// pending with its next attempt 300 ms ahead, claims that take 600 ms
// when they find nothing, and Poll a minute: it is attempted within a
// second or so.
func TestARetryDueDuringAClaimIsNotLeftToThePoll(t *testing.T) {
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	rc := newSink(t, nil)
	h.backlog(1, rc.URL)
	due := time.Now().Add(300 * time.Millisecond)
	if err := h.db.Exec("UPDATE webhook_deliveries SET next_attempt_at = ?", due.UnixMicro()).Error; err != nil {
		t.Fatal(err)
	}
	h.restart(webhook.DelivererOptions{Queue: &slowEmptyClaims{Queue: h.App.Store.WebhookQueue(), delay: 600 * time.Millisecond},
		Poll: time.Minute})
	waitFor(t, 5*time.Second, "the delivery, well before Poll", func() bool { return len(rc.requests()) == 1 })
}

// slowEmptyClaims makes a claim that finds nothing take delay longer.
type slowEmptyClaims struct {
	webhook.Queue
	delay time.Duration
}

func (q *slowEmptyClaims) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]webhookq.ClaimedDelivery, error) {
	got, err := q.Queue.Claim(ctx, owner, now, lease, limit)
	if err == nil && len(got) == 0 {
		time.Sleep(q.delay)
	}
	return got, err
}

// countingQueue counts the deliverer's claims, records and reads of the
// queue (its count, Stats; its next attempt; the enabled webhooks).
type countingQueue struct {
	webhook.Queue
	claims, records, stats, nexts, counts atomic.Int64
	claimed                               atomic.Int64 // deliveries the claims returned
}

func (q *countingQueue) EnabledWebhooks(ctx context.Context) (int64, error) {
	q.counts.Add(1)
	return q.Queue.EnabledWebhooks(ctx)
}

func (q *countingQueue) NextAttempt(ctx context.Context, now time.Time) (time.Time, error) {
	q.nexts.Add(1)
	return q.Queue.NextAttempt(ctx, now)
}

func (q *countingQueue) Record(ctx context.Context, owner string, recs []webhookq.DeliveryRecord) ([]model.Event, error) {
	q.records.Add(1)
	return q.Queue.Record(ctx, owner, recs)
}

func (q *countingQueue) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]webhookq.ClaimedDelivery, error) {
	q.claims.Add(1)
	got, err := q.Queue.Claim(ctx, owner, now, lease, limit)
	q.claimed.Add(int64(len(got)))
	return got, err
}

func (q *countingQueue) Stats(ctx context.Context) (webhookq.Stats, error) {
	q.stats.Add(1)
	return q.Queue.Stats(ctx)
}

// Commits whose events no webhook receives cost the deliverer at most a
// claim every 50 ms, however many commits come: a webhook for roles is
// enabled, and 60 users are created one after the other. A role created
// afterwards is delivered at once, and so is its redelivery, a commit
// that makes a delivery due without an event to dispatch (Poll, a
// minute, is far beyond the test).
func TestCommitsNoWebhookReceivesCostNoClaim(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			h := start(t, kind, webhook.DelivererOptions{})
			rc := newSink(t, nil)
			const hookID = "0193a000-0000-7000-8000-000000000001" // a UUID: the API names it
			h.insert(hook{id: hookID, url: rc.URL, events: []string{"role.*"}})
			q := &countingQueue{Queue: h.App.Store.WebhookQueue()}
			// Poll far beyond the test: only commits and outcomes wake it.
			h.restart(webhook.DelivererOptions{Queue: q, Poll: time.Minute})
			time.Sleep(300 * time.Millisecond) // its first round: a claim at start
			claims, stats := q.claims.Load(), q.stats.Load()+q.nexts.Load()
			began := time.Now()
			for i := range 60 {
				h.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: h.Owner,
					Body: map[string]any{"username": fmt.Sprintf("quiet%02d", i)}})
			}
			time.Sleep(200 * time.Millisecond) // the last dispatch
			most := int64(time.Since(began)/(50*time.Millisecond)) + 2
			if c, s := q.claims.Load()-claims, q.stats.Load()+q.nexts.Load()-stats; c > most || s > most || most >= 60 {
				t.Errorf("60 commits no webhook receives, in %v: %d claims, %d reads of the queue; want at most %d of each (one every 50 ms), fewer than the commits",
					time.Since(began), c, s, most)
			}
			h.NewRole("after")
			waitFor(t, 5*time.Second, "the role's delivery", func() bool { return len(rc.requests()) == 1 })
			var id string
			if err := h.db.Raw("SELECT id FROM webhook_deliveries WHERE webhook_id = ?", hookID).Scan(&id).Error; err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the delivery recorded", func() bool {
				var state string
				return h.db.Raw("SELECT state FROM webhook_deliveries WHERE id = ?", id).Scan(&state).Error == nil && state == "delivered"
			})
			time.Sleep(200 * time.Millisecond) // the role's signals spent: only the redelivery's may wake it
			h.Must(http.StatusAccepted, testenv.Req{Method: "POST", Path: "/webhooks/" + hookID + "/deliveries/" + id + "/redeliver", Token: h.Owner})
			waitFor(t, 5*time.Second, "the redelivery, well before Poll", func() bool { return len(rc.requests()) == 2 })
		})
	}
}

// While no webhook is enabled, commits have the deliverer count them at
// most every 250 ms, not once a commit; and the first one enabled is
// found after the next commit, not after Poll (a minute, far beyond the
// test): its first event is delivered at once. The webhook is written
// behind the service's back, so only the role's commit can prompt the
// count.
func TestTheFirstWebhookIsFoundAfterACommit(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			h := start(t, kind, webhook.DelivererOptions{})
			q := &countingQueue{Queue: h.App.Store.WebhookQueue()}
			h.restart(webhook.DelivererOptions{Queue: q, Poll: time.Minute})
			waitFor(t, 5*time.Second, "the count at start", func() bool { return q.counts.Load() == 1 })
			began := time.Now()
			const commits = 40
			for i := range commits {
				h.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: h.Owner,
					Body: map[string]any{"username": fmt.Sprintf("nohook%02d", i)}})
			}
			time.Sleep(300 * time.Millisecond) // the last signal's count
			most := int64(time.Since(began)/(250*time.Millisecond)) + 2
			if c := q.counts.Load() - 1; c > most || c == 0 || most >= commits {
				t.Errorf("%d commits while no webhook is enabled, in %v: %d counts; want 1 to %d (one every 250 ms), fewer than the commits",
					commits, time.Since(began), c, most)
			}
			rc := newSink(t, nil)
			h.insert(hook{id: "0193a000-0000-7000-8000-000000000002", url: rc.URL, events: []string{"role.*"}})
			h.NewRole("first")
			waitFor(t, 5*time.Second, "the role's delivery, well before Poll", func() bool { return len(rc.requests()) == 1 })
		})
	}
}

// The outcomes of a stream of attempts are recorded in batches, not a
// transaction each: the workers finish one attempt at a time, yet a
// backlog of 600 deliveries to a prompt receiver costs at most one record
// every 20 ms (the outcomes' wait), and one for every 256 outcomes.
func TestOutcomesAreRecordedInBatches(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			const n = 600
			h := start(t, kind, webhook.DelivererOptions{})
			rc := newSink(t, nil)
			h.backlog(n, rc.URL)
			q := &countingQueue{Queue: h.App.Store.WebhookQueue()}
			began := time.Now()
			h.restart(webhook.DelivererOptions{Queue: q, Poll: time.Minute})
			waitFor(t, 60*time.Second, "every delivery recorded", func() bool {
				var done int64
				return h.db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'delivered'").Scan(&done).Error == nil && done == n
			})
			took := time.Since(began)
			if got := len(rc.requests()); got < n {
				t.Fatalf("the receiver got %d requests, want %d", got, n)
			}
			most := int64(took/(20*time.Millisecond)) + n/256 + 1
			if r := q.records.Load(); r > most {
				t.Errorf("%d deliveries in %v: %d records; want at most %d", n, took, r, most)
			}
		})
	}
}

// A stream of deliveries to one receiver keeps a connection open for each
// worker, and dials no more: 600 deliveries, 16 at a time, open at most
// 16 connections.
func TestAStreamToOneReceiverReusesItsConnections(t *testing.T) {
	const n = 600
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	var conns, requests atomic.Int64
	rc := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	rc.Start()
	t.Cleanup(rc.Close)
	h.backlog(n, rc.URL)
	h.restart(webhook.DelivererOptions{Concurrency: 16, Poll: time.Minute})
	waitFor(t, 60*time.Second, "every delivery", func() bool { return requests.Load() >= n })
	if c := conns.Load(); c > 16 {
		t.Errorf("%d deliveries, 16 at a time: %d connections opened; want at most 16", n, c)
	}
}

// The instance that makes a delivery leases it as it makes it, when its
// queue has room: 40 users created one after another, over a second and
// more, are each delivered once, and no claim returns any of them. The
// claims that the commits prompt find nothing, and the deliverer then
// asks the queue for its next attempt, not for its count of every pending
// delivery (Stats, which the metrics read every 2 s).
func TestDeliveriesMadeWithRoomNeedNoClaim(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			h := start(t, kind, webhook.DelivererOptions{})
			rc := newSink(t, nil)
			h.insert(hook{id: "0193a000-0000-7000-8000-000000000002", url: rc.URL, events: []string{"user.*"}})
			q := &countingQueue{Queue: h.App.Store.WebhookQueue()}
			h.restart(webhook.DelivererOptions{Queue: q, Poll: time.Minute})
			const n = 40
			stats, began := q.stats.Load(), time.Now()
			for i := range n {
				h.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: h.Owner,
					Body: map[string]any{"username": fmt.Sprintf("leased%02d", i)}})
				time.Sleep(25 * time.Millisecond)
			}
			waitFor(t, 10*time.Second, "every delivery", func() bool { return len(rc.requests()) >= n })
			waitFor(t, 5*time.Second, "every delivery recorded", func() bool {
				var done int64
				return h.db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'delivered'").Scan(&done).Error == nil && done == n
			})
			if got := len(rc.requests()); got != n {
				t.Errorf("the receiver got %d requests, want %d", got, n)
			}
			if c := q.claimed.Load(); c != 0 {
				t.Errorf("claims returned %d deliveries; want none: each was leased by the dispatch that made it", c)
			}
			took := time.Since(began)
			if st, most := q.stats.Load()-stats, int64(took/(2*time.Second))+1; st > most {
				t.Errorf("%d creates in %v: %d claims, the queue counted %d times; want at most %d (every 2 s)",
					n, took, q.claims.Load(), st, most)
			}
		})
	}
}

// A dispatch that makes more deliveries than a few per worker leases them
// all while its queue has room (16 per worker): 150 events committed while
// no deliverer ran are dispatched at once and none is left for a claim.
func TestADispatchLeasesWhatTheQueueHolds(t *testing.T) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(t)
			}
			h := start(t, kind, webhook.DelivererOptions{})
			rc := newSink(t, nil)
			h.insert(hook{id: "0193a000-0000-7000-8000-000000000003", url: rc.URL, events: []string{"role.*"}})
			_ = h.App.Webhooks.Close()
			const n = 150 // more than the 64 a queue of four per worker held
			for i := range n {
				h.NewRole(fmt.Sprintf("burst%03d", i))
			}
			q := &countingQueue{Queue: h.App.Store.WebhookQueue()}
			h.restart(webhook.DelivererOptions{Queue: q, Poll: time.Minute})
			waitFor(t, 20*time.Second, "every delivery recorded", func() bool {
				var done int64
				return h.db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'delivered'").Scan(&done).Error == nil && done == n
			})
			if got := len(rc.requests()); got != n {
				t.Errorf("the receiver got %d requests, want %d", got, n)
			}
			if c := q.claimed.Load(); c != 0 {
				t.Errorf("claims returned %d deliveries; want none: the dispatch leased all %d", c, n)
			}
		})
	}
}

// smallDispatches makes each dispatch batch hold at most limit events.
type smallDispatches struct {
	webhook.Queue
	limit int
}

func (q *smallDispatches) DispatchLeased(ctx context.Context, _ int, lease webhookq.Lease) (webhookq.Dispatched, error) {
	return q.Queue.DispatchLeased(ctx, q.limit, lease)
}

// A backlog of events larger than one dispatch makes (its batches, 20)
// is dispatched whole, one dispatch after another, without waiting for a
// commit's signal or for Poll, whether a dispatch made deliveries or not:
// 100 users created, which the webhook does not receive, then 60 roles,
// which it does, all while no deliverer ran, dispatched two at a time
// (40 a dispatch): every role is delivered, though nothing is committed
// after the deliverer starts and Poll is a minute.
func TestABacklogBeyondOneDispatchIsDispatchedWhole(t *testing.T) {
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	rc := newSink(t, nil)
	h.insert(hook{id: "0193a000-0000-7000-8000-000000000004", url: rc.URL, events: []string{"role.*"}})
	_ = h.App.Webhooks.Close()
	for i := range 100 {
		h.NewUser(fmt.Sprintf("unheard%03d", i))
	}
	const n = 60
	for i := range n {
		h.NewRole(fmt.Sprintf("backlog%03d", i))
	}
	h.restart(webhook.DelivererOptions{Queue: &smallDispatches{Queue: h.App.Store.WebhookQueue(), limit: 2}, Poll: time.Minute})
	waitFor(t, 20*time.Second, "every delivery, well before Poll", func() bool { return len(rc.requests()) >= n })
	if got := len(rc.requests()); got != n {
		t.Errorf("the receiver got %d requests, want %d", got, n)
	}
}

// A delivery that waited in the queue behind a receiver that hangs until
// its lease no longer covers an attempt (and the recording of its outcome)
// is not attempted: it stays leased and unattempted, for its lease to end
// and a claim to take it, so that no attempt runs past the lease another
// instance may claim it after. One worker, attempts of 300 ms: the
// dispatch's lease is five rounds of attempts (four queued ahead, then its
// own) and the 10 s margin, so those the worker takes more than 1.2 s
// after the lease began lapse.
func TestALeaseRunShortIsNotAttempted(t *testing.T) {
	h := start(t, testenv.SQLite, webhook.DelivererOptions{})
	release := make(chan struct{})
	rc := newSink(t, func(received, int) int {
		<-release // hangs past the attempt's timeout
		return http.StatusNoContent
	})
	t.Cleanup(func() { close(release) })
	h.insert(hook{id: "h", url: rc.URL, events: []string{"role.created"}})
	_ = h.App.Webhooks.Close()
	const n = 12
	for i := range n {
		h.NewRole(fmt.Sprintf("slow%02d", i))
	}
	reg := prometheus.NewRegistry()
	h.restart(webhook.DelivererOptions{Concurrency: 1, Timeout: 300 * time.Millisecond, Poll: time.Minute, Registerer: reg})
	lapsed := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "guildhall_webhook_deliveries_lapsed_total" {
				return int(mf.GetMetric()[0].GetCounter().GetValue())
			}
		}
		return 0
	}
	waitFor(t, 10*time.Second, "every delivery attempted or lapsed", func() bool { return len(rc.requests())+lapsed() >= n })
	attempted, left := len(rc.requests()), lapsed()
	if left == 0 || attempted+left != n {
		t.Fatalf("%d attempted, %d lapsed; want %d in all, some lapsed (12 attempts of 300 ms take longer than the lease covers)", attempted, left, n)
	}
	// The lapsed are as the dispatch left them: leased to the instance,
	// not attempted.
	var rows []struct {
		Attempts   int
		LeaseOwner *string
	}
	waitFor(t, 5*time.Second, "the attempted recorded", func() bool {
		var recorded int64
		return h.db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE attempts = 1").Scan(&recorded).Error == nil && recorded == int64(attempted)
	})
	if err := h.db.Raw("SELECT attempts, lease_owner FROM webhook_deliveries WHERE attempts = 0").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != left {
		t.Fatalf("%d deliveries unattempted; want the %d lapsed", len(rows), left)
	}
	for _, r := range rows {
		if r.LeaseOwner == nil || *r.LeaseOwner != h.App.Webhooks.Instance() {
			t.Errorf("a lapsed delivery's lease owner: %v; want the instance's lease, left to end", r.LeaseOwner)
		}
	}
}

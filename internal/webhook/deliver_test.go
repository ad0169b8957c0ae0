package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/guildhall/guildhall/internal/httpapi"
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
	t     *testing.T
	db    *gorm.DB
	owner string // the owner's user ID
}

func start(t *testing.T, kind string, o webhook.DelivererOptions) *harness {
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
// (allowed to reach loopback).
func (h *harness) restart(o webhook.DelivererOptions) {
	a := h.App
	_ = a.Webhooks.Close()
	o.Store, o.Audience, o.Encode, o.Signals, o.AllowPrivate = a.Store, a.Service, httpapi.EventJSON, a.Broker, true
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

func newSink(t *testing.T, answer func(r received, n int) int) *sink {
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
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
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

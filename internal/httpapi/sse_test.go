package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// sseWait bounds how long a test waits for something that must come; it
// only turns a hang into a failure.
const sseWait = 30 * time.Second

// sseHTTP has no timeout: streams are long, and each test ends its own.
var sseHTTP = &http.Client{}

// sseFrame is one Server-Sent Events message (a blank-line-terminated block).
type sseFrame struct {
	ID, Event, Data, Retry string
	HasID                  bool
	Comments               []string
}

func (f sseFrame) isEvent() bool { return f.HasID || f.Event != "" || f.Data != "" }

// sseStream is an open GET /events, parsed in the background.
type sseStream struct {
	Header http.Header
	cancel context.CancelFunc
	body   io.ReadCloser
	frames chan sseFrame // closed when the stream ends
}

// sseDial sends GET /events and returns the response, whatever its status.
func sseDial(ctx context.Context, e *testenv.Env, token, query string, header map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/api/events"+query, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return sseHTTP.Do(req)
}

// sseOpen opens a stream and fails unless it is a 200 text/event-stream.
func sseOpen(t testing.TB, e *testenv.Env, token, query string, header map[string]string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := sseDial(ctx, e, token, query, header)
	if err != nil {
		cancel()
		t.Fatalf("GET /events%s: %v", query, err)
	}
	return sseWrap(t, resp, cancel)
}

// sseWrap starts parsing an open stream.
func sseWrap(t testing.TB, resp *http.Response, cancel context.CancelFunc) *sseStream {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("GET /events: status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		cancel()
		t.Fatalf("GET /events: Content-Type %q", ct)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &sseStream{Header: resp.Header, body: resp.Body, frames: make(chan sseFrame, 4096),
		cancel: func() { stop(); cancel() }}
	go s.read(ctx)
	t.Cleanup(s.Close)
	return s
}

// read parses frames per the SSE format: "field: value" lines, ":" comments,
// a blank line ends a frame; a partial frame at the end is dropped.
func (s *sseStream) read(ctx context.Context) {
	defer close(s.frames)
	r := bufio.NewReaderSize(s.body, 64<<10)
	var f sseFrame
	var data []string
	has := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if has {
				f.Data = strings.Join(data, "\n")
				select {
				case s.frames <- f:
				case <-ctx.Done():
					return
				}
			}
			f, data, has = sseFrame{}, nil, false
			continue
		}
		has = true
		if c, ok := strings.CutPrefix(line, ":"); ok {
			f.Comments = append(f.Comments, strings.TrimSpace(c))
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			f.ID, f.HasID = value, true
		case "event":
			f.Event = value
		case "data":
			data = append(data, value)
		case "retry":
			f.Retry = value
		}
	}
}

// Close ends the stream (the client disconnects).
func (s *sseStream) Close() {
	s.cancel()
	_ = s.body.Close()
}

// nextFrame returns the next frame; ok is false when the stream ended.
func (s *sseStream) nextFrame(t testing.TB, stop <-chan struct{}) (f sseFrame, ok, stopped bool) {
	t.Helper()
	select {
	case f, ok = <-s.frames:
		return f, ok, false
	case <-stop:
		return sseFrame{}, true, true
	case <-time.After(sseWait):
		t.Fatalf("no frame within %v", sseWait)
		return sseFrame{}, false, false
	}
}

// nextEventUntil returns the next event, checking that its SSE id is its
// seq and its SSE event its type; stopped is true when stop closed first.
func (s *sseStream) nextEventUntil(t testing.TB, stop <-chan struct{}) (ev api.Event, stopped bool) {
	t.Helper()
	for {
		f, ok, stopped := s.nextFrame(t, stop)
		if stopped {
			return api.Event{}, true
		}
		if !ok {
			t.Fatal("the stream ended")
		}
		if !f.isEvent() {
			continue
		}
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			t.Fatalf("event data %q: %v", f.Data, err)
		}
		if f.ID != strconv.FormatInt(ev.Seq, 10) {
			t.Errorf("SSE id %q for seq %d", f.ID, ev.Seq)
		}
		if f.Event != string(ev.Type) {
			t.Errorf("SSE event %q for type %q", f.Event, ev.Type)
		}
		return ev, false
	}
}

func (s *sseStream) nextEvent(t testing.TB) api.Event {
	t.Helper()
	ev, _ := s.nextEventUntil(t, nil)
	return ev
}

func (s *sseStream) events(t testing.TB, n int) []api.Event {
	t.Helper()
	out := make([]api.Event, n)
	for i := range out {
		out[i] = s.nextEvent(t)
	}
	return out
}

// sseRawDo is a request usable from any goroutine (no testing.T).
func sseRawDo(ctx context.Context, e *testenv.Env, token, method, path string, body any) (int, []byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+"/api"+path, bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// A stream delivers each committed event once, with id = seq, event = type
// and the event as data, the same as the audit log holds; a fresh stream
// starts with the next event, not the backlog.
func TestEventStreamDelivers(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("backlog")
		e.NewChannel("backlog")
		before := evLastSeq(t, e)
		s := sseOpen(t, e, e.Owner, "", nil)
		if cc := s.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q", cc)
		}

		e.Must(201, testenv.Req{Method: "POST", Path: "/roles/r1/create", Token: e.Owner, Body: map[string]any{"name": "R1"},
			Headers: map[string]string{"X-Audit-Reason": "live"}})
		ev := s.nextEvent(t)
		logged := evSince(t, e, before)
		if len(logged) != 1 {
			t.Fatalf("audit log after one write: %s", evJSON(logged))
		}
		if ev.Seq <= before || evJSON(ev) != evJSON(logged[0]) {
			t.Errorf("streamed %s, logged %s (backlog up to seq %d)", evJSON(ev), evJSON(logged[0]), before)
		}
		if ev.Type != "role.created" || ev.Subject != "role:r1" || ev.Reason.MustGet() != "live" {
			t.Errorf("streamed %s", evJSON(ev))
		}

		for i := range 5 {
			e.NewChannel("c" + strconv.Itoa(i))
		}
		got := s.events(t, 5)
		if want := evSince(t, e, ev.Seq); evJSON(got) != evJSON(want) {
			t.Errorf("streamed %v, logged %v", evSeqs(got), evSeqs(want))
		}
	})
}

// Last-Event-ID and ?after= replay exactly the later events, then go live.
func TestEventStreamResume(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for i := range 6 {
			e.NewChannel("c" + strconv.Itoa(i))
		}
		all := evSince(t, e, 0)
		k := all[len(all)-4].Seq
		cases := []struct {
			name   string
			after  int64
			query  string
			header map[string]string
		}{
			{"Last-Event-ID", k, "", map[string]string{"Last-Event-ID": strconv.FormatInt(k, 10)}},
			{"after", k, "?after=" + strconv.FormatInt(k, 10), nil},
			{"Last-Event-ID wins over after (browser reconnect)", k, "?after=0", map[string]string{"Last-Event-ID": strconv.FormatInt(k, 10)}},
			{"from the start", 0, "", map[string]string{"Last-Event-ID": "0"}},
			{"after 0", 0, "?after=0", nil},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				want := evSince(t, e, tc.after)
				s := sseOpen(t, e, e.Owner, tc.query, tc.header)
				defer s.Close()
				got := s.events(t, len(want))
				if !slices.Equal(evSeqs(got), evSeqs(want)) {
					t.Errorf("replayed %v, want %v", evSeqs(got), evSeqs(want))
				}
				e.NewChannel("live" + strconv.Itoa(i))
				if ev := s.nextEvent(t); ev.Subject != "channel:live"+strconv.Itoa(i) {
					t.Errorf("after the replay: %s", evJSON(ev))
				}
			})
		}
		t.Run("at the newest seq", func(t *testing.T) {
			last := evLastSeq(t, e)
			s := sseOpen(t, e, e.Owner, "", map[string]string{"Last-Event-ID": strconv.FormatInt(last, 10)})
			e.NewChannel("next")
			if ev := s.nextEvent(t); ev.Subject != "channel:next" || ev.Seq <= last {
				t.Errorf("first event %s", evJSON(ev))
			}
		})
		for _, bad := range []struct {
			name   string
			query  string
			header map[string]string
		}{
			{"Last-Event-ID not a number", "", map[string]string{"Last-Event-ID": "abc"}},
			{"after negative", "?after=-1", nil},
			{"after not a number", "?after=x", nil},
		} {
			t.Run(bad.name, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: "GET", Path: "/events" + bad.query, Token: e.Owner, Headers: bad.header})
				if res.Status != 400 {
					t.Fatalf("status %d: %s", res.Status, res.Body)
				}
				res.Problem(t)
			})
		}
	})
}

// A client that reads a few events, disconnects and resumes with
// Last-Event-ID, again and again while writers keep writing, receives every
// committed event exactly once, in order, even when seq skips numbers.
func TestEventStreamResumeWhileWriting(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		start := evLastSeq(t, e)
		const writers, perWriter = 2, 30
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		errc := make(chan error, writers)
		for w := range writers {
			go func() {
				for i := range perWriter {
					id := fmt.Sprintf("w%d-%d", w, i)
					status, body, err := sseRawDo(ctx, e, e.Owner, "POST", "/channels/"+id+"/create", map[string]any{"name": id})
					if err != nil || status != 201 {
						errc <- fmt.Errorf("create %s: %d %s %v", id, status, body, err)
						return
					}
					if i%10 == 3 { // a rolled-back change between them (seq may skip)
						_, err := e.App.Store.Write(ctx, func(tx *store.Tx) error {
							if err := tx.AppendEvent(ctx, model.Event{Type: "channel.created", Subject: "channel:ghost"}); err != nil {
								return err
							}
							return errors.New("roll back")
						})
						if err == nil {
							errc <- errors.New("the rollback committed")
							return
						}
					}
				}
				errc <- nil
			}()
		}
		go func() {
			for range writers {
				if err := <-errc; err != nil {
					t.Error(err)
				}
			}
			close(done)
		}()

		rng := rand.New(rand.NewPCG(uint64(len(kind)), 7))
		var got []int64
		last, final := start, int64(-1)
		connections := 0
		finished := false
		for final < 0 || last < final {
			s := sseOpen(t, e, e.Owner, "", map[string]string{"Last-Event-ID": strconv.FormatInt(last, 10)})
			connections++
			for n := 1 + rng.IntN(8); n > 0; n-- {
				if !finished {
					ev, stopped := s.nextEventUntil(t, done)
					if stopped {
						finished = true
						final = evLastSeq(t, e)
						break
					}
					got, last = sseAppend(t, got, last, ev)
					continue
				}
				if last >= final {
					break
				}
				got, last = sseAppend(t, got, last, s.nextEvent(t))
			}
			s.Close()
			if connections > 1000 {
				t.Fatal("too many reconnections")
			}
		}
		want := evSeqs(evSince(t, e, start))
		if len(want) != writers*perWriter {
			t.Errorf("%d events logged, want %d", len(want), writers*perWriter)
		}
		if !slices.Equal(got, want) {
			t.Errorf("received %d seqs %v,\nlogged %d seqs %v", len(got), got, len(want), want)
		}
		if connections < 5 {
			t.Errorf("only %d connections: the test did not resume", connections)
		}
		t.Logf("%d events over %d connections", len(got), connections)
	})
}

func sseAppend(t testing.TB, got []int64, last int64, ev api.Event) ([]int64, int64) {
	t.Helper()
	if ev.Seq <= last {
		t.Fatalf("seq %d after %d: a duplicate or out of order", ev.Seq, last)
	}
	if ev.Subject == "channel:ghost" {
		t.Fatalf("a rolled-back event was streamed: %s", evJSON(ev))
	}
	return append(got, ev.Seq), ev.Seq
}

// A consumer that never reads blocks neither writers nor other consumers,
// and still receives everything, in order, once it reads.
func TestEventStreamStalledConsumer(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		start := evLastSeq(t, e)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := sseDial(ctx, e, e.Owner, "", nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		defer func() { cancel(); resp.Body.Close() }()
		live := sseOpen(t, e, e.Owner, "", nil)

		// Each event carries ~40 KB (links before and after): far more, in
		// all, than the socket buffers between the server and the stalled
		// client hold, so its handler blocks in a write for most of the test.
		links := func(v int) map[string]string {
			m := map[string]string{}
			for i := range 10 {
				m["l"+strconv.Itoa(i)] = "https://example.com/" + strings.Repeat(string(rune('a'+v)), 2000)
			}
			return m
		}
		const writes = 200
		for i := range writes {
			// e.HTTP bounds each request: a blocked writer fails the test.
			e.Must(200, testenv.Req{Method: "PUT", Path: "/profile/link", Token: e.Owner, Body: map[string]any{"links": links(i % 2)}})
		}
		want := evSeqs(evSince(t, e, start))
		if len(want) != writes {
			t.Fatalf("%d events logged, want %d", len(want), writes)
		}
		if got := evSeqs(live.events(t, writes)); !slices.Equal(got, want) {
			t.Errorf("the live consumer received %v, want %v", got, want)
		}
		stalled := sseWrap(t, resp, cancel)
		if got := evSeqs(stalled.events(t, writes)); !slices.Equal(got, want) {
			t.Errorf("the stalled consumer received %v, want %v", got, want)
		}
	})
}

// Idle streams receive heartbeat comments at the configured interval.
func TestEventStreamHeartbeat(t *testing.T) {
	t.Parallel()
	if d := config.Default().SSEHeartbeat; d != 15*time.Second {
		t.Errorf("default heartbeat %v, want 15s", d)
	}
	cfg, err := config.Parse("guildhall", nil, func(k string) string {
		if k == "GUILDHALL_SSE_HEARTBEAT" {
			return "2s"
		}
		return ""
	})
	if err != nil || cfg.SSEHeartbeat != 2*time.Second {
		t.Errorf("GUILDHALL_SSE_HEARTBEAT=2s: %v (%v)", cfg.SSEHeartbeat, err)
	}
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) { c.SSEHeartbeat = 20 * time.Millisecond }))
		s := sseOpen(t, e, e.Owner, "", nil)
		beats := 0
		for beats < 3 {
			f, ok, _ := s.nextFrame(t, nil)
			if !ok {
				t.Fatal("the stream ended")
			}
			if f.isEvent() {
				t.Fatalf("an event on an idle stream: %+v", f)
			}
			if slices.Contains(f.Comments, "heartbeat") {
				beats++
			}
		}
		e.NewChannel("after")
		if ev := s.nextEvent(t); ev.Subject != "channel:after" {
			t.Errorf("after the heartbeats: %s", evJSON(ev))
		}
	})
}

// Tickets: single use, short-lived, accepted only by GET /events, without
// Authorization; the stream still checks VIEW_AUDIT_LOG.
func TestEventStreamTickets(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		ticket := func(token string) api.StreamTicket {
			var tk api.StreamTicket
			e.Must(201, testenv.Req{Method: "POST", Path: "/events/ticket", Token: token}).JSON(t, &tk)
			if len(tk.Ticket) < 32 || tk.ExpiresAt.Time().Before(time.Now().Add(-time.Second)) || tk.ExpiresAt.Time().After(time.Now().Add(2*time.Minute)) {
				t.Fatalf("ticket %+v", tk)
			}
			return tk
		}
		status := func(query string) *testenv.Response {
			return e.Do(testenv.Req{Method: "GET", Path: "/events" + query})
		}

		tk := ticket(e.Owner)
		q := "?ticket=" + url.QueryEscape(tk.Ticket)
		if res := e.Do(testenv.Req{Method: "GET", Path: "/audit-log" + q}); res.Status != 401 {
			t.Errorf("a ticket accepted by /audit-log: %d", res.Status)
		}
		before := evLastSeq(t, e)
		s := sseOpen(t, e, "", q, nil)
		e.NewChannel("seen")
		if ev := s.nextEvent(t); ev.Seq <= before || ev.Subject != "channel:seen" {
			t.Errorf("over a ticket: %s", evJSON(ev))
		}
		s.Close()
		if res := status(q); res.Status != 401 {
			t.Errorf("second use: %d %s", res.Status, res.Body)
		} else {
			res.Problem(t)
		}

		t.Run("expired", func(t *testing.T) {
			secret := "tkt_expired_" + strings.Repeat("x", 32)
			evTicketExpired(t, e, auditor.ID, secret)
			res := status("?ticket=" + secret)
			if res.Status != 401 {
				t.Fatalf("expired ticket: %d %s", res.Status, res.Body)
			}
			res.Problem(t)
		})
		t.Run("unknown", func(t *testing.T) {
			res := status("?ticket=tkt_unknown")
			if res.Status != 401 {
				t.Fatalf("unknown ticket: %d %s", res.Status, res.Body)
			}
			res.Problem(t)
		})
		t.Run("user lost VIEW_AUDIT_LOG", func(t *testing.T) {
			tk := ticket(auditor.Token)
			e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + auditor.ID + "/roles/auditors", Token: e.Owner})
			res := status("?ticket=" + url.QueryEscape(tk.Ticket))
			if res.Status != 403 {
				t.Fatalf("status %d: %s", res.Status, res.Body)
			}
			res.Problem(t)
		})
	})
}

// Shutting the HTTP stack down ends open streams.
func TestEventStreamEndsOnShutdown(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		s := sseOpen(t, e, e.Owner, "", nil)
		e.NewChannel("x")
		s.nextEvent(t)
		e.App.HTTP.Shutdown()
		for {
			f, ok, _ := s.nextFrame(t, nil)
			if !ok {
				return // ended
			}
			if f.isEvent() {
				t.Errorf("an event after shutdown: %+v", f)
			}
		}
	})
}

// With PostgreSQL, a subscriber on one instance receives the events written
// through any instance sharing the database, in seq order. Heartbeats (which
// also make a stream re-read) are off, so only the database's notification
// can carry an event from one instance to the other.
func TestEventStreamAcrossInstances(t *testing.T) {
	t.Parallel()
	testenv.RequirePostgres(t)
	noHeartbeat := testenv.WithConfig(func(c *config.Config) { c.SSEHeartbeat = time.Hour })
	cfg1 := testenv.Config(t, testenv.Postgres, noHeartbeat)
	e1 := testenv.StartWith(t, testenv.Postgres, cfg1)
	cfg2 := testenv.Config(t, testenv.SQLite, noHeartbeat, testenv.WithConfig(func(c *config.Config) {
		c.DatabaseURL, c.BootstrapToken = cfg1.DatabaseURL, cfg1.BootstrapToken
	}))
	e2 := testenv.StartWith(t, testenv.Postgres, cfg2)
	if e2.App.OwnerToken != "" {
		t.Fatal("the second instance bootstrapped a second owner")
	}
	s1 := sseOpen(t, e1, e1.Owner, "", nil)
	s2 := sseOpen(t, e2, e1.Owner, "", nil)
	for i, via := range []*testenv.Env{e1, e1, e2, e1, e2, e2} {
		before := evLastSeq(t, e1)
		via.NewChannel("c" + strconv.Itoa(i))
		want := evSince(t, e2, before)
		if len(want) != 1 {
			t.Fatalf("write %d: %d events logged, want 1", i, len(want))
		}
		for name, s := range map[string]*sseStream{"instance 1": s1, "instance 2": s2} {
			if got := s.nextEvent(t); evJSON(got) != evJSON(want[0]) {
				t.Errorf("write %d: %s streamed %s, want %s", i, name, evJSON(got), evJSON(want[0]))
			}
		}
	}
}

// A graceful shutdown (app.Serve) is not held up by a stream whose client
// stopped reading: the blocked write is cut, and Serve returns cleanly.
func TestEventStreamStalledConsumerShutdown(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		cfg := testenv.Config(t, kind, testenv.WithConfig(func(c *config.Config) { c.ShutdownTimeout = 20 * time.Second }))
		a, err := app.New(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		a.Handler = testenv.CheckContract(t, a.Handler)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		served := make(chan error, 1)
		go func() { served <- a.Serve(ctx, ln) }()
		// Only URL and HTTP are used (by sseRawDo and sseDial).
		e := &testenv.Env{URL: "http://" + ln.Addr().String(), HTTP: &http.Client{Timeout: 60 * time.Second}}
		links := map[string]string{}
		for i := range 10 {
			links["l"+strconv.Itoa(i)] = "https://example.com/" + strings.Repeat("x", 2000)
		}
		for i := range 150 { // ~40 KB of event each: more than the socket buffers hold
			links["l0"] = "https://example.com/" + strconv.Itoa(i)
			if status, body, err := sseRawDo(t.Context(), e, cfg.BootstrapToken, "PUT", "/profile/link", map[string]any{"links": links}); err != nil || status != 200 {
				t.Fatalf("write %d: %d %s %v", i, status, body, err)
			}
		}
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := sseDial(sctx, e, cfg.BootstrapToken, "", map[string]string{"Last-Event-ID": "0"}) // replay, never read
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("open: %v %v", resp, err)
		}
		defer resp.Body.Close()
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(2 * cfg.ShutdownTimeout):
			t.Fatal("Serve did not return")
		}
	})
}

// An open stream is authorized again before each delivery: losing access
// ends it, and nothing committed from the revocation on reaches it.
func TestEventStreamEndsWhenAccessEnds(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		cases := []struct {
			name   string
			ticket bool // open with a ticket instead of the bearer token
			revoke func(u testenv.User, tokenID string)
		}{
			{"role removed", false, func(u testenv.User, _ string) {
				e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + u.ID + "/roles/auditors", Token: e.Owner})
			}},
			{"user suspended", false, func(u testenv.User, _ string) {
				e.Must(200, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
					Body: map[string]any{"username": u.Username, "display_name": u.Username, "status": "suspended"}})
			}},
			{"token revoked", false, func(u testenv.User, tokenID string) {
				e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + u.ID + "/tokens/" + tokenID, Token: e.Owner})
			}},
			{"user deleted", false, func(u testenv.User, _ string) {
				e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + u.ID, Token: e.Owner})
			}},
			{"ticket, user suspended", true, func(u testenv.User, _ string) {
				e.Must(200, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
					Body: map[string]any{"username": u.Username, "display_name": u.Username, "status": "suspended"}})
			}},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e := e.WithT(t)
				u := e.NewUser("auditor" + strconv.Itoa(i))
				e.Assign(u.ID, "auditors")
				tok := e.Must(201, testenv.Req{Method: "POST", Path: "/users/" + u.ID + "/tokens", Token: e.Owner,
					Body: map[string]any{"name": "stream"}}).Map(t)
				token, tokenID := tok["token"].(string), tok["id"].(string)
				var s *sseStream
				if tc.ticket {
					var tk api.StreamTicket
					e.Must(201, testenv.Req{Method: "POST", Path: "/events/ticket", Token: token}).JSON(t, &tk)
					s = sseOpen(t, e, "", "?ticket="+url.QueryEscape(tk.Ticket), nil)
				} else {
					s = sseOpen(t, e, token, "", nil)
				}
				e.NewChannel("live" + strconv.Itoa(i))
				if ev := s.nextEvent(t); ev.Subject != "channel:live"+strconv.Itoa(i) {
					t.Fatalf("before the revocation: %s", evJSON(ev))
				}

				last := evLastSeq(t, e)
				tc.revoke(u, tokenID)
				e.NewChannel("after" + strconv.Itoa(i))
				for {
					f, ok, _ := s.nextFrame(t, nil)
					if !ok {
						break // the stream ended, as it must
					}
					if !f.isEvent() {
						continue
					}
					var ev api.Event
					if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
						t.Fatalf("event data %q: %v", f.Data, err)
					}
					if ev.Seq > last {
						t.Fatalf("delivered after access ended: %s", evJSON(ev))
					}
				}
			})
		}
	})
}

package webhook_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/webhook"
)

// got is what a receiver saw of one request.
type got struct {
	method string
	header http.Header
	body   []byte
}

// recording returns a handler answering status (and extra headers), and
// what it received.
func recording(status int, extra http.Header) (http.HandlerFunc, func() []got) {
	var mu sync.Mutex
	var seen []got
	h := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, got{r.Method, r.Header.Clone(), b})
		mu.Unlock()
		for k, v := range extra {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "thanks")
	}
	return h, func() []got {
		mu.Lock()
		defer mu.Unlock()
		return append([]got(nil), seen...)
	}
}

// loopbackClient reaches the tests' receivers, all on loopback.
func loopbackClient() *http.Client {
	return webhook.NewClient(webhook.Options{AllowPrivate: true, Timeout: 2 * time.Second})
}

func TestAttemptDelivers(t *testing.T) {
	h, seen := recording(http.StatusOK, nil)
	rcv := newReceiver(t, h)
	secret := webhook.NewSecret()
	d := webhook.Delivery{ID: "01JZ8Q4W3E5R6T7Y8U9I0OPASD", Body: []byte(`{"seq":7,"type":"channel.created"}`)}
	now := time.Now()

	o := webhook.Attempt(context.Background(), loopbackClient(), rcv.URL+"/in", d, []string{secret}, now)
	if o.Result != webhook.Delivered || o.Status != 200 || o.Err != nil || o.RetryAfter != 0 {
		t.Fatalf("Attempt = %+v; want Delivered 200", o)
	}
	reqs := seen()
	if len(reqs) != 1 {
		t.Fatalf("the receiver saw %d requests; want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != http.MethodPost || string(r.body) != string(d.Body) {
		t.Fatalf("the receiver saw %s %q; want POST %q", r.method, r.body, d.Body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q; want application/json", ct)
	}
	if id := r.header.Get("webhook-id"); id != d.ID {
		t.Fatalf("webhook-id %q; want %q", id, d.ID)
	}
	if ts := r.header.Get("webhook-timestamp"); ts != strconv.FormatInt(now.Unix(), 10) {
		t.Fatalf("webhook-timestamp %q; want %d", ts, now.Unix())
	}
	// The receiver's view, verified by the reference library with its
	// timestamp tolerance: the delivery is what a Standard Webhooks
	// consumer accepts.
	if err := verify(t, secret, r.body, r.header); err != nil {
		t.Fatalf("the reference library rejects the delivery: %v", err)
	}
}

func TestAttemptRotationSignsWithBoth(t *testing.T) {
	h, seen := recording(http.StatusAccepted, nil)
	rcv := newReceiver(t, h)
	current, previous := webhook.NewSecret(), webhook.NewSecret()
	d := webhook.Delivery{ID: "msg_rotated", Body: []byte(`{"seq":8}`)}
	o := webhook.Attempt(context.Background(), loopbackClient(), rcv.URL, d, []string{current, previous}, time.Now())
	if o.Result != webhook.Delivered || o.Status != http.StatusAccepted {
		t.Fatalf("Attempt = %+v; want Delivered 202", o)
	}
	r := seen()[0]
	for _, s := range []string{current, previous} {
		if err := verify(t, s, r.body, r.header); err != nil {
			t.Fatalf("a receiver with one of the two secrets rejects the delivery: %v", err)
		}
	}
}

func TestAttemptStatuses(t *testing.T) {
	now := time.Now()
	date := now.Add(2 * time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name       string
		status     int
		header     http.Header
		want       webhook.Result
		retryAfter time.Duration // -1: about 2 h (an HTTP date)
	}{
		{"200", 200, nil, webhook.Delivered, 0},
		{"204", 204, nil, webhook.Delivered, 0},
		{"299", 299, nil, webhook.Delivered, 0},
		{"410 disables", 410, nil, webhook.Gone, 0},
		{"400", 400, nil, webhook.Retry, 0},
		{"404", 404, nil, webhook.Retry, 0},
		{"500", 500, nil, webhook.Retry, 0},
		{"304", 304, nil, webhook.Retry, 0},
		{"429 with Retry-After in seconds", 429, http.Header{"Retry-After": {"120"}}, webhook.Retry, 120 * time.Second},
		{"503 with Retry-After as a date", 503, http.Header{"Retry-After": {date}}, webhook.Retry, -1},
		{"503 with an unreadable Retry-After", 503, http.Header{"Retry-After": {"soon"}}, webhook.Retry, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, seen := recording(tc.status, tc.header)
			rcv := newReceiver(t, h)
			o := webhook.Attempt(context.Background(), loopbackClient(), rcv.URL,
				webhook.Delivery{ID: "msg_status", Body: []byte(`{}`)}, []string{webhook.NewSecret()}, now)
			if o.Result != tc.want || o.Status != tc.status || o.Err != nil {
				t.Fatalf("Attempt = %+v; want %v with status %d", o, tc.want, tc.status)
			}
			if tc.retryAfter >= 0 && o.RetryAfter != tc.retryAfter {
				t.Fatalf("RetryAfter = %v; want %v", o.RetryAfter, tc.retryAfter)
			}
			if tc.retryAfter < 0 && (o.RetryAfter < 2*time.Hour-2*time.Second || o.RetryAfter > 2*time.Hour) {
				t.Fatalf("RetryAfter = %v; want about 2 h", o.RetryAfter)
			}
			if n := len(seen()); n != 1 {
				t.Fatalf("the receiver saw %d requests; want 1", n)
			}
		})
	}
}

func TestAttemptDoesNotFollowRedirects(t *testing.T) {
	target, seenTarget := recording(http.StatusOK, nil)
	dst := newReceiver(t, target)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			src := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, dst.URL+"/elsewhere", status)
			})
			// Even a client that follows redirects (the zero http.Client
			// does) does not follow them in an attempt.
			for _, c := range []*http.Client{loopbackClient(), {}} {
				o := webhook.Attempt(context.Background(), c, src.URL,
					webhook.Delivery{ID: "msg_redirect", Body: []byte(`{}`)}, []string{webhook.NewSecret()}, time.Now())
				if o.Result != webhook.Retry || o.Status != status {
					t.Fatalf("Attempt = %+v; want Retry with status %d", o, status)
				}
			}
			if n := len(seenTarget()); n != 0 {
				t.Fatalf("the redirect's target saw %d requests; want none", n)
			}
		})
	}
}

func TestAttemptHangingReceiverIsBounded(t *testing.T) {
	release := make(chan struct{})
	rcv := newReceiver(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the receiver's Close

	for name, c := range map[string]*http.Client{
		"the client's timeout": webhook.NewClient(webhook.Options{AllowPrivate: true, Timeout: 150 * time.Millisecond}),
		"the caller's context": {Timeout: 0},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if c.Timeout == 0 {
				// Attempt bounds this client at AttemptTimeout; the
				// context stands in for those 10 s here.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 150*time.Millisecond)
				defer cancel()
			}
			start := time.Now()
			o := webhook.Attempt(ctx, c, rcv.URL, webhook.Delivery{ID: "msg_hang", Body: []byte(`{}`)},
				[]string{webhook.NewSecret()}, start)
			took := time.Since(start)
			var ne net.Error
			if o.Result != webhook.Retry || o.Status != 0 || !errors.As(o.Err, &ne) || !ne.Timeout() {
				t.Fatalf("Attempt = %+v; want Retry after a timeout", o)
			}
			if took > 2*time.Second {
				t.Fatalf("the attempt took %v; want about 150 ms", took)
			}
		})
	}
}

func TestAttemptRefusesLoopbackUnlessAllowed(t *testing.T) {
	h, seen := recording(http.StatusOK, nil)
	rcv := newReceiver(t, h)
	d := webhook.Delivery{ID: "msg_loopback", Body: []byte(`{}`)}
	secrets := []string{webhook.NewSecret()}

	o := webhook.Attempt(context.Background(), webhook.NewClient(webhook.Options{}), rcv.URL, d, secrets, time.Now())
	var ue *webhook.URLError
	if o.Result != webhook.Retry || o.Status != 0 || !errors.As(o.Err, &ue) || ue.Reason != webhook.ReasonAddress {
		t.Fatalf("Attempt without AllowPrivate = %+v; want Retry refused at the address", o)
	}
	if rcv.conns.Load() != 0 || len(seen()) != 0 {
		t.Fatalf("the receiver saw %d connections, %d requests; want none", rcv.conns.Load(), len(seen()))
	}

	o = webhook.Attempt(context.Background(), loopbackClient(), rcv.URL, d, secrets, time.Now())
	if o.Result != webhook.Delivered {
		t.Fatalf("Attempt with AllowPrivate = %+v; want Delivered", o)
	}
}

func TestAttemptWithoutAnAnswer(t *testing.T) {
	h, seen := recording(http.StatusOK, nil)
	rcv := newReceiver(t, h)
	d := webhook.Delivery{ID: "msg_none", Body: []byte(`{}`)}

	t.Run("a malformed secret sends nothing", func(t *testing.T) {
		o := webhook.Attempt(context.Background(), loopbackClient(), rcv.URL, d, []string{"whsec_nope"}, time.Now())
		if o.Result != webhook.Retry || !errors.Is(o.Err, webhook.ErrMalformedSecret) || len(seen()) != 0 {
			t.Fatalf("Attempt = %+v, %d requests seen; want Retry with ErrMalformedSecret and none", o, len(seen()))
		}
	})
	t.Run("a closed port", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		o := webhook.Attempt(context.Background(), loopbackClient(), "http://"+addr+"/", d, []string{webhook.NewSecret()}, time.Now())
		if o.Result != webhook.Retry || o.Status != 0 || o.Err == nil {
			t.Fatalf("Attempt = %+v; want Retry with a connection error", o)
		}
	})
}

func TestResultString(t *testing.T) {
	for r, want := range map[webhook.Result]string{webhook.Delivered: "delivered", webhook.Gone: "gone", webhook.Retry: "retry"} {
		if r.String() != want {
			t.Fatalf("%d.String() = %q; want %q", int(r), r.String(), want)
		}
	}
}

// roundTripFunc answers requests without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestAttemptBoundsAnyClient(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Hour, 3 * time.Second} {
		t.Run(timeout.String(), func(t *testing.T) {
			var deadline time.Time
			c := &http.Client{Timeout: timeout, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				deadline, _ = r.Context().Deadline()
				return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
			})}
			start := time.Now()
			o := webhook.Attempt(context.Background(), c, "https://hooks.example.com/",
				webhook.Delivery{ID: "msg_bound", Body: []byte(`{}`)}, []string{webhook.NewSecret()}, start)
			want := min(timeout, webhook.AttemptTimeout)
			if timeout == 0 {
				want = webhook.AttemptTimeout
			}
			if left := deadline.Sub(start); o.Result != webhook.Delivered || left > want+time.Second || left < want-time.Second {
				t.Fatalf("Attempt = %+v with %v to its deadline; want Delivered within %v", o, left, want)
			}
		})
	}
}

package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AttemptTimeout bounds one attempt, from dialling to the answer's status:
// a receiver silent for longer is retried later.
const AttemptTimeout = 10 * time.Second

// drainLimit is how much of an answer's body is read before it is closed:
// enough for the usual short answer, so the connection is reused, and
// never a large body nobody reads.
const drainLimit = 64 << 10

// Options configure a client for deliveries.
type Options struct {
	// AllowPrivate lets deliveries reach loopback, private, link-local,
	// shared, unspecified and multicast addresses.
	AllowPrivate bool
	// Resolver resolves the destinations' names; nil is
	// net.DefaultResolver.
	Resolver Resolver
	// Timeout bounds one attempt; 0, or more than AttemptTimeout, is
	// AttemptTimeout.
	Timeout time.Duration
	// Conns is how many attempts may be made at once (the deliverer's
	// Concurrency; 0: DefaultConcurrency): as many connections to a host
	// are open at most, and kept open between attempts.
	Conns int
}

// NewClient returns the client deliveries are made with: every connection
// through a Dialer, no proxy (the proxy's address would be the one
// checked, not the destination's), redirects not followed, and each
// attempt bounded by the timeout. It keeps a connection open for each
// attempt that may be made at once, and opens no more: with fewer kept, a
// stream of deliveries to one receiver closes the connections beyond them
// after every attempt and dials them again for the next; with more
// allowed, an attempt dials while another connection is about to be freed.
func NewClient(o Options) *http.Client {
	if o.Conns <= 0 {
		o.Conns = DefaultConcurrency
	}
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            NewDialer(o.AllowPrivate, o.Resolver).DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    AttemptTimeout,
		MaxIdleConns:           max(100, o.Conns),
		MaxIdleConnsPerHost:    o.Conns,
		MaxConnsPerHost:        o.Conns,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{Transport: t, Timeout: attemptTimeout(o.Timeout), CheckRedirect: noRedirect}
}

func attemptTimeout(d time.Duration) time.Duration {
	if d <= 0 || d > AttemptTimeout {
		return AttemptTimeout
	}
	return d
}

// noRedirect hands the 3xx itself back: a redirect is a failed attempt,
// and its target was never checked.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Delivery is what one attempt sends: its ID (the webhook-id, the same on
// every attempt) and its body (the event, JSON).
type Delivery struct {
	ID   string
	Body []byte
}

// Result is what an attempt means for its delivery.
type Result int

// Results. The zero Result is Retry: an attempt that did not say
// otherwise is made again.
const (
	Retry     Result = iota // anything else: retry on the schedule (NextAttempt)
	Delivered               // a 2xx answer
	Gone                    // 410: the receiver wants no more; the caller disables the webhook
)

func (r Result) String() string {
	switch r {
	case Delivered:
		return "delivered"
	case Gone:
		return "gone"
	default:
		return "retry"
	}
}

// Outcome is the result of one attempt.
type Outcome struct {
	Result     Result
	Status     int           // the answer's status; 0 when none came
	RetryAfter time.Duration // the answer's Retry-After; 0 when none
	Err        error         // why no answer came (connection, timeout, refused address); nil when one did
}

// Attempt POSTs a delivery to url, signed with secrets at now (the
// webhook-timestamp), and says what came of it. Whatever client it is
// given, it follows no redirect and waits at most AttemptTimeout (less
// when the client's Timeout is shorter); give it a client from NewClient,
// whose dialler refuses the addresses webhooks may not reach. A secret
// that cannot sign is Retry with an error, and nothing is sent.
func Attempt(ctx context.Context, client *http.Client, url string, d Delivery, secrets []string, now time.Time) Outcome {
	sig, err := Sign(secrets, d.ID, now, d.Body)
	if err != nil {
		return Outcome{Result: Retry, Err: err}
	}
	c := *client
	c.CheckRedirect = noRedirect
	c.Timeout = attemptTimeout(c.Timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return Outcome{Result: Retry, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", d.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := c.Do(req)
	if err != nil {
		return Outcome{Result: Retry, Err: err}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	o := Outcome{Result: Retry, Status: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now)}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		o.Result = Delivered
	case resp.StatusCode == http.StatusGone:
		o.Result = Gone
	}
	return o
}

// parseRetryAfter reads a Retry-After header, seconds or an HTTP date,
// as a delay from now; 0 when absent, unreadable or past. It is at most
// MaxRetryAfter, which also keeps a huge number of seconds from
// overflowing.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n >= uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		return time.Duration(n) * time.Second
	} else if errors.Is(err, strconv.ErrRange) {
		return MaxRetryAfter
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter)
}

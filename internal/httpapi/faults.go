package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/internal/apperr"
)

// Faults configure how the HTTP stack bounds requests and answers the
// failures of what lies beneath it.
type Faults struct {
	// Classify turns driver and system errors into the apperr fault kinds
	// (unavailable, insufficient storage); nil leaves errors as they are.
	Classify func(error) error
	// RequestTimeout is the deadline of a request whose answer is JSON; the
	// transfers of attachment bytes and event streams are bounded otherwise
	// (body idle timeout and minimum rate; heartbeats). 0: none.
	RequestTimeout time.Duration
	// DBTimeout is a request's database budget (budget): the time its
	// database work may take in all, however many statements, waits and
	// retries it makes. 0: none (each statement is still bounded by the
	// store).
	DBTimeout time.Duration
	// BodyIdleTimeout: an upload body that sends nothing for this long is a
	// 408. 0: none.
	BodyIdleTimeout time.Duration
	// BodyMinRate: after the first BodyIdleTimeout, an upload body must
	// average at least this many bytes a second. 0: no minimum.
	BodyMinRate int64
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// client; without them the client is the connection's address.
	TrustedProxies []netip.Prefix
	// RateLimitClients bounds the rate limiter's tables (addresses, tokens).
	RateLimitClients int
}

type faults struct {
	Faults
}

func newFaults(f Faults) faults { return faults{Faults: f} }

// retryAfterUnavailable is the Retry-After of a 503.
const retryAfterUnavailable = "2"

// classifyFault gives infrastructure failures their kind (503, 507). A
// cancellation while the client is still there is one of our deadlines
// (drivers report an expired deadline as context.Canceled at times): the
// database did not answer in time.
func (h *Handler) classifyFault(c echo.Context, err error) error {
	if h.faults.Classify != nil {
		err = h.faults.Classify(err)
	}
	if _, ok := apperr.As(err); !ok && errors.Is(err, context.Canceled) && c.Request().Context().Err() == nil {
		return apperr.Unavailable(err)
	}
	return err
}

// faultHeaders sets what a fault answer carries, and logs its cause (the
// body shows none of it).
func (h *Handler) faultHeaders(c echo.Context, status int, err error) {
	switch status {
	case http.StatusServiceUnavailable:
		if c.Response().Header().Get("Retry-After") == "" {
			c.Response().Header().Set("Retry-After", retryAfterUnavailable)
		}
		fallthrough
	case http.StatusInsufficientStorage:
		h.log.Warn("request failed: "+http.StatusText(status), "request_id", c.Response().Header().Get(echo.HeaderXRequestID),
			"method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	}
}

// answersBytes reports whether an operation's success is anything but JSON.
func answersBytes(op *openapi3.Operation) bool {
	for code, ref := range op.Responses.Map() {
		if !strings.HasPrefix(code, "2") || ref.Value == nil {
			continue
		}
		for ct := range ref.Value.Content {
			if !strings.Contains(ct, "json") {
				return true
			}
		}
	}
	return false
}

// A request's database budget. The budget is the request's, applied at
// the edge, not a statement's: every wait of the request's database work
// honours it (a connection from the pool, the change-log question it shares
// with other requests, a build of the authorization state by another
// request, its place in the writer's queue, its transaction), so with a
// database that does not answer the request is a 503 within DBTimeout,
// where deadlines per statement or per wait would add up. A request has one
// budget, from the gate (authentication) to its answer. Only the client's
// own time is not counted: a request with a JSON body gets what the
// authentication left of it once the body has arrived (budgetAfterBody).
// A stream (attachment bytes, events) gets it for its opening, and then
// each statement has its own deadline.

// budgetLeftKey keys what is left of a request's database budget while the
// request goes on without it (pauseBudget).
type budgetLeftKey struct{}

// budget bounds ctx by its request's database budget: what pauseBudget left
// of it, or all of it.
func (h *Handler) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.faults.DBTimeout <= 0 {
		return ctx, func() {}
	}
	d := h.faults.DBTimeout
	if left, ok := ctx.Value(budgetLeftKey{}).(time.Duration); ok {
		d = left // spent (<= 0): the request's database work fails at once
	}
	return withBudget(ctx, d)
}

// pauseBudget returns base, which has no budget, carrying what is left of
// the budget that started at start.
func (h *Handler) pauseBudget(base context.Context, start time.Time) context.Context {
	if h.faults.DBTimeout <= 0 {
		return base
	}
	return context.WithValue(base, budgetLeftKey{}, h.faults.DBTimeout-time.Since(start))
}

// budgetAfterBody bounds a request with a JSON body by what is left of its
// database budget once the validator has read the body: the time the
// client took to send it is not the database's.
func (h *Handler) budgetAfterBody(op *operation) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if !op.jsonBody || op.streams || h.faults.DBTimeout <= 0 {
			return next
		}
		return func(c echo.Context) error {
			orig := c.Request()
			ctx, cancel := h.budget(orig.Context()) // the gate paused it
			defer cancel()
			c.SetRequest(orig.WithContext(ctx))
			err := next(c)
			c.SetRequest(orig) // see deadline
			return err
		}
	}
}

// deadline bounds a request that answers JSON by RequestTimeout: a database
// that hangs makes it a 503 rather than a request that never ends.
//
// A request with no body has its database budget (gate) from its start to
// its end: when that budget is the shorter, it is the request's deadline
// too, and a second timer would never fire first.
func (h *Handler) deadline(op *operation) echo.MiddlewareFunc {
	budgeted := !op.jsonBody && h.faults.DBTimeout > 0 && h.faults.DBTimeout <= h.faults.RequestTimeout
	bounded := h.faults.RequestTimeout > 0 && !op.streams && !budgeted
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if !bounded {
			return next
		}
		return func(c echo.Context) error {
			orig := c.Request()
			ctx, cancel := context.WithTimeout(orig.Context(), h.faults.RequestTimeout)
			defer cancel()
			c.SetRequest(orig.WithContext(ctx))
			err := next(c)
			// The error handler tells a client gone (its request's context
			// canceled) from a deadline of ours by the original context.
			c.SetRequest(orig)
			return err
		}
	}
}

// boundedBody reads an upload body under a per-read deadline on the
// connection: each read must come within BodyIdleTimeout, and no later than
// the minimum rate allows for the bytes so far. A body that stalls fails
// with a 408 (the blob store then removes its temporary file).
type boundedBody struct {
	r     io.Reader
	rc    *http.ResponseController
	f     Faults
	start time.Time
	n     int64
}

func (h *Handler) boundBody(w http.ResponseWriter, r io.Reader) io.Reader {
	if w == nil || r == nil || h.faults.BodyIdleTimeout <= 0 {
		return r
	}
	return &boundedBody{r: r, rc: http.NewResponseController(w), f: h.faults.Faults, start: time.Now()}
}

func (b *boundedBody) Read(p []byte) (int, error) {
	now := time.Now()
	dl := now.Add(b.f.BodyIdleTimeout)
	if b.f.BodyMinRate > 0 {
		// By then the body must have averaged BodyMinRate after the first
		// idle window (the +1: the next byte).
		byRate := b.start.Add(b.f.BodyIdleTimeout + time.Duration(float64(b.n+1)/float64(b.f.BodyMinRate)*float64(time.Second)))
		if byRate.Before(dl) {
			dl = byRate
		}
	}
	if !dl.After(now) {
		return 0, b.stalled(nil)
	}
	_ = b.rc.SetReadDeadline(dl)
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF && isTimeout(err) { // the end of every body is no timeout: no walk of its chain
		return n, b.stalled(err)
	}
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *boundedBody) stalled(cause error) error {
	detail := "The request body stalled: nothing arrived for " + b.f.BodyIdleTimeout.String() + "; nothing was stored."
	if b.f.BodyMinRate > 0 {
		detail = "The request body stalled: it arrived slower than " + strconv.FormatInt(b.f.BodyMinRate, 10) + " bytes a second, or nothing arrived for " +
			b.f.BodyIdleTimeout.String() + "; nothing was stored."
	}
	return apperr.RequestTimeout(detail, cause)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Request IDs are a random prefix chosen at start and a counter: unique
// across instances and restarts without a random read per request (they
// identify requests in logs; they are not secrets).
var (
	requestIDPrefix = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	requestIDCounter atomic.Uint64
)

func newRequestID() string {
	var b [16 + 1 + 16]byte
	copy(b[:], requestIDPrefix)
	b[16] = '-'
	n := requestIDCounter.Add(1)
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i > 16; i-- {
		b[i] = digits[n&0xf]
		n >>= 4
	}
	return string(b[:])
}

// recoverer turns a panic into a logged 500 problem.
func (h *Handler) recoverer() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if r := recover(); r != nil {
					if r == http.ErrAbortHandler {
						panic(r)
					}
					err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			return next(c)
		}
	}
}

// observe writes the access log line of each request and counts it in the
// metrics, around the rest of the chain, timing it once for both (one
// middleware rather than two: Echo v4 wraps each global middleware around
// the route's handler anew on every request).
func (h *Handler) observe(reg *prometheus.Registry) echo.MiddlewareFunc {
	count := requestMetrics(reg)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err) // render now so the status is known
			}
			end := time.Now()
			status := c.Response().Status
			count(c.Path(), req.Method, status, end.Sub(start))
			h.logRequest(c, req, status, end, end.Sub(start))
			return nil
		}
	}
}

// logRequest writes one structured line for a request, with its request
// ID. The line goes to the logger's handler directly: Logger.LogAttrs would
// first walk the stack for the caller's program counter, a cost on every
// request for a source location no handler of ours writes (the access log's
// would be this function anyway).
func (h *Handler) logRequest(c echo.Context, req *http.Request, status int, now time.Time, latency time.Duration) {
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	ctx := c.Request().Context()
	hd := h.log.Handler()
	if !hd.Enabled(ctx, level) {
		return
	}
	id := req.Header.Get(echo.HeaderXRequestID)
	if id == "" {
		id = c.Response().Header().Get(echo.HeaderXRequestID)
	}
	path := req.URL.Path
	if path == "" {
		path = "/"
	}
	r := slog.NewRecord(now, level, "request", 0)
	r.AddAttrs(slog.String("request_id", id), slog.String("method", req.Method), slog.String("path", path),
		slog.Int("status", status), slog.Duration("latency", latency), slog.String("remote_ip", c.RealIP()))
	if h.tracer != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
		}
	}
	_ = hd.Handle(ctx, r) // as LogAttrs: a line that cannot be written fails no request
}

// requestMetrics counts requests and their latency by route (the route
// pattern, never the raw path, so cardinality stays bounded). The series of
// each route, method and status are looked up once and kept.
func requestMetrics(reg *prometheus.Registry) func(route, method string, status int, took time.Duration) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "guildhall_http_requests_total", Help: "HTTP requests by route, method and status.",
	}, []string{"route", "method", "status"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "guildhall_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method"})
	reg.MustRegister(requests, latency)
	type key struct {
		route, method string
		status        int
	}
	type series struct {
		count   prometheus.Counter
		latency prometheus.Observer
	}
	var cache sync.Map // key -> series
	return func(route, method string, status int, took time.Duration) {
		k := key{route: route, method: methodLabel(method), status: status}
		if k.route == "" {
			k.route = "unmatched"
		}
		v, ok := cache.Load(k)
		if !ok {
			v, _ = cache.LoadOrStore(k, series{
				count:   requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
				latency: latency.WithLabelValues(k.route, k.method),
			})
		}
		m := v.(series)
		m.count.Inc()
		m.latency.Observe(took.Seconds())
	}
}

// methodLabel bounds the method label: a client may send any token as a
// method, and each would be a new series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

package httpapi

import (
	"context"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/guild"
)

// Tracing (Options.Tracer; off when nil, and then none of this is
// installed or run). Each request gets a server span, a child of the
// trace its traceparent header names (W3C Trace Context; tracestate is
// kept), named by the contract's operation ID ("getUser"), or by method
// and route outside the contract ("GET /docs/*"). Inside it:
//
//   - "authorize": the gate's authentication, the credential lookup and
//     the authorization state, with the store's work for them as children;
//   - the permission and hierarchy checks of the service, as
//     "authorize.check" events of the server span (internal/guild);
//   - the store's spans and events (internal/sqldb/trace.go and
//     internal/fresh/trace.go): a span per statement, the read cache's
//     decisions, its freshness question and the writes.
//
// Probes and scrapes (/healthz, /readyz, /metrics) are not traced.
// Nothing is added to the response: no header carries the trace back.

const tracerName = "github.com/guildhall/guildhall/internal/httpapi"

// attrRequestID is the request ID (X-Request-ID, and the problem's
// request_id) on the server span.
const attrRequestID = attribute.Key("guildhall.request_id")

// untraced are the routes whose requests get no span.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// traceRequests starts each request's server span. It runs after the
// request ID is chosen, and around the access log, the metrics and the
// error handler, so the span ends with the status the client got.
func (h *Handler) traceRequests() echo.MiddlewareFunc {
	prop := propagation.TraceContext{}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := c.Path()
			if untraced[route] {
				return next(c)
			}
			req := c.Request()
			method := methodLabel(req.Method)
			name := method
			attrs := make([]attribute.KeyValue, 0, 10)
			if op := h.ops.of(c); op != nil {
				name = op.id
			} else if route != "" {
				name = method + " " + route
			}
			if route != "" {
				attrs = append(attrs, semconv.HTTPRoute(route))
			}
			if method == "OTHER" {
				method = "_OTHER" // as the semantic conventions say
			}
			scheme := "http"
			if req.TLS != nil {
				scheme = "https"
			}
			attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method), semconv.URLPath(req.URL.Path),
				semconv.URLScheme(scheme), semconv.ClientAddress(c.RealIP()),
				semconv.NetworkProtocolVersion(strconv.Itoa(req.ProtoMajor)+"."+strconv.Itoa(req.ProtoMinor)),
				attrRequestID.String(c.Response().Header().Get(echo.HeaderXRequestID)))
			if ua := req.UserAgent(); ua != "" {
				attrs = append(attrs, semconv.UserAgentOriginal(ua))
			}
			ctx := prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			ctx, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			if err := next(c); err != nil {
				c.Error(err) // render now so the status is known
			}
			status := c.Response().Status
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= 500 {
				span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
				span.SetStatus(codes.Error, "")
			}
			return nil
		}
	}
}

// authenticateTraced is authenticate in a span of its own, "authorize",
// when the request is traced; the actor it returns records its checks on
// the request's span.
func (h *Handler) authenticateTraced(ctx context.Context, c echo.Context, op *operation) (*guild.Actor, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return h.authenticate(ctx, c, op)
	}
	ctx, span := h.tracer.Start(ctx, "authorize")
	defer span.End()
	actor, err := h.authenticate(ctx, c, op)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "not authenticated")
		return nil, err
	}
	span.SetAttributes(attribute.String("guildhall.user_id", actor.UserID), attribute.Bool("guildhall.owner", actor.IsOwner))
	actor.TraceChecks(parent)
	return actor, nil
}

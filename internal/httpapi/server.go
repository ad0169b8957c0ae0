// Package httpapi serves the contract: it implements the strict server
// interface generated from openapi/openapi.yaml over the guild service, and
// builds the whole HTTP stack (validator, authentication, rate limits, error
// handler, docs, metrics) in one factory, New, used by main and by tests.
package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/swaggest/swgui"
	"github.com/swaggest/swgui/v5emb"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/events"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/guild/asof"
	"github.com/guildhall/guildhall/internal/guild/webhooks"
	"github.com/guildhall/guildhall/internal/revert"
	"github.com/guildhall/guildhall/web"
)

// Options configure the HTTP stack.
type Options struct {
	Service     *guild.Service
	Revert      *revert.Service // reverts of audit events, over Service
	Broker      *events.Broker
	Logger      *slog.Logger
	CORSOrigins []string
	RateLimit   float64 // requests per second per user (per address without a token); 0 turns it off
	// MaxEventStreams bounds the event streams a user has open at once
	// on this instance; default 5.
	MaxEventStreams int
	MaxJSON         int64 // bytes; default 1 MiB
	Heartbeat       time.Duration
	Version         string
	// Ready reports whether the instance can serve (for /readyz).
	Ready func(context.Context) error
	// Registry collects the HTTP metrics; a fresh one when nil.
	Registry *prometheus.Registry
	// Faults bound requests and classify infrastructure failures (faults.go).
	Faults Faults
	// Tracer, when set, traces requests (trace.go); nil: tracing off.
	Tracer trace.TracerProvider
}

// Handler implements the generated strict server interface.
type Handler struct {
	svc       *guild.Service
	validated validatedRequests // requests that passed the contract's check (validated.go)
	hooks     *webhooks.Service // the webhooks' management, over svc
	asof      *asof.Service     // history answers (?at=), over svc
	revert    *revert.Service   // reverts of audit events, over svc
	broker    *events.Broker
	log       *slog.Logger
	limiter   *rateLimiter
	maxJSON   int64
	heartbeat time.Duration
	specJSON  []byte
	streams   context.Context
	slots     *streamSlots // the event streams open per user
	faults    faults
	ops       operationIndex // the contract's operations by route
	tracer    trace.Tracer   // nil: tracing off
}

var _ api.StrictServerInterface = (*Handler)(nil)

// Server is the HTTP stack and what its owner needs to stop it.
type Server struct {
	Echo *echo.Echo
	// Shutdown ends the event streams (call it before http.Server.Shutdown).
	Shutdown context.CancelFunc
}

// New builds the HTTP stack.
func New(o Options) (*Server, error) {
	o = o.withDefaults()
	doc, specJSON, err := loadContract()
	if err != nil {
		return nil, err
	}
	streams, stop := context.WithCancel(context.Background())
	h := &Handler{svc: o.Service, hooks: webhooks.New(o.Service), asof: asof.New(o.Service), revert: o.Revert, broker: o.Broker, log: o.Logger,
		limiter: newRateLimiter(o.RateLimit, o.Faults.RateLimitClients),
		maxJSON: o.MaxJSON, heartbeat: o.Heartbeat, specJSON: specJSON, streams: streams, slots: newStreamSlots(o.MaxEventStreams), faults: newFaults(o.Faults)}
	e := h.newEcho(o)
	if err := h.routeContract(e, doc); err != nil {
		stop()
		return nil, err
	}
	if err := h.routeOutside(e, o); err != nil {
		stop()
		return nil, err
	}
	return &Server{Echo: e, Shutdown: stop}, nil
}

// withDefaults fills in what the caller left unset.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxJSON <= 0 {
		o.MaxJSON = 1 << 20
	}
	if o.MaxEventStreams <= 0 {
		o.MaxEventStreams = 5
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return o
}

// newEcho is Echo with the middlewares every request goes through, in the
// order they wrap it: request ID, tracing, access log and metrics,
// recovery, path segments, then CORS.
func (h *Handler) newEcho(o Options) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = h.errorHandler
	e.IPExtractor = ipExtractor(o.Faults.TrustedProxies)
	e.Use(middleware.RequestIDWithConfig(middleware.RequestIDConfig{Generator: newRequestID}))
	if o.Tracer != nil {
		h.tracer = o.Tracer.Tracer(tracerName)
		e.Use(h.traceRequests())
	}
	e.Use(h.observe(o.Registry))
	e.Use(h.recoverer())
	e.Use(wholeSegments)
	if len(o.CORSOrigins) > 0 { // none configured: no cross-origin access at all
		e.Use(middleware.CORSWithConfig(middleware.CORSConfig{
			AllowOrigins: o.CORSOrigins,
			AllowMethods: []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete},
			AllowHeaders: []string{echo.HeaderAuthorization, echo.HeaderContentType, "If-Match", "If-None-Match", "Range", "X-Audit-Reason", "Last-Event-ID",
				"traceparent", "tracestate"}, // W3C trace context, honoured when tracing is on
			ExposeHeaders: []string{"ETag", "Location", "Link", "Deprecation", "Retry-After", "RateLimit-Limit", "RateLimit-Remaining",
				"RateLimit-Reset", "Content-Range", "Content-Disposition", echo.HeaderXRequestID},
			MaxAge: 600,
		}))
	}
	return e
}

// routeContract registers the contract's operations, each behind its own
// chain of middlewares, and checks that every operation has its route.
func (h *Handler) routeContract(e *echo.Echo, doc *openapi3.T) error {
	ops, err := operations(doc)
	if err != nil {
		return err
	}
	h.ops = indexOperations(ops)
	mws := make(map[string][]echo.MiddlewareFunc, len(ops))
	for _, op := range ops {
		var chain []echo.MiddlewareFunc
		if op.legacy != "" {
			chain = append(chain, h.legacy(op))
		}
		chain = append(chain, h.deadline(op), h.gate(op), h.validate(op), h.budgetAfterBody(op))
		if strings.Contains(op.legacy, "{userID}") {
			chain = append(chain, h.legacyUserLink(op))
		}
		mws[op.id] = chain
	}
	strict := api.NewStrictHandler(h, []api.StrictMiddlewareFunc{h.requireActor})
	router := newHeadRouter(e.Group(""), ops, mws)
	api.RegisterHandlersWithOptions(router, strict, api.RegisterHandlersOptions{BaseURL: "/api", OperationMiddlewares: mws})
	// The raw operations (raw.go), which gen/api/server.cfg.yaml leaves out
	// of the strict server: plain Echo handlers behind the same middlewares.
	err = router.raw(ops, map[string]echo.HandlerFunc{
		"getAttachment": h.GetAttachment,
		"putAttachment": h.PutAttachment,
		"streamEvents":  h.StreamEvents,
	})
	if err == nil {
		err = router.check(e.Routes(), ops)
	}
	if err == nil {
		shadowStaticPaths(e, ops)
	}
	return err
}

// routeOutside registers what lies outside the contract: docs, the admin
// console, problem types, health and metrics.
func (h *Handler) routeOutside(e *echo.Echo, o Options) error {
	docs := v5emb.NewHandlerWithConfig(swgui.Config{Title: "Guildhall API", SwaggerJSON: "/api/openapi.json", BasePath: "/docs/",
		SettingsUI: map[string]string{"persistAuthorization": "true"}})
	e.GET("/docs", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/docs/") })
	e.GET("/docs/*", echo.WrapHandler(docs))
	console, err := consoleHandler(web.Dist())
	if err != nil {
		return err
	}
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/console/") })
	e.Match([]string{http.MethodGet, http.MethodHead}, "/console/*", console)
	e.GET("/problems/:code", problemPage)
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok", "version": o.Version})
	})
	e.GET("/readyz", func(c echo.Context) error {
		if o.Ready != nil {
			if err := o.Ready(c.Request().Context()); err != nil {
				h.log.Warn("not ready", "err", err)
				return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
			}
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})))
	return nil
}

// legacySuccessors maps each deprecated operation to its successor's path.
var legacySuccessors = map[string]string{
	"legacyAddRolePermissions":    "/roles/{roleID}/permissions",
	"legacyRemoveRolePermissions": "/roles/{roleID}/permissions",
	"legacyAddRoleUser":           "/users/{userID}/roles/{roleID}",
	"legacyRemoveRoleUser":        "/users/{userID}/roles/{roleID}",
}

// operations lists the contract's operations with what the middlewares need.
func operations(doc *openapi3.T) ([]*operation, error) {
	var out []*operation
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			// The validator checks the request against a copy of the
			// operation without its security requirements: the gate has
			// authenticated the caller already (and answered 401), and
			// kin-openapi's own pass over them, with a no-op function, cost
			// a read a tenth of its time.
			unsecured := *op
			unsecured.Security = &openapi3.SecurityRequirements{}
			o := &operation{id: op.OperationID, method: method, path: path,
				route: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: &unsecured}}
			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			}
			o.public = len(security) == 0
			for _, req := range security {
				if _, ok := req["eventTicket"]; ok {
					o.ticket = true
				}
			}
			if rb := op.RequestBody; rb != nil && rb.Value != nil {
				for ct := range rb.Value.Content {
					if strings.Contains(ct, "json") {
						o.jsonBody = true
					} else {
						o.rawBody = true
					}
				}
			}
			o.streams = o.rawBody || answersBytes(op)
			if op.Deprecated {
				succ, ok := legacySuccessors[op.OperationID]
				if !ok {
					return nil, fmt.Errorf("deprecated operation %s has no successor", op.OperationID)
				}
				o.legacy = succ
			}
			out = append(out, o)
		}
	}
	return out, nil
}

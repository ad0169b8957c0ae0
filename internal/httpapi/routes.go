package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
)

// headRouter registers every GET operation's handler for HEAD too (RFC
// 9110: HEAD wherever GET), behind the middlewares of the contract's HEAD
// operation (authentication, rate limit, validation against that
// operation). The handler is the GET's: net/http drops the body of a HEAD
// answer, and the raw handlers, which must not read what they would send or
// must ignore Range, look at the request's method. gen/api/server.cfg.yaml
// excludes the HEAD operations from the strict server, so that no strict
// handler stands in for them.
type headRouter struct {
	api.EchoRouter
	mws   map[string][]echo.MiddlewareFunc // by operation ID
	head  map[string][]echo.MiddlewareFunc // by Echo path, e.g. /api/roles/:roleID
	twins map[string]bool                  // the Echo paths given a HEAD
}

func newHeadRouter(r api.EchoRouter, ops []*operation, mws map[string][]echo.MiddlewareFunc) *headRouter {
	h := &headRouter{EchoRouter: r, mws: mws, head: map[string][]echo.MiddlewareFunc{}, twins: map[string]bool{}}
	for _, op := range ops {
		if op.method == http.MethodHead {
			h.head[echoPath(op.path)] = mws[op.id]
		}
	}
	return h
}

func (h *headRouter) GET(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	route := h.EchoRouter.GET(path, compose(handler, m))
	if mw, ok := h.head[path]; ok {
		h.EchoRouter.HEAD(path, compose(handler, mw))
		h.twins[path] = true
	}
	return route
}

// The other methods the contract uses register their handler behind its
// middlewares the same way, composed once.

func (h *headRouter) HEAD(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return h.EchoRouter.HEAD(path, compose(handler, m))
}

func (h *headRouter) POST(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return h.EchoRouter.POST(path, compose(handler, m))
}

func (h *headRouter) PUT(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return h.EchoRouter.PUT(path, compose(handler, m))
}

func (h *headRouter) PATCH(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return h.EchoRouter.PATCH(path, compose(handler, m))
}

func (h *headRouter) DELETE(path string, handler echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	return h.EchoRouter.DELETE(path, compose(handler, m))
}

// compose puts a handler behind its route's middlewares, the first
// outermost, as Echo would. Echo v4 composes a route's middlewares anew on
// every request (a closure per middleware, and whatever each does before
// returning its handler); composed once at registration, a request only
// runs them.
func compose(handler echo.HandlerFunc, m []echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(m) - 1; i >= 0; i-- {
		handler = m[i](handler)
	}
	return handler
}

// raw registers the plain Echo handlers of operations (by operation ID) at
// the contract's method and path, behind the operation's middlewares, as
// the generated code registers a strict one.
func (h *headRouter) raw(ops []*operation, handlers map[string]echo.HandlerFunc) error {
	done := map[string]bool{}
	for _, op := range ops {
		handler, ok := handlers[op.id]
		if !ok {
			continue
		}
		path, m := echoPath(op.path), h.mws[op.id]
		switch op.method {
		case http.MethodGet:
			h.GET(path, handler, m...)
		case http.MethodPut:
			h.PUT(path, handler, m...)
		case http.MethodPost:
			h.POST(path, handler, m...)
		case http.MethodPatch:
			h.PATCH(path, handler, m...)
		case http.MethodDelete:
			h.DELETE(path, handler, m...)
		default:
			return fmt.Errorf("operation %s: no plain handler for method %s", op.id, op.method)
		}
		done[op.id] = true
	}
	for id := range handlers {
		if !done[id] {
			return fmt.Errorf("a plain handler for %s, which the contract does not have", id)
		}
	}
	return nil
}

// check reports a contract whose GET and HEAD operations do not pair up, and
// operations left without a route (one gen/api/server.cfg.yaml leaves out
// of the strict server needs a plain handler).
func (h *headRouter) check(routes []*echo.Route, ops []*operation) error {
	var missing []string
	for path := range h.head {
		if !h.twins[path] {
			missing = append(missing, path)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("HEAD operations without a GET to answer them: %s", strings.Join(missing, ", "))
	}
	routed := make(map[string]bool, len(routes))
	for _, r := range routes {
		routed[r.Method+" "+r.Path] = true
	}
	for _, op := range ops {
		if !routed[op.method+" "+echoPath(op.path)] {
			missing = append(missing, op.id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("operations without a route: %s", strings.Join(missing, ", "))
	}
	return nil
}

// echoPath turns a contract path into the Echo route the generated code
// registers: /roles/{roleID} is /api/roles/:roleID.
func echoPath(path string) string {
	return "/api" + strings.NewReplacer("{", ":", "}", "").Replace(path)
}

// wholeSegments makes a path parameter one whole, non-empty segment: Echo
// lets the last parameter of a route run over '/' (/users/u/roles/a/b would
// reach /users/{userID}/roles/{roleID}, as a 405 for GET), and matches an
// empty one (/roles//create). Such a path matches no operation of the
// contract: 404. It compares the request's segments with the route's, since
// Echo names no parameters when it answers 405 or OPTIONS.
func wholeSegments(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route := c.Path()
		if route == "" || strings.Contains(route, "*") {
			return next(c) // unmatched (already a 404), or a wildcard route outside the contract (/docs/*)
		}
		path := c.Request().URL.EscapedPath() // an escaped slash (%2F) stays inside its segment
		if strings.Count(path, "/") != strings.Count(route, "/") || strings.Contains(path, "//") ||
			len(path) > 1 && strings.HasSuffix(path, "/") {
			return echo.ErrNotFound
		}
		return next(c)
	}
}

// shadowStaticPaths makes a path without parameters answer 405 for the
// methods it does not take, as the contract's path matching says (a
// concrete path comes before a templated one: GET /channels/reorder is
// not GET /channels/{channelID}). Echo would otherwise hand such a request
// to the templated route.
func shadowStaticPaths(e *echo.Echo, ops []*operation) {
	methods := map[string][]string{} // by contract path
	for _, op := range ops {
		methods[op.path] = append(methods[op.path], op.method)
	}
	for static, own := range methods {
		if strings.Contains(static, "{") {
			continue
		}
		allow := append(slices.Clone(own), http.MethodOptions)
		slices.Sort(allow)
		refuse := func(c echo.Context) error {
			c.Response().Header().Set("Allow", strings.Join(allow, ", "))
			return echo.ErrMethodNotAllowed
		}
		shadowed := false
		for templated := range methods {
			if strings.Contains(templated, "{") && samePlace(static, templated) {
				shadowed = true
			}
		}
		if !shadowed {
			continue
		}
		// Every method the path does not take, so that Echo's own answers
		// (405 and OPTIONS) name only the path's methods too.
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodPatch, http.MethodDelete} {
			if !slices.Contains(own, m) {
				e.Add(m, echoPath(static), refuse)
			}
		}
		e.Add(http.MethodOptions, echoPath(static), func(c echo.Context) error {
			c.Response().Header().Set("Allow", strings.Join(allow, ", "))
			return c.NoContent(http.StatusNoContent)
		})
	}
}

// samePlace reports whether a concrete path matches a templated one,
// segment by segment.
func samePlace(static, templated string) bool {
	a, b := strings.Split(static, "/"), strings.Split(templated, "/")
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !strings.HasPrefix(b[i], "{") && a[i] != b[i] {
			return false
		}
	}
	return true
}

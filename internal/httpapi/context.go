package httpapi

import (
	"context"
	"net/http"

	"github.com/guildhall/guildhall/internal/guild"
)

type ctxKey int

const (
	actorKey ctxKey = iota
	requestKey
	responseKey
)

// withActor puts the authenticated caller into the request's context, which
// is the context strict handlers receive.
func withActor(ctx context.Context, a *guild.Actor) context.Context {
	return context.WithValue(ctx, actorKey, a)
}

// actorOf returns the caller of a secured operation: the gate put it in the
// context, and confirmActor answers 401 before any handler of a secured
// operation could run without one.
func actorOf(ctx context.Context) *guild.Actor {
	a, _ := ctx.Value(actorKey).(*guild.Actor)
	return a
}

// requestOf returns the *http.Request of a strict handler's context (for
// responses that need it, such as http.ServeContent).
func requestOf(ctx context.Context) *http.Request {
	r, _ := ctx.Value(requestKey).(*http.Request)
	return r
}

// responseOf returns the response writer (to set headers that depend on the
// parsed request, such as a legacy operation's successor Link).
func responseOf(ctx context.Context) http.ResponseWriter {
	w, _ := ctx.Value(responseKey).(http.ResponseWriter)
	return w
}

// isHead reports whether a strict handler serves a HEAD request (the GET
// handler answers both; see headRouter).
func isHead(ctx context.Context) bool {
	r := requestOf(ctx)
	return r != nil && r.Method == http.MethodHead
}

package httpapi

import (
	"context"

	"github.com/guildhall/guildhall/internal/guild"
)

type ctxKey int

const actorKey ctxKey = 0

// withActor puts the authenticated caller into the request's context, which
// is the context strict handlers receive.
func withActor(ctx context.Context, a *guild.Actor) context.Context {
	return context.WithValue(ctx, actorKey, a)
}

// actorOf returns the caller of a secured operation: the gate put it in the
// context, and requireActor answers 401 before any handler of a secured
// operation could run without one.
func actorOf(ctx context.Context) *guild.Actor {
	a, _ := ctx.Value(actorKey).(*guild.Actor)
	return a
}

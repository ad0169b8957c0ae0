package httpapi

import (
	"context"
	"fmt"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
)

// confirmActor is the strict middleware that keeps cached credentials
// honest (see guild.Actor): an answer is given only on credentials a read
// of the request found current. When the handler's reads did not confirm
// them, guild.Service.Confirm reads the versions; when they moved (or a
// read said so), the caller is read again (a revoked token is a 401 here)
// and the handler runs again with the fresh caller. A handler runs at most
// twice, and a write that committed was judged on the state it committed
// on, so it is never run again.
func (h *Handler) confirmActor(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	op := h.ops.byID(operationID)
	return func(c echo.Context, request any) (any, error) {
		if op == nil || !op.public {
			if a, _ := c.Request().Context().Value(actorKey).(*guild.Actor); a == nil {
				// The gate authenticates every secured operation: this is
				// defence in depth, so that no handler runs without a caller.
				return nil, apperr.Unauthenticated("A bearer token is required.")
			}
		}
		resp, err := f(c, request)
		ctx := c.Request().Context()
		a, ok := ctx.Value(actorKey).(*guild.Actor)
		if !ok || a == nil || (a.Confirmed() && !guild.IsStale(err)) {
			return resp, err
		}
		fresh, rerun, cerr := h.confirm(ctx, a)
		if cerr != nil {
			return nil, cerr
		}
		if !rerun {
			if guild.IsStale(err) {
				return nil, fmt.Errorf("stale credentials, yet current on a second read: %w", err)
			}
			return resp, err
		}
		c.SetRequest(c.Request().WithContext(withActor(ctx, fresh)))
		return f(c, request)
	}
}

// confirmOnError is the gate's half of confirmActor: a request refused
// before its handler ran (the validator's 400) is answered only once its
// caller is known to be current, so a revoked token gets its 401 first
// (docs/design.md §11: 401 before 400).
func (h *Handler) confirmOnError(c echo.Context, err error) error {
	a, ok := c.Request().Context().Value(actorKey).(*guild.Actor)
	if !ok || a == nil || a.Confirmed() {
		return err
	}
	if _, _, cerr := h.confirm(c.Request().Context(), a); cerr != nil {
		return cerr
	}
	return err
}

// confirmTimeout bounds the read that confirms a caller.
const confirmTimeout = 5 * time.Second

// confirm runs guild.Service.Confirm for an answer that is still owed: a
// client that stopped sending (its request's context is canceled when the
// server reads the end of its input) may still read the answer.
func (h *Handler) confirm(ctx context.Context, a *guild.Actor) (*guild.Actor, bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	return h.svc.Confirm(ctx, a)
}

package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
)

// requireActor is the strict middleware that keeps a secured operation's
// handler from running without a caller: the gate authenticates every
// secured operation, so this is defence in depth.
func (h *Handler) requireActor(f api.StrictHandlerFunc, operationID string) api.StrictHandlerFunc {
	op := h.ops.byID(operationID)
	return func(c echo.Context, request any) (any, error) {
		if (op == nil || !op.public) && actorOf(c.Request().Context()) == nil {
			return nil, apperr.Unauthenticated("A bearer token is required.")
		}
		return f(c, request)
	}
}

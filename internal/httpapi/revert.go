package httpapi

import (
	"context"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/revert"
)

// RevertAuditLogEntry implements POST /audit-log/{seq}/revert.
func (h *Handler) RevertAuditLogEntry(ctx context.Context, req api.RevertAuditLogEntryRequestObject) (api.RevertAuditLogEntryResponseObject, error) {
	o := opts(nil, req.Params.XAuditReason)
	changes, err := h.revert.Revert(ctx, actorOf(ctx), req.Seq, revert.Options{DryRun: deref(req.Params.DryRun), Reason: o.Reason})
	if err != nil {
		return nil, err
	}
	return api.RevertAuditLogEntry200JSONResponse{Body: api.RevertResult{Changes: toChanges(changes)}}, nil
}

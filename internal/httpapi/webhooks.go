package httpapi

import (
	"context"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/guild/webhooks"
	"github.com/guildhall/guildhall/internal/model"
)

// ListWebhooks implements GET /webhooks.
func (h *Handler) ListWebhooks(ctx context.Context, req api.ListWebhooksRequestObject) (api.ListWebhooksResponseObject, error) {
	page, err := h.hooks.ListWebhooks(ctx, actorOf(ctx), deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.WebhookList{Items: make([]api.Webhook, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, w := range page.Items {
		out.Items[i] = toWebhook(w)
	}
	return api.ListWebhooks200JSONResponse{Body: out}, nil
}

// CreateWebhook implements POST /webhooks.
func (h *Handler) CreateWebhook(ctx context.Context, req api.CreateWebhookRequestObject) (api.CreateWebhookResponseObject, error) {
	w, err := h.hooks.CreateWebhook(ctx, actorOf(ctx),
		webhooks.Create{URL: req.Body.Url, Events: req.Body.Events, Description: deref(req.Body.Description)},
		opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.CreateWebhook201JSONResponse{Body: toWebhookWithSecret(w), Headers: api.CreateWebhook201ResponseHeaders{
		ETag: ptr(etag(w.Version)), Location: ptr("/api/webhooks/" + w.ID)}}, nil
}

// GetWebhook implements GET /webhooks/{webhookID}.
func (h *Handler) GetWebhook(ctx context.Context, req api.GetWebhookRequestObject) (api.GetWebhookResponseObject, error) {
	w, err := h.hooks.GetWebhook(ctx, actorOf(ctx), req.WebhookID)
	if err != nil {
		return nil, err
	}
	return api.GetWebhook200JSONResponse{Body: toWebhook(w), Headers: api.GetWebhook200ResponseHeaders{ETag: ptr(etag(w.Version))}}, nil
}

// UpdateWebhook implements PATCH /webhooks/{webhookID}.
func (h *Handler) UpdateWebhook(ctx context.Context, req api.UpdateWebhookRequestObject) (api.UpdateWebhookResponseObject, error) {
	p := webhooks.Patch{URL: req.Body.Url, Description: req.Body.Description, Enabled: req.Body.Enabled}
	if req.Body.Events != nil {
		p.Events = *req.Body.Events
	}
	w, err := h.hooks.UpdateWebhook(ctx, actorOf(ctx), req.WebhookID, p, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.UpdateWebhook200JSONResponse{Body: toWebhook(w), Headers: api.UpdateWebhook200ResponseHeaders{ETag: ptr(etag(w.Version))}}, nil
}

// DeleteWebhook implements DELETE /webhooks/{webhookID}.
func (h *Handler) DeleteWebhook(ctx context.Context, req api.DeleteWebhookRequestObject) (api.DeleteWebhookResponseObject, error) {
	if err := h.hooks.DeleteWebhook(ctx, actorOf(ctx), req.WebhookID, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteWebhook204Response{}, nil
}

// RotateWebhookSecret implements POST /webhooks/{webhookID}/rotate.
func (h *Handler) RotateWebhookSecret(ctx context.Context, req api.RotateWebhookSecretRequestObject) (api.RotateWebhookSecretResponseObject, error) {
	w, err := h.hooks.RotateWebhookSecret(ctx, actorOf(ctx), req.WebhookID, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.RotateWebhookSecret200JSONResponse{Body: toWebhookWithSecret(w),
		Headers: api.RotateWebhookSecret200ResponseHeaders{ETag: ptr(etag(w.Version))}}, nil
}

// ListWebhookDeliveries implements GET /webhooks/{webhookID}/deliveries.
func (h *Handler) ListWebhookDeliveries(ctx context.Context, req api.ListWebhookDeliveriesRequestObject) (api.ListWebhookDeliveriesResponseObject, error) {
	page, err := h.hooks.ListWebhookDeliveries(ctx, actorOf(ctx), req.WebhookID, deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.WebhookDeliveryList{Items: make([]api.WebhookDelivery, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, d := range page.Items {
		out.Items[i] = toDelivery(d)
	}
	return api.ListWebhookDeliveries200JSONResponse{Body: out}, nil
}

// RedeliverWebhookDelivery implements POST
// /webhooks/{webhookID}/deliveries/{deliveryID}/redeliver.
func (h *Handler) RedeliverWebhookDelivery(ctx context.Context, req api.RedeliverWebhookDeliveryRequestObject) (api.RedeliverWebhookDeliveryResponseObject, error) {
	d, err := h.hooks.RedeliverWebhookDelivery(ctx, actorOf(ctx), req.WebhookID, req.DeliveryID)
	if err != nil {
		return nil, err
	}
	return api.RedeliverWebhookDelivery202JSONResponse{Body: toDelivery(d)}, nil
}

// toWebhook shows a webhook without its secrets.
func toWebhook(w model.Webhook) api.Webhook {
	out := api.Webhook{Id: w.ID, Url: w.URL, Events: w.Events, Description: w.Description, Enabled: w.Enabled,
		DisabledReason: nullable.NewNullNullable[string](), CreatorId: w.CreatorID,
		PreviousSecretUntil: nullable.NewNullNullable[time.Time](),
		CreatedAt:           api.Timestamp(w.CreatedAt), UpdatedAt: api.Timestamp(w.UpdatedAt)}
	if w.DisabledReason != "" {
		out.DisabledReason.Set(w.DisabledReason)
	}
	// Once past, the previous secret no longer signs: it is as if gone.
	if w.PreviousSecret != "" && w.PreviousUntil.After(model.Now()) {
		out.PreviousSecretUntil.Set(w.PreviousUntil)
	}
	return out
}

// toWebhookWithSecret shows a webhook with its current secret: the
// answers of its creation and of a rotation alone.
func toWebhookWithSecret(w model.Webhook) api.WebhookWithSecret {
	v := toWebhook(w)
	return api.WebhookWithSecret{Id: v.Id, Url: v.Url, Events: v.Events, Description: v.Description, Enabled: v.Enabled,
		DisabledReason: v.DisabledReason, CreatorId: v.CreatorId, PreviousSecretUntil: v.PreviousSecretUntil,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Secret: w.Secret}
}

func toDelivery(d model.Delivery) api.WebhookDelivery {
	out := api.WebhookDelivery{Id: d.ID, EventSeq: d.EventSeq, State: api.WebhookDeliveryState(d.State), Attempts: d.Attempts,
		LastStatus: nullable.NewNullNullable[int](), NextAttemptAt: nullable.NewNullNullable[time.Time](),
		CreatedAt: api.Timestamp(d.CreatedAt)}
	if d.LastStatus != 0 {
		out.LastStatus.Set(d.LastStatus)
	}
	if d.State == model.DeliveryPending && !d.NextAttemptAt.IsZero() {
		out.NextAttemptAt.Set(d.NextAttemptAt)
	}
	return out
}

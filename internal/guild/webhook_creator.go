package guild

import (
	"context"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/webhook"
)

// webhookNeeds is what a webhook's creator must hold, in base, for the
// webhook to deliver: what managing webhooks needs.
var webhookNeeds = permissions.Of(permissions.ManageWebhooks, permissions.ViewAuditLog)

// WebhookCreator judges a webhook's creator as of now (webhook.Audience):
// deleted, suspended or without what webhookNeeds, the webhook is to be
// disabled; timed out, its deliveries wait for the timeout's end (a
// timeout only holds them back); else the creator reads the audit log,
// and Visible leaves out what the audit log would hide from them
// (visibleEvents), decided as of each call.
func (s *Service) WebhookCreator(ctx context.Context, userID string) (webhook.Creator, error) {
	ctx = s.store.ReadScope(ctx)
	cred, err := s.store.CredentialsOf(ctx, userID)
	if apperr.IsNotFound(err) {
		return webhook.Creator{Standing: webhook.Lost, Why: "its creator was deleted"}, nil
	}
	if err != nil {
		return webhook.Creator{}, err
	}
	if cred.Status != model.StatusActive {
		return webhook.Creator{Standing: webhook.Lost, Why: "its creator is suspended"}, nil
	}
	now := s.now()
	if until := cred.Principal.TimeoutUntil; until != nil && until.After(now) {
		return webhook.Creator{Standing: webhook.Held, Until: *until}, nil
	}
	auth, err := s.store.AuthState(ctx)
	if err != nil {
		return webhook.Creator{}, err
	}
	a := &Actor{Principal: cred.Principal, now: now, auth: auth}
	if missing := webhookNeeds.Minus(a.Base()); !missing.IsEmpty() {
		return webhook.Creator{Standing: webhook.Lost, Why: "its creator lacks " + strings.Join(missing.Names(), ", ")}, nil
	}
	return webhook.Creator{Standing: webhook.Reads, Visible: func(ctx context.Context, events []model.Event) ([]model.Event, error) {
		return s.visibleEvents(s.store.ReadScope(ctx), a, events)
	}}, nil
}

// WebhookDisabled is the event of a webhook the deliverer disabled
// (webhook.Audience): a webhook.updated by the system, its reason saying
// why.
func (s *Service) WebhookDisabled(before, after model.Webhook, why string) model.Event {
	reason := "disabled: " + why
	return model.Event{Type: "webhook.updated", Subject: "webhook:" + before.ID, Reason: &reason,
		Data: map[string]any{"before": webhook.EventData(before), "after": webhook.EventData(after)}}
}

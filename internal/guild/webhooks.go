package guild

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/webhook"
)

// Webhooks: their management. What they receive, and when, is the
// delivery engine's; here they are created, changed, listed and deleted,
// and their deliveries listed and handed back for another attempt.
//
// Every operation needs MANAGE_WEBHOOKS and VIEW_AUDIT_LOG. The caller who
// creates a webhook, or later changes what it receives (its url or
// events), rotates its secret or enables it again, becomes its creator:
// the webhook receives what that user may read in the audit log.

// RotationOverlap is how long a rotated secret goes on signing beside the
// new one.
const RotationOverlap = 24 * time.Hour

// WebhookCreate is what a new webhook is made of.
type WebhookCreate struct {
	URL         string
	Events      []string
	Description string
}

// WebhookPatch is a merge patch of a webhook: nil members are left as
// they are.
type WebhookPatch struct {
	URL         *string
	Events      []string // nil: absent
	Description *string
	Enabled     *bool
}

// eventPattern is an event type, or a prefix ending in ".*": what the
// audit log's type filter takes (the contract's pattern).
var eventPattern = regexp.MustCompile(`^[a-z]+(\.[a-z]+)*(\.\*)?$`)

const (
	maxEventPatterns    = 64
	maxEventPatternLen  = 64
	maxWebhookURLLen    = 2048
	maxWebhookDescRunes = 400
)

// checkEvents refuses patterns the contract refuses: none, too many, one
// malformed or given twice.
func checkEvents(events []string) error {
	if len(events) == 0 || len(events) > maxEventPatterns {
		return apperr.Invalid("events", "must hold 1 to %d patterns", maxEventPatterns)
	}
	for i, e := range events {
		if len(e) > maxEventPatternLen || !eventPattern.MatchString(e) {
			return apperr.Invalid("events["+strconv.Itoa(i)+"]", "must be an event type or a prefix ending in .*")
		}
		if slices.Contains(events[:i], e) {
			return apperr.Invalid("events["+strconv.Itoa(i)+"]", "is given twice")
		}
	}
	return nil
}

func checkDescription(d *string) error {
	if d == nil {
		return nil
	}
	if len([]rune(*d)) > maxWebhookDescRunes {
		return apperr.Invalid("description", "must be at most %d characters", maxWebhookDescRunes)
	}
	if msg := names.CheckText(*d); msg != "" {
		return apperr.Invalid("description", "%s", msg)
	}
	return nil
}

// checkURL refuses a destination webhooks may not reach: a 400 at url.
// It resolves the URL's host, so it runs once the caller is known to be
// allowed: otherwise anyone could learn from the answers what names mean
// inside the service's network.
func (s *Service) checkURL(ctx context.Context, raw string) error {
	if len(raw) > maxWebhookURLLen {
		return apperr.Invalid("url", "must be at most %d characters", maxWebhookURLLen)
	}
	err := webhook.CheckURL(ctx, raw, s.webhooks.AllowPrivate, s.webhooks.Resolver)
	var ue *webhook.URLError
	if errors.As(err, &ue) {
		return apperr.Invalid("url", "%s", ue.Detail)
	}
	return err
}

// CreateWebhook creates a webhook whose creator is the caller; the webhook
// it returns holds its secret, which no later answer shows.
func (s *Service) CreateWebhook(ctx context.Context, a *Actor, in WebhookCreate, o WriteOpts) (model.Webhook, error) {
	if err := checkEvents(in.Events); err != nil {
		return model.Webhook{}, err
	}
	if err := checkDescription(&in.Description); err != nil {
		return model.Webhook{}, err
	}
	if err := a.authorize(opCreateWebhook); err != nil {
		return model.Webhook{}, err
	}
	if err := s.checkURL(ctx, in.URL); err != nil {
		return model.Webhook{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return model.Webhook{}, err
	}
	now := s.now()
	w := model.Webhook{ID: id.String(), URL: in.URL, Events: slices.Clone(in.Events), Description: in.Description,
		Enabled: true, Secret: webhook.NewSecret(), Version: 1, CreatedAt: now, UpdatedAt: now}
	events, err := s.writeEvents(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opCreateWebhook); err != nil {
			return err
		}
		n, err := tx.CountWebhooks(ctx)
		if err != nil {
			return err
		}
		if max := s.limits.MaxWebhooks; max > 0 && n >= int64(max) {
			return apperr.LimitExceeded("webhooks", max, "webhooks")
		}
		// The events committed so far; the events of this transaction
		// get greater seqs, its own webhook.created among them.
		if w.AfterSeq, err = tx.LastEventSeq(ctx); err != nil {
			return err
		}
		w.CreatorID = a.UserID
		if err := tx.InsertWebhook(ctx, w); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "webhook.created", "webhook:"+w.ID, webhookEventData(w))
	})
	if err != nil {
		return model.Webhook{}, err
	}
	s.startAfterCreation(ctx, &w, events)
	return w, nil
}

// startAfterCreation makes a new webhook receive only the events after its
// own webhook.created. An event's seq is known only once its transaction
// committed, so the webhook was stored receiving every event after those
// committed before (the other writes of its transaction included): this
// second write narrows that. Should it fail, the webhook receives a few
// events of its own transaction besides, which is harmless, so the
// creation still succeeds.
func (s *Service) startAfterCreation(ctx context.Context, w *model.Webhook, events []model.Event) {
	for _, ev := range events {
		if ev.Type != "webhook.created" || ev.Subject != "webhook:"+w.ID {
			continue
		}
		_, err := s.store.Write(ctx, func(tx *store.Tx) error { return tx.RaiseWebhookAfterSeq(ctx, w.ID, ev.Seq) })
		if err != nil {
			s.log.Warn("webhook: set its first event", "webhook_id", w.ID, "seq", ev.Seq, "error", err)
			return
		}
		w.AfterSeq = ev.Seq
	}
}

// webhookEventData is what an event tells of a webhook: never its secret,
// and of its URL only the scheme and host, since a receiver's path or
// query may be a credential of its own and the audit log has readers who
// may not manage webhooks.
func webhookEventData(w model.Webhook) map[string]any {
	return map[string]any{"destination": destinationOf(w.URL), "events": w.Events, "description": w.Description,
		"enabled": w.Enabled, "creator_id": w.CreatorID}
}

func destinationOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// ListWebhooks pages through the webhooks, oldest first.
func (s *Service) ListWebhooks(ctx context.Context, a *Actor, rawCursor string, limit int) (Page[model.Webhook], error) {
	after, err := s.cursors.decode(rawCursor, "webhooks")
	if err != nil {
		return Page[model.Webhook]{}, err
	}
	if err := a.authorize(opListWebhooks); err != nil {
		return Page[model.Webhook]{}, err
	}
	items, more, err := s.store.ListWebhooks(ctx, after, pageLimit(limit))
	if err != nil {
		return Page[model.Webhook]{}, err
	}
	page := Page[model.Webhook]{Items: items}
	if more {
		page.NextCursor = s.cursors.encode(items[len(items)-1].ID, "webhooks")
	}
	return page, nil
}

// GetWebhook returns one webhook.
func (s *Service) GetWebhook(ctx context.Context, a *Actor, id string) (model.Webhook, error) {
	w, err := s.store.GetWebhook(ctx, id)
	if err != nil {
		return model.Webhook{}, err
	}
	if err := a.authorize(opGetWebhook); err != nil {
		return model.Webhook{}, err
	}
	return w, nil
}

// UpdateWebhook applies a merge patch to a webhook. Changing its url or
// events, or enabling it again, makes the caller its creator; a patch that
// changes nothing changes nothing, and writes no event.
func (s *Service) UpdateWebhook(ctx context.Context, a *Actor, id string, p WebhookPatch, o WriteOpts) (model.Webhook, error) {
	if p.Events != nil {
		if err := checkEvents(p.Events); err != nil {
			return model.Webhook{}, err
		}
	}
	if err := checkDescription(p.Description); err != nil {
		return model.Webhook{}, err
	}
	if _, err := s.store.GetWebhook(ctx, id); err != nil {
		return model.Webhook{}, err
	}
	if err := a.authorize(opUpdateWebhook); err != nil {
		return model.Webhook{}, err
	}
	if p.URL != nil {
		if err := s.checkURL(ctx, *p.URL); err != nil {
			return model.Webhook{}, err
		}
	}
	return s.changeWebhook(ctx, a, opUpdateWebhook, id, o, func(w *model.Webhook, a *Actor) {
		if p.URL != nil && *p.URL != w.URL {
			w.URL, w.CreatorID = *p.URL, a.UserID
		}
		if p.Events != nil && !slices.Equal(p.Events, w.Events) {
			w.Events, w.CreatorID = slices.Clone(p.Events), a.UserID
		}
		if p.Description != nil {
			w.Description = *p.Description
		}
		switch {
		case p.Enabled == nil || *p.Enabled == w.Enabled:
		case *p.Enabled:
			w.Enabled, w.DisabledReason, w.CreatorID = true, "", a.UserID
		default:
			w.Enabled, w.DisabledReason = false, model.WebhookDisabledByUser
		}
	}, nil)
}

// RotateWebhookSecret gives a webhook a new secret, which it returns; the
// current one goes on signing beside it for RotationOverlap (one rotated
// earlier stops at once). The caller becomes its creator.
func (s *Service) RotateWebhookSecret(ctx context.Context, a *Actor, id string, o WriteOpts) (model.Webhook, error) {
	secret := webhook.NewSecret()
	return s.changeWebhook(ctx, a, opRotateWebhookSecret, id, o, func(w *model.Webhook, a *Actor) {
		w.PreviousSecret, w.PreviousUntil = w.Secret, s.now().Add(RotationOverlap)
		w.Secret, w.CreatorID = secret, a.UserID
	}, map[string]any{"secret_rotated": true})
}

// changeWebhook applies change to a webhook for op inside a write, checks
// If-Match, stores it and records a webhook.updated event (with extra in
// its data) unless nothing changed.
func (s *Service) changeWebhook(ctx context.Context, a *Actor, op Op, id string, o WriteOpts,
	change func(w *model.Webhook, a *Actor), extra map[string]any) (model.Webhook, error) {
	var out model.Webhook
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		w, err := tx.GetWebhook(ctx, id)
		if err != nil {
			return err
		}
		if err := a.authorize(op); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(w.Version)); err != nil {
			return err
		}
		next := w
		next.Events = slices.Clone(w.Events)
		change(&next, a)
		if extra == nil && sameWebhook(w, next) {
			out = w
			return nil
		}
		next.UpdatedAt = s.now()
		if err := tx.UpdateWebhook(ctx, next); err != nil {
			return err
		}
		next.Version = w.Version + 1
		out = next
		data := map[string]any{"before": webhookEventData(w), "after": webhookEventData(next)}
		for k, v := range extra {
			data[k] = v
		}
		return emit(ctx, tx, a, o, "webhook.updated", "webhook:"+id, data)
	})
	return out, err
}

func sameWebhook(a, b model.Webhook) bool {
	return a.URL == b.URL && slices.Equal(a.Events, b.Events) && a.Description == b.Description &&
		a.Enabled == b.Enabled && a.DisabledReason == b.DisabledReason && a.CreatorID == b.CreatorID && a.Secret == b.Secret
}

// DeleteWebhook deletes a webhook and its deliveries.
func (s *Service) DeleteWebhook(ctx context.Context, a *Actor, id string, o WriteOpts) error {
	return s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		w, err := tx.GetWebhook(ctx, id)
		if err != nil {
			return err
		}
		if err := a.authorize(opDeleteWebhook); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(w.Version)); err != nil {
			return err
		}
		if err := tx.DeleteWebhook(ctx, id); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "webhook.deleted", "webhook:"+id, webhookEventData(w))
	})
}

// ListWebhookDeliveries pages through a webhook's deliveries, newest
// first.
func (s *Service) ListWebhookDeliveries(ctx context.Context, a *Actor, id, rawCursor string, limit int) (Page[model.Delivery], error) {
	key, err := s.cursors.decode(rawCursor, "webhook_deliveries", id)
	if err != nil {
		return Page[model.Delivery]{}, err
	}
	var after store.DeliveryPosition
	if key != "" {
		at, did, ok := strings.Cut(key, "/")
		micros, perr := strconv.ParseInt(at, 10, 64)
		if !ok || perr != nil || did == "" {
			return Page[model.Delivery]{}, apperr.Invalid("cursor", "the cursor is malformed; use the next_cursor of a previous page")
		}
		after = store.DeliveryPosition{CreatedAt: time.UnixMicro(micros), ID: did}
	}
	if _, err := s.store.GetWebhook(ctx, id); err != nil {
		return Page[model.Delivery]{}, err
	}
	if err := a.authorize(opListWebhookDeliveries); err != nil {
		return Page[model.Delivery]{}, err
	}
	items, more, err := s.store.ListWebhookDeliveries(ctx, id, after, pageLimit(limit))
	if err != nil {
		return Page[model.Delivery]{}, err
	}
	page := Page[model.Delivery]{Items: items}
	if more {
		last := items[len(items)-1]
		page.NextCursor = s.cursors.encode(fmt.Sprintf("%d/%s", last.CreatedAt.UnixMicro(), last.ID), "webhook_deliveries", id)
	}
	return page, nil
}

// RedeliverWebhookDelivery makes a delivery pending again, due now, and
// releases any claim on it: its next attempt comes as soon as an instance
// takes it, and its attempts go on counting. It writes no event: the
// deliveries are not the audit log's subjects.
func (s *Service) RedeliverWebhookDelivery(ctx context.Context, a *Actor, id, deliveryID string) (model.Delivery, error) {
	var out model.Delivery
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if _, err := tx.GetWebhook(ctx, id); err != nil {
			return err
		}
		if _, err := tx.GetWebhookDelivery(ctx, id, deliveryID); err != nil {
			return err
		}
		if err := a.authorize(opRedeliverWebhookDelivery); err != nil {
			return err
		}
		var err error
		out, err = tx.RedeliverWebhookDelivery(ctx, id, deliveryID, s.now())
		return err
	})
	return out, err
}

// Package webhooks holds the rules of managing webhooks. What they receive,
// and when, is the delivery engine's (internal/webhook); here they are
// created, changed, listed and deleted, and their deliveries listed and
// handed back for another attempt, each write through the domain's kernel
// (internal/guild: the caller re-read in the transaction, the operation's
// row of the authorization table, the audit event).
//
// Every operation needs MANAGE_WEBHOOKS and VIEW_AUDIT_LOG. The caller who
// creates a webhook, or later changes what it receives (its url or
// events), rotates its secret or enables it again, becomes its creator:
// the webhook receives what that user may read in the audit log.
package webhooks

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/cursor"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/webhook"
)

// Service manages webhooks over the domain's service.
type Service struct {
	guild    *guild.Service
	store    *store.Store
	webhooks guild.WebhookOptions
	cursors  cursor.Sealer
}

// New builds the webhooks' management over svc, with its store, its
// webhook options and its cursors' key.
func New(svc *guild.Service) *Service {
	return &Service{guild: svc, store: svc.Store(), webhooks: svc.WebhookOptions(),
		cursors: cursor.New(svc.Store().CursorKey())}
}

// RotationOverlap is how long a rotated secret goes on signing beside the
// new one.
const RotationOverlap = 24 * time.Hour

// Create is what a new webhook is made of.
type Create struct {
	URL         string
	Events      []string
	Description string
}

// Patch is a merge patch of a webhook: nil members are left as
// they are.
type Patch struct {
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
func (s *Service) CreateWebhook(ctx context.Context, a *guild.Actor, in Create, o guild.WriteOpts) (model.Webhook, error) {
	if err := checkEvents(in.Events); err != nil {
		return model.Webhook{}, err
	}
	if err := checkDescription(&in.Description); err != nil {
		return model.Webhook{}, err
	}
	if err := a.Authorize(guild.OpCreateWebhook); err != nil {
		return model.Webhook{}, err
	}
	if err := s.checkURL(ctx, in.URL); err != nil {
		return model.Webhook{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return model.Webhook{}, err
	}
	now := s.guild.Now()
	w := model.Webhook{ID: id.String(), URL: in.URL, Events: slices.Clone(in.Events), Description: in.Description,
		Enabled: true, Secret: webhook.NewSecret(), Version: 1, CreatedAt: now, UpdatedAt: now}
	events, err := s.guild.WriteEvents(ctx, a, func(tx *store.Tx, a *guild.Actor) error {
		if err := a.Authorize(guild.OpCreateWebhook); err != nil {
			return err
		}
		n, err := tx.CountWebhooks(ctx)
		if err != nil {
			return err
		}
		if max := s.guild.Limits().MaxWebhooks; max > 0 && n >= int64(max) {
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
		return guild.Emit(ctx, tx, a, o, "webhook.created", "webhook:"+w.ID, webhook.EventData(w))
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
			s.guild.Logger().Warn("webhook: set its first event", "webhook_id", w.ID, "seq", ev.Seq, "error", err)
			return
		}
		w.AfterSeq = ev.Seq
	}
}

// ListWebhooks pages through the webhooks, oldest first.
func (s *Service) ListWebhooks(ctx context.Context, a *guild.Actor, rawCursor string, limit int) (guild.Page[model.Webhook], error) {
	after, err := s.cursors.Decode(rawCursor, "webhooks")
	if err != nil {
		return guild.Page[model.Webhook]{}, err
	}
	if err := a.Authorize(guild.OpListWebhooks); err != nil {
		return guild.Page[model.Webhook]{}, err
	}
	items, more, err := s.store.ListWebhooks(ctx, after, guild.PageLimit(limit))
	if err != nil {
		return guild.Page[model.Webhook]{}, err
	}
	page := guild.Page[model.Webhook]{Items: items}
	if more {
		page.NextCursor = s.cursors.Encode(items[len(items)-1].ID, "webhooks")
	}
	return page, nil
}

// GetWebhook returns one webhook.
func (s *Service) GetWebhook(ctx context.Context, a *guild.Actor, id string) (model.Webhook, error) {
	w, err := s.store.GetWebhook(ctx, id)
	if err != nil {
		return model.Webhook{}, err
	}
	if err := a.Authorize(guild.OpGetWebhook); err != nil {
		return model.Webhook{}, err
	}
	return w, nil
}

// UpdateWebhook applies a merge patch to a webhook. Changing its url or
// events, or enabling it again, makes the caller its creator; a patch that
// changes nothing changes nothing, and writes no event.
func (s *Service) UpdateWebhook(ctx context.Context, a *guild.Actor, id string, p Patch, o guild.WriteOpts) (model.Webhook, error) {
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
	if err := a.Authorize(guild.OpUpdateWebhook); err != nil {
		return model.Webhook{}, err
	}
	if p.URL != nil {
		if err := s.checkURL(ctx, *p.URL); err != nil {
			return model.Webhook{}, err
		}
	}
	return s.changeWebhook(ctx, a, guild.OpUpdateWebhook, id, o, func(w *model.Webhook, a *guild.Actor) {
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
func (s *Service) RotateWebhookSecret(ctx context.Context, a *guild.Actor, id string, o guild.WriteOpts) (model.Webhook, error) {
	secret := webhook.NewSecret()
	return s.changeWebhook(ctx, a, guild.OpRotateWebhookSecret, id, o, func(w *model.Webhook, a *guild.Actor) {
		w.PreviousSecret, w.PreviousUntil = w.Secret, s.guild.Now().Add(RotationOverlap)
		w.Secret, w.CreatorID = secret, a.UserID
	}, map[string]any{"secret_rotated": true})
}

// changeWebhook applies change to a webhook for op inside a write, checks
// If-Match, stores it and records a webhook.updated event (with extra in
// its data) unless nothing changed.
func (s *Service) changeWebhook(ctx context.Context, a *guild.Actor, op guild.Op, id string, o guild.WriteOpts,
	change func(w *model.Webhook, a *guild.Actor), extra map[string]any) (model.Webhook, error) {
	var out model.Webhook
	err := s.guild.Write(ctx, a, func(tx *store.Tx, a *guild.Actor) error {
		w, err := tx.GetWebhook(ctx, id)
		if err != nil {
			return err
		}
		if err := a.Authorize(op); err != nil {
			return err
		}
		if err := o.IfMatch.Check(guild.Tag(w.Version)); err != nil {
			return err
		}
		next := w
		next.Events = slices.Clone(w.Events)
		change(&next, a)
		if extra == nil && sameWebhook(w, next) {
			out = w
			return nil
		}
		next.UpdatedAt = s.guild.Now()
		if err := tx.UpdateWebhook(ctx, next); err != nil {
			return err
		}
		next.Version = w.Version + 1
		out = next
		data := map[string]any{"before": webhook.EventData(w), "after": webhook.EventData(next)}
		for k, v := range extra {
			data[k] = v
		}
		return guild.Emit(ctx, tx, a, o, "webhook.updated", "webhook:"+id, data)
	})
	return out, err
}

func sameWebhook(a, b model.Webhook) bool {
	return a.URL == b.URL && slices.Equal(a.Events, b.Events) && a.Description == b.Description &&
		a.Enabled == b.Enabled && a.DisabledReason == b.DisabledReason && a.CreatorID == b.CreatorID && a.Secret == b.Secret
}

// DeleteWebhook deletes a webhook and its deliveries.
func (s *Service) DeleteWebhook(ctx context.Context, a *guild.Actor, id string, o guild.WriteOpts) error {
	return s.guild.Write(ctx, a, func(tx *store.Tx, a *guild.Actor) error {
		w, err := tx.GetWebhook(ctx, id)
		if err != nil {
			return err
		}
		if err := a.Authorize(guild.OpDeleteWebhook); err != nil {
			return err
		}
		if err := o.IfMatch.Check(guild.Tag(w.Version)); err != nil {
			return err
		}
		if err := tx.DeleteWebhook(ctx, id); err != nil {
			return err
		}
		return guild.Emit(ctx, tx, a, o, "webhook.deleted", "webhook:"+id, webhook.EventData(w))
	})
}

// ListWebhookDeliveries pages through a webhook's deliveries, newest
// first.
func (s *Service) ListWebhookDeliveries(ctx context.Context, a *guild.Actor, id, rawCursor string, limit int) (guild.Page[model.Delivery], error) {
	key, err := s.cursors.Decode(rawCursor, "webhook_deliveries", id)
	if err != nil {
		return guild.Page[model.Delivery]{}, err
	}
	var below int64 // the event of the last delivery listed
	if key != "" {
		seq, perr := strconv.ParseInt(key, 10, 64)
		if perr != nil || seq <= 0 {
			return guild.Page[model.Delivery]{}, apperr.Invalid("cursor", "the cursor is malformed; use the next_cursor of a previous page")
		}
		below = seq
	}
	if _, err := s.store.GetWebhook(ctx, id); err != nil {
		return guild.Page[model.Delivery]{}, err
	}
	if err := a.Authorize(guild.OpListWebhookDeliveries); err != nil {
		return guild.Page[model.Delivery]{}, err
	}
	items, more, err := s.store.ListWebhookDeliveries(ctx, id, below, guild.PageLimit(limit))
	if err != nil {
		return guild.Page[model.Delivery]{}, err
	}
	page := guild.Page[model.Delivery]{Items: items}
	if more {
		last := items[len(items)-1]
		page.NextCursor = s.cursors.Encode(strconv.FormatInt(last.EventSeq, 10), "webhook_deliveries", id)
	}
	return page, nil
}

// RedeliverWebhookDelivery makes a delivery pending again, due now, and
// releases any claim on it: its next attempt comes as soon as an instance
// takes it, and its attempts go on counting. It writes no event: the
// deliveries are not the audit log's subjects.
func (s *Service) RedeliverWebhookDelivery(ctx context.Context, a *guild.Actor, id, deliveryID string) (model.Delivery, error) {
	var out model.Delivery
	err := s.guild.Write(ctx, a, func(tx *store.Tx, a *guild.Actor) error {
		if _, err := tx.GetWebhook(ctx, id); err != nil {
			return err
		}
		if _, err := tx.GetWebhookDelivery(ctx, id, deliveryID); err != nil {
			return err
		}
		if err := a.Authorize(guild.OpRedeliverWebhookDelivery); err != nil {
			return err
		}
		var err error
		out, err = tx.RedeliverWebhookDelivery(ctx, id, deliveryID, s.guild.Now())
		return err
	})
	if err == nil {
		// No event to dispatch: this instance's deliverer claims it now.
		s.guild.Wake()
	}
	return out, err
}

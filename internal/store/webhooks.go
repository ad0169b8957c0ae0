package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store/webhookq"
)

// Webhooks and the listing of their deliveries. The deliveries are made,
// claimed and recorded by the delivery queue (internal/store/webhookq, on
// the store's writer and read pool: WebhookQueue); here they are only
// listed and handed back to it (RedeliverWebhookDelivery).

// WebhookQueue is the webhooks' delivery queue, on the store's writes
// (every writer goes through the same one) and read pool.
func (s *Store) WebhookQueue() *webhookq.Queue {
	return webhookq.New(s.write, s.queries.sql, s.queries.eventsBySeq)
}

type webhookRow struct {
	ID             string `gorm:"primaryKey"`
	URL            string `gorm:"column:url"`
	Events         string // a JSON array of patterns
	Description    string
	Enabled        bool
	DisabledReason *string
	CreatorID      string
	Secret         string
	PreviousSecret *string
	PreviousUntil  *micros
	AfterSeq       int64
	Version        int64
	CreatedAt      micros `gorm:"autoCreateTime:false"`
	UpdatedAt      micros `gorm:"autoUpdateTime:false"`
}

func (webhookRow) TableName() string { return "webhooks" }

func (r webhookRow) model() (model.Webhook, error) {
	w := model.Webhook{ID: r.ID, URL: r.URL, Description: r.Description, Enabled: r.Enabled, CreatorID: r.CreatorID,
		Secret: r.Secret, AfterSeq: r.AfterSeq, Version: r.Version, CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
	if err := json.Unmarshal([]byte(r.Events), &w.Events); err != nil {
		return model.Webhook{}, fmt.Errorf("webhook %s: read its events: %w", r.ID, err)
	}
	if r.DisabledReason != nil {
		w.DisabledReason = *r.DisabledReason
	}
	if r.PreviousSecret != nil && r.PreviousUntil != nil {
		w.PreviousSecret, w.PreviousUntil = *r.PreviousSecret, r.PreviousUntil.time()
	}
	return w, nil
}

func webhookRowOf(w model.Webhook) (webhookRow, error) {
	events, err := json.Marshal(w.Events)
	if err != nil {
		return webhookRow{}, fmt.Errorf("webhook %s: encode its events: %w", w.ID, err)
	}
	r := webhookRow{ID: w.ID, URL: w.URL, Events: string(events), Description: w.Description, Enabled: w.Enabled,
		CreatorID: w.CreatorID, Secret: w.Secret, AfterSeq: w.AfterSeq, Version: w.Version,
		CreatedAt: microsOf(w.CreatedAt), UpdatedAt: microsOf(w.UpdatedAt)}
	if w.DisabledReason != "" {
		r.DisabledReason = &w.DisabledReason
	}
	if w.PreviousSecret != "" {
		until := microsOf(w.PreviousUntil)
		r.PreviousSecret, r.PreviousUntil = &w.PreviousSecret, &until
	}
	return r, nil
}

func webhookModels(rows []webhookRow) ([]model.Webhook, error) {
	out := make([]model.Webhook, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.model(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// InsertWebhook stores a new webhook at version 1.
func (tx *Tx) InsertWebhook(ctx context.Context, w model.Webhook) error {
	w.Version = 1
	row, err := webhookRowOf(w)
	if err != nil {
		return err
	}
	if err := tx.with(ctx).Create(&row).Error; err != nil {
		return duplicate(err, "Webhook %q already exists.", w.ID)
	}
	return nil
}

// UpdateWebhook stores every member of a webhook but its ID, its creation
// and its after_seq, and moves its version.
func (tx *Tx) UpdateWebhook(ctx context.Context, w model.Webhook) error {
	row, err := webhookRowOf(w)
	if err != nil {
		return err
	}
	err = tx.with(ctx).Model(&webhookRow{}).Where("id = ?", w.ID).Updates(map[string]any{
		"url": row.URL, "events": row.Events, "description": row.Description, "enabled": row.Enabled,
		"disabled_reason": row.DisabledReason, "creator_id": row.CreatorID, "secret": row.Secret,
		"previous_secret": row.PreviousSecret, "previous_until": row.PreviousUntil,
		"version": gorm.Expr("version + 1"), "updated_at": row.UpdatedAt}).Error
	if err != nil {
		return fmt.Errorf("update webhook %s: %w", w.ID, err)
	}
	return nil
}

// RaiseWebhookAfterSeq sets a webhook's after_seq to seq unless it is
// there already or past it.
func (tx *Tx) RaiseWebhookAfterSeq(ctx context.Context, id string, seq int64) error {
	err := tx.with(ctx).Model(&webhookRow{}).Where("id = ? AND after_seq < ?", id, seq).Update("after_seq", seq).Error
	if err != nil {
		return fmt.Errorf("set the first event of webhook %s: %w", id, err)
	}
	return nil
}

// DeleteWebhook deletes a webhook and, by the foreign key's cascade, its
// deliveries (deleted here too, for a SQLite connection without foreign
// keys enforced).
func (tx *Tx) DeleteWebhook(ctx context.Context, id string) error {
	if err := tx.with(ctx).Where("webhook_id = ?", id).Delete(&webhookDeliveryRow{}).Error; err != nil {
		return fmt.Errorf("delete the deliveries of webhook %s: %w", id, err)
	}
	if err := tx.with(ctx).Where("id = ?", id).Delete(&webhookRow{}).Error; err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	return nil
}

// GetWebhook returns one webhook.
func (q queries) GetWebhook(ctx context.Context, id string) (model.Webhook, error) {
	var r webhookRow
	if err := q.with(ctx).Where("id = ?", id).Take(&r).Error; err != nil {
		return model.Webhook{}, notFound(err, "Webhook %q does not exist.", id)
	}
	return r.model()
}

// ListWebhooks returns up to limit webhooks with an ID after the one given
// ("" for the first), in ID order (their creation's: the IDs are UUIDv7),
// and whether more follow.
func (q queries) ListWebhooks(ctx context.Context, after string, limit int) ([]model.Webhook, bool, error) {
	var rows []webhookRow
	if err := q.with(ctx).Where("id > ?", after).Order("id").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list webhooks: %w", err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out, err := webhookModels(rows)
	return out, more, err
}

// CountWebhooks counts the webhooks.
func (q queries) CountWebhooks(ctx context.Context) (int64, error) {
	var n int64
	if err := q.with(ctx).Model(&webhookRow{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count webhooks: %w", err)
	}
	return n, nil
}

// webhookDeliveryRow is a delivery as listed: the columns the API shows.
type webhookDeliveryRow struct {
	ID            string `gorm:"primaryKey"`
	WebhookID     string
	EventSeq      int64
	State         string
	Attempts      int
	LastStatus    *int
	NextAttemptAt *micros
	CreatedAt     micros `gorm:"autoCreateTime:false"`
	UpdatedAt     micros `gorm:"autoUpdateTime:false"`
}

func (webhookDeliveryRow) TableName() string { return "webhook_deliveries" }

func (r webhookDeliveryRow) model() model.Delivery {
	d := model.Delivery{ID: r.ID, WebhookID: r.WebhookID, EventSeq: r.EventSeq, State: model.DeliveryState(r.State),
		Attempts: r.Attempts, CreatedAt: r.CreatedAt.time(), UpdatedAt: r.UpdatedAt.time()}
	if r.LastStatus != nil {
		d.LastStatus = *r.LastStatus
	}
	if r.NextAttemptAt != nil {
		d.NextAttemptAt = r.NextAttemptAt.time()
	}
	return d
}

// ListWebhookDeliveries returns up to limit deliveries of a webhook, newest
// first, those of events before the seq below (0: from the newest), and
// whether more follow.
//
// Newest first is by event, on the (webhook, event) index the queue keeps
// anyway: a webhook's deliveries are made in the order of their events
// (the dispatch cursor moves through them in order) and a redelivery is
// the same row. A position by event is also one that a delivery deleted
// since (hidden from the webhook's creator) cannot lose.
func (q queries) ListWebhookDeliveries(ctx context.Context, webhookID string, below int64, limit int) ([]model.Delivery, bool, error) {
	db := q.with(ctx).Where("webhook_id = ?", webhookID)
	if below > 0 {
		db = db.Where("event_seq < ?", below)
	}
	var rows []webhookDeliveryRow
	if err := db.Order("event_seq DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, false, fmt.Errorf("list the deliveries of webhook %s: %w", webhookID, err)
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]model.Delivery, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, more, nil
}

// GetWebhookDelivery returns one delivery of a webhook.
func (q queries) GetWebhookDelivery(ctx context.Context, webhookID, id string) (model.Delivery, error) {
	var r webhookDeliveryRow
	if err := q.with(ctx).Where("id = ? AND webhook_id = ?", id, webhookID).Take(&r).Error; err != nil {
		return model.Delivery{}, notFound(err, "Delivery %q of webhook %q does not exist.", id, webhookID)
	}
	return r.model(), nil
}

// RedeliverWebhookDelivery makes a delivery pending again, due at now, and
// releases any instance's lease on it; its attempts go on counting.
func (tx *Tx) RedeliverWebhookDelivery(ctx context.Context, webhookID, id string, now time.Time) (model.Delivery, error) {
	// A live lease stays: its attempt, in flight, is the new one (one
	// attempt at a time); a lapsed one is released.
	at := microsOf(now)
	lapsed := func(col string) clause.Expr {
		return gorm.Expr("CASE WHEN lease_until IS NULL OR lease_until <= ? THEN NULL ELSE "+col+" END", at)
	}
	res := tx.with(ctx).Model(&webhookDeliveryRow{}).Where("id = ? AND webhook_id = ?", id, webhookID).Updates(map[string]any{
		"state": string(model.DeliveryPending), "next_attempt_at": at,
		"lease_owner": lapsed("lease_owner"), "lease_until": lapsed("lease_until"), "updated_at": at})
	if res.Error != nil {
		return model.Delivery{}, fmt.Errorf("redeliver %s: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return model.Delivery{}, apperr.NotFound("Delivery %q of webhook %q does not exist.", id, webhookID)
	}
	return tx.GetWebhookDelivery(ctx, webhookID, id)
}

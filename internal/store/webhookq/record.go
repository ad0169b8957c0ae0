package webhookq

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// DeliveryStep is what an attempt, or the decision not to make one, does
// to its delivery.
type DeliveryStep int

// Steps of Queue.Record.
const (
	StepDelivered DeliveryStep = iota // delivered: a 2xx answer
	StepRetry                         // pending again, attempted at NextAttemptAt
	StepFailed                        // failed: the last attempt, or a 410
	StepHold                          // not attempted; pending until NextAttemptAt (attempts unchanged)
	StepDrop                          // not attempted and never will be: the delivery is deleted
	StepRelease                       // not attempted: the lease ends, the delivery stays as it was
)

// DeliveryRecord is the outcome of one claimed delivery.
type DeliveryRecord struct {
	ID         string
	LeaseUntil time.Time // as claimed: the record is kept only while the lease is still the owner's
	Step       DeliveryStep
	Attempted  bool   // an attempt was made: attempts grows by one
	Status     int    // the answer's status (0: none)
	Error      string // why no answer came ("" when one did)
	// NextAttemptAt: when it is attempted again (StepRetry, StepHold).
	NextAttemptAt time.Time
	// Disable, when set, disables the delivery's webhook (if still
	// enabled) with this reason, and appends the event DisableEvent makes
	// of the webhook before and after the change.
	Disable      string
	WebhookID    string
	DisableEvent func(before, after model.Webhook) model.Event
}

// maxErrorText bounds last_error (VARCHAR(400)).
const maxErrorText = 400

// Record records the outcomes of deliveries claimed by owner, in
// one transaction; an outcome whose lease is no longer owner's (it ended
// and another instance claimed the delivery) is left out. It returns the
// events it appended (a webhook disabled), committed.
func (q *Queue) Record(ctx context.Context, owner string, recs []DeliveryRecord) ([]model.Event, error) {
	events, err := q.write(ctx, func(tx *sqldb.Tx) error {
		// The deliveries delivered, the most of a backlog, in one
		// statement per lease (those claimed together share it).
		type key struct {
			lease  micros
			status int
		}
		delivered := map[key][]string{}
		var rest []DeliveryRecord
		for _, r := range recs {
			if r.Step == StepDelivered && r.Attempted && r.Disable == "" {
				k := key{microsOf(r.LeaseUntil), r.Status}
				delivered[k] = append(delivered[k], r.ID)
			} else {
				rest = append(rest, r)
			}
		}
		for k, ids := range delivered {
			if err := recordDelivered(ctx, tx, owner, k.lease, k.status, ids); err != nil {
				return err
			}
		}
		disabled := map[string]bool{}
		for _, r := range rest {
			kept, err := recordDelivery(ctx, tx, owner, r)
			if err != nil {
				return err
			}
			if kept && r.Disable != "" && !disabled[r.WebhookID] {
				disabled[r.WebhookID] = true
				if err := disableWebhookFor(ctx, tx, r); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record deliveries: %w", err)
	}
	return events, nil
}

// recordDelivered records the deliveries ids, claimed by owner until
// lease, as delivered by an attempt answered with status.
func recordDelivered(ctx context.Context, tx *sqldb.Tx, owner string, lease micros, status int, ids []string) error {
	err := tx.With(ctx).Model(&queueDeliveryRow{}).
		Where("lease_owner = ? AND lease_until = ? AND id IN ?", owner, lease, ids).
		Updates(map[string]any{"state": string(model.DeliveryDelivered), "attempts": gorm.Expr("attempts + 1"),
			"last_status": nullIfZero(status), "last_error": nil, "next_attempt_at": nil,
			"lease_owner": nil, "lease_until": nil, "updated_at": microsOf(model.Now())}).Error
	if err != nil {
		return fmt.Errorf("record deliveries delivered: %w", err)
	}
	return nil
}

// recordDelivery records one outcome; false when the lease was no longer
// owner's.
func recordDelivery(ctx context.Context, tx *sqldb.Tx, owner string, r DeliveryRecord) (bool, error) {
	db := tx.With(ctx).Model(&queueDeliveryRow{}).
		Where("id = ? AND lease_owner = ? AND lease_until = ?", r.ID, owner, microsOf(r.LeaseUntil))
	if r.Step == StepDrop {
		res := db.Delete(&queueDeliveryRow{})
		return res.RowsAffected == 1, res.Error
	}
	set := map[string]any{"lease_owner": nil, "lease_until": nil, "updated_at": microsOf(model.Now())}
	if r.Attempted {
		set["attempts"] = gorm.Expr("attempts + 1")
		set["last_status"], set["last_error"] = nullIfZero(r.Status), nullIfEmpty(truncate(r.Error, maxErrorText))
	}
	switch r.Step {
	case StepDelivered:
		set["state"], set["next_attempt_at"] = string(model.DeliveryDelivered), nil
	case StepFailed:
		set["state"], set["next_attempt_at"] = string(model.DeliveryFailed), nil
	case StepRetry, StepHold:
		set["next_attempt_at"] = microsOf(r.NextAttemptAt)
	}
	res := db.Updates(set)
	if res.Error != nil {
		return false, fmt.Errorf("record delivery %s: %w", r.ID, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// disableWebhookFor disables r's webhook if it is enabled, and appends
// the event of the change.
func disableWebhookFor(ctx context.Context, tx *sqldb.Tx, r DeliveryRecord) error {
	var rows []struct {
		ID, URL, Events, Description, CreatorID string
		Version                                 int64
	}
	db := tx.With(ctx)
	if err := db.Table("webhooks").Select("id, url, events, description, creator_id, version").
		Where("id = ? AND enabled", r.WebhookID).Find(&rows).Error; err != nil {
		return fmt.Errorf("read webhook %s: %w", r.WebhookID, err)
	}
	if len(rows) == 0 {
		return nil // disabled already, or deleted: nothing changes
	}
	now := model.Now()
	err := db.Table("webhooks").Where("id = ?", r.WebhookID).
		Updates(map[string]any{"enabled": false, "disabled_reason": r.Disable,
			"version": gorm.Expr("version + 1"), "updated_at": microsOf(now)}).Error
	if err != nil {
		return fmt.Errorf("disable webhook %s: %w", r.WebhookID, err)
	}
	w := rows[0]
	before := model.Webhook{ID: w.ID, URL: w.URL, Events: eventPatterns(w.Events), Description: w.Description,
		Enabled: true, CreatorID: w.CreatorID, Version: w.Version}
	after := before
	after.Enabled, after.DisabledReason, after.Version, after.UpdatedAt = false, r.Disable, w.Version+1, now
	return tx.AppendEvent(r.DisableEvent(before, after))
}

func nullIfZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

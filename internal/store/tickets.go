package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
)

// An event-stream ticket belongs to the token that minted it (its token_id,
// with ON DELETE CASCADE: revoking the token deletes its tickets), and is
// consumed only once a stream opens: the gate peeks at it, the stream
// consumes it.

var errTicket = apperr.Unauthenticated("The event ticket is unknown, used or expired, or its token was revoked.")

// ticketRow is an event-stream ticket.
type ticketRow struct {
	Hash      string `gorm:"primaryKey"`
	UserID    string
	TokenID   *string // nil: a ticket of no token, never valid
	ExpiresAt micros
}

func (ticketRow) TableName() string { return "event_tickets" }

// InsertTicket stores an event-stream ticket's hash for the token that
// minted it, and purges expired ones.
func (tx *Tx) InsertTicket(ctx context.Context, hash, userID, tokenID string, expires time.Time) error {
	db := tx.with(ctx)
	if err := db.Where("expires_at < ?", microsOf(model.Now())).Delete(&ticketRow{}).Error; err != nil {
		return fmt.Errorf("purge tickets: %w", err)
	}
	row := ticketRow{Hash: hash, UserID: userID, ExpiresAt: microsOf(expires)}
	if tokenID != "" {
		row.TokenID = &tokenID
	}
	if err := db.Create(&row).Error; err != nil {
		return fmt.Errorf("create ticket: %w", err)
	}
	return nil
}

// TicketCredentials reads, without consuming it, the ticket with this hash
// if it is unexpired: the credentials of its token (so a revoked or expired
// token, or a suspended user, is found out like for a bearer token).
func (q queries) TicketCredentials(ctx context.Context, hash string, now time.Time) (Credentials, error) {
	var row ticketRow
	err := q.with(ctx).Where("hash = ?", hash).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Credentials{}, errTicket
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("read ticket: %w", err)
	}
	if row.TokenID == nil || !row.ExpiresAt.time().After(now) {
		return Credentials{}, errTicket
	}
	cred, err := q.tokenCredentials(ctx, true, *row.TokenID)
	if apperr.IsNotFound(err) || errors.Is(err, apperr.ErrUnauthenticated) {
		return Credentials{}, errTicket
	}
	return cred, err
}

// ConsumeTicket deletes an unexpired ticket; a ticket already consumed (by
// another stream) or expired is a 401.
func (tx *Tx) ConsumeTicket(ctx context.Context, hash string, now time.Time) error {
	res := tx.with(ctx).Where("hash = ? AND expires_at > ?", hash, microsOf(now)).Delete(&ticketRow{})
	if res.Error != nil {
		return fmt.Errorf("consume ticket: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return errTicket
	}
	return nil
}

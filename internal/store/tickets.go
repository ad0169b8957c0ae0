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

// InsertTicket stores an event-stream ticket's hash for the token that
// minted it, and purges expired ones.
func (tx *Tx) InsertTicket(ctx context.Context, hash, userID, tokenID string, expires time.Time) error {
	if err := tx.with(ctx).Exec("DELETE FROM event_tickets WHERE expires_at < ?", microsOf(model.Now())).Error; err != nil {
		return fmt.Errorf("purge tickets: %w", err)
	}
	var token *string // "" (a test's ticket of no token) is NULL: never valid
	if tokenID != "" {
		token = &tokenID
	}
	err := tx.with(ctx).Exec("INSERT INTO event_tickets (hash, user_id, token_id, expires_at) VALUES (?, ?, ?, ?)",
		hash, userID, token, microsOf(expires)).Error
	if err != nil {
		return fmt.Errorf("create ticket: %w", err)
	}
	return nil
}

// TicketCredentials reads, without consuming it, the ticket with this hash
// if it is unexpired: the credentials of its token (so a revoked or expired
// token, or a suspended user, is found out like for a bearer token).
func (q queries) TicketCredentials(ctx context.Context, hash string, now time.Time) (Credentials, error) {
	var row struct {
		TokenID   *string
		ExpiresAt micros
	}
	err := q.with(ctx).Raw("SELECT token_id, expires_at FROM event_tickets WHERE hash = ?", hash).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Credentials{}, errTicket
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("read ticket: %w", err)
	}
	if row.TokenID == nil || !row.ExpiresAt.time().After(now) {
		return Credentials{}, errTicket
	}
	cred, err := q.CredentialsOfToken(ctx, *row.TokenID)
	if apperr.IsNotFound(err) || errors.Is(err, apperr.ErrUnauthenticated) {
		return Credentials{}, errTicket
	}
	return cred, err
}

// ConsumeTicket deletes an unexpired ticket; a ticket already consumed (by
// another stream) or expired is a 401.
func (tx *Tx) ConsumeTicket(ctx context.Context, hash string, now time.Time) error {
	res := tx.with(ctx).Exec("DELETE FROM event_tickets WHERE hash = ? AND expires_at > ?", hash, microsOf(now))
	if res.Error != nil {
		return fmt.Errorf("consume ticket: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return errTicket
	}
	return nil
}

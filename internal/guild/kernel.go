package guild

import (
	"context"
	"log/slog"
	"time"

	"github.com/guildhall/guildhall/internal/cursor"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// The kernel the feature packages under internal/guild build on
// (internal/guild/webhooks, internal/guild/asof): a write of the domain and its events, an
// operation's row of the authorization table, pages and preconditions.
// What the rules of channels, roles and users need stays unexported.

// Write runs fn in a serialized write with the caller re-read inside it
// (see write).
func (s *Service) Write(ctx context.Context, a *Actor, fn func(tx *store.Tx, a *Actor) error) error {
	return s.write(ctx, a, fn)
}

// WriteEvents is Write, returning the events committed with their seqs.
func (s *Service) WriteEvents(ctx context.Context, a *Actor, fn func(tx *store.Tx, a *Actor) error) ([]model.Event, error) {
	return s.writeEvents(ctx, a, fn)
}

// Emit appends the audit event of a change made in tx.
func Emit(ctx context.Context, tx *store.Tx, a *Actor, o WriteOpts, typ, subject string, data map[string]any) error {
	return emit(ctx, tx, a, o, typ, subject, data)
}

// Authorize checks the caller against an operation's row (authorize).
func (a *Actor) Authorize(op Op) error { return a.authorize(op) }

// Check applies a precondition to a resource at the version current
// (412 when it fails).
func (p *Precondition) Check(current string) error { return p.check(current) }

// PageLimit is ?limit= bounded: DefaultLimit when absent, at most MaxLimit.
func PageLimit(limit int) int { return pageLimit(limit) }

// Store is the store the service keeps its state in.
func (s *Service) Store() *store.Store { return s.store }

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.now() }

// Limits are the bounds the service was built with.
func (s *Service) Limits() Limits { return s.limits }

// WebhookOptions say which destinations webhooks may have.
func (s *Service) WebhookOptions() WebhookOptions { return s.webhooks }

// Wake tells the notifier's subscribers, the local deliverer among them,
// that a write committed no event but changed what they read: a delivery
// made due again by a redelivery would otherwise wait for the deliverer's
// next timer. They read again and find what changed.
func (s *Service) Wake() {
	if s.notifier != nil {
		s.notifier.Published(0)
	}
}

// Logger is the service's logger.
func (s *Service) Logger() *slog.Logger { return s.log }

// AuthorizeQuery checks what an operation's row asks of a query
// parameter the request gives (authorizeQuery).
func (a *Actor) AuthorizeQuery(op Op, param string) error { return a.authorizeQuery(op, param) }

// AuthorizeOn checks the caller against an operation's row for what it
// acts on (authorizeOn).
func (a *Actor) AuthorizeOn(op Op, id string) error { return a.authorizeOn(op, id) }

// Now is when the caller's request was judged.
func (a *Actor) Now() time.Time { return a.now }

// Auth is the authorization state the caller is judged by.
func (a *Actor) Auth() *store.AuthState { return a.auth }

// Knows reports whether the caller may know that a channel exists (knows).
func (a *Actor) Knows(channelID string) bool { return a.knows(channelID) }

// KnowsEveryChannel reports whether the caller may know of every channel.
func (a *Actor) KnowsEveryChannel() bool { return a.knowsEveryChannel() }

// ChannelNotFound is what the store says of a missing channel.
func ChannelNotFound(id string) error { return channelNotFound(id) }

// Cursors seal and open list cursors.
func (s *Service) Cursors() cursor.Sealer { return s.cursors }

// UserPage is a page of users as the caller may see them (userPage).
func (s *Service) UserPage(a *Actor, users []model.User, next string, filters []string) Page[model.User] {
	return s.userPage(a, users, next, filters)
}

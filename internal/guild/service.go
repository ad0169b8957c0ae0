// Package guild is Guildhall's domain: the rules of channels, roles, users,
// tokens, attachments, profile links and the audit log, and who may do what.
// It knows neither HTTP nor SQL: internal/httpapi calls it, and it keeps state
// through internal/store and internal/blob.
//
// Every write runs in one serialized store transaction that re-reads the
// caller, checks the rules in the order of docs/design.md §11 (404, then 403 permission,
// hierarchy and granting, then 412, then 409), makes the change and appends
// its audit event, so a refused request changes nothing and no event is lost.
package guild

import (
	"context"
	"log/slog"
	"time"

	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/cursor"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/webhook"
)

// Limits are the configurable bounds of docs/design.md §9.
type Limits struct {
	MaxRoles      int
	MaxOverwrites int
	// MaxChannels bounds the channels in all, categories included;
	// MaxChannelsPerCategory the channels in one category.
	MaxChannels            int
	MaxChannelsPerCategory int
	MaxProfileLinks        int
	MaxAttachmentBytes     int64
	// MaxTokensPerUser bounds the tokens a user holds that still
	// authenticate: a user could otherwise multiply anything counted per
	// token.
	MaxTokensPerUser int
	// MaxWebhooks bounds the webhooks of the community.
	MaxWebhooks int
}

// DefaultLimits are docs/design.md's defaults.
func DefaultLimits() Limits {
	return Limits{MaxRoles: 250, MaxOverwrites: 500, MaxProfileLinks: 10, MaxAttachmentBytes: 25 << 20,
		MaxChannels: 500, MaxChannelsPerCategory: 50, MaxTokensPerUser: 25, MaxWebhooks: 25}
}

// Notifier learns of committed events (the live event stream).
type Notifier interface {
	Published(lastSeq int64)
}

// Service implements the rules.
type Service struct {
	store    *store.Store
	blobs    blob.Store
	limits   Limits
	cursors  cursor.Sealer
	notifier Notifier
	log      *slog.Logger
	now      func() time.Time
	webhooks WebhookOptions
}

// Options are the service's dependencies.
type Options struct {
	Store    *store.Store
	Blobs    blob.Store
	Limits   Limits
	Notifier Notifier // may be nil
	Logger   *slog.Logger
	Webhooks WebhookOptions
}

// WebhookOptions say which destinations webhooks may have.
type WebhookOptions struct {
	// AllowPrivate lets a webhook's URL resolve to loopback, private,
	// link-local, shared or unspecified addresses.
	AllowPrivate bool
	// Resolver resolves the hosts of webhooks' URLs (nil: the system's).
	Resolver webhook.Resolver
}

// New builds the service.
func New(o Options) *Service {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{store: o.Store, blobs: o.Blobs, limits: o.Limits, notifier: o.Notifier, log: o.Logger, now: model.Now,
		cursors: cursor.New(o.Store.CursorKey()), webhooks: o.Webhooks}
}

// WriteOpts are what every write request may carry.
type WriteOpts struct {
	IfMatch *Precondition // nil: none
	Reason  *string       // the X-Audit-Reason header
}

// write runs fn in a serialized transaction with the caller re-read inside
// it, then tells the notifier about the events it committed.
func (s *Service) write(ctx context.Context, a *Actor, fn func(tx *store.Tx, a *Actor) error) error {
	_, err := s.writeEvents(ctx, a, fn)
	return err
}

// writeEvents is write, returning the events committed with their seqs.
func (s *Service) writeEvents(ctx context.Context, a *Actor, fn func(tx *store.Tx, a *Actor) error) ([]model.Event, error) {
	events, err := s.store.Write(ctx, func(tx *store.Tx) error {
		if a == nil { // the system itself (bootstrap)
			return fn(tx, nil)
		}
		fresh, err := s.inTx(ctx, tx, a)
		if err != nil {
			return err
		}
		return fn(tx, fresh)
	})
	if err != nil {
		return nil, err
	}
	if len(events) > 0 && s.notifier != nil {
		s.notifier.Published(events[len(events)-1].Seq)
	}
	return events, nil
}

// emit appends the audit event of a change.
func emit(ctx context.Context, tx *store.Tx, a *Actor, o WriteOpts, typ, subject string, data map[string]any) error {
	ev := model.Event{Type: typ, Subject: subject, Data: data, Reason: o.Reason}
	if a != nil {
		id := a.UserID
		ev.ActorID = &id
	}
	return tx.AppendEvent(ctx, ev)
}

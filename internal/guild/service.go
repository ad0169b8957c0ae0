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
	g := guardOf(ctx)
	events, err := s.store.Write(ctx, func(tx *store.Tx) error {
		if a == nil { // the system itself (bootstrap)
			return fn(tx, nil)
		}
		fresh, err := s.inTx(ctx, tx, a)
		if err != nil {
			return err
		}
		fresh.inWrite, fresh.guard = true, g
		if g == nil {
			return fn(tx, fresh)
		}
		g.events = nil
		if err := fn(tx, fresh); err != nil {
			return err
		}
		return g.check(ctx, tx, g.events)
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
	var g *guarded
	if a != nil && a.inWrite {
		g = a.guard
	} else {
		g = guardOf(ctx)
	}
	if g != nil {
		g.events = append(g.events, ev)
	}
	return tx.AppendEvent(ctx, ev)
}

// A WriteGuard watches a write from inside its transaction: it runs once
// the write's change is made, before it commits, with the events the change
// appends (none when it changed nothing); an error undoes the change. A
// revert (internal/revert) checks there, atomically with its change, that
// no later event changed what it sets back, and a dry run undoes it there.
type WriteGuard func(ctx context.Context, tx *store.Tx, events []model.Event) error

// WithWriteGuard makes the write made under ctx run g. It marks the
// context, as store.LargeWrite does, because the end of a write's
// transaction is where the write's options do not reach.
func WithWriteGuard(ctx context.Context, g WriteGuard) context.Context {
	return context.WithValue(ctx, guardKey{}, &guarded{check: g})
}

type guardKey struct{}

// guarded is a guard and the events of its write's run so far (a write
// may run again, its first run undone: each run starts with none).
type guarded struct {
	check  WriteGuard
	events []model.Event
}

func guardOf(ctx context.Context) *guarded {
	g, _ := ctx.Value(guardKey{}).(*guarded)
	return g
}

// CanRevert checks that the caller may revert events at all (what the
// change itself needs is checked by the operation that makes it).
func (s *Service) CanRevert(a *Actor) error { return a.authorize(opRevertAuditLogEntry) }

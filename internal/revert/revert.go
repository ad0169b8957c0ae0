// Package revert sets the subject of one audit event back to the event's
// before (docs/design.md §14, Revert). It decides nothing about who may
// change what: each revert is made by the guild operation that makes the
// same change by hand, as the caller, so that the same rules, checks and
// events apply. What it adds is the reading of an event, the refusal of
// what a later event changed since (checked inside the change's own
// transaction, through a guild.WriteGuard), and the list of changes.
package revert

import (
	"context"
	"errors"
	"fmt"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/template"
)

// Service reverts events.
type Service struct {
	svc   *guild.Service
	store *store.Store
}

// New builds the service over the domain's rules and the store's audit log.
func New(svc *guild.Service, st *store.Store) *Service { return &Service{svc: svc, store: st} }

// Options are a revert's switches.
type Options struct {
	DryRun bool    // list the changes, make none
	Reason *string // the X-Audit-Reason header; nil: "revert of <seq>"
}

// errDryRun undoes a dry run's change once its list is taken.
var errDryRun = errors.New("revert: dry run")

// Revert sets the subject of event seq back to the event's before and lists
// the changes made (with DryRun, made and undone in one transaction, so
// that a dry run answers what the revert would, refusals included).
func (r *Service) Revert(ctx context.Context, a *guild.Actor, seq int64, opt Options) ([]template.Change, error) {
	if err := r.svc.CanRevert(a); err != nil {
		return nil, err
	}
	ev, err := r.event(ctx, a, seq)
	if err != nil {
		return nil, err
	}
	p, err := planFor(ev)
	if err != nil {
		return nil, err
	}
	reason := fmt.Sprintf("revert of %d", seq)
	if opt.Reason != nil {
		reason = *opt.Reason
	}
	var made []made
	guard := func(ctx context.Context, tx *store.Tx, events []model.Event) error {
		if err := p.check(ctx, tx, events); err != nil {
			return err
		}
		var err error
		if made, err = madeOf(ctx, tx, events); err != nil {
			return err
		}
		if opt.DryRun {
			return errDryRun
		}
		return nil
	}
	// A transaction of its own: every write before it has committed its
	// events, which the guard reads, and none shares its transaction.
	wctx := guild.WithWriteGuard(store.LargeWrite(ctx), guard)
	err = p.apply(wctx, r.svc, a, guild.WriteOpts{Reason: &reason})
	switch {
	case errors.Is(err, errDryRun):
	case apperr.IsNotFound(err) || errors.Is(err, apperr.ErrInvalid):
		// The subject, or what the revert needs of it (a role, a user, a
		// category, a position among fewer roles), went since.
		return nil, p.goneConflict(ctx, r.store, err)
	case err != nil:
		return nil, err
	}
	return r.changes(ctx, a, made)
}

// event reads event seq as the caller may read it in the audit log: one
// about a channel hidden from them is unknown, like one that is not there.
func (r *Service) event(ctx context.Context, a *guild.Actor, seq int64) (model.Event, error) {
	notFound := apperr.NotFound("No event has seq %d.", seq)
	list, _, err := r.store.ListEvents(ctx, store.EventFilter{BeforeSeq: seq + 1}, 1)
	if err != nil {
		return model.Event{}, err
	}
	if len(list) == 0 || list[0].Seq != seq {
		return model.Event{}, notFound
	}
	visible, err := r.svc.VisibleEvents(ctx, a, list)
	if err != nil {
		return model.Event{}, err
	}
	if len(visible) == 0 {
		return model.Event{}, notFound
	}
	return list[0], nil // as written: the shown copy may be redacted
}

// changes are the changes a revert made (or would make), those about
// channels hidden from the caller left out.
func (r *Service) changes(ctx context.Context, a *guild.Actor, list []made) ([]template.Change, error) {
	events := make([]model.Event, len(list))
	for i, m := range list {
		events[i] = m.event
	}
	visible, err := r.svc.VisibleEvents(ctx, a, events)
	if err != nil {
		return nil, err
	}
	// visible is events in their order, some left out; whether one is
	// depends on its subject alone.
	out := make([]template.Change, 0, len(visible))
	for _, m := range list {
		if len(out) < len(visible) && visible[len(out)].Subject == m.event.Subject && visible[len(out)].Type == m.event.Type {
			out = append(out, m.change)
		}
	}
	return out, nil
}

package guild

import (
	"context"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// A channel's overwrites: listing and setting them, the order the API
// lists them in, and locking a channel's to its category's.

// ListOverwrites returns a channel's overwrites and the list's version.
func (s *Service) ListOverwrites(ctx context.Context, a *Actor, channelID string) ([]model.Overwrite, int64, error) {
	list, version, ok := a.auth.Overwrites(channelID)
	if !ok {
		return nil, 0, channelNotFound(channelID)
	}
	if err := a.authorizeOn(OpListChannelOverwrites, channelID); err != nil {
		return nil, 0, err
	}
	return model.SortedOverwrites(a.rolePosition, list), version, nil
}

// SetOverwrite creates, replaces or (when allow and deny are both empty)
// removes one overwrite, and returns the channel's whole list.
func (s *Service) SetOverwrite(ctx context.Context, a *Actor, ow model.Overwrite, o WriteOpts) ([]model.Overwrite, int64, error) {
	if err := ow.Validate(); err != nil {
		return nil, 0, err
	}
	var list []model.Overwrite
	var version int64
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := s.checkOverwriteTarget(ctx, tx, ow); err != nil {
			return err
		}
		v, err := tx.OverwritesVersion(ctx, ow.ChannelID)
		if err != nil {
			return err
		}
		if err := a.authorizeOn(opSetChannelOverwrite, ow.ChannelID); err != nil {
			return err
		}
		current, err := tx.ChannelOverwrites(ctx, ow.ChannelID)
		if err != nil {
			return err
		}
		before := findOverwrite(current, ow)
		var oldAllow, oldDeny permissions.Set
		if before != nil {
			oldAllow, oldDeny = before.Allow, before.Deny
		}
		changed := (oldAllow ^ ow.Allow) | (oldDeny ^ ow.Deny)
		if err := a.canGrantIn(ow.ChannelID, changed); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(v)); err != nil {
			return err
		}
		removing := ow.Allow.IsEmpty() && ow.Deny.IsEmpty()
		if before == nil && !removing && len(current) >= s.limits.MaxOverwrites {
			return apperr.LimitExceeded("overwrites_per_channel", s.limits.MaxOverwrites, "overwrites in a channel")
		}
		if changed.IsEmpty() { // no-op (also removing what is absent)
			version = v
			list = model.SortedOverwrites(a.rolePosition, current)
			return nil
		}
		// The channels synced with a category (before this change) take it
		// too, in the same transaction; a change of a channel's own makes it
		// unsynced, as its overwrites then differ from its category's.
		synced := a.syncedChildren(ow.ChannelID)
		if err := tx.PutOverwrite(ctx, ow); err != nil {
			return err
		}
		if list, err = tx.ChannelOverwrites(ctx, ow.ChannelID); err != nil {
			return err
		}
		list = model.SortedOverwrites(a.rolePosition, list)
		if version, err = tx.OverwritesVersion(ctx, ow.ChannelID); err != nil {
			return err
		}
		return putSynced(ctx, tx, a, o, ow, before, synced)
	})
	if err != nil {
		return nil, 0, err
	}
	return list, version, nil
}

// findOverwrite is the overwrite of list with ow's target, or nil.
func findOverwrite(list []model.Overwrite, ow model.Overwrite) *model.Overwrite {
	var found *model.Overwrite
	for i := range list {
		if list[i].TargetType == ow.TargetType && list[i].TargetID == ow.TargetID {
			found = &list[i]
		}
	}
	return found
}

// putSynced records ow's change of its channel (from before, nil for a
// new overwrite), and makes the same change, with its event, in each
// channel synced with it.
func putSynced(ctx context.Context, tx *store.Tx, a *Actor, o WriteOpts, ow model.Overwrite, before *model.Overwrite, synced []string) error {
	typ := "channel.overwrite.set"
	var after any = map[string]any{"allow": ow.Allow.Names(), "deny": ow.Deny.Names()}
	if ow.Allow.IsEmpty() && ow.Deny.IsEmpty() {
		typ, after = "channel.overwrite.removed", nil
	}
	var beforeData any
	if before != nil {
		beforeData = map[string]any{"allow": before.Allow.Names(), "deny": before.Deny.Names()}
	}
	data := map[string]any{"target_type": ow.TargetType, "target_id": nilIfEmpty(ow.TargetID), "before": beforeData, "after": after}
	if err := emit(ctx, tx, a, o, typ, "channel:"+ow.ChannelID, data); err != nil {
		return err
	}
	for _, child := range synced {
		cow := ow
		cow.ChannelID = child
		if err := tx.PutOverwrite(ctx, cow); err != nil {
			return err
		}
		data := map[string]any{"target_type": ow.TargetType, "target_id": nilIfEmpty(ow.TargetID), "before": beforeData,
			"after": after, "synced_from": ow.ChannelID}
		if err := emit(ctx, tx, a, o, typ, "channel:"+child, data); err != nil {
			return err
		}
	}
	return nil
}

// checkOverwriteTarget makes an unknown role or user a 400 at body.target_id.
func (s *Service) checkOverwriteTarget(ctx context.Context, tx *store.Tx, ow model.Overwrite) error {
	var err error
	switch ow.TargetType {
	case model.TargetRole:
		_, err = tx.GetRole(ctx, ow.TargetID)
	case model.TargetUser:
		_, err = tx.GetUser(ctx, ow.TargetID)
	default:
		return nil
	}
	if apperr.IsNotFound(err) {
		return apperr.Invalid("target_id", "no %s with ID %q", ow.TargetType, ow.TargetID)
	}
	return err
}

// rolePosition is a role's position (0 for a role that does not exist).
func (a *Actor) rolePosition(id string) int {
	r, _ := a.auth.Role(id)
	return r.Position
}

// overwriteEvent is the event of one overwrite change, as SetOverwrite
// writes it.
type overwriteEvent struct {
	channelID string
	typ       string
	data      map[string]any
}

func newOverwriteEvent(channelID string, before, after *model.Overwrite) overwriteEvent {
	o := after
	if o == nil {
		o = before
	}
	e := overwriteEvent{channelID: channelID, typ: "channel.overwrite.set",
		data: map[string]any{"target_type": o.TargetType, "target_id": nilIfEmpty(o.TargetID), "before": nil, "after": nil}}
	if before != nil {
		e.data["before"] = map[string]any{"allow": before.Allow.Names(), "deny": before.Deny.Names()}
	}
	if after != nil {
		e.data["after"] = map[string]any{"allow": after.Allow.Names(), "deny": after.Deny.Names()}
	} else {
		e.typ = "channel.overwrite.removed"
	}
	return e
}

// lockPlan is what locking a channel's overwrites to its category's
// changes: the overwrites it ends with, one event for each that changes
// (synced_from: the category), and the permission bits those changes touch,
// which the caller must hold to grant them.
type lockPlan struct {
	category, channel string
	want              []model.Overwrite
	events            []overwriteEvent
	changed           permissions.Set
}

func planLock(ctx context.Context, tx *store.Tx, category, id string) (lockPlan, error) {
	p := lockPlan{category: category, channel: id}
	current, err := tx.ChannelOverwrites(ctx, id)
	if err != nil {
		return p, err
	}
	if p.want, err = tx.ChannelOverwrites(ctx, category); err != nil {
		return p, err
	}
	key := func(ow model.Overwrite) string { return ow.TargetType + ":" + ow.TargetID }
	had := map[string]model.Overwrite{}
	for _, ow := range current {
		had[key(ow)] = ow
	}
	for _, ow := range p.want {
		before, ok := had[key(ow)]
		delete(had, key(ow))
		switch {
		case !ok:
			p.events = append(p.events, newOverwriteEvent(id, nil, &ow))
			p.changed |= ow.Allow | ow.Deny
		case before.Allow != ow.Allow || before.Deny != ow.Deny:
			p.events = append(p.events, newOverwriteEvent(id, &before, &ow))
			p.changed |= (before.Allow ^ ow.Allow) | (before.Deny ^ ow.Deny)
		}
	}
	for _, ow := range current { // in the list's order: those the category lacks
		if gone, ok := had[key(ow)]; ok {
			p.events = append(p.events, newOverwriteEvent(id, &gone, nil))
			p.changed |= gone.Allow | gone.Deny
		}
	}
	return p, nil
}

// apply writes the lock and its events (none when it changes nothing).
func (p lockPlan) apply(ctx context.Context, tx *store.Tx, a *Actor, o WriteOpts) error {
	if len(p.events) == 0 {
		return nil
	}
	if err := tx.ReplaceOverwrites(ctx, p.channel, p.want); err != nil {
		return err
	}
	for _, e := range p.events {
		e.data["synced_from"] = p.category
		if err := emit(ctx, tx, a, o, e.typ, "channel:"+e.channelID, e.data); err != nil {
			return err
		}
	}
	return nil
}

// copyOverwrites makes a channel's overwrites a copy of its category's.
func copyOverwrites(ctx context.Context, tx *store.Tx, from, to string) error {
	list, err := tx.ChannelOverwrites(ctx, from)
	if err != nil {
		return err
	}
	return tx.ReplaceOverwrites(ctx, to, list)
}

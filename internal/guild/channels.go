package guild

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

var (
	viewChannel    = permissions.Of(permissions.ViewChannel)
	manageChannels = permissions.Of(permissions.ManageChannels)
	manageRoles    = permissions.Of(permissions.ManageRoles)
)

// ListChannels pages through the channels the caller can see, by ID. The
// cursor is the ID of the last channel of the page, one the caller sees, so
// it tells nothing of the channels they do not.
func (s *Service) ListChannels(ctx context.Context, a *Actor, rawCursor string, limit int) (Page[model.Channel], error) {
	after, err := decodeCursor(rawCursor, "channels")
	if err != nil {
		return Page[model.Channel]{}, err
	}
	limit = pageLimit(limit)
	page := Page[model.Channel]{Items: []model.Channel{}}
	for _, c := range a.auth.Channels() {
		if c.ID <= after || !a.In(c.ID).Has(permissions.ViewChannel) {
			continue
		}
		if len(page.Items) == limit {
			page.NextCursor = encodeCursor(page.Items[limit-1].ID, "channels")
			break
		}
		page.Items = append(page.Items, c)
	}
	return page, nil
}

// GetChannel returns a channel the caller can see.
func (s *Service) GetChannel(ctx context.Context, a *Actor, id string) (model.Channel, error) {
	c, err := a.channel(id)
	if err != nil {
		return model.Channel{}, err
	}
	if err := a.requireIn(id, viewChannel); err != nil {
		return model.Channel{}, err
	}
	return c, nil
}

// rolePosition is a role's position (0 for a role that does not exist).
func (a *Actor) rolePosition(id string) int {
	r, _ := a.auth.Role(id)
	return r.Position
}

// channel returns a channel of the caller's authorization state, or the 404
// of one that does not exist.
func (a *Actor) channel(id string) (model.Channel, error) {
	c, ok := a.auth.Channel(id)
	if !ok {
		return model.Channel{}, channelNotFound(id)
	}
	return c, nil
}

// CreateChannel creates a channel at a client-chosen ID.
func (s *Service) CreateChannel(ctx context.Context, a *Actor, id, name string, topic *string, o WriteOpts) (model.Channel, error) {
	var out model.Channel
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.require(manageChannels); err != nil {
			return err
		}
		now := s.now()
		c, err := tx.InsertChannel(ctx, model.Channel{ID: id, Name: name, Topic: topic, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			return err
		}
		out = c
		return emit(ctx, tx, a, o, "channel.created", "channel:"+id, map[string]any{"name": name, "topic": topic})
	})
	return out, err
}

// ChannelPatch is a merge patch of a channel: nil fields stay.
type ChannelPatch struct {
	Name     *string
	SetTopic bool    // the patch has a topic member
	Topic    *string // its value (nil clears)
}

// UpdateChannel applies a merge patch.
func (s *Service) UpdateChannel(ctx context.Context, a *Actor, id string, p ChannelPatch, o WriteOpts) (model.Channel, error) {
	return s.changeChannel(ctx, a, id, o, func(c *model.Channel) {
		if p.Name != nil {
			c.Name = *p.Name
		}
		if p.SetTopic {
			c.Topic = p.Topic
		}
	}, channelUpdated)
}

// RenameChannel sets a channel's name.
func (s *Service) RenameChannel(ctx context.Context, a *Actor, id, name string, o WriteOpts) (model.Channel, error) {
	return s.changeChannel(ctx, a, id, o, func(c *model.Channel) { c.Name = name }, channelRenamed)
}

// The audit events of a channel's change: the type and its data.
func channelUpdated(before, after model.Channel) (string, map[string]any) {
	return "channel.updated", map[string]any{"before": map[string]any{"name": before.Name, "topic": before.Topic},
		"after": map[string]any{"name": after.Name, "topic": after.Topic}}
}

func channelRenamed(before, after model.Channel) (string, map[string]any) {
	return "channel.renamed", map[string]any{"before": before.Name, "after": after.Name}
}

// changeChannel applies change to a channel the caller may manage, and
// records the change as audit says; a change that changes nothing is a
// no-op (no version, no event).
func (s *Service) changeChannel(ctx context.Context, a *Actor, id string, o WriteOpts, change func(*model.Channel),
	audit func(before, after model.Channel) (string, map[string]any)) (model.Channel, error) {
	var out model.Channel
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return err
		}
		if err := a.requireIn(id, manageChannels); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(c.Version)); err != nil {
			return err
		}
		next := c
		change(&next)
		if next.Name == c.Name && eqPtr(next.Topic, c.Topic) {
			out = c // no-op: no version change, no event
			return nil
		}
		next.UpdatedAt = s.now()
		if out, err = tx.UpdateChannel(ctx, next); err != nil {
			return err
		}
		typ, data := audit(c, next)
		return emit(ctx, tx, a, o, typ, "channel:"+id, data)
	})
	return out, err
}

// DeleteChannel deletes a channel with its overwrites and attachments.
func (s *Service) DeleteChannel(ctx context.Context, a *Actor, id string, o WriteOpts) error {
	var blobs []string
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return err
		}
		if err := a.requireIn(id, manageChannels); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(c.Version)); err != nil {
			return err
		}
		n, err := tx.CountOverwrites(ctx, id)
		if err != nil {
			return err
		}
		if blobs, err = tx.DeleteChannel(ctx, id); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "channel.deleted", "channel:"+id,
			map[string]any{"name": c.Name, "overwrites": n, "attachments": len(blobs)})
	})
	if err == nil {
		s.deleteBlobs(ctx, blobs)
	}
	return err
}

// ListOverwrites returns a channel's overwrites and the list's version.
func (s *Service) ListOverwrites(ctx context.Context, a *Actor, channelID string) ([]model.Overwrite, int64, error) {
	list, version, ok := a.auth.Overwrites(channelID)
	if !ok {
		return nil, 0, channelNotFound(channelID)
	}
	if err := a.requireIn(channelID, viewChannel); err != nil {
		return nil, 0, err
	}
	return sortedOverwrites(a.rolePosition, list), version, nil
}

// SetOverwrite creates, replaces or (when allow and deny are both empty)
// removes one overwrite, and returns the channel's whole list.
func (s *Service) SetOverwrite(ctx context.Context, a *Actor, ow model.Overwrite, o WriteOpts) ([]model.Overwrite, int64, error) {
	if err := validateOverwrite(ow); err != nil {
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
		if err := a.requireIn(ow.ChannelID, manageRoles); err != nil {
			return err
		}
		current, err := tx.ChannelOverwrites(ctx, ow.ChannelID)
		if err != nil {
			return err
		}
		var before *model.Overwrite
		for i := range current {
			if current[i].TargetType == ow.TargetType && current[i].TargetID == ow.TargetID {
				before = &current[i]
			}
		}
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
			list = sortedOverwrites(a.rolePosition, current)
			return nil
		}
		if err := tx.PutOverwrite(ctx, ow); err != nil {
			return err
		}
		if list, err = tx.ChannelOverwrites(ctx, ow.ChannelID); err != nil {
			return err
		}
		list = sortedOverwrites(a.rolePosition, list)
		if version, err = tx.OverwritesVersion(ctx, ow.ChannelID); err != nil {
			return err
		}
		typ := "channel.overwrite.set"
		var after any = map[string]any{"allow": ow.Allow.Names(), "deny": ow.Deny.Names()}
		if removing {
			typ, after = "channel.overwrite.removed", nil
		}
		var beforeData any
		if before != nil {
			beforeData = map[string]any{"allow": before.Allow.Names(), "deny": before.Deny.Names()}
		}
		return emit(ctx, tx, a, o, typ, "channel:"+ow.ChannelID, map[string]any{
			"target_type": ow.TargetType, "target_id": nilIfEmpty(ow.TargetID), "before": beforeData, "after": after})
	})
	if err != nil {
		return nil, 0, err
	}
	return list, version, nil
}

func validateOverwrite(ow model.Overwrite) error {
	var fields []apperr.FieldError
	if ow.TargetType == model.TargetEveryone && ow.TargetID != "" {
		fields = append(fields, apperr.FieldError{Field: "target_id", Message: "must be absent for target_type everyone"})
	}
	if ow.TargetType != model.TargetEveryone && ow.TargetID == "" {
		fields = append(fields, apperr.FieldError{Field: "target_id", Message: "is required for target_type " + ow.TargetType})
	}
	for _, l := range []struct {
		name string
		set  permissions.Set
	}{{"allow", ow.Allow}, {"deny", ow.Deny}} {
		for _, p := range l.set.Permissions() {
			if !permissions.ChannelScoped.Has(p) {
				fields = append(fields, apperr.FieldError{Field: l.name,
					Message: "permission " + quote(p.String()) + " is not channel-scoped and cannot be overwritten"})
			}
		}
	}
	if both := ow.Allow.Intersect(ow.Deny); !both.IsEmpty() {
		for _, n := range both.Names() {
			fields = append(fields, apperr.FieldError{Field: "deny",
				Message: "permission " + quote(n) + " is both allowed and denied"})
		}
	}
	if len(fields) > 0 {
		return apperr.InvalidFields(fields)
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

// sortedOverwrites sorts the list into the API's order: everyone, roles by
// position descending, users by ID, on keys computed once per overwrite.
func sortedOverwrites(position func(roleID string) int, list []model.Overwrite) []model.Overwrite {
	type keyed struct {
		rank     int8
		position int
		o        model.Overwrite
	}
	keys := make([]keyed, len(list))
	for i, o := range list {
		k := keyed{rank: 2, o: o}
		switch o.TargetType {
		case model.TargetEveryone:
			k.rank = 0
		case model.TargetRole:
			k.rank = 1
			k.position = position(o.TargetID)
		}
		keys[i] = k
	}
	slices.SortFunc(keys, func(a, b keyed) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		if a.position != b.position {
			return cmp.Compare(b.position, a.position)
		}
		return strings.Compare(a.o.TargetID, b.o.TargetID)
	})
	out := make([]model.Overwrite, len(keys))
	for i := range keys {
		out[i] = keys[i].o
	}
	return out
}

func (s *Service) deleteBlobs(ctx context.Context, keys []string) {
	for _, k := range keys {
		err := s.blobs.Delete(context.WithoutCancel(ctx), k)
		switch {
		case errors.Is(err, blob.ErrHeld):
			s.log.Info("blob kept for the orphan sweep: a backup runs", "key", k)
		case err != nil:
			s.log.Warn("delete blob", "key", k, "err", err)
		}
	}
}

func eqPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

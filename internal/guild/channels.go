package guild

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// ListChannels pages through the channels the caller knows of, in tree
// order (store.AuthState.Channels), or through the children of one
// category. The cursor holds the list-order key of the last channel of the
// page, sealed (a cursor reveals nothing).
//
// Who knows every channel (knowsEveryChannel: the §12 exemption) gets every
// channel, those they cannot view marked Unviewable. Anyone else gets the
// channels they can view; a child of a category they cannot view is listed
// with no parent, after the tree of what they can view, by its own position
// then ID (orphanKey), so that neither its place nor its neighbours tell
// where a hidden category is.
func (s *Service) ListChannels(ctx context.Context, a *Actor, parentID *string, rawCursor string, limit int) (Page[model.Channel], error) {
	filters := []string{"channels"}
	if parentID != nil {
		filters = append(filters, "parent:"+*parentID)
	}
	if err := a.authorize(opListChannels); err != nil {
		return Page[model.Channel]{}, err
	}
	after, err := s.cursors.Decode(rawCursor, filters...)
	if err != nil {
		return Page[model.Channel]{}, err
	}
	chans := a.auth.Channels()
	if parentID != nil {
		if _, err := a.category(*parentID, "parent_id"); err != nil {
			return Page[model.Channel]{}, err
		}
		chans = a.auth.Children(*parentID)
	}
	every := a.knowsEveryChannel()
	type keyed struct {
		key string // "" for a channel of the tree, until asked (keyOf)
		c   model.Channel
	}
	keyOf := func(k keyed) string {
		if k.key == "" {
			return treeKey(a, k.c)
		}
		return k.key
	}
	limit = pageLimit(limit)
	page := Page[model.Channel]{Items: make([]model.Channel, 0, min(limit, len(chans)))}
	var last keyed
	// add puts a channel on the page, or, once the page is full, seals the
	// cursor and reports that the page is done.
	add := func(k keyed) bool {
		if len(page.Items) == limit {
			page.NextCursor = s.cursors.Encode(keyOf(last), filters...)
			return false
		}
		page.Items = append(page.Items, a.shown(k.c))
		last = k
		return true
	}
	// The tree first: chans come in tree order, which is the order of
	// their keys. Orphans are gathered on the way, and come after.
	var orphans []keyed
	for _, c := range chans {
		c, listed, orphan := a.listing(c, every)
		switch {
		case !listed:
			continue
		case orphan:
			orphans = append(orphans, keyed{orphanKey(c), c})
			continue
		}
		k := keyed{c: c}
		if after != "" && keyOf(k) <= after {
			continue
		}
		if !add(k) {
			return page, nil
		}
	}
	slices.SortFunc(orphans, func(x, y keyed) int { return strings.Compare(x.key, y.key) })
	for _, k := range orphans {
		if after != "" && k.key <= after {
			continue
		}
		if !add(k) {
			return page, nil
		}
	}
	return page, nil
}

// treeKey orders channels as the tree does, as strings: a category's key is
// a prefix of its channels' keys, and the separators sort below every
// character of an ID.
func treeKey(a *Actor, c model.Channel) string {
	key := fmt.Sprintf("%010d\x01%s", c.Position, c.ID)
	if c.ParentID != nil {
		if p, ok := a.auth.Channel(*c.ParentID); ok {
			return fmt.Sprintf("%010d\x01%s\x02%s", p.Position, p.ID, key)
		}
	}
	return key
}

// orphanKey orders the children of categories hidden from the caller after
// every treeKey (which begins with a digit), by their own position then ID.
func orphanKey(c model.Channel) string {
	return fmt.Sprintf("~%010d\x01%s", c.Position, c.ID)
}

// GetChannel returns a channel the caller can see.
func (s *Service) GetChannel(ctx context.Context, a *Actor, id string) (model.Channel, error) {
	c, err := a.channel(id)
	if err != nil {
		return model.Channel{}, err
	}
	if err := a.authorizeOn(opGetChannel, id); err != nil {
		return model.Channel{}, err
	}
	return a.shown(c), nil
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

// ChannelInput is what creating a channel takes.
type ChannelInput struct {
	Name     string
	Topic    *string
	Kind     string  // "" is a text channel
	ParentID *string // the category to create it in
}

// CreateChannel creates a channel at a client-chosen ID, last among its
// siblings; a channel created in a category starts with a copy of the
// category's overwrites (synced).
func (s *Service) CreateChannel(ctx context.Context, a *Actor, id string, in ChannelInput, o WriteOpts) (model.Channel, error) {
	if err := checkName("name", &in.Name); err != nil {
		return model.Channel{}, err
	}
	if model.ReservedChannelID(id) {
		return model.Channel{}, apperr.InvalidAt("path.channelID", "%q is a path of its own (POST /channels/%s); choose another ID", id, id)
	}
	if in.Kind == "" {
		in.Kind = model.KindText
	}
	if in.Kind == model.KindCategory && in.ParentID != nil {
		return model.Channel{}, apperr.Invalid("parent_id", "a category cannot be in a category")
	}
	var out model.Channel
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if in.ParentID != nil {
			if _, err := a.category(*in.ParentID, "parent_id"); err != nil {
				return err
			}
		}
		if err := a.authorize(opCreateChannel); err != nil {
			return err
		}
		if in.ParentID != nil {
			if err := a.canPlace(opCreateChannel, in.ParentID); err != nil {
				return err
			}
		}
		if _, err := tx.GetChannel(ctx, id); err == nil {
			return apperr.Conflict("Channel %q already exists.", id)
		}
		if err := s.checkChannelLimits(ctx, tx, in.ParentID, 1); err != nil {
			return err
		}
		position, err := nextPosition(ctx, tx, in.ParentID)
		if err != nil {
			return err
		}
		now := s.now()
		if _, err = tx.InsertChannel(ctx, model.Channel{ID: id, Name: in.Name, Topic: in.Topic, Kind: in.Kind,
			ParentID: in.ParentID, Position: position, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if in.ParentID != nil {
			if err := copyOverwrites(ctx, tx, *in.ParentID, id); err != nil {
				return err
			}
		}
		if out, err = storedChannel(ctx, tx, id); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "channel.created", "channel:"+id, map[string]any{
			"name": in.Name, "topic": in.Topic, "kind": in.Kind, "parent_id": in.ParentID, "position": position, "created_at": history.Stamp(now), "copied_overwrites": in.ParentID != nil})
	})
	return a.shown(out), err
}

// checkChannelLimits refuses adding n channels to a category (nil: outside
// any) beyond the limits: channels in all, channels in a category.
func (s *Service) checkChannelLimits(ctx context.Context, tx *store.Tx, parentID *string, n int) error {
	all, err := tx.CountChannels(ctx, "")
	if err != nil {
		return err
	}
	if all+n > s.limits.MaxChannels {
		return apperr.LimitExceeded("channels", s.limits.MaxChannels, "channels")
	}
	if parentID == nil {
		return nil
	}
	return s.checkCategoryLimit(ctx, tx, *parentID, n)
}

// checkCategoryLimit refuses adding n channels to a category beyond its limit.
func (s *Service) checkCategoryLimit(ctx context.Context, tx *store.Tx, parentID string, n int) error {
	in, err := tx.CountChannels(ctx, parentID)
	if err != nil {
		return err
	}
	if in+n > s.limits.MaxChannelsPerCategory {
		return apperr.LimitExceeded("channels_per_category", s.limits.MaxChannelsPerCategory, "channels in a category")
	}
	return nil
}

// maxChannelPosition is the contract's ChannelPosition maximum.
const maxChannelPosition = 1_000_000

// nextPosition is the position that puts a channel last among its siblings,
// never past the contract's maximum (there, ties order by id).
func nextPosition(ctx context.Context, tx *store.Tx, parentID *string) (int, error) {
	next, err := tx.NextPosition(ctx, parentID)
	return min(next, maxChannelPosition), err
}

// storedChannel is a channel as the transaction left it, synced flag
// included (the authorization state computes it).
func storedChannel(ctx context.Context, tx *store.Tx, id string) (model.Channel, error) {
	list, err := storedChannels(ctx, tx, []string{id})
	if err != nil {
		return model.Channel{}, err
	}
	return list[0], nil
}

// storedChannels is storedChannel for many, from one authorization state.
func storedChannels(ctx context.Context, tx *store.Tx, ids []string) ([]model.Channel, error) {
	auth, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]model.Channel, len(ids))
	for i, id := range ids {
		c, ok := auth.Channel(id)
		if !ok {
			return nil, channelNotFound(id)
		}
		out[i] = c
	}
	return out, nil
}

// ChannelPatch is a merge patch of a channel: nil fields stay.
type ChannelPatch struct {
	Name      *string
	SetTopic  bool    // the patch has a topic member
	Topic     *string // its value (nil clears)
	SetParent bool    // the patch has a parent_id member
	ParentID  *string // its value (nil: out of any category)
	Position  *int
	Lock      bool // lock_permissions: true
}

// UpdateChannel applies a merge patch: a rename or a new topic, a move, a
// lock of the permissions to the category's.
func (s *Service) UpdateChannel(ctx context.Context, a *Actor, id string, p ChannelPatch, o WriteOpts) (model.Channel, error) {
	if err := checkName("name", p.Name); err != nil {
		return model.Channel{}, err
	}
	var out model.Channel
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return err
		}
		if err := a.hideChannel(id); err != nil {
			return err
		}
		next := c
		if p.Name != nil {
			next.Name = *p.Name
		}
		if p.SetTopic {
			next.Topic = p.Topic
		}
		mv := move{id: id, position: p.Position, setParent: p.SetParent, parentID: p.ParentID, lock: p.Lock}
		if err := s.checkMove(ctx, tx, a, c, &mv, ""); err != nil {
			return err
		}
		if err := a.authorizeOn(opUpdateChannel, id); err != nil {
			return err
		}
		if err := a.canMove(opUpdateChannel, &mv); err != nil {
			return err
		}
		var lock lockPlan
		if p.Lock {
			// A lock writes overwrites like PUT overwrite does: the caller
			// must hold, in the channel, every bit it changes.
			if lock, err = planLock(ctx, tx, *mv.to.ParentID, id); err != nil {
				return err
			}
			if err := a.canGrantIn(id, lock.changed); err != nil {
				return err
			}
		}
		if err := o.IfMatch.check(Tag(c.Version)); err != nil {
			return err
		}
		if err := s.checkMoveLimit(ctx, tx, &mv); err != nil {
			return err
		}
		next.ParentID, next.Position = mv.to.ParentID, mv.to.Position
		renamed := next.Name != c.Name || !eqPtr(next.Topic, c.Topic)
		moved := !eqPtr(next.ParentID, c.ParentID) || next.Position != c.Position
		if renamed || moved {
			next.UpdatedAt = s.now()
			if _, err = tx.UpdateChannel(ctx, next); err != nil {
				return err
			}
		}
		if err := lock.apply(ctx, tx, a, o); err != nil {
			return err
		}
		if renamed {
			typ, data := channelUpdated(c, next)
			if err := emit(ctx, tx, a, o, typ, "channel:"+id, data); err != nil {
				return err
			}
		}
		if moved {
			if err := emit(ctx, tx, a, o, "channel.moved", "channel:"+id, movedData(c, next, p.Lock)); err != nil {
				return err
			}
		}
		out, err = storedChannel(ctx, tx, id)
		return err
	})
	return a.shown(out), err
}

// RenameChannel sets a channel's name.
func (s *Service) RenameChannel(ctx context.Context, a *Actor, id, name string, o WriteOpts) (model.Channel, error) {
	if err := checkName("name", &name); err != nil {
		return model.Channel{}, err
	}
	var out model.Channel
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return err
		}
		if err := a.authorizeOn(opRenameChannel, id); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(c.Version)); err != nil {
			return err
		}
		if c.Name != name {
			next := c
			next.Name, next.UpdatedAt = name, s.now()
			if _, err := tx.UpdateChannel(ctx, next); err != nil {
				return err
			}
			if err := emit(ctx, tx, a, o, "channel.renamed", "channel:"+id, map[string]any{"before": c.Name, "after": name}); err != nil {
				return err
			}
		}
		out, err = storedChannel(ctx, tx, id)
		return err
	})
	return a.shown(out), err
}

// The audit event of a channel's new name or topic.
func channelUpdated(before, after model.Channel) (string, map[string]any) {
	return "channel.updated", map[string]any{"before": map[string]any{"name": before.Name, "topic": before.Topic},
		"after": map[string]any{"name": after.Name, "topic": after.Topic}}
}

// movedData is the data of a channel.moved event.
func movedData(before, after model.Channel, locked bool) map[string]any {
	return map[string]any{
		"before":           map[string]any{"parent_id": before.ParentID, "position": before.Position},
		"after":            map[string]any{"parent_id": after.ParentID, "position": after.Position},
		"lock_permissions": locked,
	}
}

// deleteChannel deletes a channel in a transaction, writes its
// channel.deleted event, and returns the blob keys to delete after the
// commit.
func (s *Service) deleteChannel(ctx context.Context, tx *store.Tx, a *Actor, o WriteOpts, c model.Channel) ([]string, error) {
	overwrites, err := tx.ChannelOverwrites(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	auth, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	var children []string
	for _, ch := range auth.Children(c.ID) {
		children = append(children, ch.ID)
	}
	data := history.ChannelDeleted(c, overwrites, children)
	blobs, err := tx.DeleteChannel(ctx, c.ID, s.now())
	if err != nil {
		return nil, err
	}
	data["attachments"] = len(blobs)
	return blobs, emit(ctx, tx, a, o, "channel.deleted", "channel:"+c.ID, data)
}

// DeleteChannel deletes a channel with its overwrites and attachments.
func (s *Service) DeleteChannel(ctx context.Context, a *Actor, id string, o WriteOpts) error {
	var blobs []string
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return err
		}
		if err := a.authorizeOn(opDeleteChannel, id); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(c.Version)); err != nil {
			return err
		}
		blobs, err = s.deleteChannel(ctx, tx, a, o, c)
		return err
	})
	if err == nil {
		s.deleteBlobs(ctx, blobs)
	}
	return err
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

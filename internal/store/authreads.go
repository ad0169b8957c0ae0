package store

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// The questions the authorization state answers (the global permissions,
// the roles, the channels and their overwrites) have one read path, in
// reads and in writes alike: the authorization state (authstate.go), as
// the cache keeps it, with what a transaction changed read again through
// the transaction by the same readers. A question about one channel or one
// role reads only that one again when the transaction changed it; a
// question about all of them reads the transaction's view (Tx.AuthState),
// which is kept while the transaction writes nothing more.

// AuthState returns the authorization state as the transaction sees it:
// the cache's, with the parts the transaction changed read again through
// it (kept for the transaction's next questions until it writes again, and
// never in the cache: they are not committed).
func (tx *Tx) AuthState(ctx context.Context) (*AuthState, error) {
	base, err := tx.store.AuthState(tx.cacheCtx(ctx))
	if err != nil {
		return nil, err
	}
	own, err := tx.own(ctx, false, "settings", "roles", "channels", "overwrites")
	if err != nil {
		return nil, err
	}
	b := tx.batch()
	if b.auth != nil && b.authBase == base && b.authAt == b.ownAt {
		return b.auth, nil
	}
	st := base
	if p := tx.store.auth.PartsOf(own); !p.Empty() {
		if st, err = buildAuthState(ctx, tx.queries, base, p); err != nil {
			return nil, err
		}
	}
	b.auth, b.authBase, b.authAt = st, base, b.ownAt
	return st, nil
}

// channelState returns one channel as the transaction sees it: the
// cache's, unless the transaction changed it or its overwrites.
func (tx *Tx) channelState(ctx context.Context, id string) (*ChannelState, error) {
	own, err := tx.own(ctx, false, "channels", "overwrites")
	if err != nil {
		return nil, err
	}
	var c *ChannelState
	if changed(own, fresh.Dep{Table: "channels", Key: id}) || changed(own, fresh.Dep{Table: "overwrites", Key: id}) {
		states, err := readChannelStates(ctx, tx.queries, false, []string{id})
		if err != nil {
			return nil, fmt.Errorf("read channel %q: %w", id, err)
		}
		if len(states) == 1 {
			c = states[0]
		}
	} else {
		base, err := tx.store.AuthState(tx.cacheCtx(ctx))
		if err != nil {
			return nil, err
		}
		c = base.channels[id]
	}
	if c == nil {
		return nil, channelNotFound(id)
	}
	return c, nil
}

func channelNotFound(id string) error { return apperr.NotFound("Channel %q does not exist.", id) }

// GetChannel returns one channel as of the request's scope.
func (s *Store) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	a, err := s.AuthState(ctx)
	if err != nil {
		return model.Channel{}, err
	}
	c, ok := a.channels[id]
	if !ok {
		return model.Channel{}, channelNotFound(id)
	}
	return c.channel, nil
}

// ExistingChannels returns which of the given channel IDs exist, as of the
// request's scope.
func (s *Store) ExistingChannels(ctx context.Context, ids []string) (map[string]bool, error) {
	a, err := s.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := a.channels[id]; ok {
			out[id] = true
		}
	}
	return out, nil
}

// GetChannel returns one channel as the transaction sees it.
func (tx *Tx) GetChannel(ctx context.Context, id string) (model.Channel, error) {
	c, err := tx.channelState(ctx, id)
	if err != nil {
		return model.Channel{}, err
	}
	return c.channel, nil
}

// ChannelOverwrites lists a channel's overwrites (unordered) as the
// transaction sees them.
func (tx *Tx) ChannelOverwrites(ctx context.Context, channelID string) ([]model.Overwrite, error) {
	c, err := tx.channelState(ctx, channelID)
	if err != nil {
		return nil, err
	}
	return slices.Clone(c.overwrites), nil
}

// OverwritesVersion is the version of a channel's overwrite list.
func (tx *Tx) OverwritesVersion(ctx context.Context, channelID string) (int64, error) {
	c, err := tx.channelState(ctx, channelID)
	if err != nil {
		return 0, err
	}
	return c.version, nil
}

// CountOverwrites counts a channel's overwrites.
func (tx *Tx) CountOverwrites(ctx context.Context, channelID string) (int, error) {
	c, err := tx.channelState(ctx, channelID)
	if err != nil {
		return 0, err
	}
	return len(c.overwrites), nil
}

// ChannelsByID returns the channels of ids as the transaction sees them;
// an unknown ID is absent from the map.
func (tx *Tx) ChannelsByID(ctx context.Context, ids []string) (map[string]model.Channel, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]model.Channel, len(ids))
	for _, id := range ids {
		if c, ok := a.channels[id]; ok {
			out[id] = c.channel
		}
	}
	return out, nil
}

// CountChannels counts the channels, and the channels of a category when
// parentID is not "".
func (tx *Tx) CountChannels(ctx context.Context, parentID string) (int, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return 0, err
	}
	if parentID == "" {
		return len(a.channels), nil
	}
	n := 0
	for _, c := range a.channels {
		if p := c.channel.ParentID; p != nil && *p == parentID {
			n++
		}
	}
	return n, nil
}

// NextPosition is the position after the last of the channels in a
// category (parentID nil: outside any), 0 when there are none.
func (tx *Tx) NextPosition(ctx context.Context, parentID *string) (int, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return 0, err
	}
	next := 0
	for _, c := range a.channels {
		p := c.channel.ParentID
		if (p == nil) == (parentID == nil) && (p == nil || *p == *parentID) {
			next = max(next, c.channel.Position+1)
		}
	}
	return next, nil
}

// OverwritesOf lists the overwrites of one target (a role or a user)
// across all channels, by channel ID.
func (tx *Tx) OverwritesOf(ctx context.Context, targetType, targetID string) ([]model.Overwrite, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(a.channels))
	for id := range a.channels {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []model.Overwrite
	for _, id := range ids {
		for _, o := range a.channels[id].overwrites {
			if o.TargetType == targetType && o.TargetID == targetID {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// GetRole returns one role as the transaction sees it: the cache's,
// unless the transaction changed it.
func (tx *Tx) GetRole(ctx context.Context, id string) (model.Role, error) {
	own, err := tx.own(ctx, false, "roles")
	if err != nil {
		return model.Role{}, err
	}
	if changed(own, fresh.Dep{Table: "roles", Key: id}) {
		return readRole(ctx, tx.queries, id)
	}
	base, err := tx.store.AuthState(tx.cacheCtx(ctx))
	if err != nil {
		return model.Role{}, err
	}
	r, ok := base.roles[id]
	if !ok {
		return model.Role{}, roleNotFound(id)
	}
	return r, nil
}

func roleNotFound(id string) error { return apperr.NotFound("Role %q does not exist.", id) }

// CountRoles counts the roles as the transaction sees them.
func (tx *Tx) CountRoles(ctx context.Context) (int, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return 0, err
	}
	return len(a.byPosition), nil
}

// RolePositions is every role's position as the transaction sees it.
func (tx *Tx) RolePositions(ctx context.Context) (map[string]int, error) {
	a, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(a.byPosition))
	for _, r := range a.byPosition {
		out[r.ID] = r.Position
	}
	return out, nil
}

// Settings returns the global permissions and their version as the
// transaction sees them.
func (tx *Tx) Settings(ctx context.Context) (permissions.Set, int64, error) {
	own, err := tx.own(ctx, false, "settings")
	if err != nil {
		return 0, 0, err
	}
	if changed(own, fresh.Dep{Table: "settings"}) {
		return readGlobal(ctx, tx.queries)
	}
	base, err := tx.store.AuthState(tx.cacheCtx(ctx))
	if err != nil {
		return 0, 0, err
	}
	g, v := base.Global()
	return g, v, nil
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// AuthState is what authorization reads beyond the caller: the global
// permissions, every role, and every channel with its overwrites. It is
// immutable: the store hands one value to every request that reads it, and
// builds a new one, sharing what did not change, when a change reaches a
// part (the roles, or one channel). Its methods return copies.
type AuthState struct {
	global        permissions.Set
	globalVersion int64
	roles         map[string]model.Role
	engineRoles   map[string]permissions.Role // the roles as the engine sees them
	lists         *roleLists                  // lists of them resolved (EngineRoles)
	byPosition    []model.Role                // descending
	channels      map[string]*ChannelState
	tree          []*ChannelState // in tree order (Channels)
	synced        map[string]bool // the channels synced with their category
}

// ChannelState is one channel of an AuthState: the channel, its overwrite
// list's version and its overwrites, indexed for the permission engine.
type ChannelState struct {
	channel    model.Channel
	version    int64 // of the overwrite list
	overwrites []model.Overwrite
	set        string // the overwrites in a canonical form: equal sets, equal strings
	everyone   permissions.Overwrite
	roles      []permissions.RoleOverwrite
	users      map[string]permissions.Overwrite
}

// Global is the global permissions and their version.
func (a *AuthState) Global() (permissions.Set, int64) { return a.global, a.globalVersion }

// Role returns one role.
func (a *AuthState) Role(id string) (model.Role, bool) {
	r, ok := a.roles[id]
	return r, ok
}

// EngineRoles returns the roles of ids that exist, in their order, as the
// permission engine sees them: a subject's roles. Long lists are kept
// resolved while the roles do not change (roleLists), so the slice may be
// shared: read it, never change it.
func (a *AuthState) EngineRoles(ids []string) []permissions.Role {
	if len(ids) < minKeptRoles || a.lists == nil {
		return a.resolveRoles(ids)
	}
	return a.lists.get(ids, a.resolveRoles)
}

func (a *AuthState) resolveRoles(ids []string) []permissions.Role {
	out := make([]permissions.Role, 0, len(ids))
	for _, id := range ids {
		if r, ok := a.engineRoles[id]; ok {
			out = append(out, r)
		}
	}
	return out
}

// Roles returns every role by position descending.
func (a *AuthState) Roles() []model.Role { return slices.Clone(a.byPosition) }

// RoleCount is the number of roles.
func (a *AuthState) RoleCount() int { return len(a.byPosition) }

// Channel returns one channel.
func (a *AuthState) Channel(id string) (model.Channel, bool) {
	c, ok := a.channels[id]
	if !ok {
		return model.Channel{}, false
	}
	return a.present(c), true
}

func (a *AuthState) present(c *ChannelState) model.Channel {
	ch := c.channel
	ch.Synced = a.synced[ch.ID]
	return ch
}

// Channels returns every channel in tree order: the channels outside any
// category and the categories, by position (ties by ID), each category
// followed by its channels by position (ties by ID).
func (a *AuthState) Channels() []model.Channel {
	out := make([]model.Channel, len(a.tree))
	for i, c := range a.tree {
		out[i] = a.present(c)
	}
	return out
}

// ChannelCount is the number of channels.
func (a *AuthState) ChannelCount() int { return len(a.tree) }

// Children returns the channels of a category, by position (ties by ID).
func (a *AuthState) Children(categoryID string) []model.Channel {
	var out []model.Channel
	for _, c := range a.tree {
		if p := c.channel.ParentID; p != nil && *p == categoryID {
			out = append(out, a.present(c))
		}
	}
	return out
}

// Overwrites returns a channel's overwrites (unordered) and the version of
// the list; ok is false for a channel that does not exist.
func (a *AuthState) Overwrites(channelID string) (list []model.Overwrite, version int64, ok bool) {
	c, ok := a.channels[channelID]
	if !ok {
		return nil, 0, false
	}
	return slices.Clone(c.overwrites), c.version, true
}

// ChannelFor is the permission engine's view of a channel's overwrites for
// one user (empty for a channel that does not exist). Its Roles are shared:
// the engine only reads them.
func (a *AuthState) ChannelFor(channelID, userID string) permissions.Channel {
	c, ok := a.channels[channelID]
	if !ok {
		return permissions.Channel{}
	}
	pc := permissions.Channel{Everyone: c.everyone, Roles: c.roles, User: c.users[userID]}
	if a.synced[channelID] {
		pc.SyncedFrom = *c.channel.ParentID
	}
	return pc
}

// AuthState returns the authorization state as of the request's scope,
// reading again only the parts that changed (fresh.View).
func (s *Store) AuthState(ctx context.Context) (*AuthState, error) {
	return s.auth.Get(ctx, func(ctx context.Context, base *AuthState, p fresh.Parts) (*AuthState, error) {
		return buildAuthState(ctx, s.queries, base, p)
	})
}

// buildAuthState reads the parts through q and returns base with them
// replaced (base may be nil when every part is read).
func buildAuthState(ctx context.Context, q queries, base *AuthState, p fresh.Parts) (*AuthState, error) {
	next := &AuthState{}
	if base != nil {
		*next = *base
	}
	if p.Whole(authRoles) {
		var err error
		if next.global, next.globalVersion, err = readGlobal(ctx, q); err != nil {
			return nil, err
		}
		if next.byPosition, err = readRoles(ctx, q); err != nil {
			return nil, err
		}
		next.roles = make(map[string]model.Role, len(next.byPosition))
		next.engineRoles = make(map[string]permissions.Role, len(next.byPosition))
		next.lists = newRoleLists()
		for _, r := range next.byPosition {
			next.roles[r.ID] = r
			next.engineRoles[r.ID] = permissions.Role{ID: r.ID, Permissions: r.Permissions}
		}
	}
	all, ids := p.Whole(authChannels), p.Keys(authChannels)
	if !all && len(ids) == 0 {
		return next, nil
	}
	chans, err := readChannelStates(ctx, q, all, ids)
	if err != nil {
		return nil, err
	}
	if all {
		next.channels = make(map[string]*ChannelState, len(chans))
	} else {
		next.channels = make(map[string]*ChannelState, len(base.channels)+len(chans))
		for id, c := range base.channels {
			if !p.Has(authChannels, id) {
				next.channels[id] = c
			}
		}
	}
	for _, c := range chans {
		next.channels[c.channel.ID] = c
	}
	next.arrange()
	return next, nil
}

// arrange computes the tree order and which channels are synced.
func (a *AuthState) arrange() {
	byOrder := func(x, y *ChannelState) bool {
		if x.channel.Position != y.channel.Position {
			return x.channel.Position < y.channel.Position
		}
		return x.channel.ID < y.channel.ID
	}
	var tops []*ChannelState
	children := map[string][]*ChannelState{}
	a.synced = map[string]bool{}
	for _, c := range a.channels {
		p := c.channel.ParentID
		parent := (*ChannelState)(nil)
		if p != nil {
			parent = a.channels[*p]
		}
		if parent == nil {
			tops = append(tops, c)
			continue
		}
		children[*p] = append(children[*p], c)
		if parent.set == c.set {
			a.synced[c.channel.ID] = true
		}
	}
	sort.Slice(tops, func(i, j int) bool { return byOrder(tops[i], tops[j]) })
	a.tree = make([]*ChannelState, 0, len(a.channels))
	for _, c := range tops {
		a.tree = append(a.tree, c)
		kids := children[c.channel.ID]
		sort.Slice(kids, func(i, j int) bool { return byOrder(kids[i], kids[j]) })
		a.tree = append(a.tree, kids...)
	}
}

// overwriteSet is a canonical form of a list of overwrites: two lists hold
// the same overwrites exactly when their forms are equal.
func overwriteSet(list []model.Overwrite) string {
	keys := make([]string, len(list))
	for i, o := range list {
		keys[i] = fmt.Sprintf("%s\x00%s\x00%d\x00%d", o.TargetType, o.TargetID, o.Allow, o.Deny)
	}
	sort.Strings(keys)
	return strings.Join(keys, "\x01")
}

// readChannelStates reads every channel (all), or those of ids that exist,
// with their overwrites.
func readChannelStates(ctx context.Context, q queries, all bool, ids []string) ([]*ChannelState, error) {
	// Prepared statements scanned by hand, not GORM's reflection: after a
	// reorder or an import, hundreds of channels are read again, inside
	// the next write transaction too.
	cq := "SELECT " + channelColumns + " FROM channels"
	oq := "SELECT channel_id, target_type, target_id, allow_bits, deny_bits FROM overwrites"
	var args []any
	if !all {
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, fmt.Errorf("read channels: %w", err)
		}
		cq += " WHERE id IN (" + q.dialect().JSONTexts() + ")"
		oq += " WHERE channel_id IN (" + q.dialect().JSONTexts() + ")"
		args = []any{string(list)}
	}
	var rows []channelRow
	if err := scanAll(ctx, q, cq, args, func(r *sql.Rows) error {
		var c channelRow
		if err := r.Scan(c.fields()...); err != nil {
			return err
		}
		rows = append(rows, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read channels: %w", err)
	}
	var ows []overwriteRow
	if err := scanAll(ctx, q, oq, args, func(r *sql.Rows) error {
		var o overwriteRow
		if err := r.Scan(&o.ChannelID, &o.TargetType, &o.TargetID, &o.AllowBits, &o.DenyBits); err != nil {
			return err
		}
		ows = append(ows, o)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read overwrites: %w", err)
	}
	byID := make(map[string]*ChannelState, len(rows))
	out := make([]*ChannelState, len(rows))
	for i, r := range rows {
		out[i] = &ChannelState{channel: r.model(), version: r.OverwritesVersion, users: map[string]permissions.Overwrite{}}
		byID[r.ID] = out[i]
	}
	for _, r := range ows {
		c := byID[r.ChannelID]
		if c == nil {
			continue // its channel was deleted between the two reads (the next change says so)
		}
		o := r.model()
		c.overwrites = append(c.overwrites, o)
		ow := permissions.Overwrite{Allow: o.Allow, Deny: o.Deny}
		switch o.TargetType {
		case model.TargetEveryone:
			c.everyone = ow
		case model.TargetRole:
			c.roles = append(c.roles, permissions.RoleOverwrite{RoleID: o.TargetID, Overwrite: ow})
		case model.TargetUser:
			c.users[o.TargetID] = ow
		}
	}
	for _, c := range out {
		c.set = overwriteSet(c.overwrites)
	}
	return out, nil
}

// scanAll runs a prepared query and hands each row to scan.
func scanAll(ctx context.Context, q queries, query string, args []any, scan func(*sql.Rows) error) error {
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Close()
}

// readGlobal reads the global permissions and their version.
func readGlobal(ctx context.Context, q queries) (permissions.Set, int64, error) {
	var st struct {
		GlobalPermissions int64
		GlobalVersion     int64
	}
	if err := q.with(ctx).Table("settings").Select("global_permissions, global_version").Where("id = 1").Scan(&st).Error; err != nil {
		return 0, 0, fmt.Errorf("read the global permissions: %w", err)
	}
	return permissions.Set(st.GlobalPermissions) & permissions.All, st.GlobalVersion, nil
}

// readRoles reads every role, by position descending.
func readRoles(ctx context.Context, q queries) ([]model.Role, error) {
	var rows []roleRow
	if err := q.with(ctx).Order("position DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	out := make([]model.Role, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// readRole reads one role.
func readRole(ctx context.Context, q queries, id string) (model.Role, error) {
	var rows []roleRow
	if err := q.with(ctx).Where("id = ?", id).Limit(1).Find(&rows).Error; err != nil {
		return model.Role{}, fmt.Errorf("read role %q: %w", id, err)
	}
	if len(rows) == 0 {
		return model.Role{}, roleNotFound(id)
	}
	return rows[0].model(), nil
}

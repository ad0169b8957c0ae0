package template

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Limits are the bounds an import's result must stay within (the
// service's configured limits of the same names).
type Limits struct {
	MaxRoles               int
	MaxChannels            int // categories included
	MaxChannelsPerCategory int
	MaxOverwrites          int // in one channel
}

// Plan is what an import changes, computed from the community as the
// transaction (or, for a dry run, the request) sees it.
type Plan struct {
	Changes        []Change         // as the answer lists them
	Global         *permissions.Set // the new global permissions; nil when they stay
	DeleteRoles    []model.Role     // by position descending
	CreateRoles    []model.Role
	UpdateRoles    []model.Role   // name, color or permissions
	Positions      map[string]int // every role's final position
	Moved          map[string]int // the roles whose position changes: where they were
	DeleteChannels []string
	CreateChannels []model.Channel // in tree order (categories before their channels)
	UpdateChannels []model.Channel
	Overwrites     []ChannelOverwrites // the lists that change, in tree order
	// OverwriteChanges are the overwrites created, updated or deleted, one
	// event each, in the order of Changes (a role's overwrites that go with
	// the role are in neither).
	OverwriteChanges []OverwriteChange
}

// ChannelOverwrites is a channel's whole list of overwrites after the
// import.
type ChannelOverwrites struct {
	ChannelID string
	List      []model.Overwrite
}

// OverwriteChange is one overwrite of a channel created (Before is nil),
// deleted (After is nil) or updated.
type OverwriteChange struct {
	ChannelID     string
	Before, After *model.Overwrite
}

// PlanImport compares the template with the community and lists the
// changes in the order the answer gives them: the global permissions, the
// roles, the channels, then the overwrites. It refuses what would pass a
// limit or change a channel's kind before anything is written, so a dry run
// and the import itself fail alike. The template is valid (Validate).
func PlanImport(c Community, t Document, prune bool, limits Limits) (*Plan, error) {
	p := &Plan{Positions: map[string]int{}, Moved: map[string]int{}}
	globalChanges := p.planGlobal(c, t)
	roleChanges, err := p.planRoles(c, t, prune, limits)
	if err != nil {
		return nil, err
	}
	chanChanges, err := p.planChannels(c, t, prune, limits)
	if err != nil {
		return nil, err
	}
	owChanges, err := p.planOverwrites(c, t, prune, limits)
	if err != nil {
		return nil, err
	}
	// A category exists before the channels created in it.
	slices.SortStableFunc(p.CreateChannels, func(x, y model.Channel) int {
		return cmp.Compare(kindRank(x.Kind), kindRank(y.Kind))
	})
	p.Changes = slices.Concat(globalChanges, roleChanges, chanChanges, owChanges)
	if p.Changes == nil {
		p.Changes = []Change{}
	}
	if n, ok := changesFit(p.Changes); !ok {
		return nil, apperr.AnswerTooLarge("The list of this import's changes", n,
			"import the template in parts (fewer channels or overwrites at a time), or without prune")
	}
	return p, nil
}

// planGlobal sets the global permissions when the template's differ.
func (p *Plan) planGlobal(c Community, t Document) []Change {
	global, _ := c.Global()
	if global == t.Global {
		return nil
	}
	g := t.Global
	p.Global = &g
	return []Change{{Op: "update", Kind: "global", ID: "permissions",
		Before: map[string]any{"permissions": global.Names()}, After: map[string]any{"permissions": t.Global.Names()}}}
}

// planRoles places the roles: those the template leaves out stay below its
// roles, in their order (or go, with prune); the template's take its order
// above them. Every role's final position is in p.Positions, so the apply
// step moves each role once.
func (p *Plan) planRoles(c Community, t Document, prune bool, limits Limits) ([]Change, error) {
	var changes []Change
	inTemplate := roleIDs(t)
	var kept []model.Role
	for _, r := range c.Roles() { // by position descending
		if inTemplate[r.ID] {
			continue
		}
		if prune {
			p.DeleteRoles = append(p.DeleteRoles, r)
			changes = append(changes, Change{Op: "delete", Kind: "role", ID: r.ID, Before: roleData(r)})
			continue
		}
		kept = append(kept, r)
	}
	if n := len(kept) + len(t.Roles); n > limits.MaxRoles {
		return nil, apperr.LimitExceeded("roles", limits.MaxRoles, "roles")
	}
	for i, r := range kept { // descending: the lowest is last
		p.Positions[r.ID] = len(kept) - i
	}
	for _, tr := range t.Roles {
		p.Positions[tr.ID] = len(kept) + tr.Position
		want := model.Role{ID: tr.ID, Name: tr.Name, Position: len(kept) + tr.Position, Color: tr.Color, Permissions: tr.Permissions}
		r, ok := c.Role(tr.ID)
		if !ok {
			p.CreateRoles = append(p.CreateRoles, want)
			changes = append(changes, Change{Op: "create", Kind: "role", ID: tr.ID, After: roleData(want)})
			continue
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions {
			p.UpdateRoles = append(p.UpdateRoles, want)
		}
		if r.Position != want.Position {
			p.Moved[r.ID] = r.Position
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions || r.Position != want.Position {
			changes = append(changes, Change{Op: "update", Kind: "role", ID: tr.ID, Before: roleData(r), After: roleData(want)})
		}
	}
	for _, r := range kept {
		if to := p.Positions[r.ID]; to != r.Position {
			p.Moved[r.ID] = r.Position
			after := r
			after.Position = to
			changes = append(changes, Change{Op: "update", Kind: "role", ID: r.ID, Before: roleData(r), After: roleData(after)})
		}
	}
	return changes, nil
}

// planChannels creates and updates the template's channels, and deletes
// the others with prune. A channel keeps its kind: an import that would
// change one is refused.
func (p *Plan) planChannels(c Community, t Document, prune bool, limits Limits) ([]Change, error) {
	var changes []Change
	inTemplate := map[string]bool{}
	for _, tc := range t.Channels {
		inTemplate[tc.ID] = true
	}
	parents := map[string]*string{} // every channel's category after the import
	for _, ch := range c.Channels() {
		if inTemplate[ch.ID] {
			continue
		}
		if prune {
			p.DeleteChannels = append(p.DeleteChannels, ch.ID)
			changes = append(changes, Change{Op: "delete", Kind: "channel", ID: ch.ID, Before: channelData(ch)})
			continue
		}
		parents[ch.ID] = ch.ParentID
	}
	for i, tc := range t.Channels {
		parents[tc.ID] = tc.ParentID
		want := model.Channel{ID: tc.ID, Kind: tc.Kind, Name: tc.Name, ParentID: tc.ParentID, Position: tc.Position, Topic: tc.Topic}
		ch, ok := c.Channel(tc.ID)
		switch {
		case !ok:
			p.CreateChannels = append(p.CreateChannels, want)
			changes = append(changes, Change{Op: "create", Kind: "channel", ID: tc.ID, After: channelData(want)})
		case ch.Kind != tc.Kind:
			return nil, apperr.Conflict("Channel %q is a %s here and a %s in the template (body.channels[%d].kind); a channel's kind does not change.",
				tc.ID, ch.Kind, tc.Kind, i)
		case ch.Name != want.Name || !eqPtr(ch.Topic, want.Topic) || !eqPtr(ch.ParentID, want.ParentID) || ch.Position != want.Position:
			p.UpdateChannels = append(p.UpdateChannels, want)
			changes = append(changes, Change{Op: "update", Kind: "channel", ID: tc.ID, Before: channelData(ch), After: channelData(want)})
		}
	}
	if err := checkChannelLimits(parents, limits); err != nil {
		return nil, err
	}
	return changes, nil
}

// checkChannelLimits applies the channel limits to the channels an import
// leaves, each with its category.
func checkChannelLimits(parents map[string]*string, limits Limits) error {
	if len(parents) > limits.MaxChannels {
		return apperr.LimitExceeded("channels", limits.MaxChannels, "channels")
	}
	children := map[string]int{}
	for _, parent := range parents {
		if parent != nil {
			if children[*parent]++; children[*parent] > limits.MaxChannelsPerCategory {
				return apperr.LimitExceeded("channels_per_category", limits.MaxChannelsPerCategory, "channels in a category")
			}
		}
	}
	return nil
}

// planOverwrites replaces the template's channels' everyone and role
// overwrites, one list per channel that changes.
func (p *Plan) planOverwrites(c Community, t Document, prune bool, limits Limits) ([]Change, error) {
	var changes []Change
	roles := roleIDs(t)
	for _, tc := range t.Channels {
		current, _, _ := c.Overwrites(tc.ID)
		cp := planChannelOverwrites(tc, current, prune, roles)
		if len(cp.list) > limits.MaxOverwrites {
			return nil, apperr.LimitExceeded("overwrites_per_channel", limits.MaxOverwrites, "overwrites in a channel")
		}
		changes = append(changes, cp.changes...)
		p.OverwriteChanges = append(p.OverwriteChanges, cp.overwrites...)
		if cp.changed {
			p.Overwrites = append(p.Overwrites, ChannelOverwrites{ChannelID: tc.ID, List: cp.list})
		}
	}
	return changes, nil
}

// channelOverwritePlan is what an import does to one channel's overwrites.
type channelOverwritePlan struct {
	channelID  string
	list       []model.Overwrite // the channel's overwrites after the import
	changed    bool              // list differs from the channel's, listed in changes or not
	changes    []Change
	overwrites []OverwriteChange
}

// record lists one overwrite created (before is nil), deleted (after is
// nil) or updated.
func (cp *channelOverwritePlan) record(before, after *model.Overwrite) {
	cp.changed = true
	change := Change{Kind: "overwrite"}
	switch {
	case before == nil:
		change.Op, change.ID = "create", overwriteID(cp.channelID, *after)
	case after == nil:
		change.Op, change.ID = "delete", overwriteID(cp.channelID, *before)
	default:
		change.Op, change.ID = "update", overwriteID(cp.channelID, *after)
	}
	if before != nil {
		change.Before = overwriteData(*before)
	}
	if after != nil {
		change.After = overwriteData(*after)
	}
	cp.changes = append(cp.changes, change)
	cp.overwrites = append(cp.overwrites, OverwriteChange{ChannelID: cp.channelID, Before: before, After: after})
}

// planChannelOverwrites makes a channel's overwrites the template's
// everyone and role overwrites; the user overwrites stay, and so do the
// others unless pruned (a pruned role's go with it, and are not listed
// again). roles are the template's roles.
func planChannelOverwrites(tc Channel, current []model.Overwrite, prune bool, roles map[string]bool) channelOverwritePlan {
	cp := channelOverwritePlan{channelID: tc.ID}
	wanted := map[string]Overwrite{}
	for _, ow := range tc.Overwrites {
		wanted[ow.TargetType+":"+ow.TargetID] = ow
	}
	had := map[string]model.Overwrite{}
	for _, o := range current {
		key := o.TargetType + ":" + o.TargetID
		had[key] = o
		_, want := wanted[key]
		switch {
		case want:
			continue // the template's, below
		case o.TargetType == model.TargetUser || !prune:
			cp.list = append(cp.list, o)
		case o.TargetType == model.TargetRole && !roles[o.TargetID]:
			cp.changed = true // goes with its role
		default:
			cp.record(&o, nil)
		}
	}
	for _, ow := range tc.Overwrites {
		o := model.Overwrite{ChannelID: tc.ID, TargetType: ow.TargetType, TargetID: ow.TargetID, Allow: ow.Allow, Deny: ow.Deny}
		before, ok := had[ow.TargetType+":"+ow.TargetID]
		if o.Allow.IsEmpty() && o.Deny.IsEmpty() {
			// An empty overwrite is no overwrite, as in PUT: it removes
			// the target's, prune or not.
			if ok {
				cp.record(&before, nil)
			}
			continue
		}
		cp.list = append(cp.list, o)
		switch {
		case !ok:
			cp.record(nil, &o)
		case before.Allow != o.Allow || before.Deny != o.Deny:
			cp.record(&before, &o)
		}
	}
	return cp
}

// roleIDs is the set of the template's roles.
func roleIDs(t Document) map[string]bool {
	ids := make(map[string]bool, len(t.Roles))
	for _, r := range t.Roles {
		ids[r.ID] = true
	}
	return ids
}

// changesFit says whether changes, written as JSON, stay under
// apperr.MaxAnswerBytes, and how much they weigh (as far as it counted). A
// change's before and after are written as encoding/json writes them; its
// other members take at most 64 bytes beside its ID. A prune at the limits
// lists 500 × 250 overwrites removed, about 40 MB.
func changesFit(changes []Change) (int, bool) {
	n := 0
	for _, c := range changes {
		n += len(c.ID) + 64
		for _, m := range []map[string]any{c.Before, c.After} {
			if m != nil {
				b, err := json.Marshal(m)
				if err != nil {
					return n, false // never here: the maps hold names, numbers and strings
				}
				n += len(b)
			}
		}
		if n > apperr.MaxAnswerBytes-64<<10 { // the envelope's margin
			return n, false
		}
	}
	return n, true
}

func kindRank(kind string) int {
	if kind == model.KindCategory {
		return 0
	}
	return 1
}

func roleData(r model.Role) map[string]any {
	return map[string]any{"id": r.ID, "name": r.Name, "position": r.Position, "color": r.Color, "permissions": r.Permissions.Names()}
}

func channelData(c model.Channel) map[string]any {
	return map[string]any{"id": c.ID, "kind": c.Kind, "name": c.Name, "parent_id": c.ParentID, "position": c.Position, "topic": c.Topic}
}

func overwriteData(o model.Overwrite) map[string]any {
	m := map[string]any{"target_type": o.TargetType, "allow": o.Allow.Names(), "deny": o.Deny.Names()}
	if o.TargetID != "" {
		m["target_id"] = o.TargetID
	}
	return m
}

// overwriteID names an overwrite in a list of changes: <channel>/everyone
// or <channel>/role:<role>.
func overwriteID(channelID string, o model.Overwrite) string {
	if o.TargetType == model.TargetEveryone {
		return channelID + "/everyone"
	}
	return channelID + "/" + o.TargetType + ":" + o.TargetID
}

func eqPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

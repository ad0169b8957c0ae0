package guild

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// importPlan is what an import changes, computed from the community as the
// transaction (or, for a dry run, the request) sees it.
type importPlan struct {
	changes     []TemplateChange
	global      *permissions.Set
	deleteRoles []model.Role // by position descending
	createRoles []model.Role
	updateRoles []model.Role   // name, color or permissions
	positions   map[string]int // every role's final position
	moved       map[string]int // the roles whose position changes: where they were
	deleteChans []string
	createChans []model.Channel // in tree order (categories before their channels)
	updateChans []model.Channel
	overwrites  []channelOverwrites // in tree order
	owEvents    []overwriteEvent
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

type channelOverwrites struct {
	channelID string
	list      []model.Overwrite
}

// planImport compares the template with the community and lists the
// changes in the order the answer gives them: the global permissions, the
// roles, the channels, then the overwrites. It refuses what would pass a
// limit or change a channel's kind before anything is written, so a dry run
// and the import itself fail alike.
func planImport(auth *store.AuthState, t Template, prune bool, limits Limits) (*importPlan, error) {
	p := &importPlan{positions: map[string]int{}, moved: map[string]int{}}
	globalChanges := p.planGlobal(auth, t)
	roleChanges, err := p.planRoles(auth, t, prune, limits)
	if err != nil {
		return nil, err
	}
	chanChanges, err := p.planChannels(auth, t, prune, limits)
	if err != nil {
		return nil, err
	}
	owChanges, err := p.planOverwrites(auth, t, prune, limits)
	if err != nil {
		return nil, err
	}
	// A category exists before the channels created in it.
	slices.SortStableFunc(p.createChans, func(x, y model.Channel) int {
		return cmp.Compare(kindRank(x.Kind), kindRank(y.Kind))
	})
	p.changes = slices.Concat(globalChanges, roleChanges, chanChanges, owChanges)
	if p.changes == nil {
		p.changes = []TemplateChange{}
	}
	if n, ok := changesFit(p.changes); !ok {
		return nil, AnswerTooLarge("The list of this import's changes", n,
			"import the template in parts (fewer channels or overwrites at a time), or without prune")
	}
	return p, nil
}

// planGlobal sets the global permissions when the template's differ.
func (p *importPlan) planGlobal(auth *store.AuthState, t Template) []TemplateChange {
	global, _ := auth.Global()
	if global == t.Global {
		return nil
	}
	g := t.Global
	p.global = &g
	return []TemplateChange{{Op: "update", Kind: "global", ID: "permissions",
		Before: map[string]any{"permissions": global.Names()}, After: map[string]any{"permissions": t.Global.Names()}}}
}

// planRoles places the roles: those the template leaves out stay below its
// roles, in their order (or go, with prune); the template's take its order
// above them. Every role's final position is in p.positions, so the apply
// step moves each role once.
func (p *importPlan) planRoles(auth *store.AuthState, t Template, prune bool, limits Limits) ([]TemplateChange, error) {
	var changes []TemplateChange
	inTemplate := templateRoleIDs(t)
	var kept []model.Role
	for _, r := range auth.Roles() { // by position descending
		if inTemplate[r.ID] {
			continue
		}
		if prune {
			p.deleteRoles = append(p.deleteRoles, r)
			changes = append(changes, TemplateChange{Op: "delete", Kind: "role", ID: r.ID, Before: roleData(r)})
			continue
		}
		kept = append(kept, r)
	}
	if n := len(kept) + len(t.Roles); n > limits.MaxRoles {
		return nil, apperr.LimitExceeded("roles", limits.MaxRoles, "roles")
	}
	for i, r := range kept { // descending: the lowest is last
		p.positions[r.ID] = len(kept) - i
	}
	for _, tr := range t.Roles {
		p.positions[tr.ID] = len(kept) + tr.Position
		want := model.Role{ID: tr.ID, Name: tr.Name, Position: len(kept) + tr.Position, Color: tr.Color, Permissions: tr.Permissions}
		r, ok := auth.Role(tr.ID)
		if !ok {
			p.createRoles = append(p.createRoles, want)
			changes = append(changes, TemplateChange{Op: "create", Kind: "role", ID: tr.ID, After: roleData(want)})
			continue
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions {
			p.updateRoles = append(p.updateRoles, want)
		}
		if r.Position != want.Position {
			p.moved[r.ID] = r.Position
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions || r.Position != want.Position {
			changes = append(changes, TemplateChange{Op: "update", Kind: "role", ID: tr.ID, Before: roleData(r), After: roleData(want)})
		}
	}
	for _, r := range kept {
		if to := p.positions[r.ID]; to != r.Position {
			p.moved[r.ID] = r.Position
			after := r
			after.Position = to
			changes = append(changes, TemplateChange{Op: "update", Kind: "role", ID: r.ID, Before: roleData(r), After: roleData(after)})
		}
	}
	return changes, nil
}

// planChannels creates and updates the template's channels, and deletes
// the others with prune. A channel keeps its kind: an import that would
// change one is refused.
func (p *importPlan) planChannels(auth *store.AuthState, t Template, prune bool, limits Limits) ([]TemplateChange, error) {
	var changes []TemplateChange
	inTemplate := map[string]bool{}
	for _, c := range t.Channels {
		inTemplate[c.ID] = true
	}
	parents := map[string]*string{} // every channel's category after the import
	for _, c := range auth.Channels() {
		if inTemplate[c.ID] {
			continue
		}
		if prune {
			p.deleteChans = append(p.deleteChans, c.ID)
			changes = append(changes, TemplateChange{Op: "delete", Kind: "channel", ID: c.ID, Before: channelData(c)})
			continue
		}
		parents[c.ID] = c.ParentID
	}
	for i, tc := range t.Channels {
		parents[tc.ID] = tc.ParentID
		want := model.Channel{ID: tc.ID, Kind: tc.Kind, Name: tc.Name, ParentID: tc.ParentID, Position: tc.Position, Topic: tc.Topic}
		c, ok := auth.Channel(tc.ID)
		switch {
		case !ok:
			p.createChans = append(p.createChans, want)
			changes = append(changes, TemplateChange{Op: "create", Kind: "channel", ID: tc.ID, After: channelData(want)})
		case c.Kind != tc.Kind:
			return nil, apperr.Conflict("Channel %q is a %s here and a %s in the template (body.channels[%d].kind); a channel's kind does not change.",
				tc.ID, c.Kind, tc.Kind, i)
		case c.Name != want.Name || !eqPtr(c.Topic, want.Topic) || !eqPtr(c.ParentID, want.ParentID) || c.Position != want.Position:
			p.updateChans = append(p.updateChans, want)
			changes = append(changes, TemplateChange{Op: "update", Kind: "channel", ID: tc.ID, Before: channelData(c), After: channelData(want)})
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
func (p *importPlan) planOverwrites(auth *store.AuthState, t Template, prune bool, limits Limits) ([]TemplateChange, error) {
	var changes []TemplateChange
	roles := templateRoleIDs(t)
	for _, tc := range t.Channels {
		current, _, _ := auth.Overwrites(tc.ID)
		cp := planChannelOverwrites(tc, current, prune, roles)
		if len(cp.list) > limits.MaxOverwrites {
			return nil, apperr.LimitExceeded("overwrites_per_channel", limits.MaxOverwrites, "overwrites in a channel")
		}
		changes = append(changes, cp.changes...)
		p.owEvents = append(p.owEvents, cp.events...)
		if cp.changed {
			p.overwrites = append(p.overwrites, channelOverwrites{channelID: tc.ID, list: cp.list})
		}
	}
	return changes, nil
}

// channelOverwritePlan is what an import does to one channel's overwrites.
type channelOverwritePlan struct {
	channelID string
	list      []model.Overwrite // the channel's overwrites after the import
	changed   bool              // list differs from the channel's, listed in changes or not
	changes   []TemplateChange
	events    []overwriteEvent
}

// record lists one overwrite created (before is nil), deleted (after is
// nil) or updated, with the event SetOverwrite writes for it.
func (cp *channelOverwritePlan) record(before, after *model.Overwrite) {
	cp.changed = true
	change := TemplateChange{Kind: "overwrite"}
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
	cp.events = append(cp.events, newOverwriteEvent(cp.channelID, before, after))
}

// planChannelOverwrites makes a channel's overwrites the template's
// everyone and role overwrites; the user overwrites stay, and so do the
// others unless pruned (a pruned role's go with it, and are not listed
// again). roles are the template's roles.
func planChannelOverwrites(tc TemplateChannel, current []model.Overwrite, prune bool, roles map[string]bool) channelOverwritePlan {
	cp := channelOverwritePlan{channelID: tc.ID}
	wanted := map[string]TemplateOverwrite{}
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

// templateRoleIDs is the set of the template's roles.
func templateRoleIDs(t Template) map[string]bool {
	ids := make(map[string]bool, len(t.Roles))
	for _, r := range t.Roles {
		ids[r.ID] = true
	}
	return ids
}

// changesFit says whether changes, written as JSON, stay under
// MaxAnswerBytes, and how much they weigh (as far as it counted). A
// change's before and after are written as encoding/json writes them; its
// other members take at most 64 bytes beside its ID. A prune at the limits lists
// 500 × 250 overwrites removed, about 40 MB.
func changesFit(changes []TemplateChange) (int, bool) {
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
		if n > MaxAnswerBytes-64<<10 { // the envelope's margin
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

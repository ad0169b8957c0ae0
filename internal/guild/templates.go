package guild

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// TemplateFormat names the template document's format.
const TemplateFormat = "guildhall-template/1"

// Template is a community's structure: the global permissions, the roles
// and the channels with their everyone and role overwrites. No users,
// tokens, attachments or user overwrites.
type Template struct {
	Format   string
	Global   permissions.Set
	Roles    []TemplateRole    // by position descending
	Channels []TemplateChannel // in tree order
}

// TemplateRole is a role of a template.
type TemplateRole struct {
	ID          string
	Name        string
	Position    int
	Color       *string
	Permissions permissions.Set
}

// TemplateChannel is a channel of a template.
type TemplateChannel struct {
	ID         string
	Kind       string
	Name       string
	ParentID   *string
	Position   int
	Topic      *string
	Overwrites []TemplateOverwrite // everyone first, then roles by position descending
}

// TemplateOverwrite is an everyone or role overwrite of a template channel.
type TemplateOverwrite struct {
	TargetType string // everyone or role
	TargetID   string // the role, for a role overwrite
	Allow      permissions.Set
	Deny       permissions.Set
}

// TemplateChange is one change an import makes (or would make).
type TemplateChange struct {
	Op     string // create, update, delete
	Kind   string // role, channel, overwrite, global
	ID     string
	Before map[string]any // absent when created
	After  map[string]any // absent when deleted
}

// ImportOptions are an import's switches.
type ImportOptions struct {
	DryRun bool // list the changes, make none
	Prune  bool // delete the roles, channels and overwrites the template leaves out
	// Tag is the entity tag of an export, which the write's IfMatch names.
	// The transport passes it because the domain cannot compute it: the
	// tag is the digest of the export as the contract encodes it in JSON
	// (field names, order, omitted fields), which only the transport
	// knows. It is a function, not a value, because the import computes
	// it from the state it plans against (inside its write transaction),
	// so the check and the changes see the same community.
	Tag func(Template) (string, error)
}

// checkExportTag applies an import's precondition: If-Match names the tag
// of the export the template came from, and the community's export must
// still have it. A prune deletes what the template leaves out, so without
// a tag (or with "*", which any state matches) it could delete what was
// made after the export: it needs one.
func checkExportTag(auth *store.AuthState, opt ImportOptions, ifMatch *Precondition) error {
	if opt.Prune && (ifMatch == nil || ifMatch.Any) {
		return apperr.PreconditionRequired("An import with prune=true needs If-Match with the ETag of the export it was made from.")
	}
	if ifMatch == nil || ifMatch.Any {
		return nil
	}
	tag, err := opt.Tag(templateOf(auth))
	if err != nil {
		return err
	}
	return ifMatch.check(tag)
}

// ExportTemplate is the community's structure as a template, as of the
// request's view. The owner alone may export it.
func (s *Service) ExportTemplate(_ context.Context, a *Actor) (Template, error) {
	if err := a.authorize(opExportTemplate); err != nil {
		return Template{}, err
	}
	return templateOf(a.auth), nil
}

func templateOf(auth *store.AuthState) Template {
	global, _ := auth.Global()
	t := Template{Format: TemplateFormat, Global: global, Roles: []TemplateRole{}, Channels: []TemplateChannel{}}
	for _, r := range auth.Roles() { // by position descending
		t.Roles = append(t.Roles, TemplateRole{ID: r.ID, Name: r.Name, Position: r.Position, Color: r.Color, Permissions: r.Permissions})
	}
	position := func(id string) int {
		r, _ := auth.Role(id)
		return r.Position
	}
	for _, c := range auth.Channels() { // tree order
		tc := TemplateChannel{ID: c.ID, Kind: c.Kind, Name: c.Name, ParentID: c.ParentID, Position: c.Position, Topic: c.Topic,
			Overwrites: []TemplateOverwrite{}}
		list, _, _ := auth.Overwrites(c.ID)
		for _, o := range sortedOverwrites(position, list) {
			if o.TargetType == model.TargetUser {
				continue
			}
			tc.Overwrites = append(tc.Overwrites, TemplateOverwrite{TargetType: o.TargetType, TargetID: o.TargetID, Allow: o.Allow, Deny: o.Deny})
		}
		t.Channels = append(t.Channels, tc)
	}
	return t
}

// ImportTemplate makes the community's structure what the template says,
// matching roles and channels by ID, in one transaction, and lists the
// changes; with DryRun it lists them and writes nothing. The owner alone
// may import.
func (s *Service) ImportTemplate(ctx context.Context, a *Actor, t Template, opt ImportOptions, o WriteOpts) ([]TemplateChange, error) {
	if err := validateTemplate(t); err != nil {
		return nil, err
	}
	if err := a.authorize(opImportTemplate); err != nil {
		return nil, err
	}
	if opt.DryRun {
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return nil, err
		}
		p, err := planImport(a.auth, t, opt.Prune, s.limits)
		if err != nil {
			return nil, err
		}
		return p.changes, nil
	}
	var changes []TemplateChange
	var blobs []string
	err := s.write(store.LargeWrite(ctx), a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opImportTemplate); err != nil {
			return err
		}
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return err
		}
		p, err := planImport(a.auth, t, opt.Prune, s.limits)
		if err != nil {
			return err
		}
		changes = p.changes
		blobs, err = s.applyImport(ctx, tx, a, p, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.deleteBlobs(ctx, blobs)
	return changes, nil
}

// validateTemplate finds what makes a template invalid in itself (400 at
// the member), before anything is compared with the community.
func validateTemplate(t Template) error {
	var bad []apperr.FieldError
	at := func(loc, format string, args ...any) {
		bad = append(bad, apperr.FieldError{Location: loc, Message: fmt.Sprintf(format, args...)})
	}
	if t.Format != TemplateFormat {
		at("body.format", "must be %q", TemplateFormat)
	}
	if t.Global.Has(permissions.Administrator) {
		at("body.global_permissions", "ADMINISTRATOR cannot be a global permission")
	}
	roles := map[string]bool{}
	taken := map[int]bool{}
	for i, r := range t.Roles {
		loc := "body.roles[" + strconv.Itoa(i) + "]"
		if roles[r.ID] {
			at(loc+".id", "role %q is in the template twice", r.ID)
		}
		roles[r.ID] = true
		if msg := names.Check(r.Name); msg != "" {
			at(loc+".name", "%s", msg)
		}
		switch {
		case r.Position < 1 || r.Position > len(t.Roles):
			at(loc+".position", "must be between 1 and %d, the number of roles in the template", len(t.Roles))
		case taken[r.Position]:
			at(loc+".position", "position %d is taken by another role of the template", r.Position)
		}
		taken[r.Position] = true
	}
	kinds := map[string]string{}
	for _, c := range t.Channels {
		if _, dup := kinds[c.ID]; !dup {
			kinds[c.ID] = c.Kind
		}
	}
	seen := map[string]bool{}
	for i, c := range t.Channels {
		loc := "body.channels[" + strconv.Itoa(i) + "]"
		if seen[c.ID] {
			at(loc+".id", "channel %q is in the template twice", c.ID)
		}
		if reservedChannelIDs[c.ID] {
			at(loc+".id", "%q cannot be a channel's ID (POST /channels/%s is another operation)", c.ID, c.ID)
		}
		seen[c.ID] = true
		if msg := names.Check(c.Name); msg != "" {
			at(loc+".name", "%s", msg)
		}
		if c.ParentID != nil {
			switch {
			case c.Kind == model.KindCategory:
				at(loc+".parent_id", "a category cannot be in a category")
			case kinds[*c.ParentID] != model.KindCategory:
				at(loc+".parent_id", "%q is not a category of the template", *c.ParentID)
			}
		}
		targets := map[string]bool{}
		for j, ow := range c.Overwrites {
			oloc := loc + ".overwrites[" + strconv.Itoa(j) + "]"
			mo := model.Overwrite{ChannelID: c.ID, TargetType: ow.TargetType, TargetID: ow.TargetID, Allow: ow.Allow, Deny: ow.Deny}
			if err := validateOverwrite(mo); err != nil {
				e, _ := apperr.As(err)
				for _, f := range e.Fields {
					at(oloc+"."+f.Field, "%s", f.Message)
				}
				continue
			}
			if ow.TargetType == model.TargetRole && !roles[ow.TargetID] {
				at(oloc+".target_id", "role %q is not in the template", ow.TargetID)
			}
			key := ow.TargetType + ":" + ow.TargetID
			if targets[key] {
				at(oloc, "the channel has another overwrite for the same target")
			}
			targets[key] = true
		}
	}
	if len(bad) > 0 {
		return apperr.InvalidFields(bad)
	}
	return nil
}

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

func planImport(auth *store.AuthState, t Template, prune bool, limits Limits) (*importPlan, error) {
	p := &importPlan{positions: map[string]int{}, moved: map[string]int{}}
	var roleChanges, chanChanges, owChanges []TemplateChange

	global, _ := auth.Global()
	if global != t.Global {
		g := t.Global
		p.global = &g
		p.changes = append(p.changes, TemplateChange{Op: "update", Kind: "global", ID: "permissions",
			Before: map[string]any{"permissions": global.Names()}, After: map[string]any{"permissions": t.Global.Names()}})
	}

	// Roles: those the template leaves out stay below its roles (or go,
	// with prune); the template's take its order above them.
	inTemplate := map[string]bool{}
	for _, r := range t.Roles {
		inTemplate[r.ID] = true
	}
	var kept []model.Role
	current := auth.Roles() // by position descending
	for _, r := range current {
		if inTemplate[r.ID] {
			continue
		}
		if prune {
			p.deleteRoles = append(p.deleteRoles, r)
			roleChanges = append(roleChanges, TemplateChange{Op: "delete", Kind: "role", ID: r.ID, Before: roleData(r)})
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
			roleChanges = append(roleChanges, TemplateChange{Op: "create", Kind: "role", ID: tr.ID, After: roleData(want)})
			continue
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions {
			p.updateRoles = append(p.updateRoles, want)
		}
		if r.Position != want.Position {
			p.moved[r.ID] = r.Position
		}
		if r.Name != want.Name || !eqPtr(r.Color, want.Color) || r.Permissions != want.Permissions || r.Position != want.Position {
			roleChanges = append(roleChanges, TemplateChange{Op: "update", Kind: "role", ID: tr.ID, Before: roleData(r), After: roleData(want)})
		}
	}
	for _, r := range kept {
		if to := p.positions[r.ID]; to != r.Position {
			p.moved[r.ID] = r.Position
			after := r
			after.Position = to
			roleChanges = append(roleChanges, TemplateChange{Op: "update", Kind: "role", ID: r.ID, Before: roleData(r), After: roleData(after)})
		}
	}

	// Channels.
	chanInTemplate := map[string]bool{}
	for _, c := range t.Channels {
		chanInTemplate[c.ID] = true
	}
	parents := map[string]*string{} // every channel's category after the import
	for _, c := range auth.Channels() {
		if chanInTemplate[c.ID] {
			continue
		}
		if prune {
			p.deleteChans = append(p.deleteChans, c.ID)
			chanChanges = append(chanChanges, TemplateChange{Op: "delete", Kind: "channel", ID: c.ID, Before: channelData(c)})
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
			chanChanges = append(chanChanges, TemplateChange{Op: "create", Kind: "channel", ID: tc.ID, After: channelData(want)})
		case c.Kind != tc.Kind:
			return nil, apperr.Conflict("Channel %q is a %s here and a %s in the template (body.channels[%d].kind); a channel's kind does not change.",
				tc.ID, c.Kind, tc.Kind, i)
		case c.Name != want.Name || !eqPtr(c.Topic, want.Topic) || !eqPtr(c.ParentID, want.ParentID) || c.Position != want.Position:
			p.updateChans = append(p.updateChans, want)
			chanChanges = append(chanChanges, TemplateChange{Op: "update", Kind: "channel", ID: tc.ID, Before: channelData(c), After: channelData(want)})
		}
	}
	if len(parents) > limits.MaxChannels {
		return nil, apperr.LimitExceeded("channels", limits.MaxChannels, "channels")
	}
	children := map[string]int{}
	for _, parent := range parents {
		if parent != nil {
			if children[*parent]++; children[*parent] > limits.MaxChannelsPerCategory {
				return nil, apperr.LimitExceeded("channels_per_category", limits.MaxChannelsPerCategory, "channels in a category")
			}
		}
	}

	// Overwrites: the template's everyone and role overwrites; the user
	// overwrites stay, and so do the others unless pruned (a pruned role's
	// go with it, and are not listed again).
	for _, tc := range t.Channels {
		current, _, _ := auth.Overwrites(tc.ID)
		wanted := map[string]TemplateOverwrite{}
		for _, ow := range tc.Overwrites {
			wanted[ow.TargetType+":"+ow.TargetID] = ow
		}
		var list []model.Overwrite
		changed := false
		had := map[string]model.Overwrite{}
		for _, o := range current {
			key := o.TargetType + ":" + o.TargetID
			had[key] = o
			_, want := wanted[key]
			switch {
			case want:
				continue // the template's, below
			case o.TargetType == model.TargetUser || !prune:
				list = append(list, o)
			case o.TargetType == model.TargetRole && !inTemplate[o.TargetID]:
				changed = true // goes with its role
			default:
				changed = true
				owChanges = append(owChanges, TemplateChange{Op: "delete", Kind: "overwrite", ID: overwriteID(tc.ID, o), Before: overwriteData(o)})
				p.owEvents = append(p.owEvents, newOverwriteEvent(tc.ID, &o, nil))
			}
		}
		for _, ow := range tc.Overwrites {
			o := model.Overwrite{ChannelID: tc.ID, TargetType: ow.TargetType, TargetID: ow.TargetID, Allow: ow.Allow, Deny: ow.Deny}
			before, ok := had[ow.TargetType+":"+ow.TargetID]
			if o.Allow.IsEmpty() && o.Deny.IsEmpty() {
				// An empty overwrite is no overwrite, as in PUT: it removes
				// the target's, prune or not.
				if ok {
					changed = true
					owChanges = append(owChanges, TemplateChange{Op: "delete", Kind: "overwrite", ID: overwriteID(tc.ID, before), Before: overwriteData(before)})
					p.owEvents = append(p.owEvents, newOverwriteEvent(tc.ID, &before, nil))
				}
				continue
			}
			list = append(list, o)
			switch {
			case !ok:
				changed = true
				owChanges = append(owChanges, TemplateChange{Op: "create", Kind: "overwrite", ID: overwriteID(tc.ID, o), After: overwriteData(o)})
				p.owEvents = append(p.owEvents, newOverwriteEvent(tc.ID, nil, &o))
			case before.Allow != o.Allow || before.Deny != o.Deny:
				changed = true
				owChanges = append(owChanges, TemplateChange{Op: "update", Kind: "overwrite", ID: overwriteID(tc.ID, o),
					Before: overwriteData(before), After: overwriteData(o)})
				p.owEvents = append(p.owEvents, newOverwriteEvent(tc.ID, &before, &o))
			}
		}
		if len(list) > limits.MaxOverwrites {
			return nil, apperr.LimitExceeded("overwrites_per_channel", limits.MaxOverwrites, "overwrites in a channel")
		}
		if changed {
			p.overwrites = append(p.overwrites, channelOverwrites{channelID: tc.ID, list: list})
		}
	}
	// A category exists before the channels created in it.
	slices.SortStableFunc(p.createChans, func(x, y model.Channel) int {
		return cmp.Compare(kindRank(x.Kind), kindRank(y.Kind))
	})
	p.changes = slices.Concat(p.changes, roleChanges, chanChanges, owChanges)
	if p.changes == nil {
		p.changes = []TemplateChange{}
	}
	if n, ok := changesFit(p.changes); !ok {
		return nil, AnswerTooLarge("The list of this import's changes", n,
			"import the template in parts (fewer channels or overwrites at a time), or without prune")
	}
	return p, nil
}

// MaxAnswerBytes bounds what one answer of the API weighs (docs/design.md
// §14, attachments' bytes aside): an answer that would weigh more is paged,
// or refused before anything is done.
const MaxAnswerBytes = 8 << 20

// AnswerTooLarge is the 409 of an answer that would weigh n bytes, more
// than MaxAnswerBytes; instead says what to do.
func AnswerTooLarge(what string, n int, instead string) error {
	return &apperr.Error{Kind: apperr.ErrLimitExceeded, Limit: "answer_bytes",
		Detail: fmt.Sprintf("%s would take %d bytes or more, over the %d bytes one answer may hold: %s.", what, n, MaxAnswerBytes, instead)}
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

// applyImport makes a plan's changes, each with its usual event, and
// returns the blobs of deleted channels' attachments, to delete after the
// commit.
func (s *Service) applyImport(ctx context.Context, tx *store.Tx, a *Actor, p *importPlan, o WriteOpts) ([]string, error) {
	now := s.now()
	if p.global != nil {
		before, _, err := tx.Settings(ctx)
		if err != nil {
			return nil, err
		}
		if err := tx.SetGlobal(ctx, *p.global); err != nil {
			return nil, err
		}
		if err := emit(ctx, tx, a, o, "global.permissions.set", "global:permissions", map[string]any{
			"before": before.Names(), "after": p.global.Names()}); err != nil {
			return nil, err
		}
	}
	var blobs []string
	for _, id := range p.deleteChans {
		c, err := tx.GetChannel(ctx, id)
		if err != nil {
			return nil, err
		}
		keys, err := s.deleteChannel(ctx, tx, a, o, c)
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, keys...)
	}
	for _, r := range p.deleteRoles { // highest first: the positions below stay put
		overwrites, err := tx.OverwritesOf(ctx, model.TargetRole, r.ID)
		if err != nil {
			return nil, err
		}
		holders, err := tx.DeleteRole(ctx, r, now)
		if err != nil {
			return nil, err
		}
		if err := emit(ctx, tx, a, o, "role.deleted", "role:"+r.ID, map[string]any{
			"name": r.Name, "position": r.Position, "permissions": r.Permissions.Names(), "users": holders, "overwrites": len(overwrites)}); err != nil {
			return nil, err
		}
	}
	// New roles go on top, in one statement, then every role goes to its
	// place once: inserting them one by one at the bottom would shift every
	// role once per new role.
	for i := range p.createRoles {
		p.createRoles[i].CreatedAt, p.createRoles[i].UpdatedAt = now, now
	}
	if err := tx.InsertRolesOnTop(ctx, p.createRoles); err != nil {
		return nil, err
	}
	for _, r := range p.createRoles {
		if err := emit(ctx, tx, a, o, "role.created", "role:"+r.ID, map[string]any{
			"name": r.Name, "position": r.Position, "color": r.Color, "permissions": r.Permissions.Names()}); err != nil {
			return nil, err
		}
	}
	for _, r := range p.updateRoles {
		before, err := tx.GetRole(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		r.UpdatedAt = now
		if _, err := tx.UpdateRole(ctx, r); err != nil {
			return nil, err
		}
		// The events of the single operations that make the same changes.
		if r.Name != before.Name || !eqPtr(r.Color, before.Color) {
			typ, data := roleUpdated(before, r)
			if err := emit(ctx, tx, a, o, typ, "role:"+r.ID, data); err != nil {
				return nil, err
			}
		}
		if r.Permissions != before.Permissions {
			if err := emit(ctx, tx, a, o, "role.permissions.set", "role:"+r.ID, map[string]any{
				"before": before.Permissions.Names(), "after": r.Permissions.Names()}); err != nil {
				return nil, err
			}
		}
	}
	// Positions: the roles as they now stand, moved to where the plan puts them.
	at, err := tx.RolePositions(ctx)
	if err != nil {
		return nil, err
	}
	moves := map[string]int{}
	for id, to := range p.positions {
		if at[id] != to {
			moves[id] = to
		}
	}
	if err := tx.SetRolePositions(ctx, moves, now); err != nil {
		return nil, err
	}
	for _, id := range sortedKeys(p.moved) {
		if err := emit(ctx, tx, a, o, "role.moved", "role:"+id, map[string]any{"before": p.moved[id], "after": p.positions[id]}); err != nil {
			return nil, err
		}
	}
	for _, c := range p.createChans {
		c.CreatedAt, c.UpdatedAt = now, now
		if _, err := tx.InsertChannel(ctx, c); err != nil {
			return nil, err
		}
		if err := emit(ctx, tx, a, o, "channel.created", "channel:"+c.ID, map[string]any{
			"name": c.Name, "topic": c.Topic, "kind": c.Kind, "parent_id": c.ParentID, "position": c.Position}); err != nil {
			return nil, err
		}
	}
	// One read and one statement for all the channels updated, not two
	// round trips each under the write lock.
	updates := slices.Clone(p.updateChans)
	ids := make([]string, len(updates))
	for i := range updates {
		ids[i] = updates[i].ID
		updates[i].UpdatedAt = now
	}
	befores, err := tx.ChannelsByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, ok := befores[id]; !ok {
			return nil, apperr.NotFound("Channel %q does not exist.", id)
		}
	}
	if err := tx.UpdateChannels(ctx, updates); err != nil {
		return nil, err
	}
	for _, c := range updates {
		before := befores[c.ID]
		if c.Name != before.Name || !eqPtr(c.Topic, before.Topic) {
			typ, data := channelUpdated(before, c)
			if err := emit(ctx, tx, a, o, typ, "channel:"+c.ID, data); err != nil {
				return nil, err
			}
		}
		if !eqPtr(c.ParentID, before.ParentID) || c.Position != before.Position {
			if err := emit(ctx, tx, a, o, "channel.moved", "channel:"+c.ID, movedData(before, c, false)); err != nil {
				return nil, err
			}
		}
	}
	lists := make([]store.OverwriteList, len(p.overwrites))
	for i, co := range p.overwrites {
		lists[i] = store.OverwriteList{ChannelID: co.channelID, List: co.list}
	}
	if err := tx.ReplaceOverwriteLists(ctx, lists); err != nil {
		return nil, err
	}
	for _, e := range p.owEvents {
		if err := emit(ctx, tx, a, o, e.typ, "channel:"+e.channelID, e.data); err != nil {
			return nil, err
		}
	}
	return blobs, nil
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, cmp.Compare[string])
	return out
}

package history

import (
	"maps"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Types are the event types that change a State; every other type leaves
// it alone.
var Types = []string{
	"global.permissions.set",
	"role.created", "role.updated", "role.renamed", "role.moved", "role.permissions.set", "role.deleted",
	"user.created", "user.updated", "user.timeout", "user.deleted", "user.role.assigned", "user.role.removed",
	"channel.created", "channel.updated", "channel.renamed", "channel.moved", "channel.deleted",
	"channel.overwrite.set", "channel.overwrite.removed",
}

// Relevant reports whether events of type typ change a State.
func Relevant(typ string) bool { return relevant[typ] }

var relevant = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range Types {
		m[t] = true
	}
	return m
}()

// subjectID is the ID in an event's subject "<kind>:<id>".
func subjectID(ev Event) string {
	_, id, _ := strings.Cut(ev.Subject, ":")
	return id
}

// Replay applies events, oldest first, to a fresh store's state.
func Replay(events []Event) *State {
	s := New()
	for _, ev := range events {
		s.Apply(ev)
	}
	return s
}

// Apply moves s forward by one event, as the store changed when it wrote
// it.
func (s *State) Apply(ev Event) {
	if !Relevant(ev.Type) {
		return
	}
	d, id := decode(ev.Data), subjectID(ev)
	switch {
	case ev.Type == "global.permissions.set":
		s.Global = set(d.After)
	case strings.HasPrefix(ev.Type, "role."):
		s.applyRole(ev, &d, id)
	case strings.HasPrefix(ev.Type, "user."):
		s.applyUser(ev, &d, id)
	case strings.HasPrefix(ev.Type, "channel."):
		s.applyChannel(ev, &d, id)
	}
}

func (s *State) applyRole(ev Event, d *fields, id string) {
	switch ev.Type {
	case "role.created":
		if d.shifts() {
			s.shiftRoles(d.Position, 1<<30, +1)
		}
		s.Roles[id] = &Role{ID: id, Name: d.Name, Color: d.Color, Position: d.Position,
			Permissions: setOf(d.Permissions), CreatedAt: createdAt(ev, d)}
		return
	case "role.deleted":
		s.removeRole(id, d.shifts())
		return
	}
	r := s.Roles[id]
	if r == nil {
		return
	}
	switch ev.Type {
	case "role.updated":
		if a := obj(d.After); a != nil {
			r.Name, r.Color = a.Name, a.Color
		}
	case "role.renamed":
		r.Name = str(d.After)
	case "role.moved":
		s.moveRole(r, num(d.After), d.shifts())
	case "role.permissions.set":
		r.Permissions = set(d.After)
	}
}

func (s *State) applyUser(ev Event, d *fields, id string) {
	switch ev.Type {
	case "user.created":
		if s.tracks(id) {
			s.Users[id] = &User{ID: id, Username: d.Username, DisplayName: d.DisplayName,
				Status: model.StatusActive, IsOwner: d.Owner, Roles: map[string]bool{}, CreatedAt: createdAt(ev, d)}
		}
		return
	case "user.deleted":
		delete(s.Users, id)
		s.dropOverwrites(Target{model.TargetUser, id})
		return
	}
	u := s.Users[id]
	if u == nil {
		return
	}
	switch ev.Type {
	case "user.updated":
		if a := obj(d.After); a != nil {
			u.Username, u.DisplayName, u.Status = a.Username, a.DisplayName, a.Status
		}
	case "user.timeout":
		u.TimeoutUntil = moment(d.After)
	case "user.role.assigned":
		u.Roles[d.RoleID] = true
	case "user.role.removed":
		delete(u.Roles, d.RoleID)
	}
}

func (s *State) applyChannel(ev Event, d *fields, id string) {
	switch ev.Type {
	case "channel.created":
		c := &Channel{ID: id, Name: d.Name, Topic: d.Topic, Kind: d.Kind, ParentID: d.ParentID, Position: d.Position,
			CreatedAt: createdAt(ev, d), Overwrites: map[Target]permissions.Overwrite{}}
		// A channel created in a category starts with a copy of its
		// overwrites; one an import creates gets its own by events.
		if c.ParentID != nil && (d.CopiedOverwrites == nil || *d.CopiedOverwrites) {
			if p := s.Channels[*c.ParentID]; p != nil {
				c.Overwrites = maps.Clone(p.Overwrites)
			}
		}
		s.Channels[id] = c
		return
	case "channel.deleted":
		delete(s.Channels, id)
		for _, c := range s.Channels {
			if c.ParentID != nil && *c.ParentID == id {
				c.ParentID = nil
			}
		}
		return
	}
	c := s.Channels[id]
	if c == nil {
		return
	}
	switch ev.Type {
	case "channel.updated":
		if a := obj(d.After); a != nil {
			c.Name, c.Topic = a.Name, a.Topic
		}
	case "channel.renamed":
		c.Name = str(d.After)
	case "channel.moved":
		if a := obj(d.After); a != nil {
			c.ParentID, c.Position = a.ParentID, a.Position
		}
	case "channel.overwrite.set", "channel.overwrite.removed":
		setOverwrite(c, d.target(), obj(d.After))
	}
}

// Undo moves s back by one event: s must be the state right after it.
// An event written before history answers existed may lack what undoing
// it needs: that is an *Incomplete error, and s is left as it was.
func (s *State) Undo(ev Event) error {
	if !Relevant(ev.Type) {
		return nil
	}
	d, id := decode(ev.Data), subjectID(ev)
	switch {
	case ev.Type == "global.permissions.set":
		s.Global = set(d.Before)
	case strings.HasPrefix(ev.Type, "role."):
		return s.undoRole(ev, &d, id)
	case strings.HasPrefix(ev.Type, "user."):
		return s.undoUser(ev, &d, id)
	case strings.HasPrefix(ev.Type, "channel."):
		return s.undoChannel(ev, &d, id)
	}
	return nil
}

func (s *State) undoRole(ev Event, d *fields, id string) error {
	// Whether a change of positions shifted the roles between is told
	// since history answers exist: an import sets positions as given.
	switch ev.Type {
	case "role.created", "role.deleted", "role.moved":
		if d.Shifts == nil {
			return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: "shifts"}
		}
	}
	switch ev.Type {
	case "role.created":
		s.removeRole(id, d.shifts())
		return nil
	case "role.deleted":
		if d.HolderIDs == nil || d.RoleOverwrites == nil || d.CreatedAt == nil {
			return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: "holder_ids"}
		}
		if d.shifts() {
			s.shiftRoles(d.Position, 1<<30, +1)
		}
		s.Roles[id] = &Role{ID: id, Name: d.Name, Color: d.Color, Position: d.Position,
			Permissions: setOf(d.Permissions), CreatedAt: *d.CreatedAt}
		for _, uid := range *d.HolderIDs {
			if u := s.Users[uid]; u != nil {
				u.Roles[id] = true
			}
		}
		for _, o := range *d.RoleOverwrites {
			if c := s.Channels[o.ChannelID]; c != nil {
				c.Overwrites[Target{model.TargetRole, id}] = o.overwrite()
			}
		}
		return nil
	}
	r := s.Roles[id]
	if r == nil {
		return nil
	}
	switch ev.Type {
	case "role.updated":
		if b := obj(d.Before); b != nil {
			r.Name, r.Color = b.Name, b.Color
		}
	case "role.renamed":
		r.Name = str(d.Before)
	case "role.moved":
		s.moveRole(r, num(d.Before), d.shifts())
	case "role.permissions.set":
		r.Permissions = set(d.Before)
	}
	return nil
}

func (s *State) undoUser(ev Event, d *fields, id string) error {
	switch ev.Type {
	case "user.created":
		delete(s.Users, id)
		return nil
	case "user.deleted":
		if d.UserOverwrites == nil || d.CreatedAt == nil {
			return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: "user_overwrites"}
		}
		if s.tracks(id) {
			u := &User{ID: id, Username: d.Username, DisplayName: d.DisplayName, Status: d.Status,
				Roles: map[string]bool{}, TimeoutUntil: d.TimeoutUntil, CreatedAt: *d.CreatedAt}
			for _, r := range d.Roles {
				u.Roles[r] = true
			}
			s.Users[id] = u
		}
		for _, o := range *d.UserOverwrites {
			if c := s.Channels[o.ChannelID]; c != nil {
				c.Overwrites[Target{model.TargetUser, id}] = o.overwrite()
			}
		}
		return nil
	}
	u := s.Users[id]
	if u == nil {
		return nil
	}
	switch ev.Type {
	case "user.updated":
		if b := obj(d.Before); b != nil {
			u.Username, u.DisplayName, u.Status = b.Username, b.DisplayName, b.Status
		}
	case "user.timeout":
		u.TimeoutUntil = moment(d.Before)
	case "user.role.assigned":
		delete(u.Roles, d.RoleID)
	case "user.role.removed":
		u.Roles[d.RoleID] = true
	}
	return nil
}

func (s *State) undoChannel(ev Event, d *fields, id string) error {
	switch ev.Type {
	case "channel.created":
		delete(s.Channels, id)
		return nil
	case "channel.deleted":
		if d.OverwriteList == nil || d.Children == nil || d.CreatedAt == nil {
			return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: "overwrite_list"}
		}
		c := &Channel{ID: id, Name: d.Name, Topic: d.Topic, Kind: d.Kind, ParentID: d.ParentID, Position: d.Position,
			CreatedAt: *d.CreatedAt, Overwrites: map[Target]permissions.Overwrite{}}
		for _, o := range *d.OverwriteList {
			c.Overwrites[o.target()] = o.overwrite()
		}
		s.Channels[id] = c
		for _, child := range *d.Children {
			if ch := s.Channels[child]; ch != nil {
				p := id
				ch.ParentID = &p
			}
		}
		return nil
	}
	c := s.Channels[id]
	if c == nil {
		return nil
	}
	switch ev.Type {
	case "channel.updated":
		if b := obj(d.Before); b != nil {
			c.Name, c.Topic = b.Name, b.Topic
		}
	case "channel.renamed":
		c.Name = str(d.Before)
	case "channel.moved":
		if b := obj(d.Before); b != nil {
			c.ParentID, c.Position = b.ParentID, b.Position
		}
	case "channel.overwrite.set", "channel.overwrite.removed":
		setOverwrite(c, d.target(), obj(d.Before))
	}
	return nil
}

// setOverwrite sets c's overwrite of t to o, or removes it when o is nil
// or empty.
func setOverwrite(c *Channel, t Target, o *fields) {
	if o == nil || o.overwrite().IsEmpty() {
		delete(c.Overwrites, t)
		return
	}
	c.Overwrites[t] = o.overwrite()
}

// createdAt is when an event's subject was created: its data's created_at
// (the store's own timestamp), else the event's time.
func createdAt(ev Event, d *fields) time.Time {
	if d.CreatedAt != nil {
		return d.CreatedAt.UTC()
	}
	return ev.CreatedAt
}

// shiftRoles moves the roles at positions lo..hi by delta.
func (s *State) shiftRoles(lo, hi, delta int) {
	for _, r := range s.Roles {
		if r.Position >= lo && r.Position <= hi {
			r.Position += delta
		}
	}
}

// moveRole places r at position to and, when shifts, shifts the roles
// between, as POST /roles/{id}/move does.
func (s *State) moveRole(r *Role, to int, shifts bool) {
	from := r.Position
	switch {
	case !shifts:
	case from < to:
		s.shiftRoles(from+1, to, -1)
	case from > to:
		s.shiftRoles(to, from-1, +1)
	}
	r.Position = to
}

// removeRole deletes a role: when shifts, the roles above move down; it
// leaves every user and channel.
func (s *State) removeRole(id string, shifts bool) {
	r := s.Roles[id]
	if r == nil {
		return
	}
	delete(s.Roles, id)
	if shifts {
		s.shiftRoles(r.Position+1, 1<<30, -1)
	}
	for _, u := range s.Users {
		delete(u.Roles, id)
	}
	s.dropOverwrites(Target{model.TargetRole, id})
}

func (s *State) dropOverwrites(t Target) {
	for _, c := range s.Channels {
		delete(c.Overwrites, t)
	}
}

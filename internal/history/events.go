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
func Relevant(typ string) bool {
	for _, t := range Types {
		if t == typ {
			return true
		}
	}
	return false
}

// subjectID is the ID in an event's subject "<kind>:<id>".
func subjectID(ev model.Event) string {
	_, id, _ := strings.Cut(ev.Subject, ":")
	return id
}

// Replay applies events, oldest first, to a fresh store's state.
func Replay(events []model.Event) *State {
	s := New()
	for _, ev := range events {
		s.Apply(ev)
	}
	return s
}

// Apply moves s forward by one event, as the store changed when it wrote
// it.
func (s *State) Apply(ev model.Event) {
	d, id := data(ev.Data), subjectID(ev)
	switch {
	case ev.Type == "global.permissions.set":
		s.Global = d.set("after")
	case strings.HasPrefix(ev.Type, "role."):
		s.applyRole(ev, d, id)
	case strings.HasPrefix(ev.Type, "user."):
		s.applyUser(ev, d, id)
	case strings.HasPrefix(ev.Type, "channel."):
		s.applyChannel(ev, d, id)
	}
}

func (s *State) applyRole(ev model.Event, d data, id string) {
	r := s.Roles[id]
	switch ev.Type {
	case "role.created":
		p := d.num("position")
		if d.shifts() {
			s.shiftRoles(p, 1<<30, +1)
		}
		s.Roles[id] = &Role{ID: id, Name: d.str("name"), Color: d.strPtr("color"), Position: p,
			Permissions: d.set("permissions"), CreatedAt: createdAt(ev, d)}
		return
	case "role.deleted":
		s.removeRole(id, d.shifts())
		return
	}
	if r == nil {
		return
	}
	switch ev.Type {
	case "role.updated":
		a := d.obj("after")
		r.Name, r.Color = a.str("name"), a.strPtr("color")
	case "role.renamed":
		r.Name = d.str("after")
	case "role.moved":
		s.moveRole(r, d.num("after"), d.shifts())
	case "role.permissions.set":
		r.Permissions = d.set("after")
	}
}

func (s *State) applyUser(ev model.Event, d data, id string) {
	switch ev.Type {
	case "user.created":
		if s.tracks(id) {
			owner, _ := d["owner"].(bool)
			s.Users[id] = &User{ID: id, Username: d.str("username"), DisplayName: d.str("display_name"),
				Status: model.StatusActive, IsOwner: owner, Roles: map[string]bool{}, CreatedAt: createdAt(ev, d)}
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
		a := d.obj("after")
		u.Username, u.DisplayName, u.Status = a.str("username"), a.str("display_name"), a.str("status")
	case "user.timeout":
		u.TimeoutUntil = d.time("after")
	case "user.role.assigned":
		u.Roles[d.str("role_id")] = true
	case "user.role.removed":
		delete(u.Roles, d.str("role_id"))
	}
}

func (s *State) applyChannel(ev model.Event, d data, id string) {
	switch ev.Type {
	case "channel.created":
		c := &Channel{ID: id, Name: d.str("name"), Topic: d.strPtr("topic"), Kind: d.str("kind"),
			ParentID: d.strPtr("parent_id"), Position: d.num("position"), CreatedAt: createdAt(ev, d),
			Overwrites: map[Target]permissions.Overwrite{}}
		if copied, ok := d["copied_overwrites"].(bool); c.ParentID != nil && (copied || !ok) {
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
		a := d.obj("after")
		c.Name, c.Topic = a.str("name"), a.strPtr("topic")
	case "channel.renamed":
		c.Name = d.str("after")
	case "channel.moved":
		a := d.obj("after")
		c.ParentID, c.Position = a.strPtr("parent_id"), a.num("position")
	case "channel.overwrite.set", "channel.overwrite.removed":
		setOverwrite(c, target(d), d, "after")
	}
}

// Undo moves s back by one event: s must be the state right after it.
// An event written before history answers existed may lack what undoing
// it needs: that is an *Incomplete error, and s is left as it was.
func (s *State) Undo(ev model.Event) error {
	d, id := data(ev.Data), subjectID(ev)
	switch {
	case ev.Type == "global.permissions.set":
		s.Global = d.set("before")
	case strings.HasPrefix(ev.Type, "role."):
		return s.undoRole(ev, d, id)
	case strings.HasPrefix(ev.Type, "user."):
		return s.undoUser(ev, d, id)
	case strings.HasPrefix(ev.Type, "channel."):
		return s.undoChannel(ev, d, id)
	}
	return nil
}

func (s *State) undoRole(ev model.Event, d data, id string) error {
	// Whether a change of positions shifted the roles between is told
	// since history answers exist: an import sets positions as given.
	switch ev.Type {
	case "role.created", "role.deleted", "role.moved":
		if !d.has("shifts") {
			return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: "shifts"}
		}
	}
	switch ev.Type {
	case "role.created":
		s.removeRole(id, d.shifts())
		return nil
	case "role.deleted":
		for _, k := range []string{"holder_ids", "role_overwrites", "created_at"} {
			if !d.has(k) {
				return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: k}
			}
		}
		p := d.num("position")
		if d.shifts() {
			s.shiftRoles(p, 1<<30, +1)
		}
		s.Roles[id] = &Role{ID: id, Name: d.str("name"), Color: d.strPtr("color"), Position: p,
			Permissions: d.set("permissions"), CreatedAt: *d.time("created_at")}
		for _, uid := range d.strs("holder_ids") {
			if u := s.Users[uid]; u != nil {
				u.Roles[id] = true
			}
		}
		for _, v := range d.list("role_overwrites") {
			o, _ := v.(map[string]any)
			if c := s.Channels[data(o).str("channel_id")]; c != nil {
				c.Overwrites[Target{model.TargetRole, id}] = permissions.Overwrite{Allow: data(o).set("allow"), Deny: data(o).set("deny")}
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
		b := d.obj("before")
		r.Name, r.Color = b.str("name"), b.strPtr("color")
	case "role.renamed":
		r.Name = d.str("before")
	case "role.moved":
		s.moveRole(r, d.num("before"), d.shifts())
	case "role.permissions.set":
		r.Permissions = d.set("before")
	}
	return nil
}

func (s *State) undoUser(ev model.Event, d data, id string) error {
	switch ev.Type {
	case "user.created":
		delete(s.Users, id)
		return nil
	case "user.deleted":
		for _, k := range []string{"user_overwrites", "created_at"} {
			if !d.has(k) {
				return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: k}
			}
		}
		if s.tracks(id) {
			u := &User{ID: id, Username: d.str("username"), DisplayName: d.str("display_name"), Status: d.str("status"),
				Roles: map[string]bool{}, TimeoutUntil: d.time("timeout_until"), CreatedAt: *d.time("created_at")}
			for _, r := range d.strs("roles") {
				u.Roles[r] = true
			}
			s.Users[id] = u
		}
		for _, v := range d.list("user_overwrites") {
			o := data(asMap(v))
			if c := s.Channels[o.str("channel_id")]; c != nil {
				c.Overwrites[Target{model.TargetUser, id}] = permissions.Overwrite{Allow: o.set("allow"), Deny: o.set("deny")}
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
		b := d.obj("before")
		u.Username, u.DisplayName, u.Status = b.str("username"), b.str("display_name"), b.str("status")
	case "user.timeout":
		u.TimeoutUntil = d.time("before")
	case "user.role.assigned":
		delete(u.Roles, d.str("role_id"))
	case "user.role.removed":
		u.Roles[d.str("role_id")] = true
	}
	return nil
}

func (s *State) undoChannel(ev model.Event, d data, id string) error {
	switch ev.Type {
	case "channel.created":
		delete(s.Channels, id)
		return nil
	case "channel.deleted":
		for _, k := range []string{"overwrite_list", "children", "kind", "created_at"} {
			if !d.has(k) {
				return &Incomplete{Seq: ev.Seq, Type: ev.Type, Key: k}
			}
		}
		c := &Channel{ID: id, Name: d.str("name"), Topic: d.strPtr("topic"), Kind: d.str("kind"),
			ParentID: d.strPtr("parent_id"), Position: d.num("position"), CreatedAt: *d.time("created_at"),
			Overwrites: map[Target]permissions.Overwrite{}}
		for _, v := range d.list("overwrite_list") {
			o := data(asMap(v))
			c.Overwrites[target(o)] = permissions.Overwrite{Allow: o.set("allow"), Deny: o.set("deny")}
		}
		s.Channels[id] = c
		for _, child := range d.strs("children") {
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
		b := d.obj("before")
		c.Name, c.Topic = b.str("name"), b.strPtr("topic")
	case "channel.renamed":
		c.Name = d.str("before")
	case "channel.moved":
		b := d.obj("before")
		c.ParentID, c.Position = b.strPtr("parent_id"), b.num("position")
	case "channel.overwrite.set", "channel.overwrite.removed":
		setOverwrite(c, target(d), d, "before")
	}
	return nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func target(d data) Target { return Target{Type: d.str("target_type"), ID: d.str("target_id")} }

// setOverwrite sets c's overwrite of t to d[k], or removes it when that is
// null or empty.
func setOverwrite(c *Channel, t Target, d data, k string) {
	o, ok := d.overwrite(k)
	if !ok || o.IsEmpty() {
		delete(c.Overwrites, t)
		return
	}
	c.Overwrites[t] = o
}

// createdAt is when an event's subject was created: its data's created_at
// (the store's own timestamp), else the event's time.
func createdAt(ev model.Event, d data) time.Time {
	if t := d.time("created_at"); t != nil {
		return *t
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

// Package history answers "as of an instant" questions from the audit log.
// It is pure: a State is the part of the community that permissions depend
// on (the global permissions, the roles, the channels with their
// overwrites, the users with their roles and timeouts), and an event of
// the audit log moves it forward (Apply) or back (Undo). Replaying every
// event from the first gives the state after the last; undoing the events
// after an instant, newest first, from the state of now gives the same
// state as replaying those up to the instant, which is what the service
// does, since it reads only the events after the instant.
package history

import (
	"maps"
	"slices"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Role is a role as of an instant.
type Role struct {
	ID          string
	Name        string
	Color       *string
	Position    int
	Permissions permissions.Set
	CreatedAt   time.Time
}

// Target names whom an overwrite is for: everyone (ID ""), a role or a user.
type Target struct {
	Type string
	ID   string
}

// Channel is a channel as of an instant, with its overwrites.
type Channel struct {
	ID         string
	Name       string
	Topic      *string
	Kind       string
	ParentID   *string
	Position   int
	CreatedAt  time.Time
	Overwrites map[Target]permissions.Overwrite
}

// User is a user as of an instant: what the audit log keeps of them (never
// their email), their roles and their timeout.
type User struct {
	ID           string
	Username     string
	DisplayName  string
	Status       string
	IsOwner      bool
	Roles        map[string]bool
	TimeoutUntil *time.Time
	CreatedAt    time.Time
}

// State is the community as far as permissions go.
type State struct {
	Global   permissions.Set
	Roles    map[string]*Role
	Channels map[string]*Channel
	Users    map[string]*User
	// Only, when not nil, limits Users to these IDs: events about other
	// users leave the state alone (a question about one user need not
	// read every user).
	Only map[string]bool
}

// New is the state of a fresh store, before its first event.
func New() *State {
	return &State{Global: permissions.DefaultGlobal, Roles: map[string]*Role{}, Channels: map[string]*Channel{},
		Users: map[string]*User{}}
}

// Clone is a deep copy of s.
func (s *State) Clone() *State {
	out := &State{Global: s.Global, Roles: make(map[string]*Role, len(s.Roles)),
		Channels: make(map[string]*Channel, len(s.Channels)), Users: make(map[string]*User, len(s.Users)), Only: maps.Clone(s.Only)}
	for id, r := range s.Roles {
		c := *r
		out.Roles[id] = &c
	}
	for id, ch := range s.Channels {
		c := *ch
		c.Overwrites = maps.Clone(ch.Overwrites)
		out.Channels[id] = &c
	}
	for id, u := range s.Users {
		c := *u
		c.Roles = maps.Clone(u.Roles)
		out.Users[id] = &c
	}
	return out
}

// tracks reports whether the state follows user id.
func (s *State) tracks(id string) bool { return s.Only == nil || s.Only[id] }

// RolesByPosition returns the roles, highest position first.
func (s *State) RolesByPosition() []*Role {
	out := slices.Collect(maps.Values(s.Roles))
	slices.SortFunc(out, func(a, b *Role) int { return b.Position - a.Position })
	return out
}

// Overwrites returns a channel's overwrites as the store lists them
// (unordered; model.SortedOverwrites orders them).
func (c *Channel) List() []model.Overwrite {
	out := make([]model.Overwrite, 0, len(c.Overwrites))
	for t, o := range c.Overwrites {
		out = append(out, model.Overwrite{ChannelID: c.ID, TargetType: t.Type, TargetID: t.ID, Allow: o.Allow, Deny: o.Deny})
	}
	return out
}

// Synced reports whether a channel is in a category and has the
// category's overwrites, as sets.
func (s *State) Synced(id string) bool {
	c := s.Channels[id]
	if c == nil || c.ParentID == nil {
		return false
	}
	p := s.Channels[*c.ParentID]
	return p != nil && maps.Equal(p.Overwrites, c.Overwrites)
}

// Subject is the permission engine's view of user u at instant at.
func (s *State) Subject(u *User, at time.Time) permissions.Subject {
	sub := permissions.Subject{IsOwner: u.IsOwner, Global: s.Global}
	for _, r := range s.RolesByPosition() {
		if u.Roles[r.ID] {
			sub.Roles = append(sub.Roles, permissions.Role{ID: r.ID, Permissions: r.Permissions})
		}
	}
	if u.TimeoutUntil != nil && u.TimeoutUntil.After(at) {
		sub.TimedOut, sub.TimeoutUntil = true, *u.TimeoutUntil
	}
	return sub
}

// ChannelFor is the permission engine's view of a channel's overwrites
// for user id (the zero value for a channel that did not exist).
func (s *State) ChannelFor(channelID, userID string) permissions.Channel {
	c := s.Channels[channelID]
	if c == nil {
		return permissions.Channel{}
	}
	var out permissions.Channel
	for _, t := range slices.SortedFunc(maps.Keys(c.Overwrites), func(a, b Target) int {
		if a.Type != b.Type {
			return compare(a.Type, b.Type)
		}
		return compare(a.ID, b.ID)
	}) {
		o := c.Overwrites[t]
		switch t.Type {
		case model.TargetEveryone:
			out.Everyone = o
		case model.TargetRole:
			out.Roles = append(out.Roles, permissions.RoleOverwrite{RoleID: t.ID, Overwrite: o})
		case model.TargetUser:
			if t.ID == userID {
				out.User = o
			}
		}
	}
	if s.Synced(channelID) {
		out.SyncedFrom = *c.ParentID
	}
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

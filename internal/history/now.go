package history

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Now is the state of now, from what the store answers: the global
// permissions, every role, every channel with its overwrites, and the
// users read (only, when not nil, says which users the state follows).
func Now(global permissions.Set, roles []model.Role, channels []model.Channel, overwrites func(channelID string) []model.Overwrite,
	users []model.User, only []string) *State {
	st := New()
	st.Global = global
	for _, r := range roles {
		st.Roles[r.ID] = &Role{ID: r.ID, Name: r.Name, Color: r.Color, Position: r.Position, Permissions: r.Permissions, CreatedAt: r.CreatedAt}
	}
	for _, c := range channels {
		hc := &Channel{ID: c.ID, Name: c.Name, Topic: c.Topic, Kind: c.Kind, ParentID: c.ParentID, Position: c.Position,
			CreatedAt: c.CreatedAt, Overwrites: map[Target]permissions.Overwrite{}}
		for _, o := range overwrites(c.ID) {
			hc.Overwrites[Target{Type: o.TargetType, ID: o.TargetID}] = permissions.Overwrite{Allow: o.Allow, Deny: o.Deny}
		}
		st.Channels[c.ID] = hc
	}
	if only != nil {
		st.Only = map[string]bool{}
		for _, id := range only {
			st.Only[id] = true
		}
	}
	for _, u := range users {
		h := &User{ID: u.ID, Username: u.Username, DisplayName: u.DisplayName, Status: u.Status, IsOwner: u.IsOwner,
			Roles: map[string]bool{}, TimeoutUntil: u.TimeoutUntil, CreatedAt: u.CreatedAt}
		for _, r := range u.Roles {
			h.Roles[r] = true
		}
		st.Users[u.ID] = h
	}
	return st
}

// RoleList is the roles as the API lists them, by position descending,
// their names cleaned as the current rule cleans them; the log does not
// keep when a role last changed, so UpdatedAt is CreatedAt.
func (s *State) RoleList() []model.Role {
	out := []model.Role{}
	for _, r := range s.RolesByPosition() {
		out = append(out, model.Role{ID: r.ID, Name: names.Usable(r.Name, r.ID), Position: r.Position, Color: r.Color,
			Permissions: r.Permissions, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt})
	}
	return out
}

// UserModel is a user as the API shows them, as of the state; the log
// keeps no email: email is the one they have now (nil if deleted since).
func (s *State) UserModel(u *User, email *string) model.User {
	out := model.User{ID: u.ID, Username: names.Usable(u.Username, u.ID), DisplayName: names.Usable(u.DisplayName, u.ID),
		Email: email, Status: u.Status, IsOwner: u.IsOwner, TimeoutUntil: u.TimeoutUntil,
		CreatedAt: u.CreatedAt, UpdatedAt: u.CreatedAt, Roles: []string{}}
	for _, r := range s.RolesByPosition() {
		if u.Roles[r.ID] {
			out.Roles = append(out.Roles, r.ID)
		}
	}
	return out
}

// Holders pages the users who hold p in a channel at instant at, in the
// order of their lower-cased usernames then IDs: up to n after the key
// after, and the key the next page goes on from ("" at the end).
func (s *State) Holders(channelID string, p permissions.Permission, at time.Time, after string, n int) ([]*User, string) {
	type keyed struct {
		key string
		u   *User
	}
	var held []keyed
	for _, u := range s.Users {
		if permissions.InChannel(s.Subject(u, at), s.ChannelFor(channelID, u.ID)).Has(p) {
			held = append(held, keyed{strings.ToLower(u.Username) + "\x00" + u.ID, u})
		}
	}
	slices.SortFunc(held, func(x, y keyed) int { return cmp.Compare(x.key, y.key) })
	i, _ := slices.BinarySearchFunc(held, after, func(k keyed, t string) int {
		if k.key <= t {
			return -1
		}
		return 1
	})
	held = held[i:]
	next := ""
	if len(held) > n {
		held, next = held[:n], held[n-1].key
	}
	out := make([]*User, len(held))
	for i, k := range held {
		out[i] = k.u
	}
	return out, next
}

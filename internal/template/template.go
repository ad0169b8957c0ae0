// Package template is the community template document (guildhall-template/1):
// its format, what makes one valid, the export of a community's structure,
// and the plan of an import (the changes it makes, in the order the answer
// lists them, and the limits it must stay within).
//
// It is pure: it reads the community through Community and writes nothing.
// internal/guild authorizes an export or an import, checks its
// precondition, and applies a plan in one transaction with each change's
// event; internal/httpapi converts the document to and from the contract's
// JSON.
package template

import (
	"fmt"
	"strconv"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Format names the template document's format.
const Format = "guildhall-template/1"

// Document is a community's structure: the global permissions, the roles
// and the channels with their everyone and role overwrites. No users,
// tokens, attachments or user overwrites.
type Document struct {
	Format   string
	Global   permissions.Set
	Roles    []Role    // by position descending
	Channels []Channel // in tree order
}

// Role is a role of a template.
type Role struct {
	ID          string
	Name        string
	Position    int
	Color       *string
	Permissions permissions.Set
}

// Channel is a channel of a template.
type Channel struct {
	ID         string
	Kind       string
	Name       string
	ParentID   *string
	Position   int
	Topic      *string
	Overwrites []Overwrite // everyone first, then roles by position descending
}

// Overwrite is an everyone or role overwrite of a template channel.
type Overwrite struct {
	TargetType string // everyone or role
	TargetID   string // the role, for a role overwrite
	Allow      permissions.Set
	Deny       permissions.Set
}

// Change is one change an import makes (or would make).
type Change struct {
	Op     string // create, update, delete
	Kind   string // role, channel, overwrite, global
	ID     string
	Before map[string]any // absent when created
	After  map[string]any // absent when deleted
}

// Community is the structure an export reads and an import plans against,
// as one consistent view (the store's authorization state is one).
type Community interface {
	Global() (permissions.Set, int64)
	Roles() []model.Role // by position descending
	Role(id string) (model.Role, bool)
	Channels() []model.Channel // in tree order
	Channel(id string) (model.Channel, bool)
	Overwrites(channelID string) (list []model.Overwrite, version int64, ok bool)
}

// Export is the community's structure as a template.
func Export(c Community) Document {
	global, _ := c.Global()
	t := Document{Format: Format, Global: global, Roles: []Role{}, Channels: []Channel{}}
	for _, r := range c.Roles() { // by position descending
		t.Roles = append(t.Roles, Role{ID: r.ID, Name: r.Name, Position: r.Position, Color: r.Color, Permissions: r.Permissions})
	}
	position := func(id string) int {
		r, _ := c.Role(id)
		return r.Position
	}
	for _, ch := range c.Channels() { // tree order
		tc := Channel{ID: ch.ID, Kind: ch.Kind, Name: ch.Name, ParentID: ch.ParentID, Position: ch.Position, Topic: ch.Topic,
			Overwrites: []Overwrite{}}
		list, _, _ := c.Overwrites(ch.ID)
		for _, o := range model.SortedOverwrites(position, list) {
			if o.TargetType == model.TargetUser {
				continue
			}
			tc.Overwrites = append(tc.Overwrites, Overwrite{TargetType: o.TargetType, TargetID: o.TargetID, Allow: o.Allow, Deny: o.Deny})
		}
		t.Channels = append(t.Channels, tc)
	}
	return t
}

// Validate finds what makes a template invalid in itself (400 at the
// member), before anything is compared with the community.
func Validate(t Document) error {
	var bad []apperr.FieldError
	at := func(loc, format string, args ...any) {
		bad = append(bad, apperr.FieldError{Location: loc, Message: fmt.Sprintf(format, args...)})
	}
	if t.Format != Format {
		at("body.format", "must be %q", Format)
	}
	if t.Global.Has(permissions.Administrator) {
		at("body.global_permissions", "ADMINISTRATOR cannot be a global permission")
	}
	roles := validateRoles(t.Roles, at)
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
		if model.ReservedChannelID(c.ID) {
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
		validateOverwrites(loc, c, roles, at)
	}
	if len(bad) > 0 {
		return apperr.InvalidFields(bad)
	}
	return nil
}

// validateRoles reports the template's duplicate roles, bad names and
// positions outside 1..len(roles) or taken twice, and returns the set of
// its roles.
func validateRoles(list []Role, at func(loc, format string, args ...any)) map[string]bool {
	roles := map[string]bool{}
	taken := map[int]bool{}
	for i, r := range list {
		loc := "body.roles[" + strconv.Itoa(i) + "]"
		if roles[r.ID] {
			at(loc+".id", "role %q is in the template twice", r.ID)
		}
		roles[r.ID] = true
		if msg := names.Check(r.Name); msg != "" {
			at(loc+".name", "%s", msg)
		}
		switch {
		case r.Position < 1 || r.Position > len(list):
			at(loc+".position", "must be between 1 and %d, the number of roles in the template", len(list))
		case taken[r.Position]:
			at(loc+".position", "position %d is taken by another role of the template", r.Position)
		}
		taken[r.Position] = true
	}
	return roles
}

// validateOverwrites reports a channel's invalid overwrites (loc is the
// channel's): each as setting it alone would, a role the template lacks, and
// two for one target.
func validateOverwrites(loc string, c Channel, roles map[string]bool, at func(loc, format string, args ...any)) {
	targets := map[string]bool{}
	for j, ow := range c.Overwrites {
		oloc := loc + ".overwrites[" + strconv.Itoa(j) + "]"
		mo := model.Overwrite{ChannelID: c.ID, TargetType: ow.TargetType, TargetID: ow.TargetID, Allow: ow.Allow, Deny: ow.Deny}
		if err := mo.Validate(); err != nil {
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

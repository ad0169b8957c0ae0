package template_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/template"
)

// community is a Community held in memory: roles by position descending,
// channels in tree order, as the store's authorization state gives them.
type community struct {
	global     permissions.Set
	roles      []model.Role
	channels   []model.Channel
	overwrites map[string][]model.Overwrite
}

func (c *community) Global() (permissions.Set, int64) { return c.global, 1 }
func (c *community) Roles() []model.Role              { return slices.Clone(c.roles) }
func (c *community) Channels() []model.Channel        { return slices.Clone(c.channels) }

func (c *community) Role(id string) (model.Role, bool) {
	i := slices.IndexFunc(c.roles, func(r model.Role) bool { return r.ID == id })
	if i < 0 {
		return model.Role{}, false
	}
	return c.roles[i], true
}

func (c *community) Channel(id string) (model.Channel, bool) {
	i := slices.IndexFunc(c.channels, func(ch model.Channel) bool { return ch.ID == id })
	if i < 0 {
		return model.Channel{}, false
	}
	return c.channels[i], true
}

func (c *community) Overwrites(id string) ([]model.Overwrite, int64, bool) {
	if _, ok := c.Channel(id); !ok {
		return nil, 0, false
	}
	return slices.Clone(c.overwrites[id]), 1, true
}

func ptr(s string) *string { return &s }

var (
	view = permissions.Of(permissions.ViewChannel)
	send = permissions.Of(permissions.SendMessages)
)

// small is a community with two roles, a category holding a channel, and
// a channel with every kind of overwrite.
func small() *community {
	return &community{
		global: view | send,
		roles: []model.Role{
			{ID: "mods", Name: "Mods", Position: 2, Color: ptr("#3498db"), Permissions: permissions.Of(permissions.ManageRoles)},
			{ID: "helpers", Name: "Helpers", Position: 1, Permissions: permissions.Of(permissions.ManageMessages)},
		},
		channels: []model.Channel{
			{ID: "general", Kind: model.KindText, Name: "General", Position: 1},
			{ID: "staff", Kind: model.KindCategory, Name: "Staff", Position: 2},
			{ID: "ops", Kind: model.KindText, Name: "Operations", ParentID: ptr("staff"), Position: 1, Topic: ptr("t")},
		},
		overwrites: map[string][]model.Overwrite{
			"general": {
				{ChannelID: "general", TargetType: model.TargetUser, TargetID: "u1", Deny: send},
				{ChannelID: "general", TargetType: model.TargetRole, TargetID: "helpers", Allow: send},
				{ChannelID: "general", TargetType: model.TargetRole, TargetID: "mods", Allow: view},
				{ChannelID: "general", TargetType: model.TargetEveryone, Deny: send},
			},
			"staff": {{ChannelID: "staff", TargetType: model.TargetEveryone, Deny: view}},
		},
	}
}

// TestExport: the export holds the structure and no user overwrite, each
// channel's overwrites in the API's order, and empty lists (never nil) for
// a community without roles, channels or overwrites.
func TestExport(t *testing.T) {
	d := template.Export(small())
	if d.Format != template.Format || d.Global != view|send {
		t.Errorf("format %q, global %v", d.Format, d.Global.Names())
	}
	var roles []string
	for _, r := range d.Roles {
		roles = append(roles, r.ID)
	}
	if !slices.Equal(roles, []string{"mods", "helpers"}) || d.Roles[0].Color == nil || *d.Roles[0].Color != "#3498db" {
		t.Errorf("roles %v (color %v)", roles, d.Roles[0].Color)
	}
	var got []string
	for _, c := range d.Channels {
		for _, o := range c.Overwrites {
			got = append(got, c.ID+"/"+o.TargetType+":"+o.TargetID)
		}
	}
	want := []string{"general/everyone:", "general/role:mods", "general/role:helpers", "staff/everyone:"}
	if !slices.Equal(got, want) {
		t.Errorf("overwrites %v, want %v", got, want)
	}
	if ops := d.Channels[2]; ops.ParentID == nil || *ops.ParentID != "staff" || ops.Topic == nil || ops.Overwrites == nil {
		t.Errorf("ops exported as %+v", ops)
	}

	empty := template.Export(&community{})
	if empty.Roles == nil || empty.Channels == nil {
		t.Errorf("an empty community exports nil lists: %+v", empty)
	}
}

// TestValidate: each fault of a template is reported at its member, all
// of them at once; an export is valid.
func TestValidate(t *testing.T) {
	if err := template.Validate(template.Export(small())); err != nil {
		t.Fatalf("an export is invalid: %v", err)
	}
	role := func(id string, position int) template.Role {
		return template.Role{ID: id, Name: id, Position: position}
	}
	text := func(id string, ows ...template.Overwrite) template.Channel {
		return template.Channel{ID: id, Kind: model.KindText, Name: id, Overwrites: ows}
	}
	for _, tc := range []struct {
		name string
		edit func(d *template.Document)
		want []string // the locations reported, in order
	}{
		{"another format", func(d *template.Document) { d.Format = "guildhall-template/2" }, []string{"body.format"}},
		{"ADMINISTRATOR as a global permission", func(d *template.Document) { d.Global = permissions.Of(permissions.Administrator) },
			[]string{"body.global_permissions"}},
		{"a role twice, a position outside 1..n and one taken", func(d *template.Document) {
			d.Roles = []template.Role{role("a", 1), role("a", 2), role("b", 5), role("c", 2)}
		}, []string{"body.roles[1].id", "body.roles[2].position", "body.roles[3].position"}},
		{"names with nothing visible", func(d *template.Document) {
			d.Roles = []template.Role{{ID: "a", Name: "\u200b", Position: 1}}
			d.Channels = []template.Channel{{ID: "c", Kind: model.KindText, Name: " "}}
		}, []string{"body.roles[0].name", "body.channels[0].name"}},
		{"a channel twice, and a reserved ID", func(d *template.Document) {
			d.Channels = []template.Channel{text("c"), text("c"), text("reorder")}
		}, []string{"body.channels[1].id", "body.channels[2].id"}},
		{"a category in a category, a parent that is no category", func(d *template.Document) {
			d.Channels = []template.Channel{
				{ID: "cat", Kind: model.KindCategory, Name: "cat"},
				{ID: "sub", Kind: model.KindCategory, Name: "sub", ParentID: ptr("cat")},
				{ID: "c", Kind: model.KindText, Name: "c", ParentID: ptr("general")},
				text("general"),
				{ID: "d", Kind: model.KindText, Name: "d", ParentID: ptr("cat")},
			}
		}, []string{"body.channels[1].parent_id", "body.channels[2].parent_id"}},
		{"overwrites invalid in themselves, of a role not in the template, twice for a target", func(d *template.Document) {
			d.Roles = []template.Role{role("a", 1)}
			d.Channels = []template.Channel{text("c",
				template.Overwrite{TargetType: model.TargetEveryone, TargetID: "a"},
				template.Overwrite{TargetType: model.TargetRole, TargetID: "a", Allow: permissions.Of(permissions.ManageUsers)},
				template.Overwrite{TargetType: model.TargetRole, TargetID: "a", Allow: view, Deny: view},
				template.Overwrite{TargetType: model.TargetRole, TargetID: "gone", Allow: view},
				template.Overwrite{TargetType: model.TargetRole, TargetID: "a", Allow: send},
				template.Overwrite{TargetType: model.TargetRole, TargetID: "a", Deny: send},
			)}
		}, []string{"body.channels[0].overwrites[0].target_id", "body.channels[0].overwrites[1].allow",
			"body.channels[0].overwrites[2].deny", "body.channels[0].overwrites[3].target_id", "body.channels[0].overwrites[5]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := template.Document{Format: template.Format, Roles: []template.Role{}, Channels: []template.Channel{}}
			tc.edit(&d)
			err := template.Validate(d)
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalid) {
				t.Fatalf("got %v, want a 400", err)
			}
			var got []string
			for _, f := range e.Fields {
				got = append(got, f.Location)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("reported at %v, want %v (%+v)", got, tc.want, e.Fields)
			}
		})
	}
}

package template_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/template"
)

var limits = template.Limits{MaxRoles: 250, MaxChannels: 500, MaxChannelsPerCategory: 50, MaxOverwrites: 500}

// listed is a plan's changes as "op kind id".
func listed(p *template.Plan) []string {
	out := []string{}
	for _, c := range p.Changes {
		out = append(out, c.Op+" "+c.Kind+" "+c.ID)
	}
	return out
}

func mustPlan(t *testing.T, c template.Community, d template.Document, prune bool) *template.Plan {
	t.Helper()
	p, err := template.PlanImport(c, d, prune, limits)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanOfAnExportChangesNothing: importing what was just exported, with
// prune or without, lists no change (an empty list, not nil) and plans no
// write.
func TestPlanOfAnExportChangesNothing(t *testing.T) {
	c := small()
	for _, prune := range []bool{false, true} {
		p := mustPlan(t, c, template.Export(c), prune)
		if p.Changes == nil || len(p.Changes) != 0 {
			t.Errorf("prune=%v: changes %v", prune, listed(p))
		}
		if p.Global != nil || len(p.DeleteRoles)+len(p.CreateRoles)+len(p.UpdateRoles)+len(p.Moved) != 0 ||
			len(p.DeleteChannels)+len(p.CreateChannels)+len(p.UpdateChannels)+len(p.Overwrites)+len(p.OverwriteChanges) != 0 {
			t.Errorf("prune=%v: writes planned: %+v", prune, p)
		}
	}
}

// TestPlanRoles: the roles the template leaves out stay below its roles in
// their order (or go, with prune); the template's take its order above
// them; each role that moves is listed once, with where it was.
func TestPlanRoles(t *testing.T) {
	c := small()
	c.roles = slices.Insert(c.roles, 0, model.Role{ID: "top", Name: "Top", Position: 3})
	d := template.Export(c)
	d.Roles = []template.Role{{ID: "new", Name: "New", Position: 2}, {ID: "mods", Name: "Mods", Position: 1, Color: ptr("#3498db"),
		Permissions: permissions.Of(permissions.ManageRoles)}}
	// The overwrites of a role left out are not the template's.
	d.Channels[0].Overwrites = slices.DeleteFunc(d.Channels[0].Overwrites, func(o template.Overwrite) bool { return o.TargetID == "helpers" })
	for _, tc := range []struct {
		name      string
		prune     bool
		changes   []string
		positions map[string]int
		moved     map[string]int
	}{
		{"kept below", false, []string{"create role new", "update role mods", "update role top"},
			map[string]int{"top": 2, "helpers": 1, "mods": 3, "new": 4}, map[string]int{"mods": 2, "top": 3}},
		{"pruned", true, []string{"delete role top", "delete role helpers", "create role new", "update role mods"},
			map[string]int{"mods": 1, "new": 2}, map[string]int{"mods": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, c, d, tc.prune)
			var roles []string
			for _, ch := range listed(p) {
				if strings.Contains(ch, " role ") {
					roles = append(roles, ch)
				}
			}
			if !slices.Equal(roles, tc.changes) {
				t.Errorf("changes %v, want %v", roles, tc.changes)
			}
			if !maps.Equal(p.Positions, tc.positions) || !maps.Equal(p.Moved, tc.moved) {
				t.Errorf("positions %v moved %v, want %v and %v", p.Positions, p.Moved, tc.positions, tc.moved)
			}
			if len(p.UpdateRoles) != 0 { // mods moves, nothing else of it changes
				t.Errorf("roles updated: %+v", p.UpdateRoles)
			}
		})
	}
}

// TestPlanChannels: new channels are created categories first, changed
// ones updated, the others kept or (with prune) deleted; a channel whose
// kind differs is a 409 and nothing is planned.
func TestPlanChannels(t *testing.T) {
	c := small()
	d := template.Export(c)
	d.Channels[2].Name = "Ops"
	d.Channels = slices.Insert(d.Channels, 0, template.Channel{ID: "a", Kind: model.KindText, Name: "A", Position: 3},
		template.Channel{ID: "cat", Kind: model.KindCategory, Name: "Cat", Position: 4},
		template.Channel{ID: "in-cat", Kind: model.KindText, Name: "In", ParentID: ptr("cat"), Position: 1})
	d.Channels = slices.DeleteFunc(d.Channels, func(ch template.Channel) bool { return ch.ID == "general" })

	p := mustPlan(t, c, d, false)
	var created []string
	for _, ch := range p.CreateChannels {
		created = append(created, ch.ID)
	}
	if want := []string{"cat", "a", "in-cat"}; !slices.Equal(created, want) {
		t.Errorf("created in the order %v, want %v", created, want)
	}
	if want := []string{"create channel a", "create channel cat", "create channel in-cat", "update channel ops"}; !slices.Equal(listed(p), want) {
		t.Errorf("changes %v, want %v", listed(p), want)
	}
	if p = mustPlan(t, c, d, true); !slices.Equal(p.DeleteChannels, []string{"general"}) || listed(p)[0] != "delete channel general" {
		t.Errorf("with prune: deleted %v, changes %v", p.DeleteChannels, listed(p))
	}

	d.Channels[len(d.Channels)-1].Kind = model.KindCategory // ops
	d.Channels[len(d.Channels)-1].ParentID = nil
	if _, err := template.PlanImport(c, d, false, limits); !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("a kind changed: got %v, want a 409", err)
	}
}

// TestPlanOverwrites: the template's everyone and role overwrites replace
// the channel's; user overwrites stay; an empty one removes its target's;
// others stay, or with prune are deleted (those of a pruned role silently,
// with the role). Each listed change has one overwrite change beside it.
func TestPlanOverwrites(t *testing.T) {
	c := small()
	d := template.Export(c)
	d.Roles = d.Roles[:1] // mods; helpers is left out
	d.Channels[0].Overwrites = []template.Overwrite{
		{TargetType: model.TargetEveryone, Deny: view | send},
		{TargetType: model.TargetRole, TargetID: "mods"}, // empty: removes mods'
	}
	d.Channels[1].Overwrites = []template.Overwrite{} // staff: everyone's left out

	for _, tc := range []struct {
		name    string
		prune   bool
		changes []string
		lists   map[string][]string
	}{
		{"kept", false, []string{"update overwrite general/everyone", "delete overwrite general/role:mods"},
			map[string][]string{"general": {"user:u1", "role:helpers", "everyone:"}}},
		{"pruned", true, []string{"delete overwrite staff/everyone", "update overwrite general/everyone", "delete overwrite general/role:mods"},
			map[string][]string{"general": {"user:u1", "everyone:"}, "staff": {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, c, d, tc.prune)
			var got []string
			for _, ch := range listed(p) {
				if strings.Contains(ch, " overwrite ") {
					got = append(got, ch)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.changes))
			if !slices.Equal(got, want) {
				t.Errorf("changes %v, want %v", got, want)
			}
			if len(p.OverwriteChanges) != len(got) {
				t.Errorf("%d overwrite changes for %d listed", len(p.OverwriteChanges), len(got))
			}
			lists := map[string][]string{}
			for _, co := range p.Overwrites {
				lists[co.ChannelID] = []string{}
				for _, o := range co.List {
					lists[co.ChannelID] = append(lists[co.ChannelID], o.TargetType+":"+o.TargetID)
				}
			}
			if !maps.EqualFunc(lists, tc.lists, slices.Equal) {
				t.Errorf("lists %v, want %v", lists, tc.lists)
			}
		})
	}

	p := mustPlan(t, c, d, false)
	i := slices.IndexFunc(p.OverwriteChanges, func(oc template.OverwriteChange) bool {
		return oc.ChannelID == "general" && oc.After != nil && oc.After.TargetType == model.TargetEveryone
	})
	if i < 0 {
		t.Fatalf("no change of general's everyone overwrite: %+v", p.OverwriteChanges)
	}
	if oc := p.OverwriteChanges[i]; oc.Before == nil || oc.Before.Deny != send || oc.After.Deny != view|send {
		t.Errorf("everyone's change: %+v -> %+v", oc.Before, oc.After)
	}
}

// TestPlanLimits: an import whose result would pass a limit, or whose
// list of changes would weigh more than an answer may, is refused with
// the limit named.
func TestPlanLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(d *template.Document, l *template.Limits)
		limit string // "" when the plan passes
	}{
		{"roles at the limit", func(_ *template.Document, l *template.Limits) { l.MaxRoles = 2 }, ""},
		{"roles over it", func(_ *template.Document, l *template.Limits) { l.MaxRoles = 1 }, "roles"},
		{"channels over it", func(_ *template.Document, l *template.Limits) { l.MaxChannels = 2 }, "channels"},
		{"a category over it", func(d *template.Document, l *template.Limits) {
			l.MaxChannelsPerCategory = 1
			d.Channels = append(d.Channels, template.Channel{ID: "more", Kind: model.KindText, Name: "More", ParentID: ptr("staff")})
		}, "channels_per_category"},
		{"overwrites over it", func(_ *template.Document, l *template.Limits) { l.MaxOverwrites = 3 }, "overwrites_per_channel"},
		{"changes under the answer's bound", func(d *template.Document, _ *template.Limits) {
			d.Channels[0].Topic = ptr(strings.Repeat("x", 7<<20))
		}, ""},
		{"changes over it", func(d *template.Document, _ *template.Limits) {
			d.Channels[0].Topic = ptr(strings.Repeat("x", apperr.MaxAnswerBytes))
		}, "answer_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small()
			d, l := template.Export(c), limits
			tc.edit(&d, &l)
			_, err := template.PlanImport(c, d, false, l)
			e, _ := apperr.As(err)
			switch {
			case tc.limit == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.limit != "" && (e == nil || !errors.Is(err, apperr.ErrLimitExceeded) || e.Limit != tc.limit):
				t.Errorf("got %v, want limit %s", err, tc.limit)
			}
		})
	}
}

package history_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

var t0 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

func ev(seq int64, typ, subject string, data map[string]any) history.Event {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	return history.Event{Seq: seq, Type: typ, Subject: subject, Data: raw, CreatedAt: t0.Add(time.Duration(seq) * time.Second)}
}

func names(ps ...permissions.Permission) []string { return permissions.Of(ps...).Names() }

// Each case: a history, then what the state after it holds; undoing every
// event from that state gives back a fresh store's.
func TestApplyAndUndo(t *testing.T) {
	ow := func(allow, deny []string) map[string]any { return map[string]any{"allow": allow, "deny": deny} }
	cases := []struct {
		name   string
		events []history.Event
		check  func(t *testing.T, s *history.State)
	}{
		{"a role created at the bottom shifts the others up", []history.Event{
			ev(1, "role.created", "role:a", map[string]any{"name": "A", "position": 1, "permissions": []string{}, "shifts": true}),
			ev(2, "role.created", "role:b", map[string]any{"name": "B", "position": 1, "permissions": names(permissions.ManageRoles), "shifts": true}),
		}, func(t *testing.T, s *history.State) {
			if s.Roles["a"].Position != 2 || s.Roles["b"].Position != 1 || !s.Roles["b"].Permissions.Has(permissions.ManageRoles) {
				t.Fatalf("roles %+v %+v", *s.Roles["a"], *s.Roles["b"])
			}
		}},
		{"a move shifts the roles between; an import's does not", []history.Event{
			ev(1, "role.created", "role:a", map[string]any{"position": 1, "shifts": true}),
			ev(2, "role.created", "role:b", map[string]any{"position": 1, "shifts": true}),
			ev(3, "role.created", "role:c", map[string]any{"position": 1, "shifts": true}),
			ev(4, "role.moved", "role:c", map[string]any{"before": 1, "after": 3, "shifts": true}),
			ev(5, "role.moved", "role:a", map[string]any{"before": 2, "after": 1, "shifts": false}),
			ev(6, "role.moved", "role:b", map[string]any{"before": 1, "after": 2, "shifts": false}),
		}, func(t *testing.T, s *history.State) {
			got := fmt.Sprint(s.Roles["a"].Position, s.Roles["b"].Position, s.Roles["c"].Position)
			if got != "1 2 3" {
				t.Fatalf("positions a b c: %s", got)
			}
		}},
		{"a role deleted leaves its holders and overwrites, and is given back whole", []history.Event{
			ev(1, "user.created", "user:u", map[string]any{"username": "u"}),
			ev(2, "channel.created", "channel:c", map[string]any{"name": "c", "kind": "text", "position": 0}),
			ev(3, "role.created", "role:a", map[string]any{"position": 1, "permissions": names(permissions.ViewChannel), "shifts": true, "created_at": t0}),
			ev(4, "user.role.assigned", "user:u", map[string]any{"role_id": "a", "before": []string{}, "after": []string{"a"}}),
			ev(5, "channel.overwrite.set", "channel:c", map[string]any{"target_type": "role", "target_id": "a", "before": nil,
				"after": ow(names(permissions.SendMessages), []string{})}),
			ev(6, "role.deleted", "role:a", map[string]any{"position": 1, "permissions": names(permissions.ViewChannel), "shifts": true,
				"holder_ids": []string{"u"}, "created_at": t0, "role_overwrites": []any{map[string]any{"channel_id": "c",
					"allow": names(permissions.SendMessages), "deny": []string{}}}}),
		}, func(t *testing.T, s *history.State) {
			if len(s.Roles) != 0 || len(s.Users["u"].Roles) != 0 || len(s.Channels["c"].Overwrites) != 0 {
				t.Fatalf("the role stays: %v %v %v", s.Roles, s.Users["u"].Roles, s.Channels["c"].Overwrites)
			}
		}},
		{"a channel created in a category copies its overwrites; deleting the category keeps it", []history.Event{
			ev(1, "channel.created", "channel:k", map[string]any{"name": "k", "kind": "category", "position": 0, "created_at": t0}),
			ev(2, "channel.overwrite.set", "channel:k", map[string]any{"target_type": "everyone", "target_id": nil, "before": nil,
				"after": ow([]string{}, names(permissions.ViewChannel))}),
			ev(3, "channel.created", "channel:c", map[string]any{"name": "c", "kind": "text", "parent_id": "k", "position": 0, "copied_overwrites": true}),
			ev(4, "channel.created", "channel:i", map[string]any{"name": "i", "kind": "text", "parent_id": "k", "position": 1, "copied_overwrites": false}),
			ev(5, "channel.deleted", "channel:k", map[string]any{"name": "k", "kind": "category", "position": 0, "created_at": t0,
				"children": []string{"c", "i"}, "overwrite_list": []any{map[string]any{"target_type": "everyone", "target_id": nil,
					"allow": []string{}, "deny": names(permissions.ViewChannel)}}}),
		}, func(t *testing.T, s *history.State) {
			c, i := s.Channels["c"], s.Channels["i"]
			if c.ParentID != nil || len(c.Overwrites) != 1 || len(i.Overwrites) != 0 || s.Channels["k"] != nil {
				t.Fatalf("after the category: c %+v, i %+v", *c, *i)
			}
		}},
		{"a user timed out, renamed and deleted", []history.Event{
			ev(1, "channel.created", "channel:c", map[string]any{"name": "c", "kind": "text", "position": 0}),
			ev(2, "user.created", "user:u", map[string]any{"username": "u", "display_name": "U", "created_at": t0}),
			ev(3, "user.timeout", "user:u", map[string]any{"before": nil, "after": t0.Add(time.Hour)}),
			ev(4, "user.updated", "user:u", map[string]any{"before": map[string]any{"username": "u", "display_name": "U", "status": "active"},
				"after": map[string]any{"username": "v", "display_name": "V", "status": "suspended"}}),
			ev(5, "channel.overwrite.set", "channel:c", map[string]any{"target_type": "user", "target_id": "u", "before": nil,
				"after": ow(names(permissions.AddReactions), []string{})}),
			ev(6, "user.deleted", "user:u", map[string]any{"username": "v", "display_name": "V", "status": "suspended", "roles": []string{},
				"timeout_until": t0.Add(time.Hour), "created_at": t0, "user_overwrites": []any{map[string]any{"channel_id": "c",
					"allow": names(permissions.AddReactions), "deny": []string{}}}}),
		}, func(t *testing.T, s *history.State) {
			if len(s.Users) != 0 || len(s.Channels["c"].Overwrites) != 0 {
				t.Fatalf("the user stays: %v %v", s.Users, s.Channels["c"].Overwrites)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states := []*history.State{history.New()}
			for _, e := range tc.events {
				next := states[len(states)-1].Clone()
				next.Apply(e)
				states = append(states, next)
			}
			tc.check(t, states[len(states)-1])
			s := states[len(states)-1].Clone()
			for i := len(tc.events) - 1; i >= 0; i-- {
				if err := s.Undo(tc.events[i]); err != nil {
					t.Fatal(err)
				}
				if !equal(s, states[i]) {
					t.Fatalf("undoing event %d (%s): got %s, want %s", tc.events[i].Seq, tc.events[i].Type, dump(s), dump(states[i]))
				}
			}
		})
	}
}

// Events written by a release before history answers lack what undoing
// them needs: Undo says so, and leaves the state alone.
func TestUndoIncomplete(t *testing.T) {
	for _, e := range []history.Event{
		ev(1, "role.deleted", "role:a", map[string]any{"name": "A", "position": 1, "permissions": []string{}, "users": 0, "overwrites": 0}),
		ev(2, "role.created", "role:a", map[string]any{"name": "A", "position": 1, "permissions": []string{}}),
		ev(3, "role.moved", "role:a", map[string]any{"before": 1, "after": 2}),
		ev(4, "user.deleted", "user:u", map[string]any{"username": "u", "roles": []string{}, "tokens": 0, "overwrites": 0}),
		ev(5, "channel.deleted", "channel:c", map[string]any{"name": "c", "overwrites": 0, "attachments": 0}),
	} {
		s := history.New()
		var inc *history.Incomplete
		if err := s.Undo(e); err == nil || !asIncomplete(err, &inc) || inc.Seq != e.Seq {
			t.Errorf("%s: %v, want an Incomplete", e.Type, err)
		}
		if !equal(s, history.New()) {
			t.Errorf("%s: the state changed", e.Type)
		}
	}
}

func asIncomplete(err error, target **history.Incomplete) bool {
	inc, ok := err.(*history.Incomplete)
	*target = inc
	return ok
}

// FuzzUndoInvertsApply: random histories written as the service writes
// them; undoing them newest first, from the state after the last, passes
// through every state that replaying them passed through.
func FuzzUndoInvertsApply(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42} {
		f.Add(seed, uint8(80))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := &gen{r: r, s: history.New()}
		states := []*history.State{history.New()}
		var events []history.Event
		for range int(n) {
			e, ok := g.next()
			if !ok {
				continue
			}
			g.s.Apply(e)
			events = append(events, e)
			states = append(states, g.s.Clone())
		}
		s := g.s.Clone()
		for i := len(events) - 1; i >= 0; i-- {
			if err := s.Undo(events[i]); err != nil {
				t.Fatal(err)
			}
			if !equal(s, states[i]) {
				t.Fatalf("undoing %s %s: got %s, want %s", events[i].Type, events[i].Data, dump(s), dump(states[i]))
			}
		}
	})
}

// gen writes random events as the service would, from the state so far.
type gen struct {
	r   *rand.Rand
	s   *history.State
	seq int64
}

func (g *gen) perms() []string {
	var out []string
	for _, p := range []permissions.Permission{permissions.ViewChannel, permissions.SendMessages, permissions.AddReactions, permissions.ManageMessages} {
		if g.r.IntN(2) == 0 {
			out = append(out, p.String())
		}
	}
	return permissions.Of(mustParse(out)...).Names()
}

func mustParse(names []string) []permissions.Permission {
	var out []permissions.Permission
	for _, n := range names {
		p, _ := permissions.ByName(n)
		out = append(out, p)
	}
	return out
}

func pick[V any](r *rand.Rand, m map[string]V) (string, bool) {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) == 0 {
		return "", false
	}
	return keys[r.IntN(len(keys))], true
}

func owData(o permissions.Overwrite, ok bool) any {
	if !ok {
		return nil
	}
	return map[string]any{"allow": o.Allow.Names(), "deny": o.Deny.Names()}
}

func (g *gen) next() (history.Event, bool) {
	g.seq++
	s, r := g.s, g.r
	id := fmt.Sprintf("x%d", g.seq)
	switch r.IntN(12) {
	case 0:
		shifts := r.IntN(4) != 0
		p := 1
		if !shifts {
			p = len(s.Roles) + 1 // an import puts new roles on top
		}
		return ev(g.seq, "role.created", "role:"+id, map[string]any{"name": id, "position": p, "permissions": g.perms(), "shifts": shifts, "created_at": t0}), true
	case 1:
		rid, ok := pick(r, s.Roles)
		if !ok {
			return history.Event{}, false
		}
		to := 1 + r.IntN(len(s.Roles))
		return ev(g.seq, "role.moved", "role:"+rid, map[string]any{"before": s.Roles[rid].Position, "after": to, "shifts": true}), true
	case 2:
		rid, ok := pick(r, s.Roles)
		if !ok {
			return history.Event{}, false
		}
		role := s.Roles[rid]
		var holders []string
		for _, uid := range slices.Sorted(maps.Keys(s.Users)) {
			if s.Users[uid].Roles[rid] {
				holders = append(holders, uid)
			}
		}
		var ows []any
		for _, cid := range slices.Sorted(maps.Keys(s.Channels)) {
			if o, ok := s.Channels[cid].Overwrites[history.Target{Type: model.TargetRole, ID: rid}]; ok {
				ows = append(ows, map[string]any{"channel_id": cid, "allow": o.Allow.Names(), "deny": o.Deny.Names()})
			}
		}
		return ev(g.seq, "role.deleted", "role:"+rid, map[string]any{"name": role.Name, "color": role.Color, "position": role.Position,
			"permissions": role.Permissions.Names(), "shifts": true, "holder_ids": nonNil(holders), "role_overwrites": nonNilAny(ows), "created_at": role.CreatedAt}), true
	case 3:
		rid, ok := pick(r, s.Roles)
		if !ok {
			return history.Event{}, false
		}
		return ev(g.seq, "role.permissions.set", "role:"+rid, map[string]any{"before": s.Roles[rid].Permissions.Names(), "after": g.perms()}), true
	case 4:
		return ev(g.seq, "user.created", "user:"+id, map[string]any{"username": id, "display_name": id, "created_at": t0}), true
	case 5:
		uid, ok1 := pick(r, s.Users)
		rid, ok2 := pick(r, s.Roles)
		if !ok1 || !ok2 {
			return history.Event{}, false
		}
		typ := "user.role.assigned"
		if s.Users[uid].Roles[rid] {
			typ = "user.role.removed"
		}
		return ev(g.seq, typ, "user:"+uid, map[string]any{"role_id": rid}), true
	case 6:
		uid, ok := pick(r, s.Users)
		if !ok {
			return history.Event{}, false
		}
		var after any
		if r.IntN(2) == 0 {
			after = t0.Add(time.Duration(r.IntN(100)) * time.Hour)
		}
		var before any
		if u := s.Users[uid]; u.TimeoutUntil != nil {
			before = *u.TimeoutUntil
		}
		return ev(g.seq, "user.timeout", "user:"+uid, map[string]any{"before": before, "after": after}), true
	case 7:
		uid, ok := pick(r, s.Users)
		if !ok {
			return history.Event{}, false
		}
		u := s.Users[uid]
		var ows []any
		for _, cid := range slices.Sorted(maps.Keys(s.Channels)) {
			if o, ok := s.Channels[cid].Overwrites[history.Target{Type: model.TargetUser, ID: uid}]; ok {
				ows = append(ows, map[string]any{"channel_id": cid, "allow": o.Allow.Names(), "deny": o.Deny.Names()})
			}
		}
		var until any
		if u.TimeoutUntil != nil {
			until = *u.TimeoutUntil
		}
		return ev(g.seq, "user.deleted", "user:"+uid, map[string]any{"username": u.Username, "display_name": u.DisplayName, "status": u.Status,
			"roles": nonNil(slices.Sorted(maps.Keys(u.Roles))), "timeout_until": until, "created_at": u.CreatedAt, "user_overwrites": nonNilAny(ows)}), true
	case 8:
		data := map[string]any{"name": id, "kind": "text", "position": r.IntN(3), "created_at": t0}
		if r.IntN(4) == 0 {
			data["kind"] = "category"
		} else if k, ok := pickCategory(r, s); ok {
			data["parent_id"], data["copied_overwrites"] = k, r.IntN(3) != 0
		}
		return ev(g.seq, "channel.created", "channel:"+id, data), true
	case 9:
		cid, ok := pick(r, s.Channels)
		if !ok {
			return history.Event{}, false
		}
		c := s.Channels[cid]
		var ows []any
		for t, o := range c.Overwrites {
			var tid any
			if t.ID != "" {
				tid = t.ID
			}
			ows = append(ows, map[string]any{"target_type": t.Type, "target_id": tid, "allow": o.Allow.Names(), "deny": o.Deny.Names()})
		}
		var children []string
		for _, x := range slices.Sorted(maps.Keys(s.Channels)) {
			if p := s.Channels[x].ParentID; p != nil && *p == cid {
				children = append(children, x)
			}
		}
		return ev(g.seq, "channel.deleted", "channel:"+cid, map[string]any{"name": c.Name, "topic": c.Topic, "kind": c.Kind, "parent_id": c.ParentID,
			"position": c.Position, "created_at": c.CreatedAt, "overwrite_list": nonNilAny(ows), "children": nonNil(children)}), true
	case 10:
		cid, ok := pick(r, s.Channels)
		if !ok || s.Channels[cid].Kind == "category" {
			return history.Event{}, false
		}
		c := s.Channels[cid]
		var parent any
		if k, ok := pickCategory(r, s); ok && r.IntN(2) == 0 {
			parent = k
		}
		return ev(g.seq, "channel.moved", "channel:"+cid, map[string]any{"before": map[string]any{"parent_id": c.ParentID, "position": c.Position},
			"after": map[string]any{"parent_id": parent, "position": r.IntN(5)}}), true
	default:
		cid, ok := pick(r, s.Channels)
		if !ok {
			return history.Event{}, false
		}
		t := history.Target{Type: model.TargetEveryone}
		if uid, ok := pick(r, s.Users); ok && r.IntN(3) == 0 {
			t = history.Target{Type: model.TargetUser, ID: uid}
		} else if rid, ok := pick(r, s.Roles); ok && r.IntN(2) == 0 {
			t = history.Target{Type: model.TargetRole, ID: rid}
		}
		before, had := s.Channels[cid].Overwrites[t]
		after := permissions.Overwrite{Allow: permissions.Of(mustParse(g.perms())...)}
		after.Deny = permissions.Of(mustParse(g.perms())...) &^ after.Allow
		typ := "channel.overwrite.set"
		var afterData any = owData(after, true)
		if after.IsEmpty() {
			typ, afterData = "channel.overwrite.removed", nil
		}
		var tid any
		if t.ID != "" {
			tid = t.ID
		}
		return ev(g.seq, typ, "channel:"+cid, map[string]any{"target_type": t.Type, "target_id": tid, "before": owData(before, had), "after": afterData}), true
	}
}

func pickCategory(r *rand.Rand, s *history.State) (string, bool) {
	cats := map[string]bool{}
	for id, c := range s.Channels {
		if c.Kind == "category" {
			cats[id] = true
		}
	}
	return pick(r, cats)
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func nonNilAny(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// equal compares states, an empty set of roles and none alike.
func equal(a, b *history.State) bool { return dump(a) == dump(b) }

func dump(s *history.State) string {
	out := map[string]any{"global": s.Global.Names()}
	roles := map[string]history.Role{}
	for id, r := range s.Roles {
		roles[id] = *r
	}
	channels := map[string]any{}
	for id, c := range s.Channels {
		ows := map[string]permissions.Overwrite{}
		for t, o := range c.Overwrites {
			ows[t.Type+":"+t.ID] = o
		}
		channels[id] = []any{c.ID, c.Name, c.Topic, c.Kind, c.ParentID, c.Position, c.CreatedAt, ows}
	}
	users := map[string]any{}
	for id, u := range s.Users {
		var until string
		if u.TimeoutUntil != nil {
			until = u.TimeoutUntil.UTC().String()
		}
		users[id] = []any{u.Username, u.DisplayName, u.Status, u.IsOwner, slices.Sorted(maps.Keys(u.Roles)), until, u.CreatedAt.UTC()}
	}
	out["roles"], out["channels"], out["users"] = roles, channels, users
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	return string(b)
}

package httpapi_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

func memChange(e *testenv.Env, token, roleID string, add, remove []string) *testenv.Response {
	body := map[string]any{}
	if add != nil {
		body["add"] = add
	}
	if remove != nil {
		body["remove"] = remove
	}
	return e.Do(testenv.Req{Method: "POST", Path: "/roles/" + roleID + "/members", Token: token, Body: body})
}

func memResult(t *testing.T, res *testenv.Response) api.RoleMembersResult {
	t.Helper()
	catWant(t, res, http.StatusOK)
	var r api.RoleMembersResult
	res.JSON(t, &r)
	return r
}

// memMembers walks GET /roles/{id}/members.
func memMembers(t *testing.T, e *testenv.Env, roleID string, limit int) []string {
	t.Helper()
	return e2eWalk(t, e, e.Owner, "/roles/"+roleID+"/members", limit, nil)
}

func memEvents(t *testing.T, e *testenv.Env) []api.Event {
	t.Helper()
	var log api.EventList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=user.role.*&limit=200", Token: e.Owner}).JSON(t, &log)
	return log.Items
}

// Bulk membership: every change or none, idempotent, one event per changed
// user; the members list pages the holders.
func TestRoleMembersBulk(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods", "MANAGE_MESSAGES")
		var ids []string
		for i := range 7 {
			ids = append(ids, e.NewUser(fmt.Sprintf("u%d", i)).ID)
		}
		slices.Sort(ids)
		e.Assign(ids[0], "mods")

		r := memResult(t, memChange(e, e.Owner, "mods", ids[:5], nil))
		if r.Added != 4 || r.Removed != 0 {
			t.Errorf("added %d removed %d, want 4 and 0 (u0 had it)", r.Added, r.Removed)
		}
		if got := memMembers(t, e, "mods", 2); !slices.Equal(got, ids[:5]) {
			t.Errorf("members %v, want %v", got, ids[:5])
		}
		events := len(memEvents(t, e))
		r = memResult(t, memChange(e, e.Owner, "mods", ids[3:6], ids[:2]))
		if r.Added != 1 || r.Removed != 2 {
			t.Errorf("added %d removed %d, want 1 and 2", r.Added, r.Removed)
		}
		after := memEvents(t, e)
		if len(after)-events != 3 {
			t.Errorf("%d events for 3 changed users", len(after)-events)
		}
		for _, ev := range after[:3] { // newest first
			if ev.Data["role_id"] != "mods" || ev.Data["before"] == nil || ev.Data["after"] == nil {
				t.Errorf("event %s", e2eJSON(ev))
			}
		}
		// The same again: no change, no event.
		r = memResult(t, memChange(e, e.Owner, "mods", ids[3:6], ids[:2]))
		if r.Added != 0 || r.Removed != 0 || len(memEvents(t, e)) != len(after) {
			t.Errorf("a repeated change: %+v and %d new events", r, len(memEvents(t, e))-len(after))
		}
		var u api.User
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + ids[5], Token: e.Owner}).JSON(t, &u)
		if !slices.Contains(u.Roles, "mods") {
			t.Errorf("user %s", e2eJSON(u))
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles/nope/members", Token: e.Owner}), http.StatusNotFound, "not_found")
	})
}

// Bad bulk input is a 400 at its index and changes nothing; a user the
// caller may not change is a 403 naming them, and nothing changes.
func TestRoleMembersRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		// A new role lands at 1: mods 3, helpers 2, secret 1 (mods lack
		// secret's MANAGE_MESSAGES).
		e.NewRole("mods", "MANAGE_ROLES", "VIEW_CHANNEL")
		e.NewRole("helpers", "VIEW_CHANNEL")
		e.NewRole("secret", "MANAGE_MESSAGES")
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mods")
		peer := e.NewUser("peer")
		e.Assign(peer.ID, "mods")
		a, b := e.NewUser("ua").ID, e.NewUser("ub").ID
		snapshot := func() string {
			return e2eJSON(e2eWalk(t, e, e.Owner, "/users", 200, nil)) + e2eJSON(memMembers(t, e, "helpers", 200)) +
				e2eJSON(memMembers(t, e, "secret", 200))
		}
		before := snapshot()
		beforeEvents := len(memEvents(t, e))
		unknown := "01936f4e-8d2a-7c3b-9a4e-5f6a7b8c9d0e"
		for _, c := range []struct {
			name      string
			res       *testenv.Response
			status    int
			locations []string
		}{
			{"an unknown user", memChange(e, mod.Token, "helpers", []string{a, unknown}, []string{b}), 400, []string{"body.add[1]"}},
			{"unknown users in both lists", memChange(e, mod.Token, "helpers", []string{unknown}, []string{b, "not-a-user"}), 400, nil},
			{"a user in both lists", memChange(e, mod.Token, "helpers", []string{a, b}, []string{b}), 400, []string{"body.remove[0]"}},
			{"a user twice", memChange(e, mod.Token, "helpers", []string{a, a}, nil), 400, nil},
			{"more than 1,000", memChange(e, mod.Token, "helpers", slices.Repeat([]string{a}, 1001), nil), 400, nil},
			{"a user not below the caller", memChange(e, mod.Token, "helpers", []string{a, peer.ID}, nil), 403, nil},
			{"a role with a permission the caller lacks", memChange(e, mod.Token, "secret", []string{a}, nil), 403, nil},
			{"a role not below the caller", memChange(e, mod.Token, "mods", []string{a}, nil), 403, nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				code := "validation"
				if c.status == 403 {
					code = "forbidden"
				}
				p := e2eProblem(t, c.res, c.status, code)
				for _, loc := range c.locations {
					if p.Errors == nil || !slices.ContainsFunc(*p.Errors, func(f api.FieldError) bool { return f.Location == loc }) {
						t.Errorf("errors %s, want one at %s", e2eJSON(p.Errors), loc)
					}
				}
			})
		}
		// 'a user not below the caller' names the user.
		p := e2eProblem(t, memChange(e, mod.Token, "helpers", []string{a, peer.ID}, nil), 403, "forbidden")
		if p.UserId == nil || *p.UserId != peer.ID || p.Reason == nil || *p.Reason != "role_hierarchy" {
			t.Errorf("refusal %+v", p)
		}
		if after := snapshot(); after != before || len(memEvents(t, e)) != beforeEvents {
			t.Errorf("refused changes changed something:\n%s\n%s", before, after)
		}
		// Oneself is allowed, like a single assignment.
		if r := memResult(t, memChange(e, mod.Token, "helpers", []string{mod.ID, a}, nil)); r.Added != 2 {
			t.Errorf("%+v", r)
		}
	})
}

// A thousand users at once, on both stores.
func TestRoleMembersThousand(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("crowd")
		ids := make([]string, 1000)
		for i := range ids {
			res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": fmt.Sprintf("m%04d", i)}})
			ids[i] = res.Map(t)["id"].(string)
		}
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if r := memResult(t, memChange(e, e.Owner, "crowd", ids, nil)); r.Added != 1000 {
			t.Errorf("%+v", r)
		}
		got := memMembers(t, e, "crowd", 200)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%d members listed", len(got))
		}
		if r := memResult(t, memChange(e, e.Owner, "crowd", nil, ids[:999])); r.Removed != 999 {
			t.Errorf("%+v", r)
		}
		if got := memMembers(t, e, "crowd", 50); !slices.Equal(got, ids[999:]) {
			t.Errorf("left %v", got)
		}
	})
}

// The owner's roles are changed by the owner alone: a role manager who may
// change everyone else's is refused in bulk too, and nobody's roles change.
func TestRoleMembersOwnerIsTheOwners(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("crowd")
		e.NewRole("managers", "MANAGE_ROLES")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/managers/move", Token: e.Owner, Body: map[string]any{"position": 2}})
		boss := e.NewUser("boss")
		e.Assign(boss.ID, "managers")
		alice := e.NewUser("alice")
		owner := e2eOwnerID(t, e)
		for _, c := range []struct{ add, remove []string }{{[]string{alice.ID, owner}, nil}, {nil, []string{owner}}} {
			p := e2eProblem(t, memChange(e, boss.Token, "crowd", c.add, c.remove), http.StatusForbidden, "forbidden")
			if p.Reason == nil || *p.Reason != api.RoleHierarchy {
				t.Errorf("reason %v", p.Reason)
			}
		}
		if got := memMembers(t, e, "crowd", 50); len(got) != 0 {
			t.Errorf("members after refusals: %v", got)
		}
		if r := memResult(t, memChange(e, boss.Token, "crowd", []string{alice.ID}, nil)); r.Added != 1 {
			t.Errorf("%+v", r)
		}
		if r := memResult(t, memChange(e, e.Owner, "crowd", []string{owner}, nil)); r.Added != 1 {
			t.Errorf("the owner adding themself: %+v", r)
		}
	})
}

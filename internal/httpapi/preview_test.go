package httpapi_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

var preChannelScoped = []string{"MANAGE_ROLES", "MANAGE_CHANNELS", "VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY",
	"ATTACH_FILES", "MANAGE_MESSAGES", "EMBED_LINKS", "MENTION_EVERYONE", "ADD_REACTIONS"}

func preSome(r *rand.Rand, from []string) []string {
	var out []string
	for _, p := range from {
		if r.IntN(4) == 0 {
			out = append(out, p)
		}
	}
	return out
}

func prePreview(t *testing.T, e *testenv.Env, token string, body map[string]any) api.PermissionPreview {
	t.Helper()
	res := e.Do(testenv.Req{Method: "POST", Path: "/permissions/preview", Token: token, Body: body})
	catWant(t, res, http.StatusOK)
	var p api.PermissionPreview
	res.JSON(t, &p)
	return p
}

// The preview of a set of roles is what a member holding exactly those
// roles has: property-tested against GET /users/{id}/permissions over
// random communities, explanations included.
func TestPreviewMatchesAMemberWithTheRoles(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		r := rand.New(rand.NewPCG(7, uint64(len(kind))))
		global := append(preSome(r, preChannelScoped), "VIEW_CHANNEL")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner, Body: map[string]any{"permissions": slices.Compact(slices.Sorted(slices.Values(global)))}})
		roles := []string{"r0", "r1", "r2", "r3", "r4"}
		for _, id := range roles {
			e.NewRole(id, preSome(r, preChannelScoped)...)
		}
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/cat/create", Token: e.Owner, Body: map[string]any{"name": "cat", "kind": "category"}})
		channels := []string{"cat"}
		for i := range 6 {
			id := fmt.Sprintf("c%d", i)
			body := map[string]any{"name": id}
			if i%2 == 0 {
				body["parent_id"] = "cat"
			}
			e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Token: e.Owner, Body: body})
			channels = append(channels, id)
		}
		for _, ch := range channels {
			if allow, deny := preSome(r, preChannelScoped), preSome(r, preChannelScoped); r.IntN(2) == 0 {
				e.SetOverwrite(ch, "everyone", "", allow, slices.DeleteFunc(deny, func(p string) bool { return slices.Contains(allow, p) }))
			}
			for _, role := range roles {
				if r.IntN(3) == 0 {
					allow := preSome(r, preChannelScoped)
					deny := slices.DeleteFunc(preSome(r, preChannelScoped), func(p string) bool { return slices.Contains(allow, p) })
					if len(allow)+len(deny) > 0 {
						e.SetOverwrite(ch, "role", role, allow, deny)
					}
				}
			}
		}
		for trial := range 8 {
			var held []string
			for _, role := range roles {
				if r.IntN(2) == 0 {
					held = append(held, role)
				}
			}
			u := e.NewUser(fmt.Sprintf("member%d", trial))
			if len(held) > 0 {
				memResult(t, memChange(e, e.Owner, held[0], []string{u.ID}, nil))
				for _, role := range held[1:] {
					e.Assign(u.ID, role)
				}
			}
			p := prePreview(t, e, e.Owner, map[string]any{"roles": nonNilStrings(held), "explain": true, "channel_ids": channels})
			var base api.UserPermissions
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/permissions?explain=true", Token: e.Owner}).JSON(t, &base)
			if e2eJSON(p.Base) != e2eJSON(base.Permissions) || e2eJSON(p.BaseExplain) != e2eJSON(base.Explain) {
				t.Errorf("roles %v: base %s, the member has %s", held, e2eJSON(p.Base), e2eJSON(base.Permissions))
			}
			if got, want := previewChannels(p), catIDs(catChannels(t, e, e.Owner, "")); !slices.Equal(got, want) {
				t.Errorf("channels %v, want %v (tree order)", got, want)
			}
			for _, c := range p.Channels {
				var in api.UserPermissions
				e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/permissions?explain=true&channelID=" + c.ChannelId, Token: e.Owner}).JSON(t, &in)
				if e2eJSON(c.Permissions) != e2eJSON(in.Permissions) || e2eJSON(c.Explain) != e2eJSON(in.Explain) {
					t.Errorf("roles %v in %s: preview %s, the member has %s", held, c.ChannelId, e2eJSON(c.Permissions), e2eJSON(in.Permissions))
				}
			}
		}
		// channel_ids narrows, in tree order.
		p := prePreview(t, e, e.Owner, map[string]any{"roles": []string{}, "channel_ids": []string{"c3", "c2", "cat"}})
		if got := previewChannels(p); !slices.Equal(got, []string{"cat", "c2", "c3"}) || p.BaseExplain != nil || p.Channels[0].Explain != nil {
			t.Errorf("narrowed preview %s", e2eJSON(p))
		}
	})
}

func previewChannels(p api.PermissionPreview) []string {
	var ids []string
	for _, c := range p.Channels {
		ids = append(ids, c.ChannelId)
	}
	return ids
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Preview's refusals: unknown roles and channels at their index, roles not
// below the caller, callers without MANAGE_ROLES.
func TestPreviewRefusals(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		// A new role lands at 1: high 3, mods 2, low 1.
		e.NewRole("high")
		e.NewRole("mods", "MANAGE_ROLES", "VIEW_CHANNEL")
		e.NewRole("low", "SEND_MESSAGES")
		e.NewChannel("ops")
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mods")
		plain := e.NewUser("plain")
		post := func(token string, body map[string]any) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/permissions/preview", Token: token, Body: body})
		}
		p := e2eProblem(t, post(mod.Token, map[string]any{"roles": []string{"low", "nope"}, "channel_ids": []string{"ops", "gone"}}), 400, "validation")
		if e2eJSON(locations(p)) != `["body.roles[1]","body.channel_ids[1]"]` {
			t.Errorf("errors %s", e2eJSON(p.Errors))
		}
		p = e2eProblem(t, post(mod.Token, map[string]any{"roles": []string{"low", "high"}}), 403, "forbidden")
		if p.Reason == nil || *p.Reason != "role_hierarchy" || p.RoleId == nil || *p.RoleId != "high" {
			t.Errorf("refusal %+v", p)
		}
		e2eProblem(t, post(mod.Token, map[string]any{"roles": []string{"mods"}}), 403, "forbidden")
		e2eProblem(t, post(plain.Token, map[string]any{"roles": []string{}}), 403, "forbidden")
		prePreview(t, e, mod.Token, map[string]any{"roles": []string{"low"}})
		prePreview(t, e, e.Owner, map[string]any{"roles": []string{"high", "mods", "low"}})
	})
}

func locations(p api.Problem) []string {
	var out []string
	if p.Errors != nil {
		for _, f := range *p.Errors {
			out = append(out, f.Location)
		}
	}
	return out
}

// With explain, a preview covers at most 50 channels, named in
// channel_ids; without it, every channel.
func TestPreviewExplainCoversAPageOfChannels(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods", "MANAGE_ROLES", "VIEW_CHANNEL")
		e.NewRole("low", "SEND_MESSAGES")
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mods")
		ids := make([]string, 51)
		for i := range ids {
			ids[i] = fmt.Sprintf("c%02d", i)
			e.NewChannel(ids[i])
		}
		post := func(body map[string]any) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/permissions/preview", Token: mod.Token, Body: body})
		}
		for _, tc := range []struct {
			name string
			body map[string]any
		}{
			{"every channel", map[string]any{"roles": []string{"low"}, "explain": true}},
			{"51 channels", map[string]any{"roles": []string{"low"}, "explain": true, "channel_ids": ids}},
		} {
			p := e2eProblem(t, post(tc.body), http.StatusBadRequest, "validation")
			if got := locations(p); !slices.Equal(got, []string{"body.channel_ids"}) {
				t.Errorf("%s: errors %s, want one at body.channel_ids", tc.name, e2eJSON(p.Errors))
			}
		}
		p := prePreview(t, e, mod.Token, map[string]any{"roles": []string{"low"}, "explain": true, "channel_ids": ids[:50]})
		if len(p.Channels) != 50 || p.BaseExplain == nil {
			t.Fatalf("50 channels explained: %d channels", len(p.Channels))
		}
		for _, c := range p.Channels {
			if c.Explain == nil || len(*c.Explain) == 0 {
				t.Fatalf("channel %s without its explanation", c.ChannelId)
			}
		}
		for _, body := range []map[string]any{
			{"roles": []string{"low"}},
			{"roles": []string{"low"}, "explain": false, "channel_ids": ids},
		} {
			if p := prePreview(t, e, mod.Token, body); len(p.Channels) != 51 || p.Channels[0].Explain != nil {
				t.Errorf("%s: %d channels, want all 51 without explanations", e2eJSON(body), len(p.Channels))
			}
		}
	})
}

// At the default limits (250 roles, each with an overwrite in every
// channel, IDs of 64 characters), the explanation of one channel holds
// about 5,000 steps: a preview explains as many channels as fit in 20,000
// steps, stays under 8 MiB, and refuses more with a 400 at
// body.channel_ids. Without explain, every channel is a small answer.
func TestPreviewExplainAtTheLimitsStaysUnder8MiB(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner, Body: widestTemplate(250, 5)})
		roles := make([]string, 250)
		for i := range roles {
			roles[i] = widestID("r", i)
		}
		children := []string{widestID("c", 1), widestID("c", 2), widestID("c", 3), widestID("c", 4)}
		res := e.Do(testenv.Req{Method: "POST", Path: "/permissions/preview", Token: e.Owner,
			Body: map[string]any{"roles": roles, "explain": true, "channel_ids": children}})
		if p := e2eProblem(t, res, http.StatusBadRequest, "validation"); !slices.Equal(locations(p), []string{"body.channel_ids"}) {
			t.Errorf("4 channels: errors %s, want one at body.channel_ids", e2eJSON(p.Errors))
		}
		res = e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/permissions/preview", Token: e.Owner,
			Body: map[string]any{"roles": roles, "explain": true, "channel_ids": children[:3]}})
		var p api.PermissionPreview
		res.JSON(t, &p)
		steps := 0
		for _, c := range p.Channels {
			for _, x := range *c.Explain {
				steps += len(x.Steps)
			}
		}
		if len(p.Channels) != 3 || steps < 15000 {
			t.Fatalf("3 channels explained with %d steps; the setup is not at the limits", steps)
		}
		if len(res.Body) > 8<<20 {
			t.Errorf("the explanation of 3 channels is %d bytes, over 8 MiB", len(res.Body))
		}
		t.Logf("3 channels explained: %d steps, %d bytes", steps, len(res.Body))
		res = e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/permissions/preview", Token: e.Owner, Body: map[string]any{"roles": roles}})
		if len(res.Body) > 1<<20 {
			t.Errorf("the preview of every channel without explain is %d bytes", len(res.Body))
		}
	})
}

// widestID is an ID of 64 characters, the longest there is.
func widestID(prefix string, i int) string {
	id := fmt.Sprintf("%s%03d-", prefix, i)
	return id + strings.Repeat("x", 64-len(id))
}

// widestTemplate is a community at the limits of what an explanation
// holds: every permission but ADMINISTRATOR global and in each of roles
// roles, and one category with channels-1 synced children, each with an
// everyone overwrite and an overwrite of every role touching every
// channel-scoped permission.
func widestTemplate(roles, channels int) map[string]any {
	var all []string
	for _, p := range e2eCatalog {
		if p != "ADMINISTRATOR" {
			all = append(all, p)
		}
	}
	rs := make([]map[string]any, roles)
	overwrites := []map[string]any{{"target_type": "everyone", "allow": []string{}, "deny": preChannelScoped}}
	for i := range rs {
		rs[i] = map[string]any{"id": widestID("r", i), "name": "r", "position": roles - i, "color": nil, "permissions": all}
		ow := map[string]any{"target_type": "role", "target_id": widestID("r", i), "allow": preChannelScoped, "deny": []string{}}
		if i%2 == 1 {
			ow["allow"], ow["deny"] = []string{}, preChannelScoped
		}
		overwrites = append(overwrites, ow)
	}
	cat := widestID("c", 0)
	chs := []map[string]any{{"id": cat, "kind": "category", "name": "cat", "parent_id": nil, "position": 0, "topic": nil, "overwrites": overwrites}}
	for i := 1; i < channels; i++ {
		chs = append(chs, map[string]any{"id": widestID("c", i), "kind": "text", "name": "c", "parent_id": cat, "position": i, "topic": nil, "overwrites": overwrites})
	}
	return map[string]any{"format": "guildhall-template/1", "global_permissions": all, "roles": rs, "channels": chs}
}

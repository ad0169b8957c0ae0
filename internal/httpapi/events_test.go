package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

// --- helpers (prefix ev)

// evPage reads one page of the audit log as the owner.
func evPage(t testing.TB, e *testenv.Env, query string) api.EventList {
	t.Helper()
	var page api.EventList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?" + query, Token: e.Owner}).JSON(t, &page)
	return page
}

// evWalk reads every page of the audit log with the filters given (as the
// owner), newest first, failing on a repeated seq or a wrong order.
func evWalk(t testing.TB, e *testenv.Env, filters url.Values, limit int) []api.Event {
	t.Helper()
	var out []api.Event
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("the audit log never ends")
		}
		q := url.Values{}
		for k, v := range filters {
			q[k] = v
		}
		q.Set("limit", strconv.Itoa(limit))
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		page := evPage(t, e, q.Encode())
		if len(page.Items) > limit {
			t.Fatalf("page of %d items with limit %d", len(page.Items), limit)
		}
		for _, ev := range page.Items {
			if n := len(out); n > 0 && ev.Seq >= out[n-1].Seq {
				t.Fatalf("audit log not strictly newest first: seq %d after %d", ev.Seq, out[n-1].Seq)
			}
			out = append(out, ev)
		}
		if !page.NextCursor.IsSpecified() || page.NextCursor.IsNull() {
			return out
		}
		cursor = page.NextCursor.MustGet()
	}
}

// evSince returns the events with seq > after, oldest first.
func evSince(t testing.TB, e *testenv.Env, after int64) []api.Event {
	t.Helper()
	var out []api.Event
	cursor := ""
	for {
		q := "limit=200"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		page := evPage(t, e, q)
		for _, ev := range page.Items {
			if ev.Seq <= after {
				slices.Reverse(out)
				return out
			}
			out = append(out, ev)
		}
		if !page.NextCursor.IsSpecified() || page.NextCursor.IsNull() {
			slices.Reverse(out)
			return out
		}
		cursor = page.NextCursor.MustGet()
	}
}

// evLastSeq is the newest event's seq (0 when there is none).
func evLastSeq(t testing.TB, e *testenv.Env) int64 {
	t.Helper()
	page := evPage(t, e, "limit=1")
	if len(page.Items) == 0 {
		return 0
	}
	return page.Items[0].Seq
}

// evNone fails when any event newer than seq exists.
func evNone(t testing.TB, e *testenv.Env, seq int64) {
	t.Helper()
	if got := evSince(t, e, seq); len(got) > 0 {
		t.Fatalf("%d event(s) written, want none: %s", len(got), evJSON(got))
	}
}

// evOr dereferences an optional list.
func evOr[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// evActor is an event's actor_id, "" when null.
func evActor(ev api.Event) string {
	a, _ := ev.ActorId.Get()
	return a
}

func evJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func evSeqs(list []api.Event) []int64 {
	out := make([]int64, len(list))
	for i, ev := range list {
		out[i] = ev.Seq
	}
	return out
}

// evCheckData compares the members of want with those of data, as JSON.
func evCheckData(t testing.TB, data, want map[string]any) {
	t.Helper()
	for k, w := range want {
		g, ok := data[k]
		if !ok {
			t.Errorf("data has no %q: %s", k, evJSON(data))
			continue
		}
		if evJSON(g) != evJSON(w) {
			t.Errorf("data.%s = %s, want %s", k, evJSON(g), evJSON(w))
		}
	}
}

// evAdmin creates a user holding a role with ADMINISTRATOR, the actor of the
// mutation table (a non-owner, so actor_id tells them apart).
func evAdmin(t testing.TB, e *testenv.Env) testenv.User {
	t.Helper()
	e.NewRole("boss", "ADMINISTRATOR")
	admin := e.NewUser("admin")
	e.Assign(admin.ID, "boss")
	return admin
}

// --- the table over every mutating operation

type evFixture struct {
	e            *testenv.Env
	admin        testenv.User
	bob          string // created by the table
	bobToken     string
	tokenID      string
	tokenSecret  string
	globalBefore []string
	template     api.Template
	webhookID    string
	revertSeq    int64 // the event the revert case reverts
}

type evCase struct {
	op      string // the contract's operationId
	name    string
	asOwner bool                             // sent with the owner's token (an owner-only operation)
	setup   func(t *testing.T, f *evFixture) // its events are not counted
	req     func(f *evFixture) testenv.Req   // sent with the admin's token and a reason
	status  int
	typ     string
	subj    func(f *evFixture) string
	data    func(f *evFixture) map[string]any
	absent  []string // data members that must not exist
	after   func(t *testing.T, f *evFixture, res *testenv.Response, ev api.Event)
}

func evSubject(s string) func(*evFixture) string { return func(*evFixture) string { return s } }

func evStatic(m map[string]any) func(*evFixture) map[string]any {
	return func(*evFixture) map[string]any { return m }
}

const evMergePatch = "application/merge-patch+json"

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// evMutations is every mutating operation of the contract, in an order where
// each case may rely on the earlier ones.
func evMutations() []evCase {
	none := []string{}
	return []evCase{
		// roles
		{op: "createRole", name: "create", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/create", Body: map[string]any{"name": "Mods", "permissions": []string{"SEND_MESSAGES"}}}
		}, status: 201, typ: "role.created", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"name": "Mods", "position": 1, "color": nil, "permissions": []string{"SEND_MESSAGES"}})},
		{op: "updateRole", name: "patch color", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/roles/mods", Type: evMergePatch, Body: `{"color":"#ff0000"}`}
		}, status: 200, typ: "role.updated", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": map[string]any{"name": "Mods", "color": nil}, "after": map[string]any{"name": "Mods", "color": "#ff0000"}})},
		{op: "renameRole", name: "rename", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": "Moderators"}}
		}, status: 200, typ: "role.renamed", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": "Mods", "after": "Moderators"})},
		{op: "moveRole", name: "move down", setup: func(_ *testing.T, f *evFixture) {
			f.e.NewRole("helpers") // helpers 1, mods 2, boss 3
		}, req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: map[string]any{"position": 1}}
		}, status: 200, typ: "role.moved", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": 2, "after": 1})},
		{op: "replaceRolePermissions", name: "replace", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Body: map[string]any{"permissions": []string{"EMBED_LINKS", "SEND_MESSAGES"}}}
		}, status: 200, typ: "role.permissions.set", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": []string{"SEND_MESSAGES"}, "after": []string{"SEND_MESSAGES", "EMBED_LINKS"}})},
		{op: "legacyAddRolePermissions", name: "add_perm", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/add_perm", Body: map[string]any{"permissions": []string{"ADD_REACTIONS"}}}
		}, status: 200, typ: "role.permissions.set", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": []string{"SEND_MESSAGES", "EMBED_LINKS"}, "after": []string{"SEND_MESSAGES", "EMBED_LINKS", "ADD_REACTIONS"}})},
		{op: "legacyRemoveRolePermissions", name: "remove_perm", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/remove_perm", Body: map[string]any{"permissions": []string{"EMBED_LINKS"}}}
		}, status: 200, typ: "role.permissions.set", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"before": []string{"SEND_MESSAGES", "EMBED_LINKS", "ADD_REACTIONS"}, "after": []string{"SEND_MESSAGES", "ADD_REACTIONS"}})},

		// users and their roles
		{op: "createUser", name: "create", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": "bob", "display_name": "Bob", "email": "bob@example.com"}}
		}, status: 201, typ: "user.created", subj: func(f *evFixture) string { return "user:" + f.bob },
			data:   evStatic(map[string]any{"username": "bob", "display_name": "Bob"}),
			absent: []string{"email"},
			after: func(t *testing.T, f *evFixture, res *testenv.Response, _ api.Event) {
				// Runs before the subject is compared: the ID is the server's.
				f.bob = res.Map(t)["id"].(string)
			}},
		{op: "updateUser", name: "replace", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/users/" + f.bob, Body: map[string]any{"username": "bob", "display_name": "Bobby", "email": "bob@example.org", "status": "active"}}
		}, status: 200, typ: "user.updated", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{
				"before":        map[string]any{"username": "bob", "display_name": "Bob", "status": "active"},
				"after":         map[string]any{"username": "bob", "display_name": "Bobby", "status": "active"},
				"email_changed": true})},
		{op: "patchUser", name: "display name", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/users/" + f.bob, Type: evMergePatch, Body: `{"display_name":"Bob"}`}
		}, status: 200, typ: "user.updated", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{
				"before":        map[string]any{"username": "bob", "display_name": "Bobby", "status": "active"},
				"after":         map[string]any{"username": "bob", "display_name": "Bob", "status": "active"},
				"email_changed": false})},
		{op: "patchUser", name: "timeout", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/users/" + f.bob, Type: evMergePatch,
				Body: `{"timeout_until":"` + evTimeout.Format(time.RFC3339Nano) + `"}`}
		}, status: 200, typ: "user.timeout", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"before": nil, "after": evTimeout.Format(time.RFC3339Nano)})},
		{op: "patchUser", name: "end the timeout", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/users/" + f.bob, Type: evMergePatch, Body: `{"timeout_until":null}`}
		}, status: 200, typ: "user.timeout", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"before": evTimeout.Format(time.RFC3339Nano), "after": nil})},
		{op: "changeRoleMembers", name: "add", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/members", Body: map[string]any{"add": []string{f.bob}}}
		}, status: 200, typ: "user.role.assigned", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": none, "after": []string{"mods"}})},
		{op: "changeRoleMembers", name: "remove", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/members", Body: map[string]any{"remove": []string{f.bob}}}
		}, status: 200, typ: "user.role.removed", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": []string{"mods"}, "after": none})},
		{op: "assignUserRole", name: "assign", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/users/" + f.bob + "/roles/mods"}
		}, status: 204, typ: "user.role.assigned", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": none, "after": []string{"mods"}})},
		{op: "removeUserRole", name: "remove", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/users/" + f.bob + "/roles/mods"}
		}, status: 204, typ: "user.role.removed", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": []string{"mods"}, "after": none})},
		{op: "legacyAddRoleUser", name: "add_user", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/add_user", Body: map[string]any{"user_id": f.bob}}
		}, status: 204, typ: "user.role.assigned", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": none, "after": []string{"mods"}})},
		{op: "legacyRemoveRoleUser", name: "remove_user", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/remove_user", Body: map[string]any{"user_id": f.bob}}
		}, status: 204, typ: "user.role.removed", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"role_id": "mods", "before": []string{"mods"}, "after": none})},

		// tokens (the admin's own)
		{op: "createToken", name: "create", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/users/" + f.admin.ID + "/tokens", Body: map[string]any{"name": "ci"}}
		}, status: 201, typ: "user.token.created", subj: func(f *evFixture) string { return "user:" + f.admin.ID },
			data: func(f *evFixture) map[string]any { return map[string]any{"token_id": f.tokenID, "name": "ci"} },
			after: func(t *testing.T, f *evFixture, res *testenv.Response, ev api.Event) {
				m := res.Map(t)
				f.tokenID, f.tokenSecret = m["id"].(string), m["token"].(string)
				if strings.Contains(evJSON(ev), f.tokenSecret) || strings.Contains(evJSON(ev), f.tokenSecret[3:]) {
					t.Errorf("the event holds the token's secret: %s", evJSON(ev))
				}
			}},
		{op: "deleteToken", name: "revoke", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/users/" + f.admin.ID + "/tokens/" + f.tokenID}
		}, status: 204, typ: "user.token.deleted", subj: func(f *evFixture) string { return "user:" + f.admin.ID },
			data: func(f *evFixture) map[string]any { return map[string]any{"token_id": f.tokenID} }},

		// the admin's profile links
		{op: "replaceProfileLinks", name: "replace", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/profile/link", Body: map[string]any{"links": map[string]string{"site": "https://a.example"}}}
		}, status: 200, typ: "profile.links.set", subj: func(f *evFixture) string { return "user:" + f.admin.ID },
			data: evStatic(map[string]any{"before": map[string]string{}, "after": map[string]string{"site": "https://a.example"}})},
		{op: "updateProfileLinks", name: "merge", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/profile/link", Type: evMergePatch, Body: `{"links":{"blog":"https://b.example","site":null}}`}
		}, status: 200, typ: "profile.links.set", subj: func(f *evFixture) string { return "user:" + f.admin.ID },
			data: evStatic(map[string]any{"before": map[string]string{"site": "https://a.example"}, "after": map[string]string{"blog": "https://b.example"}})},
		{op: "deleteProfileLinks", name: "delete", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/profile/link"}
		}, status: 204, typ: "profile.links.deleted", subj: func(f *evFixture) string { return "user:" + f.admin.ID },
			data: evStatic(map[string]any{"before": map[string]string{"blog": "https://b.example"}, "after": map[string]string{}})},

		// global permissions
		{op: "replaceGlobalPermissions", name: "replace", setup: func(t *testing.T, f *evFixture) {
			var g api.PermissionList
			f.e.Must(200, testenv.Req{Method: "GET", Path: "/permissions/global", Token: f.e.Owner}).JSON(t, &g)
			for _, p := range g.Permissions {
				f.globalBefore = append(f.globalBefore, string(p))
			}
		}, req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": []string{"SEND_MESSAGES", "VIEW_CHANNEL"}}}
		}, status: 200, typ: "global.permissions.set", subj: evSubject("global:permissions"),
			data: func(f *evFixture) map[string]any {
				return map[string]any{"before": f.globalBefore, "after": []string{"VIEW_CHANNEL", "SEND_MESSAGES"}}
			}},

		// channels, overwrites, attachments
		{op: "createChannel", name: "create", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/create", Body: map[string]any{"name": "General", "topic": "Welcome"}}
		}, status: 201, typ: "channel.created", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"name": "General", "topic": "Welcome"})},
		{op: "updateChannel", name: "patch topic", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/channels/general", Type: evMergePatch, Body: `{"topic":"Hello"}`}
		}, status: 200, typ: "channel.updated", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"before": map[string]any{"name": "General", "topic": "Welcome"}, "after": map[string]any{"name": "General", "topic": "Hello"}})},
		{op: "reorderChannels", name: "move", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/reorder", Body: map[string]any{"positions": []any{map[string]any{"id": "general", "position": 3}}}}
		}, status: 200, typ: "channel.moved", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"before": map[string]any{"parent_id": nil, "position": 0}, "after": map[string]any{"parent_id": nil, "position": 3}})},
		{op: "renameChannel", name: "rename", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/rename", Body: map[string]any{"name": "Lobby"}}
		}, status: 200, typ: "channel.renamed", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"before": "General", "after": "Lobby"})},
		{op: "setChannelOverwrite", name: "create", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/permissions", Body: map[string]any{
				"target_type": "role", "target_id": "mods", "allow": []string{"SEND_MESSAGES"}, "deny": []string{"ADD_REACTIONS"}}}
		}, status: 200, typ: "channel.overwrite.set", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"target_type": "role", "target_id": "mods", "before": nil,
				"after": map[string]any{"allow": []string{"SEND_MESSAGES"}, "deny": []string{"ADD_REACTIONS"}}})},
		{op: "setChannelOverwrite", name: "change", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/permissions", Body: map[string]any{
				"target_type": "role", "target_id": "mods", "allow": []string{"EMBED_LINKS", "SEND_MESSAGES"}, "deny": none}}
		}, status: 200, typ: "channel.overwrite.set", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"target_type": "role", "target_id": "mods",
				"before": map[string]any{"allow": []string{"SEND_MESSAGES"}, "deny": []string{"ADD_REACTIONS"}},
				"after":  map[string]any{"allow": []string{"SEND_MESSAGES", "EMBED_LINKS"}, "deny": none}})},
		{op: "setChannelOverwrite", name: "remove (empty)", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/permissions", Body: map[string]any{
				"target_type": "role", "target_id": "mods", "allow": none, "deny": none}}
		}, status: 200, typ: "channel.overwrite.removed", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"target_type": "role", "target_id": "mods",
				"before": map[string]any{"allow": []string{"SEND_MESSAGES", "EMBED_LINKS"}, "deny": none}, "after": nil})},
		{op: "putAttachment", name: "new", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/channels/general/attachment?attachmentID=notes.txt", Type: "text/plain", Body: []byte("hello")}
		}, status: 201, typ: "channel.attachment.created", subj: evSubject("attachment:general/notes.txt"),
			data: evStatic(map[string]any{"channel_id": "general", "attachment_id": "notes.txt", "content_type": "text/plain",
				"size": 5, "sha256": sha256Hex("hello")})},
		{op: "putAttachment", name: "replace", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/channels/general/attachment?attachmentID=notes.txt", Type: "text/plain", Body: []byte("hello, world")}
		}, status: 200, typ: "channel.attachment.updated", subj: evSubject("attachment:general/notes.txt"),
			data: evStatic(map[string]any{"channel_id": "general", "attachment_id": "notes.txt", "size": 12, "sha256": sha256Hex("hello, world")})},
		{op: "deleteAttachment", name: "delete", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/channels/general/attachment?attachmentID=notes.txt"}
		}, status: 204, typ: "channel.attachment.deleted", subj: evSubject("attachment:general/notes.txt"),
			data: evStatic(map[string]any{"channel_id": "general", "attachment_id": "notes.txt", "size": 12, "sha256": sha256Hex("hello, world")})},
		{op: "deleteChannel", name: "cascade", setup: func(_ *testing.T, f *evFixture) {
			f.e.SetOverwrite("general", "everyone", "", nil, []string{"MENTION_EVERYONE"})
			f.e.Must(201, testenv.Req{Method: "PUT", Path: "/channels/general/attachment?attachmentID=a.png", Token: f.e.Owner, Type: "image/png", Body: []byte("png")})
		}, req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/general/delete"}
		}, status: 204, typ: "channel.deleted", subj: evSubject("channel:general"),
			data: evStatic(map[string]any{"name": "Lobby", "overwrites": 1, "attachments": 1})},

		// cascading deletes of a role and a user
		{op: "deleteRole", name: "cascade", setup: func(_ *testing.T, f *evFixture) {
			f.e.Assign(f.bob, "mods")
			f.e.NewChannel("ops")
			f.e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
		}, req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/delete"}
		}, status: 204, typ: "role.deleted", subj: evSubject("role:mods"),
			data: evStatic(map[string]any{"name": "Moderators", "position": 1, "permissions": []string{"SEND_MESSAGES", "ADD_REACTIONS"},
				"users": 1, "overwrites": 1})},
		{op: "deleteUser", name: "cascade", setup: func(t *testing.T, f *evFixture) {
			f.e.Assign(f.bob, "helpers")
			tok := f.e.Must(201, testenv.Req{Method: "POST", Path: "/users/" + f.bob + "/tokens", Token: f.e.Owner, Body: map[string]any{"name": "x"}})
			f.bobToken = tok.Map(t)["token"].(string)
			f.e.SetOverwrite("ops", "user", f.bob, []string{"SEND_MESSAGES"}, nil)
			f.e.Must(200, testenv.Req{Method: "PUT", Path: "/profile/link", Token: f.bobToken,
				Body: map[string]any{"links": map[string]string{"x": "https://x.example", "y": "https://y.example"}}})
		}, req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/users/" + f.bob}
		}, status: 204, typ: "user.deleted", subj: func(f *evFixture) string { return "user:" + f.bob },
			data: evStatic(map[string]any{"username": "bob", "roles": []string{"helpers"}, "tokens": 1, "overwrites": 1, "profile_links": 2})},

		// a webhook: its URL's scheme and host only, never its secret
		{op: "createWebhook", name: "create", req: func(*evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/webhooks", Body: map[string]any{"url": "https://192.0.2.10/hook?key=k", "events": []string{"role.*"}}}
		}, status: 201, typ: "webhook.created", subj: func(f *evFixture) string { return "webhook:" + f.webhookID },
			data: func(f *evFixture) map[string]any {
				return map[string]any{"destination": "https://192.0.2.10", "events": []string{"role.*"}, "enabled": true, "creator_id": f.admin.ID}
			},
			absent: []string{"url", "secret"},
			after: func(t *testing.T, f *evFixture, res *testenv.Response, ev api.Event) {
				m := res.Map(t)
				f.webhookID = m["id"].(string)
				if secret := m["secret"].(string); strings.Contains(evJSON(ev), secret[len("whsec_"):]) {
					t.Errorf("the event holds the webhook's secret: %s", evJSON(ev))
				}
			}},
		{op: "updateWebhook", name: "disable", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/webhooks/" + f.webhookID, Type: evMergePatch, Body: `{"enabled":false}`}
		}, status: 200, typ: "webhook.updated", subj: func(f *evFixture) string { return "webhook:" + f.webhookID },
			data: func(f *evFixture) map[string]any {
				return map[string]any{"before": map[string]any{"destination": "https://192.0.2.10", "events": []string{"role.*"}, "description": "",
					"enabled": true, "creator_id": f.admin.ID}, "after": map[string]any{"destination": "https://192.0.2.10", "events": []string{"role.*"},
					"description": "", "enabled": false, "creator_id": f.admin.ID}}
			}},
		{op: "rotateWebhookSecret", name: "rotate", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/webhooks/" + f.webhookID + "/rotate"}
		}, status: 200, typ: "webhook.updated", subj: func(f *evFixture) string { return "webhook:" + f.webhookID },
			data:   evStatic(map[string]any{"secret_rotated": true}),
			absent: []string{"secret"},
			after: func(t *testing.T, f *evFixture, res *testenv.Response, ev api.Event) {
				if secret := res.Map(t)["secret"].(string); strings.Contains(evJSON(ev), secret[len("whsec_"):]) {
					t.Errorf("the event holds the webhook's secret: %s", evJSON(ev))
				}
			}},
		{op: "deleteWebhook", name: "delete", req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "DELETE", Path: "/webhooks/" + f.webhookID}
		}, status: 204, typ: "webhook.deleted", subj: func(f *evFixture) string { return "webhook:" + f.webhookID },
			data: evStatic(map[string]any{"destination": "https://192.0.2.10", "events": []string{"role.*"}, "enabled": false})},

		// a template that changes one thing
		{op: "importTemplate", name: "one change", asOwner: true, setup: func(t *testing.T, f *evFixture) {
			f.e.Must(200, testenv.Req{Method: "GET", Path: "/export", Token: f.e.Owner}).JSON(t, &f.template)
			f.template.GlobalPermissions = api.PermissionNames{"VIEW_CHANNEL"}
		}, req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/import", Body: f.template}
		}, status: 200, typ: "global.permissions.set", subj: evSubject("global:permissions"),
			data: evStatic(map[string]any{"before": []string{"VIEW_CHANNEL", "SEND_MESSAGES"}, "after": []string{"VIEW_CHANNEL"}})},

		// a revert writes the event of the change it makes, by hand's type
		{op: "revertAuditLogEntry", name: "a rename", setup: func(t *testing.T, f *evFixture) {
			f.e.NewRole("scribes")
			f.e.Must(200, testenv.Req{Method: "POST", Path: "/roles/scribes/rename", Token: f.e.Owner, Body: map[string]any{"name": "Scribes"}})
			f.revertSeq = evLastSeq(t, f.e)
		}, req: func(f *evFixture) testenv.Req {
			return testenv.Req{Method: "POST", Path: fmt.Sprintf("/audit-log/%d/revert", f.revertSeq)}
		}, status: 200, typ: "role.renamed", subj: evSubject("role:scribes"),
			data: evStatic(map[string]any{"before": "Scribes", "after": "scribes"})},
	}
}

// evTimeout is a timeout the mutation table sets.
var evTimeout = time.Now().Add(24 * time.Hour).UTC().Truncate(time.Microsecond)

// evOwnerID is the owner's user ID.
func evOwnerID(t *testing.T, e *testenv.Env) string {
	t.Helper()
	return e.Must(200, testenv.Req{Method: "GET", Path: "/me", Token: e.Owner}).Map(t)["id"].(string)
}

// Every successful change writes exactly one event, in the same request,
// with its type, subject, actor, reason and data (before/after for
// permission changes; what went with it for cascading deletes).
func TestEventsEveryMutation(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		f := &evFixture{e: e, admin: evAdmin(t, e)}
		types := map[string]bool{}
		for i, tc := range evMutations() {
			t.Run(tc.op+"/"+tc.name, func(t *testing.T) {
				var actor string
				if tc.setup != nil {
					tc.setup(t, f)
				}
				req := tc.req(f)
				req.Token, actor = f.admin.Token, f.admin.ID
				if tc.asOwner {
					req.Token, actor = e.Owner, evOwnerID(t, e)
				}
				reason := "case " + strconv.Itoa(i) + ": " + tc.op + " " + tc.name
				req.Headers = map[string]string{"X-Audit-Reason": reason}
				before := evLastSeq(t, e)
				res := e.Must(tc.status, req)
				got := evSince(t, e, before)
				if len(got) != 1 {
					t.Fatalf("%d events written, want exactly 1: %s", len(got), evJSON(got))
				}
				ev := got[0]
				if tc.after != nil {
					tc.after(t, f, res, ev)
				}
				types[string(ev.Type)] = true
				if string(ev.Type) != tc.typ {
					t.Errorf("type %q, want %q", ev.Type, tc.typ)
				}
				if want := tc.subj(f); ev.Subject != want {
					t.Errorf("subject %q, want %q", ev.Subject, want)
				}
				if a, err := ev.ActorId.Get(); err != nil || a != actor {
					t.Errorf("actor_id %s, want %q", evJSON(ev.ActorId), actor)
				}
				if r, err := ev.Reason.Get(); err != nil || r != reason {
					t.Errorf("reason %s, want %q", evJSON(ev.Reason), reason)
				}
				if ev.CreatedAt.Time().IsZero() || ev.CreatedAt.Time().Location() != time.UTC || time.Since(ev.CreatedAt.Time()) > time.Hour {
					t.Errorf("created_at %v", ev.CreatedAt)
				}
				evCheckData(t, ev.Data, tc.data(f))
				for _, k := range tc.absent {
					if _, ok := ev.Data[k]; ok {
						t.Errorf("data holds %q: %s", k, evJSON(ev.Data))
					}
				}
			})
		}
		// Every type the contract lists is written by some operation, but the
		// one the system writes alone when it cleans names at start-up
		// (TestStoredNamesCleanedAtStart).
		types["user.token.renamed"] = true
		var schema struct {
			Enum []string
		}
		doc, err := httpapi.LoadContract()
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := doc.Components.Schemas["EventType"].Value.MarshalJSON()
		_ = json.Unmarshal(raw, &schema)
		if len(schema.Enum) == 0 {
			t.Fatal("the contract's EventType has no enum")
		}
		for _, typ := range schema.Enum {
			if !types[typ] {
				t.Errorf("no operation of the table wrote %q", typ)
			}
		}
		for typ := range types {
			if !slices.Contains(schema.Enum, typ) {
				t.Errorf("type %q is not in the contract's EventType", typ)
			}
		}
	})
}

// The table above cannot fall behind the contract: every operation that is
// not GET or HEAD is in it, except the event-stream ticket (no change).
func TestEventsTableCoversEveryMutation(t *testing.T) {
	t.Parallel()
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	// They change nothing, or (a redelivery) nothing the audit log is about.
	exempt := map[string]bool{"createEventTicket": true, "previewPermissions": true, "redeliverWebhookDelivery": true}
	want := map[string]bool{}
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			if method == http.MethodGet || method == http.MethodHead || exempt[op.OperationID] {
				continue
			}
			want[op.OperationID] = true
		}
	}
	have := map[string]bool{}
	for _, tc := range evMutations() {
		have[tc.op] = true
	}
	var missing, unknown []string
	for op := range want {
		if !have[op] {
			missing = append(missing, op)
		}
	}
	for op := range have {
		if !want[op] {
			unknown = append(unknown, op)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("mutating operations without an event case: %v", missing)
	}
	if len(unknown) > 0 {
		t.Errorf("cases naming no mutating operation of the contract: %v", unknown)
	}
	if len(want) < 28 {
		t.Errorf("only %d mutating operations found in the contract", len(want))
	}
}

// A request that changes nothing (a no-op) answers its success and writes no
// event.
func TestEventsNoOpWritesNone(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods", "SEND_MESSAGES")
		e.NewRole("helpers")
		bob := e.NewUser("bob")
		e.Assign(bob.ID, "mods")
		e.Must(201, testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "Ops", "topic": "t"}})
		e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
		e.Must(200, testenv.Req{Method: "PUT", Path: "/profile/link", Token: bob.Token, Body: map[string]any{"links": map[string]string{"a": "https://a.example"}}})
		var g api.PermissionList
		e.Must(200, testenv.Req{Method: "GET", Path: "/permissions/global", Token: e.Owner}).JSON(t, &g)
		var bobUser api.User
		e.Must(200, testenv.Req{Method: "GET", Path: "/users/" + bob.ID, Token: e.Owner}).JSON(t, &bobUser)
		ownerToken := e.Owner

		cases := []struct {
			name   string
			req    testenv.Req
			status int
		}{
			{"rename channel to its name", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "Ops"}}, 200},
			{"patch channel with its values", testenv.Req{Method: "PATCH", Path: "/channels/ops", Type: evMergePatch, Body: `{"name":"Ops","topic":"t"}`}, 200},
			{"empty channel patch", testenv.Req{Method: "PATCH", Path: "/channels/ops", Type: evMergePatch, Body: `{}`}, 200},
			{"rename role to its name", testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": "mods"}}, 200},
			{"patch role with its color", testenv.Req{Method: "PATCH", Path: "/roles/mods", Type: evMergePatch, Body: `{"color":null}`}, 200},
			{"move role to its position", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: map[string]any{"position": 2}}, 200},
			{"replace role permissions with the same", testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Body: map[string]any{"permissions": []string{"SEND_MESSAGES"}}}, 200},
			{"add_perm of a held permission", testenv.Req{Method: "POST", Path: "/roles/mods/add_perm", Body: map[string]any{"permissions": []string{"SEND_MESSAGES"}}}, 200},
			{"remove_perm of an absent permission", testenv.Req{Method: "POST", Path: "/roles/mods/remove_perm", Body: map[string]any{"permissions": []string{"EMBED_LINKS"}}}, 200},
			{"assign an assigned role", testenv.Req{Method: "POST", Path: "/users/" + bob.ID + "/roles/mods"}, 204},
			{"remove an absent role", testenv.Req{Method: "DELETE", Path: "/users/" + bob.ID + "/roles/helpers"}, 204},
			{"add_user of a holder", testenv.Req{Method: "POST", Path: "/roles/mods/add_user", Body: map[string]any{"user_id": bob.ID}}, 204},
			{"remove_user of a non-holder", testenv.Req{Method: "POST", Path: "/roles/helpers/remove_user", Body: map[string]any{"user_id": bob.ID}}, 204},
			{"set an overwrite to its value", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: map[string]any{
				"target_type": "role", "target_id": "mods", "allow": []string{"SEND_MESSAGES"}, "deny": []string{}}}, 200},
			{"remove an absent overwrite", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: map[string]any{
				"target_type": "user", "target_id": bob.ID, "allow": []string{}, "deny": []string{}}}, 200},
			{"replace global permissions with the same", testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": g.Permissions}}, 200},
			{"replace a user with the same", testenv.Req{Method: "PUT", Path: "/users/" + bob.ID, Body: map[string]any{
				"username": bobUser.Username, "display_name": bobUser.DisplayName, "status": "active"}}, 200},
			{"replace own profile links with the same", testenv.Req{Method: "PUT", Path: "/profile/link", Token: bob.Token, Body: map[string]any{"links": map[string]string{"a": "https://a.example"}}}, 200},
			{"patch own links removing an absent label", testenv.Req{Method: "PATCH", Path: "/profile/link", Token: bob.Token, Type: evMergePatch, Body: `{"links":{"zz":null}}`}, 200},
			{"delete profile links when there are none", testenv.Req{Method: "DELETE", Path: "/profile/link", Token: ownerToken}, 204},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.req.Token == "" {
					tc.req.Token = e.Owner
				}
				tc.req.Headers = map[string]string{"X-Audit-Reason": "nothing"}
				before := evLastSeq(t, e)
				e.Must(tc.status, tc.req)
				evNone(t, e, before)
			})
		}
	})
}

// A refused, invalid or failed request writes no event and changes nothing;
// a change rolled back after its event was appended leaves no event either.
func TestEventsRefusedWritesNone(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("top", "MANAGE_ROLES", "MANAGE_CHANNELS") // a granter lacking most permissions
		granter := e.NewUser("granter")
		e.Assign(granter.ID, "top")
		e.NewRole("mods", "SEND_MESSAGES")
		member := e.NewUser("member")
		e.NewUser("bob")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
		chanTag := e.Must(200, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner}).Header.Get("ETag")

		absent := func(path string) func(t *testing.T) {
			return func(t *testing.T) {
				e.Must(404, testenv.Req{Method: "GET", Path: path, Token: e.Owner})
			}
		}
		name := func(path, want string) func(t *testing.T) {
			return func(t *testing.T) {
				got := e.Must(200, testenv.Req{Method: "GET", Path: path, Token: e.Owner}).Map(t)["name"]
				if got != want {
					t.Errorf("%s name %v, want %q", path, got, want)
				}
			}
		}
		usersNamed := func(username string, want int) func(t *testing.T) {
			return func(t *testing.T) {
				n := 0
				var list api.UserList
				e.Must(200, testenv.Req{Method: "GET", Path: "/users?limit=200", Token: e.Owner}).JSON(t, &list)
				for _, u := range list.Items {
					if strings.EqualFold(u.Username, username) {
						n++
					}
				}
				if n != want {
					t.Errorf("%d users named %q, want %d", n, username, want)
				}
			}
		}
		cases := []struct {
			name   string
			req    testenv.Req
			status int
			code   string
			check  func(t *testing.T)
		}{
			{"403 missing permission", testenv.Req{Method: "POST", Path: "/channels/new/create", Token: member.Token, Body: map[string]any{"name": "x"}}, 403, "forbidden", absent("/channels/new")},
			{"403 cannot grant unheld", testenv.Req{Method: "POST", Path: "/roles/admins/create", Token: granter.Token, Body: map[string]any{"name": "x", "permissions": []string{"ADMINISTRATOR"}}}, 403, "forbidden", absent("/roles/admins")},
			{"403 global permissions", testenv.Req{Method: "PUT", Path: "/permissions/global", Token: granter.Token, Body: map[string]any{"permissions": []string{}}}, 403, "forbidden", func(t *testing.T) {
				var g api.PermissionList
				e.Must(200, testenv.Req{Method: "GET", Path: "/permissions/global", Token: e.Owner}).JSON(t, &g)
				if len(g.Permissions) == 0 {
					t.Error("the global permissions were emptied")
				}
			}},
			{"403 another user's token", testenv.Req{Method: "POST", Path: "/users/" + member.ID + "/tokens", Token: granter.Token, Body: map[string]any{"name": "x"}}, 403, "forbidden", func(t *testing.T) {
				var list api.TokenList
				e.Must(200, testenv.Req{Method: "GET", Path: "/users/" + member.ID + "/tokens", Token: e.Owner}).JSON(t, &list)
				if len(list.Items) != 1 {
					t.Errorf("%d tokens, want the 1 made by the fixture", len(list.Items))
				}
			}},
			{"400 unknown permission", testenv.Req{Method: "POST", Path: "/roles/fly/create", Token: e.Owner, Body: map[string]any{"name": "x", "permissions": []string{"FLY"}}}, 400, "validation", absent("/roles/fly")},
			{"400 reason too long", testenv.Req{Method: "POST", Path: "/channels/long/create", Token: e.Owner, Body: map[string]any{"name": "x"},
				Headers: map[string]string{"X-Audit-Reason": strings.Repeat("r", 513)}}, 400, "validation", absent("/channels/long")},
			{"400 reason not UTF-8", testenv.Req{Method: "POST", Path: "/channels/bytes/create", Token: e.Owner, Body: map[string]any{"name": "x"},
				Headers: map[string]string{"X-Audit-Reason": "caf\xe9"}}, 400, "validation", absent("/channels/bytes")},
			{"400 reason with a control character", testenv.Req{Method: "POST", Path: "/channels/tab/create", Token: e.Owner, Body: map[string]any{"name": "x"},
				Headers: map[string]string{"X-Audit-Reason": "a\tb"}}, 400, "validation", absent("/channels/tab")},
			{"400 reason not UTF-8 on an upload", testenv.Req{Method: "PUT", Path: "/channels/ops/attachment?attachmentID=a.txt", Token: e.Owner, Type: "text/plain", Body: []byte("x"),
				Headers: map[string]string{"X-Audit-Reason": "\xff"}}, 400, "validation", absent("/channels/ops/attachment?attachmentID=a.txt")},
			{"400 allow and deny overlap", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner, Body: map[string]any{
				"target_type": "everyone", "allow": []string{"SEND_MESSAGES"}, "deny": []string{"SEND_MESSAGES"}}}, 400, "validation", nil},
			{"401 no token", testenv.Req{Method: "POST", Path: "/channels/anon/create", Body: map[string]any{"name": "x"}}, 401, "unauthenticated", absent("/channels/anon")},
			{"404 missing channel", testenv.Req{Method: "POST", Path: "/channels/nope/rename", Token: e.Owner, Body: map[string]any{"name": "x"}}, 404, "not_found", absent("/channels/nope")},
			{"409 channel ID taken (rolled back)", testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "Other"}}, 409, "conflict", name("/channels/ops", "ops")},
			{"409 username taken (rolled back)", testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": "BOB"}}, 409, "conflict", usersNamed("bob", 1)},
			{"409 role ID taken", testenv.Req{Method: "POST", Path: "/roles/mods/create", Token: e.Owner, Body: map[string]any{"name": "Other"}}, 409, "conflict", name("/roles/mods", "mods")},
			{"412 stale If-Match", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: e.Owner, Body: map[string]any{"name": "Renamed"},
				Headers: map[string]string{"If-Match": `"999"`}}, 412, "precondition_failed", name("/channels/ops", "ops")},
			{"412 stale If-Match on delete", testenv.Req{Method: "POST", Path: "/channels/ops/delete", Token: e.Owner,
				Headers: map[string]string{"If-Match": `"999"`}}, 412, "precondition_failed", name("/channels/ops", "ops")},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.req.Headers == nil {
					tc.req.Headers = map[string]string{"X-Audit-Reason": "refused"}
				}
				before := evLastSeq(t, e)
				res := e.Do(tc.req)
				if res.Status != tc.status {
					t.Fatalf("status %d, want %d: %s", res.Status, tc.status, res.Body)
				}
				if p := res.Problem(t); string(p.Code) != tc.code {
					t.Errorf("code %q, want %q", p.Code, tc.code)
				}
				evNone(t, e, before)
				if tc.check != nil {
					tc.check(t)
				}
			})
		}
		if tag := e.Must(200, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner}).Header.Get("ETag"); tag != chanTag {
			t.Errorf("the channel's ETag moved from %s to %s", chanTag, tag)
		}

		t.Run("rolled back after appending", func(t *testing.T) {
			before := evLastSeq(t, e)
			boom := errors.New("boom")
			_, err := e.App.Store.Write(t.Context(), func(tx *store.Tx) error {
				now := model.Now()
				if _, err := tx.InsertChannel(t.Context(), model.Channel{ID: "ghost", Name: "ghost", CreatedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
				if err := tx.AppendEvent(t.Context(), model.Event{Type: "channel.created", Subject: "channel:ghost"}); err != nil {
					return err
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("write: %v", err)
			}
			evNone(t, e, before)
			absent("/channels/ghost")(t)
			// The next change gets an event (seq may skip the rolled-back one).
			e.NewChannel("after")
			got := evSince(t, e, before)
			if len(got) != 1 || got[0].Subject != "channel:after" {
				t.Fatalf("events after the rollback: %s", evJSON(got))
			}
		})
	})
}

// X-Audit-Reason is stored as sent (up to 512 characters); an absent or
// blank one is null.
func TestEventsReason(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		long := strings.Repeat("é", 512) // characters, not bytes
		cases := []struct {
			name   string
			header map[string]string
			want   *string
		}{
			{"absent", nil, nil},
			{"empty", map[string]string{"X-Audit-Reason": ""}, nil},
			{"blank", map[string]string{"X-Audit-Reason": "   "}, nil},
			{"text", map[string]string{"X-Audit-Reason": "Spam cleanup, ticket #42 ✓"}, evPtr("Spam cleanup, ticket #42 ✓")},
			{"512 characters", map[string]string{"X-Audit-Reason": long}, &long},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := evLastSeq(t, e)
				e.Must(201, testenv.Req{Method: "POST", Path: "/channels/c" + strconv.Itoa(i) + "/create", Token: e.Owner,
					Body: map[string]any{"name": "x"}, Headers: tc.header})
				got := evSince(t, e, before)
				if len(got) != 1 {
					t.Fatalf("%d events", len(got))
				}
				if evJSON(got[0].Reason) != evJSON(tc.want) {
					t.Errorf("reason %s, want %s", evJSON(got[0].Reason), evJSON(tc.want))
				}
			})
		}
	})
}

func evPtr[T any](v T) *T { return &v }

// The audit log's filters select exactly the events a model filter selects
// over the whole log, newest first, across pages.
func TestEventsAuditLogFilters(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("boss", "ADMINISTRATOR")
		a, b := e.NewUser("anna"), e.NewUser("ben")
		e.Assign(a.ID, "boss")
		e.Assign(b.ID, "boss")
		do := func(u testenv.User, status int, method, path string, body any) {
			e.Must(status, testenv.Req{Method: method, Path: path, Token: u.Token, Body: body})
		}
		do(a, 201, "POST", "/roles/r1/create", map[string]any{"name": "r1"})
		do(a, 201, "POST", "/roles/r2/create", map[string]any{"name": "r2"})
		do(a, 201, "POST", "/channels/c1/create", map[string]any{"name": "c1"})
		do(a, 200, "POST", "/roles/r1/rename", map[string]any{"name": "R1"})
		time.Sleep(2 * time.Millisecond) // distinct timestamps around the middle
		do(b, 201, "POST", "/channels/c2/create", map[string]any{"name": "c2"})
		do(b, 200, "PUT", "/roles/r2/permissions", map[string]any{"permissions": []string{"SEND_MESSAGES"}})
		do(b, 201, "POST", "/roles/r3/create", map[string]any{"name": "r3"})
		do(b, 200, "POST", "/channels/c1/rename", map[string]any{"name": "C1"})

		all := evWalk(t, e, nil, 200)
		var middle time.Time
		for _, ev := range all {
			if ev.Subject == "channel:c2" {
				middle = ev.CreatedAt.Time()
			}
		}
		if middle.IsZero() {
			t.Fatal("no channel:c2 event")
		}
		ts := func(tm time.Time) string { return tm.UTC().Format(time.RFC3339Nano) }
		cases := []struct {
			name    string
			query   url.Values
			atLeast int
			keep    func(api.Event) bool
		}{
			{"actor a", url.Values{"actorID": {a.ID}}, 4, func(ev api.Event) bool { return evActor(ev) == a.ID }},
			{"actor b", url.Values{"actorID": {b.ID}}, 4, func(ev api.Event) bool { return evActor(ev) == b.ID }},
			{"exact type", url.Values{"type": {"role.created"}}, 4, func(ev api.Event) bool { return ev.Type == "role.created" }},
			{"type prefix role.*", url.Values{"type": {"role.*"}}, 6, func(ev api.Event) bool { return strings.HasPrefix(string(ev.Type), "role.") }},
			{"type prefix user.role.*", url.Values{"type": {"user.role.*"}}, 2, func(ev api.Event) bool { return strings.HasPrefix(string(ev.Type), "user.role.") }},
			{"subject", url.Values{"subject": {"role:r1"}}, 2, func(ev api.Event) bool { return ev.Subject == "role:r1" }},
			{"actor and type", url.Values{"actorID": {b.ID}, "type": {"channel.*"}}, 2, func(ev api.Event) bool {
				return evActor(ev) == b.ID && strings.HasPrefix(string(ev.Type), "channel.")
			}},
			{"since (inclusive)", url.Values{"since": {ts(middle)}}, 4, func(ev api.Event) bool { return !ev.CreatedAt.Time().Before(middle) }},
			{"until (exclusive)", url.Values{"until": {ts(middle)}}, 4, func(ev api.Event) bool { return ev.CreatedAt.Time().Before(middle) }},
			{"since and until", url.Values{"since": {ts(all[len(all)-1].CreatedAt.Time())}, "until": {ts(middle)}}, 4, func(ev api.Event) bool {
				return !ev.CreatedAt.Time().Before(all[len(all)-1].CreatedAt.Time()) && ev.CreatedAt.Time().Before(middle)
			}},
			{"nothing matches", url.Values{"subject": {"role:none"}}, 0, func(api.Event) bool { return false }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var want []int64
				for _, ev := range all {
					if tc.keep(ev) {
						want = append(want, ev.Seq)
					}
				}
				if len(want) < tc.atLeast {
					t.Fatalf("the model selects %d events, want at least %d: the fixture is wrong", len(want), tc.atLeast)
				}
				if tc.atLeast > 0 && len(want) == len(all) {
					t.Fatalf("the filter selects the whole log: the fixture is wrong")
				}
				got := evWalk(t, e, tc.query, 3) // small pages: the filter holds across pages
				if !slices.Equal(evSeqs(got), want) {
					t.Errorf("seqs %v, want %v", evSeqs(got), want)
				}
			})
		}
	})
}

// The audit log pages newest first with a cursor that visits every event
// once and is bound to its filters.
func TestEventsAuditLogPaging(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for i := range 7 {
			e.NewChannel("c" + strconv.Itoa(i))
		}
		whole := evPage(t, e, "limit=200")
		if len(whole.Items) < 8 || !whole.NextCursor.IsNull() {
			t.Fatalf("whole log: %d items, next_cursor %s", len(whole.Items), evJSON(whole.NextCursor))
		}
		for _, limit := range []int{1, 2, 3, len(whole.Items), len(whole.Items) + 1} {
			t.Run("limit "+strconv.Itoa(limit), func(t *testing.T) {
				got := evWalk(t, e, nil, limit)
				if !slices.Equal(evSeqs(got), evSeqs(whole.Items)) {
					t.Errorf("walk %v, want %v", evSeqs(got), evSeqs(whole.Items))
				}
			})
		}
		t.Run("default limit", func(t *testing.T) {
			if page := evPage(t, e, ""); len(page.Items) != len(whole.Items) {
				t.Errorf("%d items without a limit", len(page.Items))
			}
		})

		t.Run("a filter few events pass ends pages short", func(t *testing.T) {
			// 1,200 events after the channels' (written here in one
			// transaction): a page reads at most 1,000 events, so the
			// channels' events are on a later page than the first.
			if _, err := e.App.Store.Write(t.Context(), func(tx *store.Tx) error {
				for i := range 1200 {
					if err := tx.AppendEvent(t.Context(), model.Event{Type: "user.updated", Subject: "user:filler" + strconv.Itoa(i)}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			first := evPage(t, e, "type=channel.*&limit=50")
			if len(first.Items) != 0 || first.NextCursor.IsNull() {
				t.Errorf("first page: %d events, next_cursor %s; want none and a cursor", len(first.Items), evJSON(first.NextCursor))
			}
			if got := evWalk(t, e, url.Values{"type": {"channel.*"}}, 50); len(got) != 7 {
				t.Errorf("type=channel.*: %d events, want the 7 channels'", len(got))
			}
		})

		first := evPage(t, e, "limit=2")
		cur := first.NextCursor.MustGet()
		second := evPage(t, e, "limit=2&cursor="+url.QueryEscape(cur))
		if len(second.Items) != 2 || second.Items[0].Seq >= first.Items[1].Seq {
			t.Fatalf("second page %v after %v", evSeqs(second.Items), evSeqs(first.Items))
		}
		bad := []struct{ name, query, location string }{
			{"cursor with another type", "type=role.*&cursor=" + url.QueryEscape(cur), "query.cursor"},
			{"cursor with an actor", "actorID=01936f4e-8d2a-7c3b-9a4e-5f6a7b8c9d0e&cursor=" + url.QueryEscape(cur), "query.cursor"},
			{"cursor with a since", "since=2020-01-01T00:00:00Z&cursor=" + url.QueryEscape(cur), "query.cursor"},
			{"malformed cursor", "cursor=bm90IGEgY3Vyc29y", "query.cursor"},
			{"limit 0", "limit=0", "query.limit"},
			{"limit 201", "limit=201", "query.limit"},
			{"bad type", "type=Role", "query.type"},
			{"bad subject", "subject=nokind", "query.subject"},
			{"bad since", "since=yesterday", "query.since"},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: "GET", Path: "/audit-log?" + tc.query, Token: e.Owner})
				if res.Status != 400 {
					t.Fatalf("status %d, want 400: %s", res.Status, res.Body)
				}
				p := res.Problem(t)
				found := false
				for _, fe := range evOr(p.Errors) {
					found = found || fe.Location == tc.location
				}
				if !found {
					t.Errorf("no error at %s: %s", tc.location, res.Body)
				}
			})
		}
	})
}

// The audit log, the stream and tickets need VIEW_AUDIT_LOG.
func TestEventsNeedViewAuditLog(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		e.NewRole("mods", "MANAGE_ROLES", "MANAGE_USERS", "MANAGE_CHANNELS", "MANAGE_MESSAGES")
		auditor, mod := e.NewUser("auditor"), e.NewUser("mod")
		e.Assign(auditor.ID, "auditors")
		e.Assign(mod.ID, "mods")
		ops := []struct{ method, path string }{
			{"GET", "/audit-log"},
			{"GET", "/events"},
			{"POST", "/events/ticket"},
		}
		for _, op := range ops {
			t.Run(op.method+" "+op.path, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: op.method, Path: op.path, Token: mod.Token})
				if res.Status != 403 {
					t.Fatalf("without VIEW_AUDIT_LOG: %d %s", res.Status, res.Body)
				}
				p := res.Problem(t)
				if p.Reason == nil || *p.Reason != "missing_permissions" || evJSON(p.MissingPermissions) != `["VIEW_AUDIT_LOG"]` {
					t.Errorf("403 body %s", res.Body)
				}
				res = e.Do(testenv.Req{Method: op.method, Path: op.path})
				if res.Status != 401 {
					t.Fatalf("without a token: %d %s", res.Status, res.Body)
				}
				res.Problem(t)
				if op.path == "/events" {
					s := sseOpen(t, e, auditor.Token, "", nil)
					s.Close()
					return
				}
				want := 200
				if op.method == "POST" {
					want = 201
				}
				e.Must(want, testenv.Req{Method: op.method, Path: op.path, Token: auditor.Token})
			})
		}
	})
}

// Retention: events older than the configured retention are purged, newer
// ones stay; the default keeps everything.
func TestEventsRetention(t *testing.T) {
	t.Parallel()
	if d := config.Default().EventRetention; d != 0 {
		t.Errorf("default retention %v, want 0 (keep everything)", d)
	}
	cfg, err := config.Parse("guildhall", nil, func(string) string { return "" })
	if err != nil || cfg.EventRetention != 0 {
		t.Errorf("parsed default retention %v (%v), want 0", cfg.EventRetention, err)
	}
	cfg, err = config.Parse("guildhall", []string{"--event-retention", "720h"}, func(string) string { return "" })
	if err != nil || cfg.EventRetention != 720*time.Hour {
		t.Errorf("--event-retention 720h: %v (%v)", cfg.EventRetention, err)
	}
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind) // the default: nothing is purged
		old := time.Now().Add(-72 * time.Hour).UTC().Truncate(time.Microsecond)
		appendOld := func(subject string) {
			_, err := e.App.Store.Write(t.Context(), func(tx *store.Tx) error {
				err := tx.AppendEvent(t.Context(), model.Event{Type: "channel.created", Subject: subject, CreatedAt: old})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		appendOld("channel:old1")
		appendOld("channel:old2")
		e.NewChannel("fresh")
		subjects := func(env *testenv.Env) []string {
			var out []string
			for _, ev := range evWalk(t, env, nil, 200) {
				out = append(out, ev.Subject)
			}
			return out
		}
		if s := subjects(e); !slices.Contains(s, "channel:old1") || !slices.Contains(s, "channel:fresh") {
			t.Fatalf("before any purge: %v", s)
		}

		t.Run("store purge", func(t *testing.T) {
			n, err := e.App.Store.PurgeEvents(t.Context(), old.Add(time.Microsecond))
			if err != nil || n != 2 {
				t.Fatalf("purged %d (%v), want 2", n, err)
			}
			s := subjects(e)
			if slices.Contains(s, "channel:old1") || slices.Contains(s, "channel:old2") || !slices.Contains(s, "channel:fresh") {
				t.Errorf("after the purge: %v", s)
			}
			if n, err := e.App.Store.PurgeEvents(t.Context(), old.Add(time.Microsecond)); err != nil || n != 0 {
				t.Errorf("second purge: %d (%v)", n, err)
			}
		})

		t.Run("configured retention purges at start", func(t *testing.T) {
			appendOld("channel:old3")
			cfg := e.Config
			cfg.EventRetention = 24 * time.Hour
			e2 := testenv.StartWith(t, kind, cfg) // same store; bootstrap finds it non-empty
			deadline := time.Now().Add(20 * time.Second)
			for slices.Contains(subjects(e2), "channel:old3") {
				if time.Now().After(deadline) {
					t.Fatal("the old event was not purged by the instance with a retention")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if s := subjects(e2); !slices.Contains(s, "channel:fresh") {
				t.Errorf("a fresh event was purged: %v", s)
			}
		})
	})
}

// evTicketExpired stores an already expired ticket for a user.
func evTicketExpired(t testing.TB, e *testenv.Env, userID, secret string) {
	t.Helper()
	_, err := e.App.Store.Write(context.Background(), func(tx *store.Tx) error {
		return tx.InsertTicket(context.Background(), guild.HashToken(secret), userID, "", time.Now().Add(-time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
}

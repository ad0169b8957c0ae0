package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

var e2eCatalog = []string{"ADMINISTRATOR", "MANAGE_USERS", "MANAGE_ROLES", "MANAGE_CHANNELS", "VIEW_AUDIT_LOG", "VIEW_CHANNEL",
	"SEND_MESSAGES", "READ_MESSAGE_HISTORY", "ATTACH_FILES", "MANAGE_MESSAGES", "EMBED_LINKS", "MENTION_EVERYONE", "ADD_REACTIONS",
	"MODERATE_MEMBERS", "MANAGE_WEBHOOKS"}

var e2eGlobalOnly = []string{"ADMINISTRATOR", "MANAGE_USERS", "VIEW_AUDIT_LOG", "MODERATE_MEMBERS", "MANAGE_WEBHOOKS"}

func TestPermissionsCatalog(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		res, err := e.Client(alice.Token).ListPermissionsWithResponse(t.Context())
		if err != nil || res.JSON200 == nil {
			t.Fatalf("catalog: %v %s", err, res.Body)
		}
		var names []string
		for _, p := range res.JSON200.Items {
			names = append(names, string(p.Name))
			if p.Description == "" {
				t.Errorf("%s has no description", p.Name)
			}
			want := []api.PermissionInfoScopes{"global", "channel"}
			if slices.Contains(e2eGlobalOnly, string(p.Name)) {
				want = []api.PermissionInfoScopes{"global"}
			}
			if !slices.Equal(p.Scopes, want) {
				t.Errorf("%s scopes %v, want %v", p.Name, p.Scopes, want)
			}
		}
		if !slices.Equal(names, e2eCatalog) || !res.JSON200.NextCursor.IsNull() {
			t.Errorf("catalog %s", res.Body)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/permissions"}), http.StatusUnauthorized, "unauthenticated")
	})
}

func TestPermissionsGlobal(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		roleAdmin := e2eMember(t, e, "mod", "MANAGE_ROLES", "MANAGE_USERS", "MANAGE_CHANNELS", "VIEW_AUDIT_LOG")
		admin := e2eMember(t, e, "admin", "ADMINISTRATOR")
		get := func() (string, string) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/permissions/global", Token: alice.Token})
			return e2eJSON(res.Map(t)["permissions"]), e2eETag(t, res)
		}
		put := func(token string, perms any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PUT", Path: "/permissions/global", Token: token, Body: map[string]any{"permissions": perms}, Headers: headers})
		}
		fresh := `["VIEW_CHANNEL","SEND_MESSAGES","READ_MESSAGE_HISTORY","ATTACH_FILES","EMBED_LINKS","ADD_REACTIONS"]`
		perms, tag := get()
		if perms != fresh {
			t.Fatalf("fresh global permissions %s, want %s", perms, fresh)
		}
		if base := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions", Token: alice.Token}).Map(t)["permissions"]; e2eJSON(base) != fresh {
			t.Errorf("a user without roles has %v", base)
		}

		t.Run("errors change nothing", func(t *testing.T) {
			seq := e2eSeq(t, e)
			p := e2eProblem(t, put(e.Owner, []string{"VIEW_CHANNEL", "ADMINISTRATOR"}, nil), http.StatusBadRequest, "validation")
			if msg := e2eField(t, p, "body.permissions"); !strings.Contains(msg, "ADMINISTRATOR") {
				t.Errorf("message %q", msg)
			}
			p = e2eProblem(t, put(e.Owner, []string{"VIEW_CHANNEL", "FLY"}, nil), http.StatusBadRequest, "validation")
			if msg := e2eField(t, p, "body.permissions[1]"); msg != `unknown permission "FLY"` {
				t.Errorf("message %q", msg)
			}
			p = e2eProblem(t, put(roleAdmin.Token, []string{"VIEW_CHANNEL"}, nil), http.StatusForbidden, "forbidden")
			if p.MissingPermissions == nil || !slices.Equal(*p.MissingPermissions, []api.PermissionName{"ADMINISTRATOR"}) {
				t.Errorf("403 %+v", p)
			}
			e2eProblem(t, put(alice.Token, []string{"VIEW_CHANNEL"}, nil), http.StatusForbidden, "forbidden")
			e2eProblem(t, put("", []string{"VIEW_CHANNEL"}, nil), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/permissions/global"}), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, put(e.Owner, []string{"VIEW_CHANNEL"}, e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner, Body: `{"permissions":[]}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, put(e.Owner, []string{strings.Repeat("A", 1<<20)}, nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			if p, tg := get(); p != fresh || tg != tag {
				t.Errorf("changed: %s %s", p, tg)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("replace", func(t *testing.T) {
			seq := e2eSeq(t, e)
			res := put(admin.Token, []string{"SEND_MESSAGES", "VIEW_CHANNEL"}, e2eIfMatch(tag))
			if res.Status != http.StatusOK || e2eJSON(res.Map(t)["permissions"]) != `["VIEW_CHANNEL","SEND_MESSAGES"]` {
				t.Fatalf("replace: %s", res)
			}
			tag2 := e2eETag(t, res)
			if p, tg := get(); p != `["VIEW_CHANNEL","SEND_MESSAGES"]` || tg != tag2 || tag2 == tag {
				t.Errorf("read back %s %s (was %s)", p, tg, tag)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"global.permissions.set"}) {
				t.Errorf("events %v", ev)
			}
			// Base permissions follow at once.
			base := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions", Token: alice.Token}).Map(t)["permissions"]
			if e2eJSON(base) != `["VIEW_CHANNEL","SEND_MESSAGES"]` {
				t.Errorf("alice's base %v", base)
			}
			// The same set again is a no-op.
			seq = e2eSeq(t, e)
			res = put(e.Owner, []string{"VIEW_CHANNEL", "SEND_MESSAGES"}, e2eIfMatch(tag2))
			if res.Status != http.StatusOK || e2eETag(t, res) != tag2 {
				t.Errorf("no-op: %s", res)
			}
			e2eNoEvent(t, e, seq)
			// Empty is allowed.
			if res := put(e.Owner, []string{}, nil); res.Status != http.StatusOK || e2eJSON(res.Map(t)["permissions"]) != `[]` {
				t.Errorf("empty: %s", res)
			}
		})
	})
}

// A user's base and channel permissions, and their explanation.
func TestPermissionsOfUser(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		mod := e2eMember(t, e, "mod", "MANAGE_ROLES")
		admin := e2eMember(t, e, "admin", "ADMINISTRATOR")
		e.NewRole("helpers", "MANAGE_MESSAGES", "MENTION_EVERYONE")
		e.NewRole("muted")
		e.Assign(alice.ID, "helpers")
		e.Assign(alice.ID, "muted")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "everyone", "", []string{"MANAGE_CHANNELS"}, []string{"SEND_MESSAGES", "ADD_REACTIONS"})
		e.SetOverwrite("ops", "role", "helpers", []string{"SEND_MESSAGES"}, nil)
		e.SetOverwrite("ops", "role", "muted", nil, []string{"SEND_MESSAGES", "EMBED_LINKS"})
		e.SetOverwrite("ops", "user", alice.ID, []string{"ADD_REACTIONS"}, []string{"MANAGE_CHANNELS"})
		perms := func(token, user, query string) api.UserPermissions {
			t.Helper()
			res := e.Do(testenv.Req{Method: "GET", Path: "/users/" + user + "/permissions" + query, Token: token})
			if res.Status != http.StatusOK {
				t.Fatalf("permissions %s: %s", query, res)
			}
			var p api.UserPermissions
			res.JSON(t, &p)
			if p.UserId != user {
				t.Errorf("user_id %s", p.UserId)
			}
			return p
		}

		t.Run("base", func(t *testing.T) {
			p := perms(alice.Token, alice.ID, "")
			want := `["VIEW_CHANNEL","SEND_MESSAGES","READ_MESSAGE_HISTORY","ATTACH_FILES","MANAGE_MESSAGES","EMBED_LINKS","MENTION_EVERYONE","ADD_REACTIONS"]`
			if e2eJSON(p.Permissions) != want || !p.ChannelId.IsNull() || p.Explain != nil {
				t.Errorf("alice's base %s", e2eJSON(p))
			}
			for _, tok := range []string{e.Owner, admin.Token} { // owner and ADMINISTRATOR: everything
				var id string
				if tok == admin.Token {
					id = admin.ID
				} else {
					id = e2eOwnerID(t, e)
				}
				if p := perms(tok, id, ""); e2eJSON(p.Permissions) != e2eJSON(e2eCatalog) {
					t.Errorf("base of %s: %v", id, p.Permissions)
				}
			}
		})
		t.Run("in a channel", func(t *testing.T) {
			// global+helpers, minus everyone deny (SEND, ADD_REACTIONS) plus MANAGE_CHANNELS,
			// roles merged: allow SEND (helpers) wins over deny SEND (muted); EMBED denied,
			// user: allow ADD_REACTIONS, deny MANAGE_CHANNELS.
			p := perms(mod.Token, alice.ID, "?channelID=ops")
			want := `["VIEW_CHANNEL","SEND_MESSAGES","READ_MESSAGE_HISTORY","ATTACH_FILES","MANAGE_MESSAGES","MENTION_EVERYONE","ADD_REACTIONS"]`
			if e2eJSON(p.Permissions) != want || p.ChannelId.MustGet() != "ops" {
				t.Errorf("alice in ops %s", e2eJSON(p))
			}
			// Without VIEW_CHANNEL nothing is left; without SEND_MESSAGES the dependants go.
			e.SetOverwrite("ops", "user", bob.ID, nil, []string{"SEND_MESSAGES"})
			if p := perms(bob.Token, bob.ID, "?channelID=ops"); e2eJSON(p.Permissions) != `["MANAGE_CHANNELS","VIEW_CHANNEL","READ_MESSAGE_HISTORY"]` {
				t.Errorf("bob without SEND_MESSAGES %v", p.Permissions)
			}
			e.SetOverwrite("ops", "user", bob.ID, nil, []string{"VIEW_CHANNEL"})
			if p := perms(mod.Token, bob.ID, "?channelID=ops"); len(p.Permissions) != 0 {
				t.Errorf("bob without VIEW_CHANNEL %v", p.Permissions)
			}
			// Bob himself may not learn that ops exists (docs/design.md §12): for him
			// it is an unknown channel.
			res := e.Do(testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/permissions?channelID=ops", Token: bob.Token})
			if res.Status != http.StatusBadRequest || e2eField(t, res.Problem(t), "query.channelID") != `no channel with ID "ops"` {
				t.Errorf("bob asking about the hidden ops: %s", res)
			}
			// The owner and ADMINISTRATOR bypass overwrites: every channel-scoped permission.
			e.SetOverwrite("ops", "user", admin.ID, nil, []string{"VIEW_CHANNEL"})
			var channelScoped []string
			for _, n := range e2eCatalog {
				if !slices.Contains(e2eGlobalOnly, n) {
					channelScoped = append(channelScoped, n)
				}
			}
			if p := perms(admin.Token, admin.ID, "?channelID=ops"); e2eJSON(p.Permissions) != e2eJSON(channelScoped) {
				t.Errorf("ADMINISTRATOR in ops %v", p.Permissions)
			}
		})
		t.Run("explain", func(t *testing.T) {
			p := perms(alice.Token, alice.ID, "?channelID=ops&explain=true")
			if p.Explain == nil || len(*p.Explain) != 10 {
				t.Fatalf("explain with a channel: want one entry per channel-scoped permission: %s", e2eJSON(p.Explain))
			}
			steps := map[string][]string{}
			for i, x := range *p.Explain {
				var kinds []string
				for _, s := range x.Steps {
					k := string(s.Kind) + "/" + string(s.Effect)
					if s.RoleId != nil {
						k += "/" + *s.RoleId
					}
					kinds = append(kinds, k)
					if s.Detail == "" {
						t.Errorf("%s: step without detail", x.Permission)
					}
				}
				steps[string(x.Permission)] = kinds
				if x.Granted != slices.Contains(p.Permissions, x.Permission) {
					t.Errorf("%s: granted %v disagrees with permissions %v", x.Permission, x.Granted, p.Permissions)
				}
				if i > 0 && slices.Index(e2eCatalog, string(x.Permission)) < slices.Index(e2eCatalog, string((*p.Explain)[i-1].Permission)) {
					t.Errorf("explain not in catalog order")
				}
			}
			wants := map[string][]string{
				"SEND_MESSAGES":   {"global/allow", "overwrite_everyone/deny", "overwrite_role/deny/muted", "overwrite_role/allow/helpers"},
				"EMBED_LINKS":     {"global/allow", "overwrite_role/deny/muted"},
				"MANAGE_CHANNELS": {"overwrite_everyone/allow", "overwrite_user/deny"},
				"ADD_REACTIONS":   {"global/allow", "overwrite_everyone/deny", "overwrite_user/allow"},
				"MANAGE_MESSAGES": {"role/allow/helpers"},
				"MANAGE_ROLES":    nil,
			}
			for perm, want := range wants {
				// Role overwrites are merged: their denials come before their grants.
				if got := steps[perm]; !slices.Equal(got, want) {
					t.Errorf("%s steps %v, want %v", perm, got, want)
				}
			}
			// Without VIEW_CHANNEL: implicit denials (asked by a moderator:
			// ops is hidden from bob himself).
			p = perms(mod.Token, bob.ID, "?channelID=ops&explain=true")
			for _, x := range *p.Explain {
				if x.Granted {
					t.Errorf("bob granted %s without VIEW_CHANNEL", x.Permission)
				}
				if x.Permission == "READ_MESSAGE_HISTORY" {
					last := x.Steps[len(x.Steps)-1]
					if last.Kind != "implicit" || last.Effect != "deny" {
						t.Errorf("READ_MESSAGE_HISTORY without VIEW_CHANNEL: %s", e2eJSON(x.Steps))
					}
				}
			}
			// Base explain covers the whole catalog; the owner's says owner.
			p = perms(e.Owner, e2eOwnerID(t, e), "?explain=true")
			if p.Explain == nil || len(*p.Explain) != len(e2eCatalog) {
				t.Fatalf("base explain: %s", e2eJSON(p.Explain))
			}
			for _, x := range *p.Explain {
				if !x.Granted || len(x.Steps) == 0 || x.Steps[0].Kind != "owner" {
					t.Errorf("owner %s: %s", x.Permission, e2eJSON(x))
				}
			}
			p = perms(admin.Token, admin.ID, "?explain=true")
			for _, x := range *p.Explain {
				if !x.Granted || !slices.ContainsFunc(x.Steps, func(s api.ExplanationStep) bool { return s.Kind == "administrator" }) {
					t.Errorf("ADMINISTRATOR %s: %s", x.Permission, e2eJSON(x))
				}
			}
			// explain=false is the default: no explain member.
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?explain=false", Token: alice.Token})
			if strings.Contains(string(res.Body), "explain") {
				t.Errorf("explain=false: %s", res.Body)
			}
		})
		t.Run("errors", func(t *testing.T) {
			ghost := "0192f1a0-0000-7000-8000-000000000000"
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + ghost + "/permissions", Token: e.Owner}), http.StatusNotFound, "not_found")
			p := e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?channelID=none", Token: e.Owner}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "query.channelID")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?channelID=NO", Token: e.Owner}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "query.channelID")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?explain=maybe", Token: e.Owner}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "query.explain")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/x/permissions", Token: e.Owner}), http.StatusBadRequest, "validation")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions", Token: bob.Token}), http.StatusForbidden, "forbidden")
			if p.MissingPermissions == nil || !slices.Equal(*p.MissingPermissions, []api.PermissionName{"MANAGE_ROLES"}) {
				t.Errorf("403 %+v", p)
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions"}), http.StatusUnauthorized, "unauthenticated")
		})
	})
}

// e2eOwnerID finds the owner's user ID.
func e2eOwnerID(t testing.TB, e *testenv.Env) string {
	t.Helper()
	var l api.UserList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=1", Token: e.Owner}).JSON(t, &l)
	if len(l.Items) == 0 || !l.Items[0].IsOwner {
		t.Fatalf("the first user is not the owner: %s", e2eJSON(l))
	}
	return l.Items[0].Id
}

// TestUserPermissionsFollowRoleChanges: another user's permissions are
// answered from their role IDs cached as of the credentials version; a role
// assigned or removed, on this instance or another, shows in the very next
// answer of either.
func TestUserPermissionsFollowRoleChanges(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		bob := e1.NewUser("bob")
		e1.NewRole("auditors", "VIEW_AUDIT_LOG")
		has := func(e *testenv.Env) bool {
			t.Helper()
			var p api.UserPermissions
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/permissions", Token: e.Owner}).JSON(t, &p)
			for _, n := range p.Permissions {
				if n == "VIEW_AUDIT_LOG" {
					return true
				}
			}
			return false
		}
		for _, e := range []*testenv.Env{e1, e2, e1, e2} { // cached on both
			if has(e) {
				t.Fatal("bob has VIEW_AUDIT_LOG before any role")
			}
		}
		e1.Assign(bob.ID, "auditors")
		if !has(e2) || !has(e1) {
			t.Fatal("a role assigned is not seen by the next answer")
		}
		e2.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + bob.ID + "/roles/auditors", Token: e2.Owner})
		if has(e1) || has(e2) {
			t.Fatal("a role removed is still seen by the next answer")
		}
	})
}

// TestManyRolesFollowChanges: a member of many roles (enough that what
// their list resolves to is kept, store.roleLists) is answered from their
// roles as they are now, on the very next request after each change: a
// role's permissions replaced, the role taken away and given back, the
// role deleted, and an overwrite of one of their roles in a channel; as
// the subject of GET permissions and as the caller.
func TestManyRolesFollowChanges(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		m := e.NewUser("many")
		for i := range 20 {
			role := fmt.Sprintf("m%02d", i)
			e.NewRole(role, "VIEW_CHANNEL")
			e.Assign(m.ID, role)
		}
		e.NewChannel("c")
		base := func() []any {
			return e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + m.ID + "/permissions", Token: e.Owner}).Map(t)["permissions"].([]any)
		}
		in := func() []any {
			return e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + m.ID + "/permissions?channelID=c", Token: e.Owner}).Map(t)["permissions"].([]any)
		}
		holds := func(want bool, step string) {
			t.Helper()
			has := slices.Contains(base(), any("MANAGE_CHANNELS"))
			res := e.Do(testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: m.Token})
			if has != want || (res.Status == http.StatusOK) != want {
				t.Fatalf("%s: MANAGE_CHANNELS held %v, VIEW_AUDIT_LOG answered %d; want %v", step, has, res.Status, want)
			}
		}
		grant := func(perms ...string) {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/m17/permissions", Token: e.Owner,
				Body: map[string]any{"permissions": perms}})
		}
		holds(false, "before")
		grant("VIEW_CHANNEL", "MANAGE_CHANNELS", "VIEW_AUDIT_LOG")
		holds(true, "role granted more")
		grant("VIEW_CHANNEL")
		holds(false, "role's permissions replaced")
		grant("VIEW_CHANNEL", "MANAGE_CHANNELS", "VIEW_AUDIT_LOG")
		holds(true, "granted again")
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + m.ID + "/roles/m17", Token: e.Owner})
		holds(false, "role taken away")
		e.Assign(m.ID, "m17")
		holds(true, "role given back")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/m17/delete", Token: e.Owner})
		holds(false, "role deleted")

		if !slices.Contains(in(), any("SEND_MESSAGES")) {
			t.Fatalf("in c before the overwrite: %v", in())
		}
		e.SetOverwrite("c", "role", "m03", nil, []string{"SEND_MESSAGES"})
		if got := in(); slices.Contains(got, any("SEND_MESSAGES")) {
			t.Fatalf("in c after m03 was denied SEND_MESSAGES: %v", got)
		}
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + m.ID + "/roles/m03", Token: e.Owner})
		if got := in(); !slices.Contains(got, any("SEND_MESSAGES")) {
			t.Fatalf("in c after m03 was taken away: %v", got)
		}
	})
}

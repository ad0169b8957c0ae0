package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/testenv"
)

// authzCaller is one kind of caller of the authorization matrix.
type authzCaller string

const (
	callerNoToken   authzCaller = "no token"
	callerGarbage   authzCaller = "garbage token"
	callerSuspended authzCaller = "suspended user"
	callerNone      authzCaller = "no permissions"
	callerExact     authzCaller = "exactly the required permission"
	callerDenied    authzCaller = "required permission denied by a channel overwrite"
	callerAdmin     authzCaller = "ADMINISTRATOR"
	callerOwner     authzCaller = "owner"
)

var authzCallers = []authzCaller{callerNoToken, callerGarbage, callerSuspended, callerNone, callerExact, callerDenied, callerAdmin, callerOwner}

// authzKey identifies a requirement: callers are built per requirement.
func authzKey(r authzRequirement) string {
	return r.Scope + ":" + strings.Join(r.Permissions, ",") + ":" + strings.Join(r.AnyOf, "|")
}

func authzSet(names []string) permissions.Set {
	var s permissions.Set
	for _, n := range names {
		p, ok := permissions.ByName(n)
		if !ok {
			panic("unknown permission " + n)
		}
		s = s.Union(permissions.Of(p))
	}
	return s
}

// authzGrantFor is the smallest role that meets r: its permissions and, in a
// channel, those docs/design.md §5 step 6 makes them depend on (nothing counts there
// without VIEW_CHANNEL; ATTACH_FILES, EMBED_LINKS and MENTION_EVERYONE not
// without SEND_MESSAGES).
func authzGrantFor(r authzRequirement) []string {
	set := authzSet(r.Permissions)
	if len(r.AnyOf) > 0 {
		set = set.Union(authzSet(r.AnyOf[:1])) // one will do: the first
	}
	if r.Scope == "channel" && !set.IsEmpty() {
		set = set.Union(permissions.Of(permissions.ViewChannel))
		if !set.Intersect(permissions.Of(permissions.AttachFiles, permissions.EmbedLinks, permissions.MentionEveryone)).IsEmpty() {
			set = set.Union(permissions.Of(permissions.SendMessages))
		}
	}
	return append([]string{}, set.Names()...)
}

// authzDenyFor is what the overwrite of the "denied" caller takes away: the
// required permissions an overwrite can hold (VIEW_CHANNEL when none can,
// to show that a global requirement ignores channel overwrites).
func authzDenyFor(r authzRequirement) []string {
	set := authzSet(r.Permissions).Intersect(permissions.ChannelScoped)
	if set.IsEmpty() {
		set = permissions.Of(permissions.ViewChannel)
	}
	return set.Names()
}

// authzSend sends a request like testenv.Env.Do, except that an event
// stream answers with its status and headers as soon as it opens.
func authzSend(t testing.TB, e *testenv.Env, r testenv.Req) *testenv.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body io.Reader
	ct := r.Type
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case string:
		body = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode body: %v", err)
		}
		body = bytes.NewReader(data)
		if ct == "" {
			ct = "application/json"
		}
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, e.URL+"/api"+r.Path, body)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return &testenv.Response{Status: resp.StatusCode, Header: resp.Header}
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", r.Method, r.Path, err)
	}
	return &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// authzState reads, as the owner, what a request may change: each path's
// status and (for successes) body, and the newest audit event. A refused
// request must leave it exactly as it was.
func authzState(t testing.TB, e *testenv.Env, paths ...string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range append(slices.Clone(paths), "/audit-log?limit=1") {
		res := e.Do(testenv.Req{Method: "GET", Path: p, Token: e.Owner})
		fmt.Fprintf(&b, "GET %s: %d", p, res.Status)
		if res.Status < 300 { // a problem's request_id differs on every read
			fmt.Fprintf(&b, " %s", res.Body)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// authzOwner is the owner as a testenv.User.
func authzOwner(t testing.TB, e *testenv.Env) testenv.User {
	t.Helper()
	var list api.UserList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=200", Token: e.Owner}).JSON(t, &list)
	for _, u := range list.Items {
		if u.IsOwner {
			return testenv.User{ID: u.Id, Username: u.Username, Token: e.Owner}
		}
	}
	t.Fatal("no owner in the user list")
	return testenv.User{}
}

// authzSuspend suspends a user (as the owner).
func authzSuspend(t testing.TB, e *testenv.Env, u testenv.User, status string) {
	t.Helper()
	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
		Body: map[string]any{"username": u.Username, "display_name": u.Username, "status": status}})
}

// authzTokenID mints a token for a user (as the owner) and returns its ID.
func authzTokenID(t testing.TB, e *testenv.Env, userID string) string {
	t.Helper()
	res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users/" + userID + "/tokens", Token: e.Owner,
		Body: map[string]any{"name": "spare"}})
	return res.Map(t)["id"].(string)
}

// authzFixture is one instance with a caller of every kind for every
// requirement of the contract. Global permissions are empty, so "no
// permissions" means none at all. Roles, top to bottom: admin
// (ADMINISTRATOR), need-<i> (exactly requirement i), floor; every role a
// case creates lands below them all.
type authzFixture struct {
	e                  *testenv.Env
	reqs               map[string]authzRequirement // by operationId
	owner, none, admin testenv.User
	suspended, victim  testenv.User
	exact, denied      map[string]testenv.User // by authzKey
	victimToken        string                  // a token ID of victim
	n                  int
	webhooks           map[string]string // by use: a webhook the rows share, or one to delete
}

func newAuthzFixture(t *testing.T, kind string) *authzFixture {
	t.Helper()
	e := testenv.Start(t, kind)
	f := &authzFixture{e: e, reqs: map[string]authzRequirement{}, exact: map[string]testenv.User{}, denied: map[string]testenv.User{}}
	_, ops := authzContractOps(t)
	keys := map[string]authzRequirement{}
	for _, c := range ops {
		r, err := authzRequirementOf(c.op)
		if err != nil {
			t.Fatalf("%s: %v", c.op.OperationID, err)
		}
		f.reqs[c.op.OperationID] = r
		if r.Scope != "public" {
			keys[authzKey(r)] = r
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)

	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner, Body: map[string]any{"permissions": []string{}}})
	e.NewRole("admin", "ADMINISTRATOR")
	for i, k := range sorted {
		e.NewRole(fmt.Sprintf("need-%d", i), authzGrantFor(keys[k])...)
	}
	e.NewRole("floor")
	f.owner = authzOwner(t, e)
	f.none = e.NewUser("nobody")
	f.victim = e.NewUser("victim")
	f.victimToken = authzTokenID(t, e, f.victim.ID)
	f.admin = e.NewUser("admin")
	e.Assign(f.admin.ID, "admin")
	f.suspended = e.NewUser("suspended")
	e.Assign(f.suspended.ID, "admin")
	authzSuspend(t, e, f.suspended, "suspended")
	e.NewChannel("ops")
	for i, k := range sorted {
		ex, de := e.NewUser(fmt.Sprintf("exact-%d", i)), e.NewUser(fmt.Sprintf("denied-%d", i))
		e.Assign(ex.ID, fmt.Sprintf("need-%d", i))
		e.Assign(de.ID, fmt.Sprintf("need-%d", i))
		e.SetOverwrite("ops", "user", de.ID, nil, authzDenyFor(keys[k]))
		f.exact[k], f.denied[k] = ex, de
	}
	e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/ops/attachment?attachmentID=logo.txt", Token: e.Owner,
		Body: "the logo", Type: "text/plain"})
	return f
}

func (f *authzFixture) next(prefix string) string {
	f.n++
	return fmt.Sprintf("%s-%d", prefix, f.n)
}

// caller returns who calls as c for requirement r, and their token. Callers
// without an identity of their own act as the victim in "self" cases.
func (f *authzFixture) caller(c authzCaller, r authzRequirement) (testenv.User, string) {
	key := authzKey(r)
	switch c {
	case callerNoToken:
		return f.victim, ""
	case callerGarbage:
		return f.victim, "gh_NotARealTokenNotARealTokenNotARealToken0"
	case callerSuspended:
		return f.suspended, f.suspended.Token
	case callerNone:
		return f.none, f.none.Token
	case callerExact, callerDenied:
		if r.Scope == "public" {
			return f.none, f.none.Token
		}
		u := f.exact[key]
		if c == callerDenied {
			u = f.denied[key]
		}
		return u, u.Token
	case callerAdmin:
		return f.admin, f.admin.Token
	}
	return f.owner, f.owner.Token
}

// freshChannel creates a channel where requirement r's "denied" caller has
// the overwrite that takes the requirement away.
func (f *authzFixture) freshChannel(t *testing.T, op string) string {
	id := f.next("chan")
	f.e.NewChannel(id)
	r := f.reqs[op]
	f.e.SetOverwrite(id, "user", f.denied[authzKey(r)].ID, nil, authzDenyFor(r))
	return id
}

func (f *authzFixture) freshRole(perms ...string) string {
	id := f.next("role")
	f.e.NewRole(id, perms...)
	return id
}

func (f *authzFixture) freshUser() testenv.User { return f.e.NewUser(f.next("user")) }

// webhook returns the path of a webhook kept for a use, made (as the
// owner) when there is none yet or the last one was deleted: a fresh one
// per request would outgrow the limit of 25. The shared one has a
// delivery, msg_authz.
func (f *authzFixture) webhook(t *testing.T, use string) string {
	t.Helper()
	if id, ok := f.webhooks[use]; ok && f.e.Do(testenv.Req{Method: "GET", Path: "/webhooks/" + id, Token: f.e.Owner}).Status == http.StatusOK {
		return "/webhooks/" + id
	}
	res := f.e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/webhooks", Token: f.e.Owner,
		Body: map[string]any{"url": "https://192.0.2.10/" + use, "events": []string{"role.*"}}})
	id := res.Map(t)["id"].(string)
	if f.webhooks == nil {
		f.webhooks = map[string]string{}
	}
	f.webhooks[use] = id
	if use == "shared" {
		operatorExec(t, f.e, "INSERT INTO webhook_deliveries (id, webhook_id, event_seq, state, attempts, created_at, updated_at) "+
			"VALUES ('msg_authz', '"+id+"', 1, 'failed', 8, 1, 1)")
	}
	return "/webhooks/" + id
}

func (f *authzFixture) upload(id string) {
	f.e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/ops/attachment?attachmentID=" + id, Token: f.e.Owner,
		Body: "bytes of " + id, Type: "text/plain"})
}

// authzRow is one operation (or one variant of it) in the matrix.
type authzRow struct {
	name string // operationId, with the variant in parentheses
	op   string
	// prepare makes what the request needs (fresh targets, as the owner) for
	// a caller who is me, and returns the request (without its token) and
	// the paths whose state a refusal must leave unchanged.
	prepare func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string)
	success int
	want    map[authzCaller]int // exceptions to the expectation derived from the contract
	reason  string              // the reason of this row's 403s when not missing_permissions
}

func get(path string) func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
	return func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
		return testenv.Req{Method: "GET", Path: path}, nil
	}
}

var notSelfOrOwner = map[authzCaller]int{callerNone: 403, callerExact: 403, callerDenied: 403, callerAdmin: 403}

// ownerOnly: every caller with a token but the owner is refused.
var ownerOnly = notSelfOrOwner

func authzRows() []authzRow {
	mergePatch := "application/merge-patch+json"
	return []authzRow{
		{name: "getOpenAPIYAML", op: "getOpenAPIYAML", success: 200, prepare: get("/openapi.yaml")},
		{name: "getOpenAPIJSON", op: "getOpenAPIJSON", success: 200, prepare: get("/openapi.json")},

		{name: "listChannels", op: "listChannels", success: 200, prepare: get("/channels")},
		{name: "getChannel", op: "getChannel", success: 200, prepare: get("/channels/ops")},
		{name: "createChannel", op: "createChannel", success: 201, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.next("new")
			return testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Body: map[string]any{"name": "New"}}, []string{"/channels/" + id}
		}},
		{name: "reorderChannels", op: "reorderChannels", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.next("moved")
			f.e.NewChannel(id)
			// Viewable by everyone: MANAGE_CHANNELS in a channel needs VIEW_CHANNEL there.
			f.e.SetOverwrite(id, "everyone", "", []string{"VIEW_CHANNEL"}, nil)
			return testenv.Req{Method: "POST", Path: "/channels/reorder", Body: map[string]any{"positions": []any{map[string]any{"id": id, "position": 9}}}},
				[]string{"/channels/" + id}
		}},
		{name: "updateChannel", op: "updateChannel", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshChannel(t, "updateChannel")
			return testenv.Req{Method: "PATCH", Path: "/channels/" + id, Type: mergePatch, Body: `{"name":"Edited","topic":"new"}`}, []string{"/channels/" + id}
		}},
		{name: "renameChannel", op: "renameChannel", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshChannel(t, "renameChannel")
			return testenv.Req{Method: "POST", Path: "/channels/" + id + "/rename", Body: map[string]any{"name": "Renamed"}}, []string{"/channels/" + id}
		}},
		{name: "deleteChannel", op: "deleteChannel", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshChannel(t, "deleteChannel")
			return testenv.Req{Method: "POST", Path: "/channels/" + id + "/delete"}, []string{"/channels/" + id, "/channels/" + id + "/permissions"}
		}},
		// Who holds no permission cannot view ops: it is hidden (404)
		// before the missing permission (403) is told.
		{name: "listChannelAccess", op: "listChannelAccess", success: 200, prepare: get("/channels/ops/access"),
			want: map[authzCaller]int{callerNone: 404}},
		{name: "listChannelOverwrites", op: "listChannelOverwrites", success: 200, prepare: get("/channels/ops/permissions")},
		{name: "setChannelOverwrite", op: "setChannelOverwrite", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshChannel(t, "setChannelOverwrite")
			return testenv.Req{Method: "POST", Path: "/channels/" + id + "/permissions",
				Body: map[string]any{"target_type": "everyone", "allow": []string{"VIEW_CHANNEL"}, "deny": []string{}}}, []string{"/channels/" + id + "/permissions"}
		}},

		{name: "listAttachments", op: "listAttachments", success: 200, prepare: get("/channels/ops/attachments")},
		{name: "getAttachment", op: "getAttachment", success: 200, prepare: get("/channels/ops/attachment?attachmentID=logo.txt")},
		{name: "putAttachment (new)", op: "putAttachment", success: 201, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.next("file")
			path := "/channels/ops/attachment?attachmentID=" + id
			return testenv.Req{Method: "PUT", Path: path, Body: "new bytes", Type: "text/plain"}, []string{path}
		}},
		{name: "deleteAttachment (another's)", op: "deleteAttachment", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.next("file")
			f.upload(id)
			path := "/channels/ops/attachment?attachmentID=" + id
			return testenv.Req{Method: "DELETE", Path: path}, []string{path}
		}},

		{name: "listPermissions", op: "listPermissions", success: 200, prepare: get("/permissions")},
		{name: "getGlobalPermissions", op: "getGlobalPermissions", success: 200, prepare: get("/permissions/global")},
		{name: "replaceGlobalPermissions", op: "replaceGlobalPermissions", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			f.e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/permissions/global", Token: f.e.Owner, Body: map[string]any{"permissions": []string{}}})
			return testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": []string{"ADD_REACTIONS"}}},
				[]string{"/permissions/global"}
		}},
		// ops is hidden from a caller with no permission at all: channelID=ops
		// is then unknown, a 400 (before the 403 of another user's).
		{name: "getUserPermissions (another user)", op: "getUserPermissions", success: 200, want: map[authzCaller]int{callerNone: 400}, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: "/users/" + f.victim.ID + "/permissions?channelID=ops&explain=true"}, nil
		}},
		{name: "getUserPermissions (self)", op: "getUserPermissions", success: 200, want: map[authzCaller]int{callerNone: 400},
			prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "GET", Path: "/users/" + me.ID + "/permissions?channelID=ops&explain=true"}, nil
			}},

		{name: "listRoles", op: "listRoles", success: 200, prepare: get("/roles")},
		{name: "getRole", op: "getRole", success: 200, prepare: get("/roles/floor")},
		{name: "getRolePermissions", op: "getRolePermissions", success: 200, prepare: get("/roles/floor/permissions")},
		{name: "createRole", op: "createRole", success: 201, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.next("made")
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/create", Body: map[string]any{"name": "Made", "permissions": []string{}}},
				[]string{"/roles/" + id, "/roles"}
		}},
		{name: "updateRole", op: "updateRole", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "PATCH", Path: "/roles/" + id, Type: mergePatch, Body: `{"name":"Edited","color":"#112233"}`}, []string{"/roles/" + id}
		}},
		{name: "renameRole", op: "renameRole", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/rename", Body: map[string]any{"name": "Renamed"}}, []string{"/roles/" + id}
		}},
		{name: "moveRole", op: "moveRole", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/move", Body: map[string]any{"position": 2}}, []string{"/roles"}
		}},
		{name: "deleteRole", op: "deleteRole", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/delete"}, []string{"/roles"}
		}},
		{name: "replaceRolePermissions", op: "replaceRolePermissions", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "PUT", Path: "/roles/" + id + "/permissions", Body: map[string]any{"permissions": []string{"MANAGE_ROLES"}}},
				[]string{"/roles/" + id}
		}},
		{name: "legacyAddRolePermissions", op: "legacyAddRolePermissions", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/add_perm", Body: map[string]any{"permissions": []string{"MANAGE_ROLES"}}},
				[]string{"/roles/" + id}
		}},
		{name: "legacyRemoveRolePermissions", op: "legacyRemoveRolePermissions", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id := f.freshRole("MANAGE_ROLES")
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/remove_perm", Body: map[string]any{"permissions": []string{"MANAGE_ROLES"}}},
				[]string{"/roles/" + id}
		}},
		{name: "legacyAddRoleUser", op: "legacyAddRoleUser", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id, u := f.freshRole(), f.freshUser()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/add_user", Body: map[string]any{"user_id": u.ID}},
				[]string{"/users/" + u.ID + "/roles"}
		}},
		{name: "legacyRemoveRoleUser", op: "legacyRemoveRoleUser", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id, u := f.freshRole(), f.freshUser()
			f.e.Assign(u.ID, id)
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/remove_user", Body: map[string]any{"user_id": u.ID}},
				[]string{"/users/" + u.ID + "/roles"}
		}},

		{name: "listUsers", op: "listUsers", success: 200, prepare: get("/users")},
		{name: "getMe", op: "getMe", success: 200, prepare: get("/me")},
		{name: "getUser", op: "getUser", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: "/users/" + f.victim.ID}, nil
		}},
		{name: "listUserRoles", op: "listUserRoles", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: "/users/" + f.victim.ID + "/roles"}, nil
		}},
		{name: "createUser", op: "createUser", success: 201, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": f.next("made")}}, []string{"/users?limit=200"}
		}},
		{name: "updateUser (another user)", op: "updateUser", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			u := f.freshUser()
			return testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Body: map[string]any{"username": u.Username, "display_name": "Edited", "status": "active"}},
				[]string{"/users/" + u.ID}
		}},
		{name: "updateUser (own display_name)", op: "updateUser", success: 200, want: map[authzCaller]int{callerNone: 200},
			prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "PUT", Path: "/users/" + me.ID, Body: map[string]any{"username": me.Username, "display_name": f.next("Me"), "status": "active"}},
					[]string{"/users/" + me.ID}
			}},
		// One's own email needs MANAGE_USERS, but no hierarchy over oneself.
		{name: "updateUser (own email)", op: "updateUser", success: 200,
			prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "PUT", Path: "/users/" + me.ID, Body: map[string]any{"username": me.Username, "display_name": me.Username,
					"email": f.next("me") + "@example.com", "status": "active"}}, []string{"/users/" + me.ID}
			}},
		{name: "deleteUser", op: "deleteUser", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			u := f.freshUser()
			return testenv.Req{Method: "DELETE", Path: "/users/" + u.ID}, []string{"/users/" + u.ID}
		}},
		{name: "assignUserRole", op: "assignUserRole", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id, u := f.freshRole(), f.freshUser()
			return testenv.Req{Method: "POST", Path: "/users/" + u.ID + "/roles/" + id}, []string{"/users/" + u.ID + "/roles"}
		}},
		{name: "removeUserRole", op: "removeUserRole", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id, u := f.freshRole(), f.freshUser()
			f.e.Assign(u.ID, id)
			return testenv.Req{Method: "DELETE", Path: "/users/" + u.ID + "/roles/" + id}, []string{"/users/" + u.ID + "/roles"}
		}},

		{name: "listTokens (another user)", op: "listTokens", success: 200, want: notSelfOrOwner, reason: "self_or_owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "GET", Path: "/users/" + f.victim.ID + "/tokens"}, nil
			}},
		{name: "listTokens (self)", op: "listTokens", success: 200, prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: "/users/" + me.ID + "/tokens"}, nil
		}},
		{name: "createToken (another user)", op: "createToken", success: 201, want: notSelfOrOwner, reason: "self_or_owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "POST", Path: "/users/" + f.victim.ID + "/tokens", Body: map[string]any{"name": "minted"}},
					[]string{"/users/" + f.victim.ID + "/tokens"}
			}},
		{name: "createToken (self)", op: "createToken", success: 201, prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "POST", Path: "/users/" + me.ID + "/tokens", Body: map[string]any{"name": "mine"}},
				[]string{"/users/" + me.ID + "/tokens"}
		}},
		{name: "getToken (another user)", op: "getToken", success: 200, want: notSelfOrOwner, reason: "self_or_owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "GET", Path: "/users/" + f.victim.ID + "/tokens/" + f.victimToken}, nil
			}},
		{name: "getToken (self)", op: "getToken", success: 200, prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: "/users/" + me.ID + "/tokens/" + authzTokenID(t, f.e, me.ID)}, nil
		}},
		{name: "deleteToken (another user)", op: "deleteToken", success: 204, want: notSelfOrOwner, reason: "self_or_owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				path := "/users/" + f.victim.ID + "/tokens/" + authzTokenID(t, f.e, f.victim.ID)
				return testenv.Req{Method: "DELETE", Path: path}, []string{path}
			}},
		{name: "deleteToken (self)", op: "deleteToken", success: 204, prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			path := "/users/" + me.ID + "/tokens/" + authzTokenID(t, f.e, me.ID)
			return testenv.Req{Method: "DELETE", Path: path}, []string{path}
		}},

		{name: "patchUser (another user)", op: "patchUser", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			u := f.freshUser()
			return testenv.Req{Method: "PATCH", Path: "/users/" + u.ID, Type: mergePatch, Body: `{"display_name":"Edited"}`}, []string{"/users/" + u.ID}
		}},
		{name: "patchUser (own display_name)", op: "patchUser", success: 200, want: map[authzCaller]int{callerNone: 200},
			prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
				return testenv.Req{Method: "PATCH", Path: "/users/" + me.ID, Type: mergePatch, Body: `{"display_name":"` + f.next("Me") + `"}`},
					[]string{"/users/" + me.ID}
			}},
		{name: "listRoleMembers", op: "listRoleMembers", success: 200, prepare: get("/roles/floor/members")},
		{name: "changeRoleMembers", op: "changeRoleMembers", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			id, u := f.freshRole(), f.freshUser()
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/members", Body: map[string]any{"add": []string{u.ID}}},
				[]string{"/users/" + u.ID + "/roles"}
		}},
		{name: "previewPermissions", op: "previewPermissions", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "POST", Path: "/permissions/preview", Body: map[string]any{"roles": []string{f.freshRole("SEND_MESSAGES")}}}, nil
		}},
		{name: "exportTemplate", op: "exportTemplate", success: 200, want: ownerOnly, reason: "owner_only", prepare: get("/export")},
		{name: "importTemplate (dry run)", op: "importTemplate", success: 200, want: ownerOnly, reason: "owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				tag := f.e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/export", Token: f.e.Owner}).Header.Get("ETag")
				return testenv.Req{Method: "POST", Path: "/import?dry_run=true&prune=true", Headers: map[string]string{"If-Match": tag}, Body: map[string]any{
					"format": "guildhall-template/1", "global_permissions": []string{}, "roles": []any{}, "channels": []any{}}}, []string{"/roles", "/channels"}
			}},
		{name: "importTemplate", op: "importTemplate", success: 200, want: ownerOnly, reason: "owner_only",
			prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
				var doc map[string]any
				f.e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/export", Token: f.e.Owner}).JSON(t, &doc)
				return testenv.Req{Method: "POST", Path: "/import", Body: doc}, []string{"/roles", "/channels"}
			}},

		{name: "getProfileLinks", op: "getProfileLinks", success: 200, prepare: get("/profile/link")},
		{name: "replaceProfileLinks", op: "replaceProfileLinks", success: 200, prepare: func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "PUT", Path: "/profile/link", Body: map[string]any{"links": map[string]string{"site": "https://example.com/"}}}, nil
		}},
		{name: "updateProfileLinks", op: "updateProfileLinks", success: 200, prepare: func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "PATCH", Path: "/profile/link", Type: mergePatch, Body: `{"links":{"blog":"https://blog.example.com/"}}`}, nil
		}},
		{name: "deleteProfileLinks", op: "deleteProfileLinks", success: 204, prepare: func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "DELETE", Path: "/profile/link"}, nil
		}},

		{name: "listAuditLog", op: "listAuditLog", success: 200, prepare: get("/audit-log")},
		{name: "streamEvents", op: "streamEvents", success: 200, prepare: get("/events")},
		// The change reverted needs MANAGE_ROLES in a channel where the
		// caller is given it (and VIEW_CHANNEL) by an overwrite of their own:
		// what the row requires beyond that is VIEW_AUDIT_LOG.
		{name: "revertAuditLogEntry", op: "revertAuditLogEntry", success: 200, prepare: func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			id := f.next("reverted")
			f.e.NewChannel(id)
			f.e.SetOverwrite(id, "user", me.ID, []string{"VIEW_CHANNEL", "MANAGE_ROLES"}, nil)
			f.e.SetOverwrite(id, "everyone", "", []string{"ADD_REACTIONS"}, nil)
			return testenv.Req{Method: "POST", Path: fmt.Sprintf("/audit-log/%d/revert", e2eSeq(t, f.e))}, []string{"/channels/" + id + "/permissions"}
		}},
		{name: "createEventTicket", op: "createEventTicket", success: 201, prepare: func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "POST", Path: "/events/ticket"}, nil
		}},

		{name: "listWebhooks", op: "listWebhooks", success: 200, prepare: get("/webhooks")},
		{name: "createWebhook", op: "createWebhook", success: 201, prepare: func(*testing.T, *authzFixture, testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "POST", Path: "/webhooks", Body: map[string]any{"url": "https://192.0.2.10/new", "events": []string{"user.*"}}},
				[]string{"/webhooks"}
		}},
		{name: "getWebhook", op: "getWebhook", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: f.webhook(t, "shared")}, nil
		}},
		{name: "updateWebhook", op: "updateWebhook", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			path := f.webhook(t, "shared")
			return testenv.Req{Method: "PATCH", Path: path, Type: mergePatch, Body: map[string]any{"description": f.next("hook")}}, []string{path}
		}},
		{name: "deleteWebhook", op: "deleteWebhook", success: 204, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			path := f.webhook(t, "delete")
			return testenv.Req{Method: "DELETE", Path: path}, []string{path, "/webhooks"}
		}},
		{name: "rotateWebhookSecret", op: "rotateWebhookSecret", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			path := f.webhook(t, "shared")
			return testenv.Req{Method: "POST", Path: path + "/rotate"}, []string{path}
		}},
		{name: "listWebhookDeliveries", op: "listWebhookDeliveries", success: 200, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			return testenv.Req{Method: "GET", Path: f.webhook(t, "shared") + "/deliveries"}, nil
		}},
		{name: "redeliverWebhookDelivery", op: "redeliverWebhookDelivery", success: 202, prepare: func(t *testing.T, f *authzFixture, _ testenv.User) (testenv.Req, []string) {
			path := f.webhook(t, "shared")
			return testenv.Req{Method: "POST", Path: path + "/deliveries/msg_authz/redeliver"}, []string{path + "/deliveries"}
		}},
	}
}

// authzWithHeads adds to rows a HEAD twin of every GET row: the contract's
// HEAD operation of the same path, which must answer each caller with the
// status its GET gives.
func authzWithHeads(t *testing.T, rows []authzRow) []authzRow {
	_, ops := authzContractOps(t)
	byPath := map[string]map[string]string{} // path -> method -> operationId
	pathOf := map[string]string{}
	for _, o := range ops {
		if byPath[o.path] == nil {
			byPath[o.path] = map[string]string{}
		}
		byPath[o.path][o.method] = o.op.OperationID
		pathOf[o.op.OperationID] = o.path
	}
	for _, row := range rows {
		head, ok := byPath[pathOf[row.op]][http.MethodHead]
		if !ok || byPath[pathOf[row.op]][http.MethodGet] != row.op {
			continue
		}
		get := row
		row.name, row.op = head+" (as "+get.name+")", head
		row.prepare = func(t *testing.T, f *authzFixture, me testenv.User) (testenv.Req, []string) {
			req, paths := get.prepare(t, f, me)
			req.Method = http.MethodHead
			return req, paths
		}
		rows = append(rows, row)
	}
	return rows
}

// expect is the status a caller must get: derived from the operation's
// x-required-permissions, except where the row says otherwise.
func (row authzRow) expect(r authzRequirement, c authzCaller) int {
	if w, ok := row.want[c]; ok {
		return w
	}
	if r.Scope == "public" {
		return row.success
	}
	switch c {
	case callerNoToken, callerGarbage, callerSuspended:
		return http.StatusUnauthorized
	case callerNone:
		if len(r.Permissions) == 0 && len(r.AnyOf) == 0 {
			return row.success
		}
		if r.Scope == "channel" {
			return http.StatusNotFound // no VIEW_CHANNEL anywhere: the channel is hidden
		}
		return http.StatusForbidden
	case callerDenied:
		if r.Scope == "channel" {
			if authzHidden(r) {
				return http.StatusNotFound
			}
			return http.StatusForbidden
		}
	}
	return row.success
}

// authzHidden reports whether requirement r's "denied" caller may not know
// of the channel (docs/design.md §12 "Non-disclosure"): the overwrite took
// VIEW_CHANNEL away, and no base permission of theirs manages channels.
func authzHidden(r authzRequirement) bool {
	base := authzSet(authzGrantFor(r))
	knows := permissions.Of(permissions.Administrator, permissions.ManageChannels, permissions.ManageRoles)
	return base.Intersect(knows).IsEmpty() && slices.Contains(authzDenyFor(r), "VIEW_CHANNEL")
}

// channelOfPath is the {channelID} of a path, or "".
func channelOfPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/channels/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// TestAuthzMatrix runs every operation of the contract as every kind of
// caller and checks the status against the operation's x-required-permissions:
// no token, a garbage token and a suspended user get 401; a user without
// permissions 403 (unless none are required); a user holding exactly the
// required permissions succeeds; the same user with the requirement denied by
// an overwrite of the channel gets 403 for channel-scoped requirements only;
// ADMINISTRATOR and the owner succeed (a user's tokens excepted). Every
// refusal is a problem that names what is missing and changes nothing.
func TestAuthzMatrix(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := newAuthzFixture(t, kind)
		rows := authzWithHeads(t, authzRows())
		covered := map[string]bool{}
		for _, row := range rows {
			covered[row.op] = true
			r, ok := f.reqs[row.op]
			if !ok {
				t.Fatalf("row %s: no operation %q in the contract", row.name, row.op)
			}
			t.Run(row.name, func(t *testing.T) {
				for _, c := range authzCallers {
					me, token := f.caller(c, r)
					req, paths := row.prepare(t, f, me)
					req.Token = token
					want := row.expect(r, c)
					var before string
					if want >= 400 {
						before = authzState(t, f.e, paths...)
					}
					res := authzSend(t, f.e, req)
					if res.Status != want {
						t.Errorf("%s: %s %s: status %d, want %d; body %s", c, req.Method, req.Path, res.Status, want, res.Body)
						continue
					}
					if want < 400 {
						continue
					}
					if after := authzState(t, f.e, paths...); after != before {
						t.Errorf("%s: the refused %s %s changed state:\nbefore:\n%s\nafter:\n%s", c, req.Method, req.Path, before, after)
					}
					if req.Method == http.MethodHead {
						continue // no body
					}
					p := res.Problem(t)
					if want == http.StatusForbidden {
						authzCheckForbidden(t, c, row, r, req, p, f)
					}
				}
			})
		}
		for op := range f.reqs {
			if !covered[op] {
				t.Errorf("operation %s has no row in the authorization matrix", op)
			}
		}
	})
}

func authzCheckForbidden(t *testing.T, c authzCaller, row authzRow, r authzRequirement, req testenv.Req, p api.Problem, f *authzFixture) {
	t.Helper()
	wantReason := row.reason
	if wantReason == "" {
		wantReason = "missing_permissions"
	}
	if p.Reason == nil || string(*p.Reason) != wantReason {
		t.Errorf("%s: reason %v, want %s", c, p.Reason, wantReason)
		return
	}
	if p.MissingPermissions == nil {
		t.Errorf("%s: missing_permissions is absent", c)
		return
	}
	var missing []string
	for _, m := range *p.MissingPermissions {
		missing = append(missing, string(m))
	}
	if wantReason != "missing_permissions" {
		if len(missing) != 0 {
			t.Errorf("%s: %s refusal lists missing permissions %v", c, wantReason, missing)
		}
		if wantReason == "self_or_owner_only" && (p.UserId == nil || *p.UserId != f.victim.ID) {
			t.Errorf("%s: user_id %v, want the victim %s", c, p.UserId, f.victim.ID)
		}
		return
	}
	switch c {
	case callerDenied: // the overwrite took exactly the requirement away
		if !slices.Equal(missing, r.Permissions) {
			t.Errorf("%s: missing_permissions %v, want %v", c, missing, r.Permissions)
		}
	default:
		for _, need := range r.Permissions {
			if !slices.Contains(missing, need) {
				t.Errorf("%s: missing_permissions %v does not name %s", c, missing, need)
			}
		}
	}
	wantChannel := ""
	if r.Scope == "channel" {
		wantChannel = channelOfPath(req.Path)
	}
	if got := authzDeref(p.ChannelId); got != wantChannel {
		t.Errorf("%s: channel_id %q, want %q", c, got, wantChannel)
	}
}

func authzDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// authzEscalationFixture: roles top to bottom admin-high (ADMINISTRATOR),
// admin-low (ADMINISTRATOR), manager (MANAGE_ROLES, MANAGE_USERS), perky
// (MANAGE_CHANNELS), plain (none); global permissions are docs/design.md's defaults.
// boss has admin-high and plain, deputy admin-low, mgr and mgr2 manager,
// holder perky, the owner plain; chanmod has no role but MANAGE_ROLES by an
// overwrite of channel ops; victim has nothing.
type authzEscalationFixture struct {
	e     *testenv.Env
	users map[string]testenv.User
	vars  *strings.Replacer
}

func newAuthzEscalationFixture(t *testing.T, kind string) *authzEscalationFixture {
	t.Helper()
	e := testenv.Start(t, kind)
	e.NewRole("admin-high", "ADMINISTRATOR")
	e.NewRole("admin-low", "ADMINISTRATOR")
	e.NewRole("manager", "MANAGE_USERS", "MANAGE_ROLES")
	e.NewRole("perky", "MANAGE_CHANNELS")
	e.NewRole("plain")
	f := &authzEscalationFixture{e: e, users: map[string]testenv.User{"owner": authzOwner(t, e)}}
	for name, roles := range map[string][]string{
		"boss": {"admin-high", "plain"}, "deputy": {"admin-low"}, "mgr": {"manager"}, "mgr2": {"manager"},
		"holder": {"perky"}, "chanmod": nil, "victim": nil,
	} {
		u := e.NewUser(name)
		for _, r := range roles {
			e.Assign(u.ID, r)
		}
		f.users[name] = u
	}
	e.Assign(f.users["owner"].ID, "plain")
	e.NewChannel("ops")
	e.NewChannel("lobby")
	e.SetOverwrite("ops", "user", f.users["chanmod"].ID, []string{"MANAGE_ROLES"}, nil)
	victimToken := authzTokenID(t, e, f.users["victim"].ID)
	var pairs []string
	for name, u := range f.users {
		pairs = append(pairs, "{"+name+"}", u.ID)
	}
	pairs = append(pairs, "{victimToken}", victimToken)
	f.vars = strings.NewReplacer(pairs...)
	return f
}

// authzEscalation is an attempt to get more than one has; it must be a 403
// saying why, and change nothing.
type authzEscalation struct {
	name         string
	as           string // a user of the fixture
	method, path string
	body         string // JSON, with {user} placeholders
	reason       string
	missing      []string
	channel      string // channel_id
	role, user   string // role_id; user_id (a user of the fixture)
	state        []string
}

func authzEscalations() []authzEscalation {
	const (
		unheld    = "cannot_grant_unheld"
		hierarchy = "role_hierarchy"
		missing   = "missing_permissions"
		selfOnly  = "self_or_owner_only"
	)
	none := []string{}
	return []authzEscalation{
		// Granting a permission one does not hold.
		{name: "create a role with a permission one lacks", as: "mgr", method: "POST", path: "/roles/sneaky/create",
			body: `{"name":"Sneaky","permissions":["MANAGE_CHANNELS"]}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/roles/sneaky", "/roles"}},
		{name: "give a lower role a permission one lacks", as: "mgr", method: "PUT", path: "/roles/plain/permissions",
			body: `{"permissions":["MANAGE_CHANNELS"]}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/roles/plain"}},
		{name: "take from a lower role a permission one lacks", as: "mgr", method: "PUT", path: "/roles/perky/permissions",
			body: `{"permissions":[]}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/roles/perky"}},
		{name: "allow in an overwrite a permission one lacks", as: "mgr", method: "POST", path: "/channels/ops/permissions",
			body: `{"target_type":"role","target_id":"plain","allow":["MANAGE_CHANNELS"],"deny":[]}`, reason: unheld,
			missing: []string{"MANAGE_CHANNELS"}, channel: "ops", state: []string{"/channels/ops/permissions"}},
		{name: "deny in an overwrite a permission one lacks", as: "mgr", method: "POST", path: "/channels/ops/permissions",
			body: `{"target_type":"everyone","allow":[],"deny":["MANAGE_MESSAGES"]}`, reason: unheld,
			missing: []string{"MANAGE_MESSAGES"}, channel: "ops", state: []string{"/channels/ops/permissions"}},
		{name: "channel MANAGE_ROLES allows in an overwrite what one lacks there", as: "chanmod", method: "POST", path: "/channels/ops/permissions",
			body: `{"target_type":"user","target_id":"{chanmod}","allow":["MANAGE_ROLES","MANAGE_CHANNELS"],"deny":[]}`, reason: unheld,
			missing: []string{"MANAGE_CHANNELS"}, channel: "ops", state: []string{"/channels/ops/permissions"}},

		// Managing an equal or higher role.
		{name: "rename one's own top role", as: "mgr", method: "POST", path: "/roles/manager/rename",
			body: `{"name":"Kings"}`, reason: hierarchy, missing: none, role: "manager", state: []string{"/roles/manager"}},
		{name: "rename a higher role", as: "mgr", method: "POST", path: "/roles/admin-low/rename",
			body: `{"name":"Peons"}`, reason: hierarchy, missing: none, role: "admin-low", state: []string{"/roles/admin-low"}},
		{name: "edit a higher role", as: "mgr", method: "PATCH", path: "/roles/admin-low",
			body: `{"color":"#000000"}`, reason: hierarchy, missing: none, role: "admin-low", state: []string{"/roles/admin-low"}},
		{name: "delete one's own top role", as: "mgr", method: "POST", path: "/roles/manager/delete",
			reason: hierarchy, missing: none, role: "manager", state: []string{"/roles"}},
		{name: "change the permissions of one's own top role", as: "mgr", method: "PUT", path: "/roles/manager/permissions",
			body: `{"permissions":["MANAGE_USERS"]}`, reason: hierarchy, missing: none, role: "manager", state: []string{"/roles/manager"}},
		{name: "move a lower role up to one's own position", as: "mgr", method: "POST", path: "/roles/plain/move",
			body: `{"position":3}`, reason: hierarchy, missing: none, role: "plain", state: []string{"/roles"}},
		{name: "move a higher role down", as: "mgr", method: "POST", path: "/roles/admin-low/move",
			body: `{"position":1}`, reason: hierarchy, missing: none, role: "admin-low", state: []string{"/roles"}},

		// Assigning roles.
		{name: "assign a higher role to oneself", as: "mgr", method: "POST", path: "/users/{mgr}/roles/admin-low",
			reason: hierarchy, missing: none, role: "admin-low", state: []string{"/users/{mgr}/roles"}},
		{name: "assign one's own top role to another user", as: "mgr", method: "POST", path: "/users/{victim}/roles/manager",
			reason: hierarchy, missing: none, role: "manager", state: []string{"/users/{victim}/roles"}},
		{name: "assign oneself a lower role holding a permission one lacks", as: "mgr", method: "POST", path: "/users/{mgr}/roles/perky",
			reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/users/{mgr}/roles"}},
		{name: "assign another user a lower role holding a permission one lacks", as: "mgr", method: "POST", path: "/users/{victim}/roles/perky",
			reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/users/{victim}/roles"}},
		{name: "remove a lower role holding a permission one lacks", as: "mgr", method: "DELETE", path: "/users/{holder}/roles/perky",
			reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/users/{holder}/roles"}},
		{name: "assign a lower role to a user as high as oneself", as: "mgr", method: "POST", path: "/users/{mgr2}/roles/plain",
			reason: hierarchy, missing: none, user: "mgr2", state: []string{"/users/{mgr2}/roles"}},

		// ADMINISTRATOR through a role one can edit.
		{name: "grant ADMINISTRATOR to a lower role", as: "mgr", method: "PUT", path: "/roles/plain/permissions",
			body: `{"permissions":["ADMINISTRATOR"]}`, reason: unheld, missing: []string{"ADMINISTRATOR"}, state: []string{"/roles/plain"}},
		{name: "create a role with ADMINISTRATOR", as: "mgr", method: "POST", path: "/roles/crown/create",
			body: `{"name":"Crown","permissions":["ADMINISTRATOR"]}`, reason: unheld, missing: []string{"ADMINISTRATOR"}, state: []string{"/roles/crown", "/roles"}},

		// An ADMINISTRATOR against a higher one, and the owner.
		{name: "ADMINISTRATOR takes a higher administrator's role", as: "deputy", method: "DELETE", path: "/users/{boss}/roles/admin-high",
			reason: hierarchy, missing: none, role: "admin-high", state: []string{"/users/{boss}/roles"}},
		{name: "ADMINISTRATOR takes a lower role from a higher administrator", as: "deputy", method: "DELETE", path: "/users/{boss}/roles/plain",
			reason: hierarchy, missing: none, user: "boss", state: []string{"/users/{boss}/roles"}},
		{name: "ADMINISTRATOR suspends a higher administrator", as: "deputy", method: "PUT", path: "/users/{boss}",
			body: `{"username":"boss","display_name":"boss","status":"suspended"}`, reason: hierarchy, missing: none, user: "boss", state: []string{"/users/{boss}"}},
		{name: "ADMINISTRATOR deletes a higher administrator", as: "deputy", method: "DELETE", path: "/users/{boss}",
			reason: hierarchy, missing: none, user: "boss", state: []string{"/users/{boss}"}},
		{name: "ADMINISTRATOR strips a higher administrator's role", as: "deputy", method: "PUT", path: "/roles/admin-high/permissions",
			body: `{"permissions":[]}`, reason: hierarchy, missing: none, role: "admin-high", state: []string{"/roles/admin-high"}},
		{name: "ADMINISTRATOR renames its own top role", as: "deputy", method: "POST", path: "/roles/admin-low/rename",
			body: `{"name":"Supreme"}`, reason: hierarchy, missing: none, role: "admin-low", state: []string{"/roles/admin-low"}},
		{name: "ADMINISTRATOR changes the owner", as: "boss", method: "PUT", path: "/users/{owner}",
			body: `{"username":"owner","display_name":"Deposed","status":"active"}`, reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}"}},
		{name: "ADMINISTRATOR suspends the owner", as: "boss", method: "PUT", path: "/users/{owner}",
			body: `{"username":"owner","display_name":"owner","status":"suspended"}`, reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}"}},
		{name: "ADMINISTRATOR deletes the owner", as: "boss", method: "DELETE", path: "/users/{owner}",
			reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}"}},
		{name: "ADMINISTRATOR takes a role from the owner", as: "boss", method: "DELETE", path: "/users/{owner}/roles/plain",
			reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}/roles"}},
		{name: "ADMINISTRATOR gives the owner a role", as: "boss", method: "POST", path: "/users/{owner}/roles/perky",
			reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}/roles"}},

		// A user's tokens are theirs and the owner's.
		{name: "MANAGE_USERS mints a token for a lower user", as: "mgr", method: "POST", path: "/users/{victim}/tokens",
			body: `{"name":"mine now"}`, reason: selfOnly, missing: none, user: "victim", state: []string{"/users/{victim}/tokens"}},
		{name: "ADMINISTRATOR mints a token for a lower user", as: "deputy", method: "POST", path: "/users/{victim}/tokens",
			body: `{"name":"mine now"}`, reason: selfOnly, missing: none, user: "victim", state: []string{"/users/{victim}/tokens"}},
		{name: "ADMINISTRATOR mints a token for the owner", as: "boss", method: "POST", path: "/users/{owner}/tokens",
			body: `{"name":"mine now"}`, reason: selfOnly, missing: none, user: "owner", state: []string{"/users/{owner}/tokens"}},
		{name: "ADMINISTRATOR lists another user's tokens", as: "deputy", method: "GET", path: "/users/{victim}/tokens",
			reason: selfOnly, missing: none, user: "victim"},
		{name: "ADMINISTRATOR revokes another user's token", as: "deputy", method: "DELETE", path: "/users/{victim}/tokens/{victimToken}",
			reason: selfOnly, missing: none, user: "victim", state: []string{"/users/{victim}/tokens/{victimToken}"}},

		// MANAGE_USERS on users not below.
		{name: "MANAGE_USERS suspends a user as high as oneself", as: "mgr", method: "PUT", path: "/users/{mgr2}",
			body: `{"username":"mgr2","display_name":"mgr2","status":"suspended"}`, reason: hierarchy, missing: none, user: "mgr2", state: []string{"/users/{mgr2}"}},
		{name: "MANAGE_USERS deletes a higher user", as: "mgr", method: "DELETE", path: "/users/{deputy}",
			reason: hierarchy, missing: none, user: "deputy", state: []string{"/users/{deputy}"}},

		// MANAGE_ROLES granted only in channel ops, used elsewhere.
		{name: "channel MANAGE_ROLES sets an overwrite in another channel", as: "chanmod", method: "POST", path: "/channels/lobby/permissions",
			body: `{"target_type":"everyone","allow":["ADD_REACTIONS"],"deny":[]}`, reason: missing, missing: []string{"MANAGE_ROLES"}, channel: "lobby",
			state: []string{"/channels/lobby/permissions"}},
		{name: "channel MANAGE_ROLES creates a role", as: "chanmod", method: "POST", path: "/roles/mine/create",
			body: `{"name":"Mine"}`, reason: missing, missing: []string{"MANAGE_ROLES"}, state: []string{"/roles/mine", "/roles"}},
		{name: "channel MANAGE_ROLES changes a role's permissions", as: "chanmod", method: "PUT", path: "/roles/plain/permissions",
			body: `{"permissions":["ADD_REACTIONS"]}`, reason: missing, missing: []string{"MANAGE_ROLES"}, state: []string{"/roles/plain"}},
		{name: "channel MANAGE_ROLES assigns a role", as: "chanmod", method: "POST", path: "/users/{chanmod}/roles/plain",
			reason: missing, missing: []string{"MANAGE_ROLES"}, state: []string{"/users/{chanmod}/roles"}},
		{name: "channel MANAGE_ROLES reads another user's permissions", as: "chanmod", method: "GET", path: "/users/{victim}/permissions?channelID=ops",
			reason: missing, missing: []string{"MANAGE_ROLES"}},

		// Legacy operations as a side door.
		{name: "legacy add_perm of a permission one lacks", as: "mgr", method: "POST", path: "/roles/plain/add_perm",
			body: `{"permissions":["MANAGE_CHANNELS"]}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/roles/plain"}},
		{name: "legacy add_perm of ADMINISTRATOR", as: "mgr", method: "POST", path: "/roles/plain/add_perm",
			body: `{"permissions":["ADMINISTRATOR"]}`, reason: unheld, missing: []string{"ADMINISTRATOR"}, state: []string{"/roles/plain"}},
		{name: "legacy remove_perm of a permission one lacks", as: "mgr", method: "POST", path: "/roles/perky/remove_perm",
			body: `{"permissions":["MANAGE_CHANNELS"]}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/roles/perky"}},
		{name: "legacy add_perm on one's own top role", as: "mgr", method: "POST", path: "/roles/manager/add_perm",
			body: `{"permissions":["VIEW_CHANNEL"]}`, reason: hierarchy, missing: none, role: "manager", state: []string{"/roles/manager"}},
		{name: "legacy add_user of a higher role to oneself", as: "mgr", method: "POST", path: "/roles/admin-low/add_user",
			body: `{"user_id":"{mgr}"}`, reason: hierarchy, missing: none, role: "admin-low", state: []string{"/users/{mgr}/roles"}},
		{name: "legacy add_user of a role holding a permission one lacks", as: "mgr", method: "POST", path: "/roles/perky/add_user",
			body: `{"user_id":"{mgr}"}`, reason: unheld, missing: []string{"MANAGE_CHANNELS"}, state: []string{"/users/{mgr}/roles"}},
		{name: "legacy remove_user of a higher administrator's role", as: "deputy", method: "POST", path: "/roles/admin-high/remove_user",
			body: `{"user_id":"{boss}"}`, reason: hierarchy, missing: none, role: "admin-high", state: []string{"/users/{boss}/roles"}},
		{name: "legacy remove_user from the owner", as: "boss", method: "POST", path: "/roles/plain/remove_user",
			body: `{"user_id":"{owner}"}`, reason: hierarchy, missing: none, user: "owner", state: []string{"/users/{owner}/roles"}},
		{name: "legacy add_user with channel-only MANAGE_ROLES", as: "chanmod", method: "POST", path: "/roles/plain/add_user",
			body: `{"user_id":"{chanmod}"}`, reason: missing, missing: []string{"MANAGE_ROLES"}, state: []string{"/users/{chanmod}/roles"}},

		// Global permissions are ADMINISTRATOR's.
		{name: "replace global permissions without ADMINISTRATOR", as: "mgr", method: "PUT", path: "/permissions/global",
			body: `{"permissions":["MANAGE_ROLES"]}`, reason: missing, missing: []string{"ADMINISTRATOR"}, state: []string{"/permissions/global"}},
	}
}

// TestAuthzEscalation tries every way up the hierarchy we know of: each is a
// 403 whose reason, missing_permissions and ids say why, and changes nothing.
func TestAuthzEscalation(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := newAuthzEscalationFixture(t, kind)
		for _, tc := range authzEscalations() {
			t.Run(tc.name, func(t *testing.T) {
				state := make([]string, len(tc.state))
				for i, p := range tc.state {
					state[i] = f.vars.Replace(p)
				}
				req := testenv.Req{Method: tc.method, Path: f.vars.Replace(tc.path), Token: f.users[tc.as].Token}
				if tc.body != "" {
					req.Body, req.Type = f.vars.Replace(tc.body), "application/json"
					if tc.method == http.MethodPatch {
						req.Type = "application/merge-patch+json"
					}
				}
				before := authzState(t, f.e, state...)
				res := f.e.Do(req)
				if res.Status != http.StatusForbidden {
					t.Fatalf("%s %s as %s: status %d, want 403; body %s", req.Method, req.Path, tc.as, res.Status, res.Body)
				}
				p := res.Problem(t)
				if got := string(authzDeref(p.Reason)); got != tc.reason {
					t.Errorf("reason %q, want %q (%s)", got, tc.reason, res.Body)
				}
				var missing []string
				if p.MissingPermissions == nil {
					t.Errorf("missing_permissions is absent: %s", res.Body)
				}
				for _, m := range authzDeref(p.MissingPermissions) {
					missing = append(missing, string(m))
				}
				if !slices.Equal(missing, tc.missing) && !(len(missing) == 0 && len(tc.missing) == 0) {
					t.Errorf("missing_permissions %v, want %v", missing, tc.missing)
				}
				if got := authzDeref(p.ChannelId); got != tc.channel {
					t.Errorf("channel_id %q, want %q", got, tc.channel)
				}
				if got := authzDeref(p.RoleId); got != tc.role {
					t.Errorf("role_id %q, want %q", got, tc.role)
				}
				wantUser := ""
				if tc.user != "" {
					wantUser = f.users[tc.user].ID
				}
				if got := authzDeref(p.UserId); got != wantUser {
					t.Errorf("user_id %q, want %s (%q)", got, tc.user, wantUser)
				}
				if authzDeref(p.Detail) == "" {
					t.Errorf("the problem has no detail")
				}
				if after := authzState(t, f.e, state...); after != before {
					t.Errorf("the refused request changed state:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	})
}

// TestAuthzChannelScopedRequirements: channel-scoped requirements use the
// caller's effective permissions in the path's channel, in both directions.
func TestAuthzChannelScopedRequirements(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("builders", "MANAGE_CHANNELS")
		bob, carol := e.NewUser("bob"), e.NewUser("carol")
		e.Assign(bob.ID, "builders")
		for _, c := range []string{"ops", "lobby", "attic"} {
			e.NewChannel(c)
		}
		e.SetOverwrite("ops", "role", "builders", nil, []string{"MANAGE_CHANNELS"})
		e.SetOverwrite("ops", "user", carol.ID, []string{"MANAGE_ROLES"}, nil)

		refused := func(t *testing.T, r testenv.Req, channel string, missing ...string) {
			t.Helper()
			before := authzState(t, e, "/channels/"+channel, "/channels/"+channel+"/permissions")
			p := e.Must(http.StatusForbidden, r).Problem(t)
			if string(authzDeref(p.Reason)) != "missing_permissions" || authzDeref(p.ChannelId) != channel ||
				fmt.Sprint(authzDeref(p.MissingPermissions)) != fmt.Sprint(missing) {
				t.Errorf("%s %s: problem %+v, want missing %v in channel %s", r.Method, r.Path, p, missing, channel)
			}
			if after := authzState(t, e, "/channels/"+channel, "/channels/"+channel+"/permissions"); after != before {
				t.Errorf("%s %s: the refusal changed state:\n%s\n%s", r.Method, r.Path, before, after)
			}
		}
		// MANAGE_CHANNELS denied to builders by an overwrite of ops.
		refused(t, testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: bob.Token, Body: map[string]any{"name": "Mine"}}, "ops", "MANAGE_CHANNELS")
		refused(t, testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: bob.Token, Type: "application/merge-patch+json", Body: `{"topic":"x"}`}, "ops", "MANAGE_CHANNELS")
		refused(t, testenv.Req{Method: "POST", Path: "/channels/ops/delete", Token: bob.Token}, "ops", "MANAGE_CHANNELS")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/lobby/rename", Token: bob.Token, Body: map[string]any{"name": "Hall"}})
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/attic/delete", Token: bob.Token})
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/annex/create", Token: bob.Token, Body: map[string]any{"name": "Annex"}})

		// MANAGE_ROLES granted to carol by an overwrite of ops only.
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: carol.Token,
			Body: map[string]any{"target_type": "everyone", "allow": []string{"ADD_REACTIONS"}, "deny": []string{}}})
		refused(t, testenv.Req{Method: "POST", Path: "/channels/lobby/permissions", Token: carol.Token,
			Body: map[string]any{"target_type": "everyone", "allow": []string{"ADD_REACTIONS"}, "deny": []string{}}}, "lobby", "MANAGE_ROLES")
		p := e.Must(http.StatusForbidden, testenv.Req{Method: "POST", Path: "/roles/carols/create", Token: carol.Token,
			Body: map[string]any{"name": "Carol's"}}).Problem(t)
		if fmt.Sprint(authzDeref(p.MissingPermissions)) != "[MANAGE_ROLES]" || p.ChannelId != nil {
			t.Errorf("creating a role with channel-only MANAGE_ROLES: %+v", p)
		}
	})
}

// authzChannelCreate creates a fresh channel as a user and returns the status.
func authzChannelCreate(t *testing.T, e *testenv.Env, token string, n *int) *testenv.Response {
	t.Helper()
	*n++
	return e.Do(testenv.Req{Method: "POST", Path: fmt.Sprintf("/channels/made-%d/create", *n), Token: token, Body: map[string]any{"name": "Made"}})
}

// TestAuthzChangeTakesEffectOnNextRequest: every change of permissions,
// roles, overwrites, status or tokens decides the very next request, also on
// a second instance sharing the store (which caches its own snapshot).
func TestAuthzChangeTakesEffectOnNextRequest(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		e1.NewRole("builders", "MANAGE_CHANNELS")
		alice := e1.NewUser("alice")
		e1.Assign(alice.ID, "builders")
		n := 0
		expect := func(step string, e *testenv.Env, want int) {
			t.Helper()
			if res := authzChannelCreate(t, e, alice.Token, &n); res.Status != want {
				t.Fatalf("%s: creating a channel on instance %s: %d, want %d; %s", step, e.URL, res.Status, want, res.Body)
			}
		}
		owner := func(e *testenv.Env, want int, r testenv.Req) {
			t.Helper()
			r.Token = e.Owner
			e.Must(want, r)
		}
		expect("warm both instances", e1, 201)
		expect("warm both instances", e2, 201)

		owner(e1, 200, testenv.Req{Method: "PUT", Path: "/roles/builders/permissions", Body: map[string]any{"permissions": []string{}}})
		expect("permission removed on 1, next request on 2", e2, 403)
		expect("permission removed on 1, next request on 1", e1, 403)
		owner(e2, 200, testenv.Req{Method: "PUT", Path: "/roles/builders/permissions", Body: map[string]any{"permissions": []string{"MANAGE_CHANNELS"}}})
		expect("permission restored on 2, next request on 1", e1, 201)

		owner(e1, 204, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/builders"})
		expect("role removed", e2, 403)
		owner(e1, 204, testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/roles/builders"})
		expect("role assigned again", e2, 201)

		owner(e1, 200, testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": []string{"MANAGE_CHANNELS"}}})
		owner(e1, 204, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/builders"})
		expect("granted by the global permissions", e2, 201)
		owner(e2, 200, testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": []string{"VIEW_CHANNEL"}}})
		expect("global permission removed", e1, 403)
		owner(e1, 204, testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/roles/builders"})

		// An overwrite decides the next request in its channel.
		rename := func(e *testenv.Env, want int) {
			t.Helper()
			e.Must(want, testenv.Req{Method: "POST", Path: "/channels/made-1/rename", Token: alice.Token, Body: map[string]any{"name": fmt.Sprint("Renamed ", n)}})
			n++
		}
		rename(e2, 200)
		e1.SetOverwrite("made-1", "role", "builders", nil, []string{"MANAGE_CHANNELS"})
		rename(e2, 403)
		e2.SetOverwrite("made-1", "role", "builders", nil, nil) // removes it
		rename(e1, 200)

		// Suspension and revocation: 401 from the next request on.
		authzSuspend(t, e1, alice, "suspended")
		if res := e2.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}); res.Status != 401 {
			t.Fatalf("suspended: %d %s", res.Status, res.Body)
		}
		authzSuspend(t, e2, alice, "active")
		expect("reactivated", e1, 201)
		var tokens api.TokenList
		e1.Must(200, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e1.Owner}).JSON(t, &tokens)
		for _, tok := range tokens.Items {
			owner(e1, 204, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/tokens/" + tok.Id})
		}
		for _, e := range []*testenv.Env{e1, e2} {
			if res := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}); res.Status != 401 {
				t.Fatalf("revoked: %d %s", res.Status, res.Body)
			}
		}
	})
}

// warmStatements is what a read answered from the read cache costs, asked
// being the freshness questions the read cache asked for it: on
// PostgreSQL one statement each, asked only when the instance did not hold
// its lease (internal/fresh's lease.go), which answers with none; on
// SQLite none while the wal-index header shows no commit since the last
// question.
func warmStatements(kind string, asked int64) int64 {
	if kind == testenv.Postgres {
		return asked
	}
	return 0
}

// statementCost returns how to measure what a request costs st: its
// statements, and what they should be on a warm instance (warmStatements).
func statementCost(t *testing.T, e *testenv.Env, kind string) func(r testenv.Req, want int) (n, warm int64) {
	st := e.App.Store
	return func(r testenv.Req, want int) (int64, int64) {
		t.Helper()
		before, asked := st.QueryCount(), st.CacheStats().Questions
		e.Must(want, r)
		return st.QueryCount() - before, warmStatements(kind, st.CacheStats().Questions-asked)
	}
}

// leaseAnswered fails t when, on PostgreSQL, no request of st was answered
// under the lease: the warm costs measured would then be the questions'.
func leaseAnswered(t *testing.T, e *testenv.Env, kind string) {
	t.Helper()
	if kind == testenv.Postgres && e.App.Store.CacheStats().Leased == 0 {
		t.Error("no request was answered under the lease")
	}
}

// TestAuthzOneStatementPerRequest: on a warm instance, authenticating and
// authorizing a request costs the read cache's freshness question and
// nothing else: on PostgreSQL none under the lease, one statement when it
// must ask; none on SQLite while nothing was committed (the wal-index
// header answers). GET /permissions and a
// cached channel do nothing else.
func TestAuthzOneStatementPerRequest(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods", "MANAGE_CHANNELS")
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "mods")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "role", "mods", nil, []string{"MANAGE_CHANNELS"})
		cost := statementCost(t, e, kind)
		defer leaseAnswered(t, e, kind)
		catalog := testenv.Req{Method: "GET", Path: "/permissions", Token: alice.Token}
		cost(catalog, 200) // warm
		cost(catalog, 200) // and the read cache (SQLite), filled by a caller already authenticated
		for range 3 {
			if n, warm := cost(catalog, 200); n != warm {
				t.Fatalf("GET /permissions on a warm instance cost %d statements, want %d", n, warm)
			}
		}
		// A channel-scoped refusal (overwrites included) reads only the
		// channel beyond authentication.
		rename := testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: alice.Token, Type: "application/merge-patch+json", Body: `{"topic":"x"}`}
		channel := testenv.Req{Method: "GET", Path: "/channels/ops", Token: alice.Token}
		cost(channel, 200) // fills the read cache (SQLite)
		if n, warm := cost(channel, 200); n != warm {
			t.Errorf("GET /channels/ops cost %d statements, want %d (the read cache's freshness question)", n, warm)
		}
		// A change reloads the snapshot once; then the question alone again.
		e.SetOverwrite("ops", "role", "mods", nil, nil)
		if n, _ := cost(catalog, 200); n < 2 {
			t.Errorf("the first request after a change cost %d statements; it must reload the snapshot", n)
		}
		if n, warm := cost(catalog, 200); n != warm {
			t.Errorf("GET /permissions after the reload cost %d statements, want %d", n, warm)
		}
		e.Must(http.StatusOK, rename)
	})
}

// TestAuthzExplainAnswersWhy: ?explain=true says, for every permission, which
// rules granted or removed it ("why can't Alice see #ops?").
func TestAuthzExplainAnswersWhy(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("admins", "ADMINISTRATOR")
		e.NewRole("mods", "MANAGE_MESSAGES")
		e.NewRole("ops-team")
		alice, bob, root := e.NewUser("alice"), e.NewUser("bob"), e.NewUser("root")
		e.Assign(alice.ID, "mods")
		e.Assign(bob.ID, "ops-team")
		e.Assign(root.ID, "admins")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("ops", "role", "ops-team", []string{"VIEW_CHANNEL"}, nil)
		e.SetOverwrite("ops", "user", bob.ID, nil, []string{"SEND_MESSAGES"})

		explain := func(token, userID, channel string) (map[string]api.PermissionExplanation, []string) {
			t.Helper()
			path := "/users/" + userID + "/permissions?explain=true"
			if channel != "" {
				path += "&channelID=" + channel
			}
			var up api.UserPermissions
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: token}).JSON(t, &up)
			want := permissions.All
			if channel != "" {
				want = permissions.ChannelScoped
			}
			var order []string
			byName := map[string]api.PermissionExplanation{}
			for _, x := range authzDeref(up.Explain) {
				order = append(order, string(x.Permission))
				byName[string(x.Permission)] = x
				if x.Granted != slices.Contains(up.Permissions, api.PermissionName(x.Permission)) {
					t.Errorf("%s: granted=%v disagrees with permissions %v", x.Permission, x.Granted, up.Permissions)
				}
			}
			if !slices.Equal(order, want.Names()) {
				t.Errorf("explain lists %v, want one entry per permission in catalog order %v", order, want.Names())
			}
			var granted []string
			for _, p := range up.Permissions {
				granted = append(granted, string(p))
			}
			return byName, granted
		}
		steps := func(x api.PermissionExplanation) string {
			var s []string
			for _, st := range x.Steps {
				s = append(s, fmt.Sprintf("%s:%s:%s", st.Kind, st.Effect, authzDeref(st.RoleId)))
			}
			return strings.Join(s, " ")
		}
		cases := []struct {
			name, token, user, channel, perm string
			granted                          bool
			steps                            string
		}{
			// ops is hidden from alice herself (docs/design.md §12), not from those who manage roles.
			{"alice cannot see ops: the everyone overwrite", root.Token, alice.ID, "ops", "VIEW_CHANNEL", false, "global:allow: overwrite_everyone:deny:"},
			{"alice's role permission is void without VIEW_CHANNEL", root.Token, alice.ID, "ops", "MANAGE_MESSAGES", false, "role:allow:mods implicit:deny:"},
			{"alice's base holds her role's permission", alice.Token, alice.ID, "", "MANAGE_MESSAGES", true, "role:allow:mods"},
			{"bob sees ops through his role's overwrite", bob.Token, bob.ID, "ops", "VIEW_CHANNEL", true, "global:allow: overwrite_everyone:deny: overwrite_role:allow:ops-team"},
			{"bob's own overwrite denies SEND_MESSAGES", bob.Token, bob.ID, "ops", "SEND_MESSAGES", false, "global:allow: overwrite_user:deny:"},
			{"without SEND_MESSAGES, ATTACH_FILES goes", bob.Token, bob.ID, "ops", "ATTACH_FILES", false, "global:allow: implicit:deny:"},
			{"untouched global permission", bob.Token, bob.ID, "ops", "READ_MESSAGE_HISTORY", true, "global:allow:"},
			{"ADMINISTRATOR bypasses overwrites", root.Token, root.ID, "ops", "VIEW_CHANNEL", true, "administrator:allow:"},
			{"the owner has everything", e.Owner, authzOwner(t, e).ID, "", "ADMINISTRATOR", true, "owner:allow:"},
			{"an ADMINISTRATOR asks about alice", root.Token, alice.ID, "ops", "VIEW_CHANNEL", false, "global:allow: overwrite_everyone:deny:"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				byName, _ := explain(tc.token, tc.user, tc.channel)
				x, ok := byName[tc.perm]
				if !ok {
					t.Fatalf("no explanation of %s", tc.perm)
				}
				if x.Granted != tc.granted || steps(x) != tc.steps {
					t.Errorf("%s: granted=%v steps %q, want granted=%v steps %q", tc.perm, x.Granted, steps(x), tc.granted, tc.steps)
				}
			})
		}
		// Only oneself, or MANAGE_ROLES; an unknown channel is a 400 even
		// for an unknown user (400 before 404).
		p := e.Must(http.StatusForbidden, testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/permissions?explain=true", Token: alice.Token}).Problem(t)
		if fmt.Sprint(authzDeref(p.MissingPermissions)) != "[MANAGE_ROLES]" {
			t.Errorf("alice asking about bob: %+v", p)
		}
		p = e.Must(http.StatusBadRequest, testenv.Req{Method: "GET", Token: alice.Token,
			Path: "/users/01936f4e-8d2a-7c3b-9a4e-5f6a7b8c9d0e/permissions?channelID=nowhere"}).Problem(t)
		if p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Location != "query.channelID" {
			t.Errorf("unknown channel: %+v", p)
		}
	})
}

// TestAuthzOrderOfChecks: a request that fails several checks gets the
// first failure in docs/design.md §11's order: 401, 400, 404, 403 (permission, then
// hierarchy, then granting), 412, 409.
func TestAuthzOrderOfChecks(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("manager", "MANAGE_ROLES")
		e.NewRole("plain")
		mgr, nobody := e.NewUser("mgr"), e.NewUser("nobody")
		e.Assign(mgr.ID, "manager")
		e.NewChannel("ops")
		owner := authzOwner(t, e)
		stale := map[string]string{"If-Match": `"999"`}
		cases := []struct {
			name   string
			req    testenv.Req
			status int
			reason string
		}{
			{"401 before 400", testenv.Req{Method: "POST", Path: "/roles/plain/rename", Body: map[string]any{"name": ""}}, 401, ""},
			{"401 before 404", testenv.Req{Method: "GET", Path: "/channels/nowhere", Token: "gh_garbage"}, 401, ""},
			{"400 before 404", testenv.Req{Method: "POST", Path: "/roles/ghost/rename", Token: mgr.Token, Body: map[string]any{"name": ""}}, 400, ""},
			{"400 before 403", testenv.Req{Method: "PUT", Path: "/permissions/global", Token: nobody.Token,
				Body: map[string]any{"permissions": []string{"FLY"}}}, 400, ""},
			{"400 (Last-Event-ID) before 403", testenv.Req{Method: "GET", Path: "/events", Token: nobody.Token,
				Headers: map[string]string{"Last-Event-ID": "not-a-seq"}}, 400, ""},
			{"404 before 403", testenv.Req{Method: "POST", Path: "/channels/nowhere/rename", Token: nobody.Token, Body: map[string]any{"name": "x"}}, 404, ""},
			{"403 before 412", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: nobody.Token, Headers: stale,
				Body: map[string]any{"name": "x"}}, 403, "missing_permissions"},
			{"403 before 409", testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: nobody.Token, Body: map[string]any{"name": "x"}}, 403, "missing_permissions"},
			{"permission before hierarchy", testenv.Req{Method: "POST", Path: "/roles/manager/rename", Token: nobody.Token,
				Body: map[string]any{"name": "x"}}, 403, "missing_permissions"},
			{"hierarchy before granting", testenv.Req{Method: "PUT", Path: "/roles/manager/permissions", Token: mgr.Token,
				Body: map[string]any{"permissions": []string{"ADMINISTRATOR"}}}, 403, "role_hierarchy"},
			{"granting before 412", testenv.Req{Method: "PUT", Path: "/roles/plain/permissions", Token: mgr.Token, Headers: stale,
				Body: map[string]any{"permissions": []string{"ADMINISTRATOR"}}}, 403, "cannot_grant_unheld"},
			{"granting before 409", testenv.Req{Method: "POST", Path: "/roles/plain/create", Token: mgr.Token,
				Body: map[string]any{"name": "x", "permissions": []string{"MANAGE_CHANNELS"}}}, 403, "cannot_grant_unheld"},
			{"412 before 409", testenv.Req{Method: "PUT", Path: "/users/" + owner.ID, Token: e.Owner, Headers: stale,
				Body: map[string]any{"username": "owner", "display_name": "owner", "status": "suspended"}}, 412, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := authzState(t, e, "/roles", "/channels?limit=200", "/users/"+owner.ID, "/permissions/global")
				res := authzSend(t, e, tc.req)
				if res.Status != tc.status {
					t.Fatalf("%s %s: %d, want %d; %s", tc.req.Method, tc.req.Path, res.Status, tc.status, res.Body)
				}
				p := res.Problem(t)
				if got := string(authzDeref(p.Reason)); got != tc.reason {
					t.Errorf("reason %q, want %q", got, tc.reason)
				}
				if after := authzState(t, e, "/roles", "/channels?limit=200", "/users/"+owner.ID, "/permissions/global"); after != before {
					t.Errorf("the refused request changed state:\n%s\n%s", before, after)
				}
			})
		}
	})
}

// TestAuthzReadsConfirmCachedCredentials: on a warm instance the hottest
// reads cost only the read cache's freshness questions (warmStatements), and
// cached credentials never outlive a change made on another instance: the
// very next request there is answered on the new state (the caller read
// again), and a revoked token gets its 401 before any 400 of a bad request.
func TestAuthzReadsConfirmCachedCredentials(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		e1.NewRole("mods", "MANAGE_ROLES")
		alice := e1.NewUser("alice")
		bob := e1.NewUser("bob")
		e1.Assign(alice.ID, "mods")
		e1.NewChannel("ops")
		cost := statementCost(t, e2, kind)
		defer leaseAnswered(t, e2, kind)
		reads := []testenv.Req{
			{Method: "GET", Path: "/users/" + bob.ID},
			{Method: "GET", Path: "/users?limit=5"},
			{Method: "GET", Path: "/users/" + bob.ID + "/permissions"},
			{Method: "GET", Path: "/users/" + bob.ID + "/permissions?channelID=ops"},
			{Method: "GET", Path: "/channels/ops"},
		}
		for _, r := range reads {
			r.Token = alice.Token
			cost(r, 200) // warm: caches alice's credentials and the snapshot
			cost(r, 200) // and the read cache (SQLite)
			if n, warm := cost(r, 200); n != warm {
				t.Errorf("warm %s cost %d statements, want %d", r.Path, n, warm)
			}
		}

		// Alice loses MANAGE_ROLES on instance 1: instance 2's cached
		// credentials are now stale, and its next read says so.
		e1.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/mods", Token: e1.Owner})
		perms := testenv.Req{Method: "GET", Path: "/users/" + bob.ID + "/permissions", Token: alice.Token}
		if n, _ := cost(perms, http.StatusForbidden); n < 2 {
			t.Errorf("the first read after a change on another instance cost %d statements; it must read the caller again", n)
		}
		if n, warm := cost(perms, http.StatusForbidden); n != warm {
			t.Errorf("the next one cost %d statements, want %d", n, warm)
		}

		// Revoked on instance 1: instance 2 answers 401, also to a request
		// that is invalid too (401 comes before 400).
		var tokens api.TokenList
		e1.Must(200, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e1.Owner}).JSON(t, &tokens)
		for _, tok := range tokens.Items {
			e1.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/tokens/" + tok.Id, Token: e1.Owner})
		}
		bad := testenv.Req{Method: "GET", Path: "/users?limit=0", Token: alice.Token}
		if res := e2.Do(bad); res.Status != http.StatusUnauthorized {
			t.Fatalf("a revoked token with an invalid request: %d %s, want 401", res.Status, res.Body)
		}
		for _, r := range reads {
			r.Token = alice.Token
			if res := e2.Do(r); res.Status != http.StatusUnauthorized {
				t.Fatalf("%s with a token revoked on another instance: %d %s, want 401", r.Path, res.Status, res.Body)
			}
		}
	})
}

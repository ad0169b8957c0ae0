package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/oapi-codegen/nullable"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// The typed contract of roles: create at the bottom, list, get, patch,
// rename, move and delete.
func TestRolesContract(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		c := e.Client(e.Owner)
		ctx := t.Context()

		perms := api.PermissionNames{"SEND_MESSAGES", "MANAGE_ROLES", "VIEW_CHANNEL"}
		created, err := c.CreateRoleWithResponse(ctx, "mods", nil, api.RoleCreate{Name: "Moderators", Permissions: &perms,
			Color: nullable.NewNullableWithValue("#3498db")})
		if err != nil || created.JSON201 == nil {
			t.Fatalf("create: %v %d %s", err, created.StatusCode(), created.Body)
		}
		r := created.JSON201
		if r.Id != "mods" || r.Name != "Moderators" || r.Position != 1 || r.Color.MustGet() != "#3498db" {
			t.Errorf("created %s", created.Body)
		}
		if e2eJSON(r.Permissions) != `["MANAGE_ROLES","VIEW_CHANNEL","SEND_MESSAGES"]` {
			t.Errorf("permissions not in catalog order: %v", r.Permissions)
		}
		e2eCheckTimestamps(t, r.CreatedAt.Time(), r.UpdatedAt.Time())
		if loc := created.HTTPResponse.Header.Get("Location"); loc != "/api/roles/mods" {
			t.Errorf("Location %q", loc)
		}
		modsTag := created.HTTPResponse.Header.Get("ETag")
		if modsTag == "" {
			t.Fatal("no ETag")
		}

		// A new role lands at 1 and pushes mods up, which moves mods' ETag.
		helpers, err := c.CreateRoleWithResponse(ctx, "helpers", nil, api.RoleCreate{Name: "Helpers"})
		if err != nil || helpers.JSON201 == nil {
			t.Fatalf("create helpers: %v %s", err, helpers.Body)
		}
		if helpers.JSON201.Position != 1 || !helpers.JSON201.Color.IsNull() || len(helpers.JSON201.Permissions) != 0 {
			t.Errorf("helpers %s", helpers.Body)
		}
		got, err := c.GetRoleWithResponse(ctx, "mods")
		if err != nil || got.JSON200 == nil {
			t.Fatalf("get: %v %s", err, got.Body)
		}
		if got.JSON200.Position != 2 {
			t.Errorf("mods at %d after a create, want 2", got.JSON200.Position)
		}
		if tag := got.HTTPResponse.Header.Get("ETag"); tag == modsTag || tag == "" {
			t.Errorf("mods' ETag %q did not move when its position changed (was %q)", tag, modsTag)
		}

		list, err := c.ListRolesWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list: %v %s", err, list.Body)
		}
		if ids := e2eRoleIDs(list.JSON200.Items); !slices.Equal(ids, []string{"mods", "helpers"}) || !list.JSON200.NextCursor.IsNull() {
			t.Errorf("list %s", list.Body)
		}
		if e2eJSON(list.JSON200.Items[0]) != e2eJSON(got.JSON200) {
			t.Errorf("list item %s != get %s", e2eJSON(list.JSON200.Items[0]), e2eJSON(got.JSON200))
		}

		patched, err := c.UpdateRoleWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, "mods", nil,
			api.RolePatch{Color: nullable.NewNullNullable[string]()})
		if err != nil || patched.JSON200 == nil {
			t.Fatalf("patch: %v %s", err, patched.Body)
		}
		if !patched.JSON200.Color.IsNull() || patched.JSON200.Name != "Moderators" || patched.JSON200.Position != 2 {
			t.Errorf("patched %s", patched.Body)
		}

		renamed, err := c.RenameRoleWithResponse(ctx, "mods", nil, api.RenameRequest{Name: "Mods"})
		if err != nil || renamed.JSON200 == nil || renamed.JSON200.Name != "Mods" {
			t.Fatalf("rename: %v %s", err, renamed.Body)
		}

		moved, err := c.MoveRoleWithResponse(ctx, "mods", nil, api.MoveRequest{Position: 1})
		if err != nil || moved.JSON200 == nil || moved.JSON200.Position != 1 {
			t.Fatalf("move: %v %s", err, moved.Body)
		}
		other, _ := c.GetRoleWithResponse(ctx, "helpers")
		if other.JSON200 == nil || other.JSON200.Position != 2 {
			t.Errorf("helpers after the move: %s", other.Body)
		}

		rp, err := c.GetRolePermissionsWithResponse(ctx, "mods")
		if err != nil || rp.JSON200 == nil || e2eJSON(rp.JSON200.Permissions) != `["MANAGE_ROLES","VIEW_CHANNEL","SEND_MESSAGES"]` {
			t.Fatalf("permissions: %v %s", err, rp.Body)
		}
		if rp.HTTPResponse.Header.Get("ETag") != moved.HTTPResponse.Header.Get("ETag") {
			t.Errorf("permissions ETag %q != role ETag %q", rp.HTTPResponse.Header.Get("ETag"), moved.HTTPResponse.Header.Get("ETag"))
		}

		helpersTag := other.HTTPResponse.Header.Get("ETag")
		deleted, err := c.DeleteRoleWithResponse(ctx, "mods", nil)
		if err != nil || deleted.StatusCode() != http.StatusNoContent {
			t.Fatalf("delete: %v %s", err, deleted.Body)
		}
		gone, _ := c.GetRoleWithResponse(ctx, "mods")
		if gone.ApplicationproblemJSON404 == nil {
			t.Errorf("get after delete: %d %s", gone.StatusCode(), gone.Body)
		}
		other, _ = c.GetRoleWithResponse(ctx, "helpers")
		if other.JSON200 == nil || other.JSON200.Position != 1 {
			t.Errorf("helpers after the delete: %s", other.Body)
		}
		if tag := other.HTTPResponse.Header.Get("ETag"); tag == helpersTag {
			t.Errorf("helpers moved down but its ETag %s did not move", tag)
		}
	})
}

// Positions run 1..N without holes through creates, moves and deletes.
func TestRolesPositions(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			e.NewRole(id)
		}
		want := func(order ...string) {
			t.Helper()
			got := e2eRoleOrder(t, e)
			if !slices.Equal(got, order) {
				t.Fatalf("roles by position %v, want %v", got, order)
			}
		}
		moveReq := func(id string, pos any) testenv.Req {
			body := map[string]any{"position": pos}
			if pos == nil {
				body = map[string]any{}
			}
			return testenv.Req{Method: "POST", Path: "/roles/" + id + "/move", Token: e.Owner, Body: body}
		}
		move := func(id string, pos any) *testenv.Response { return e.Do(moveReq(id, pos)) }
		want("a", "b", "c", "d", "e") // a was created first, so it is highest

		if res := move("e", 5); res.Status != http.StatusOK || res.Map(t)["position"] != float64(5) {
			t.Fatalf("move up: %s", res)
		}
		want("e", "a", "b", "c", "d")
		e.Must(http.StatusOK, moveReq("a", 2))
		want("e", "b", "c", "a", "d")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/c/delete", Token: e.Owner})
		want("e", "b", "a", "d")
		e.NewRole("f")
		want("e", "b", "a", "d", "f")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/e/delete", Token: e.Owner})
		want("b", "a", "d", "f")

		t.Run("same position is a 200 no-op", func(t *testing.T) {
			before := e2eGet(t, e, "/roles/a")
			tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/a", Token: e.Owner}))
			seq := e2eSeq(t, e)
			res := move("a", 3)
			if res.Status != http.StatusOK || e2eETag(t, res) != tag {
				t.Fatalf("no-op move: %s ETag %s (before %s)", res, res.Header.Get("ETag"), tag)
			}
			if after := e2eGet(t, e, "/roles/a"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("out of range is 400 and changes nothing", func(t *testing.T) {
			seq := e2eSeq(t, e)
			for _, pos := range []any{0, -1, 5, 100000, 100001, "2", 1.5, nil} {
				p := e2eProblem(t, move("a", pos), http.StatusBadRequest, "validation")
				e2eField(t, p, "body.position")
			}
			want("b", "a", "d", "f")
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors", func(t *testing.T) {
			seq := e2eSeq(t, e)
			tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/a", Token: e.Owner}))
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: e.Owner, Body: map[string]any{"position": 1},
				Headers: e2eIfMatch(`"999"`)}), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/none/move", Token: e.Owner, Body: map[string]any{"position": 1},
				Headers: e2eIfMatch(`"999"`)}), http.StatusNotFound, "not_found")
			e2eNoEvent(t, e, seq) // the refusals above wrote nothing
			plain := e.NewUser("plain")
			seq = e2eSeq(t, e)
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: plain.Token, Body: map[string]any{"position": 1}}),
				http.StatusForbidden, "forbidden")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Body: map[string]any{"position": 1}}),
				http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: e.Owner, Body: `{"position":1}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: e.Owner,
				Body: `{"position":1,"pad":"` + strings.Repeat("x", 1<<20) + `"}`, Type: "application/json"}),
				http.StatusRequestEntityTooLarge, "payload_too_large")
			want("b", "a", "d", "f")
			e2eNoEvent(t, e, seq)
			res := e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: e.Owner, Body: map[string]any{"position": 1}, Headers: e2eIfMatch(tag)})
			if res.Status != http.StatusOK {
				t.Fatalf("matching If-Match: %s", res)
			}
			want("b", "d", "f", "a")
		})
		t.Run("a mod cannot move to or above its own top", func(t *testing.T) {
			// mod holds "top" (at 5), which has MANAGE_ROLES.
			mod := e2eMember(t, e, "mod", "MANAGE_ROLES")
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/mod-role/move", Token: e.Owner, Body: map[string]any{"position": 5}})
			want("mod-role", "b", "d", "f", "a")
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/a/move", Token: mod.Token, Body: map[string]any{"position": 5}}),
				http.StatusForbidden, "forbidden")
			if p.Reason == nil || *p.Reason != api.RoleHierarchy {
				t.Errorf("reason %v", p.Reason)
			}
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/a/move", Token: mod.Token, Body: map[string]any{"position": 4}})
			want("mod-role", "a", "b", "d", "f")
		})
	})
}

func TestRolesCreate(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.NewRole("mods", "MANAGE_MESSAGES")
		create := func(token, id string, body any) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/roles/" + id + "/create", Token: token, Body: body})
		}
		before := e2eRoleOrder(t, e)
		mods := e2eGet(t, e, "/roles/mods")
		seq := e2eSeq(t, e)

		p := e2eProblem(t, create(e.Owner, "mods", map[string]any{"name": "Other"}), http.StatusConflict, "conflict")
		if p.Detail == nil || !strings.Contains(*p.Detail, "mods") {
			t.Errorf("409 detail %v", p.Detail)
		}
		cases := []struct {
			name, id string
			body     any
			location string
			message  string
		}{
			{"unknown permission", "x", map[string]any{"name": "x", "permissions": []string{"VIEW_CHANNEL", "FLY"}}, "body.permissions[1]", `unknown permission "FLY"`},
			{"duplicate permission", "x", map[string]any{"name": "x", "permissions": []string{"VIEW_CHANNEL", "VIEW_CHANNEL"}}, "body.permissions[1]", "duplicate"},
			{"bad color", "x", map[string]any{"name": "x", "color": "blue"}, "body.color", ""},
			{"no name", "x", map[string]any{"permissions": []string{}}, "body.name", ""},
			{"empty name", "x", map[string]any{"name": ""}, "body.name", ""},
			{"position is not settable", "x", map[string]any{"name": "x", "position": 3}, "body.position", ""},
			{"uppercase ID", "Mods2", map[string]any{"name": "x"}, "path.roleID", ""},
			{"ID too long", strings.Repeat("r", 65), map[string]any{"name": "x"}, "path.roleID", ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				p := e2eProblem(t, create(e.Owner, tc.id, tc.body), http.StatusBadRequest, "validation")
				if msg := e2eField(t, p, tc.location); !strings.Contains(msg, tc.message) {
					t.Errorf("message %q lacks %q", msg, tc.message)
				}
			})
		}
		e2eProblem(t, create("", "x", map[string]any{"name": "x"}), http.StatusUnauthorized, "unauthenticated")
		p = e2eProblem(t, create(plain.Token, "x", map[string]any{"name": "x"}), http.StatusForbidden, "forbidden")
		if p.MissingPermissions == nil || !slices.Equal(*p.MissingPermissions, []api.PermissionName{"MANAGE_ROLES"}) {
			t.Errorf("403 %+v", p)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/x/create", Token: e.Owner, Body: `{"name":"x"}`, Type: "text/plain"}),
			http.StatusUnsupportedMediaType, "unsupported_media_type")
		e2eProblem(t, create(e.Owner, "x", map[string]any{"name": strings.Repeat("x", 1<<20)}), http.StatusRequestEntityTooLarge, "payload_too_large")

		if after := e2eRoleOrder(t, e); !slices.Equal(after, before) {
			t.Errorf("roles changed: %v -> %v", before, after)
		}
		if after := e2eGet(t, e, "/roles/mods"); e2eJSON(after) != e2eJSON(mods) {
			t.Errorf("mods changed: %v -> %v", mods, after)
		}
		e2eNoEvent(t, e, seq)
	})
}

// The role limit (250) is a 409 limit_exceeded naming it.
func TestRolesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 250 roles")
	}
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for i := range 250 {
			e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: fmt.Sprintf("/roles/r%d/create", i), Token: e.Owner, Body: map[string]any{"name": "r"}})
		}
		seq := e2eSeq(t, e)
		p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/one-more/create", Token: e.Owner, Body: map[string]any{"name": "x"}}),
			http.StatusConflict, "limit_exceeded")
		if p.Limit == nil || *p.Limit != "roles" {
			t.Errorf("limit %v, want roles", p.Limit)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles/one-more", Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eNoEvent(t, e, seq)
		// A taken ID is still a plain conflict at the limit.
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/r0/create", Token: e.Owner, Body: map[string]any{"name": "x"}}),
			http.StatusConflict, "conflict")
		order := e2eRoleOrder(t, e)
		if len(order) != 250 || order[0] != "r0" || order[249] != "r249" {
			t.Errorf("%d roles, first %s", len(order), order[0])
		}
	})
}

func TestRolesPatchAndRename(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/roles/mods/create", Token: e.Owner,
			Body: map[string]any{"name": "Moderators", "color": "#112233"}})
		patch := func(body string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PATCH", Path: "/roles/mods", Token: e.Owner, Body: body, Type: "application/merge-patch+json", Headers: headers})
		}
		rename := func(name string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/roles/mods/rename", Token: e.Owner, Body: map[string]any{"name": name}, Headers: headers})
		}
		tagOf := func() string {
			return e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/mods", Token: e.Owner}))
		}

		res := patch(`{"name":"Mods"}`, nil)
		if m := res.Map(t); res.Status != http.StatusOK || m["name"] != "Mods" || m["color"] != "#112233" {
			t.Fatalf("name patch: %s", res)
		}
		tag := tagOf()
		res = patch(`{"color":null}`, e2eIfMatch(tag))
		if m := res.Map(t); res.Status != http.StatusOK || m["name"] != "Mods" || m["color"] != nil {
			t.Fatalf("color null: %s", res)
		} else if _, ok := m["color"]; !ok {
			t.Errorf("color is absent instead of null: %s", res.Body)
		}
		if e2eETag(t, res) == tag {
			t.Errorf("ETag did not move")
		}
		res = patch(`{"color":"#ABCDEF","name":"M"}`, nil)
		if m := res.Map(t); res.Status != http.StatusOK || m["name"] != "M" || m["color"] != "#ABCDEF" {
			t.Fatalf("both: %s", res)
		}

		t.Run("no-ops", func(t *testing.T) {
			before := e2eGet(t, e, "/roles/mods")
			tag := tagOf()
			seq := e2eSeq(t, e)
			for _, res := range []*testenv.Response{patch(`{}`, nil), patch(`{"name":"M"}`, nil), rename("M", e2eIfMatch(tag))} {
				if res.Status != http.StatusOK || e2eETag(t, res) != tag {
					t.Errorf("no-op: %s ETag %s (want %s)", res, res.Header.Get("ETag"), tag)
				}
			}
			if after := e2eGet(t, e, "/roles/mods"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors change nothing", func(t *testing.T) {
			before := e2eGet(t, e, "/roles/mods")
			seq := e2eSeq(t, e)
			e2eProblem(t, patch(`{"name":"Stale"}`, e2eIfMatch(`"1"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, rename("Stale", e2eIfMatch(`"1"`)), http.StatusPreconditionFailed, "precondition_failed")
			for _, path := range []string{"/roles/none", "/roles/none/rename"} {
				method, body, ct := "PATCH", `{"name":"x"}`, "application/merge-patch+json"
				if strings.HasSuffix(path, "rename") {
					method, ct = "POST", "application/json"
				}
				e2eProblem(t, e.Do(testenv.Req{Method: method, Path: path, Token: e.Owner, Body: body, Type: ct, Headers: e2eIfMatch(`"1"`)}),
					http.StatusNotFound, "not_found")
				e2eProblem(t, e.Do(testenv.Req{Method: method, Path: strings.Replace(path, "none", "mods", 1), Token: plain.Token, Body: body, Type: ct}),
					http.StatusForbidden, "forbidden")
				e2eProblem(t, e.Do(testenv.Req{Method: method, Path: strings.Replace(path, "none", "mods", 1), Body: body, Type: ct}),
					http.StatusUnauthorized, "unauthenticated")
				e2eProblem(t, e.Do(testenv.Req{Method: method, Path: strings.Replace(path, "none", "mods", 1), Token: e.Owner, Body: body, Type: "text/plain"}),
					http.StatusUnsupportedMediaType, "unsupported_media_type")
				e2eProblem(t, e.Do(testenv.Req{Method: method, Path: strings.Replace(path, "none", "mods", 1), Token: e.Owner,
					Body: `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, Type: ct}), http.StatusRequestEntityTooLarge, "payload_too_large")
			}
			p := e2eProblem(t, patch(`{"color":"red"}`, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.color")
			p = e2eProblem(t, patch(`{"permissions":[]}`, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.permissions")
			p = e2eProblem(t, rename("", nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			if after := e2eGet(t, e, "/roles/mods"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("rename", func(t *testing.T) {
			tag := tagOf()
			seq := e2eSeq(t, e)
			res := rename("Moderators", e2eIfMatch(tag))
			if res.Status != http.StatusOK || res.Map(t)["name"] != "Moderators" || e2eETag(t, res) == tag {
				t.Fatalf("rename: %s", res)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"role.renamed"}) {
				t.Errorf("events %v", ev)
			}
		})
	})
}

func TestRolesDelete(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.NewRole("keep", "SEND_MESSAGES")
		e.NewRole("mods", "MANAGE_MESSAGES")
		e.NewRole("low")
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "mods")
		e.Assign(alice.ID, "keep")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "role", "mods", []string{"VIEW_CHANNEL"}, nil)
		e.SetOverwrite("ops", "role", "keep", nil, []string{"ADD_REACTIONS"})
		aliceTag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}))
		owTag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner}))
		tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/mods", Token: e.Owner}))
		del := func(token, id string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/roles/" + id + "/delete", Token: token, Headers: headers})
		}

		seq := e2eSeq(t, e)
		e2eProblem(t, del(e.Owner, "mods", e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
		e2eProblem(t, del(e.Owner, "none", e2eIfMatch(`"999"`)), http.StatusNotFound, "not_found")
		e2eProblem(t, del(plain.Token, "mods", nil), http.StatusForbidden, "forbidden")
		e2eProblem(t, del("", "mods", nil), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, del(e.Owner, "Mods", nil), http.StatusBadRequest, "validation")
		e2eNoEvent(t, e, seq)

		res := del(e.Owner, "mods", e2eIfMatch(tag))
		if res.Status != http.StatusNoContent || len(res.Body) != 0 {
			t.Fatalf("delete: %s", res)
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"role.deleted"}) {
			t.Errorf("events %v, want one role.deleted", ev)
		}
		if got := e2eRoleOrder(t, e); !slices.Equal(got, []string{"keep", "low"}) {
			t.Errorf("roles %v", got)
		}
		u := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
		if roles := u.Map(t)["roles"]; e2eJSON(roles) != `["keep"]` {
			t.Errorf("alice's roles after delete: %v", roles)
		}
		if e2eETag(t, u) == aliceTag {
			t.Errorf("alice's ETag did not move though her roles changed")
		}
		ur := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/roles", Token: e.Owner})
		if ids := e2eRoleIDs(e2eDecodeRoles(t, ur).Items); !slices.Equal(ids, []string{"keep"}) {
			t.Errorf("alice's role list %v", ids)
		}
		owRes := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner})
		if got := e2eTargets(e2eDecodeOverwrites(t, owRes)); !slices.Equal(got, []string{"role:keep"}) {
			t.Errorf("overwrites after delete %v", got)
		}
		if e2eETag(t, owRes) == owTag {
			t.Errorf("the overwrite list's ETag did not move")
		}
		perms := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions", Token: e.Owner}).Map(t)["permissions"]
		if slices.Contains(perms.([]any), any("MANAGE_MESSAGES")) {
			t.Errorf("alice keeps the deleted role's permission: %v", perms)
		}
		// Re-creating the ID gives a fresh role that nobody holds.
		e.NewRole("mods")
		if roles := e2eGet(t, e, "/users/"+alice.ID)["roles"]; e2eJSON(roles) != `["keep"]` {
			t.Errorf("a re-created role came back to alice: %v", roles)
		}
	})
}

func TestRolesPermissions(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.NewRole("mods", "SEND_MESSAGES")
		put := func(token string, perms any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Token: token, Body: map[string]any{"permissions": perms}, Headers: headers})
		}
		get := func() (string, string) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/mods/permissions", Token: plain.Token})
			return e2eJSON(res.Map(t)["permissions"]), e2eETag(t, res)
		}
		perms, tag := get()
		if perms != `["SEND_MESSAGES"]` {
			t.Fatalf("permissions %s", perms)
		}
		seq := e2eSeq(t, e)
		res := put(e.Owner, []string{"ADD_REACTIONS", "MANAGE_ROLES", "VIEW_CHANNEL"}, e2eIfMatch(tag))
		if res.Status != http.StatusOK || e2eJSON(res.Map(t)["permissions"]) != `["MANAGE_ROLES","VIEW_CHANNEL","ADD_REACTIONS"]` {
			t.Fatalf("put: %s", res)
		}
		tag2 := e2eETag(t, res)
		if p2, t2 := get(); p2 != `["MANAGE_ROLES","VIEW_CHANNEL","ADD_REACTIONS"]` || t2 != tag2 || tag2 == tag {
			t.Errorf("after put: %s %s (put ETag %s, before %s)", p2, t2, tag2, tag)
		}
		if role := e2eGet(t, e, "/roles/mods"); e2eJSON(role["permissions"]) != `["MANAGE_ROLES","VIEW_CHANNEL","ADD_REACTIONS"]` {
			t.Errorf("role %v", role)
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"role.permissions.set"}) {
			t.Errorf("events %v", ev)
		}

		t.Run("same set is a no-op", func(t *testing.T) {
			seq := e2eSeq(t, e)
			res := put(e.Owner, []string{"VIEW_CHANNEL", "ADD_REACTIONS", "MANAGE_ROLES"}, e2eIfMatch(tag2))
			if res.Status != http.StatusOK || e2eETag(t, res) != tag2 {
				t.Errorf("no-op: %s", res)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors change nothing", func(t *testing.T) {
			seq := e2eSeq(t, e)
			e2eProblem(t, put(e.Owner, []string{}, e2eIfMatch(tag)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/roles/none/permissions", Token: e.Owner, Body: map[string]any{"permissions": []string{}},
				Headers: e2eIfMatch(`"1"`)}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles/none/permissions", Token: e.Owner}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles/NONE/permissions", Token: e.Owner}), http.StatusBadRequest, "validation")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles/mods/permissions"}), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, put(plain.Token, []string{}, nil), http.StatusForbidden, "forbidden")
			e2eProblem(t, put("", []string{}, nil), http.StatusUnauthorized, "unauthenticated")
			p := e2eProblem(t, put(e.Owner, []string{"VIEW_CHANNEL", "FLY"}, nil), http.StatusBadRequest, "validation")
			if msg := e2eField(t, p, "body.permissions[1]"); msg != `unknown permission "FLY"` {
				t.Errorf("message %q", msg)
			}
			p = e2eProblem(t, put(e.Owner, "VIEW_CHANNEL", nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.permissions")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Token: e.Owner, Body: `{"permissions":[]}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Token: e.Owner,
				Body: `{"permissions":["` + strings.Repeat("A", 1<<20) + `"]}`, Type: "application/json"}), http.StatusRequestEntityTooLarge, "payload_too_large")
			if p, tg := get(); p != `["MANAGE_ROLES","VIEW_CHANNEL","ADD_REACTIONS"]` || tg != tag2 {
				t.Errorf("changed: %s %s", p, tg)
			}
			e2eNoEvent(t, e, seq)
		})
	})
}

var e2eDeprecation = regexp.MustCompile(`^@[0-9]+$`)

// e2eLegacyHeaders checks a legacy operation's Deprecation and successor Link.
func e2eLegacyHeaders(t testing.TB, res *testenv.Response, successor string) {
	t.Helper()
	if d := res.Header.Get("Deprecation"); !e2eDeprecation.MatchString(d) {
		t.Errorf("status %d: Deprecation %q, want @<unix>", res.Status, d)
	}
	want := "<" + successor + `>; rel="successor-version"`
	if l := res.Header.Get("Link"); l != want {
		t.Errorf("status %d: Link %q, want %q", res.Status, l, want)
	}
}

// The legacy role operations behave like their successors and say they are
// deprecated, on errors too.
func TestRolesLegacy(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		alice := e.NewUser("alice")
		e.NewRole("mods", "SEND_MESSAGES")
		permsLink := "/api/roles/mods/permissions"
		legacy := func(op, token string, body any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/roles/mods/" + op, Token: token, Body: body, Headers: headers})
		}
		perms := func() string { return e2eJSON(e2eGet(t, e, "/roles/mods/permissions")["permissions"]) }

		t.Run("add_perm and remove_perm", func(t *testing.T) {
			tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/mods", Token: e.Owner}))
			res := legacy("add_perm", e.Owner, map[string]any{"permissions": []string{"ADD_REACTIONS", "MANAGE_ROLES"}}, e2eIfMatch(tag))
			if res.Status != http.StatusOK || e2eJSON(res.Map(t)["permissions"]) != `["MANAGE_ROLES","SEND_MESSAGES","ADD_REACTIONS"]` {
				t.Fatalf("add_perm: %s", res)
			}
			e2eLegacyHeaders(t, res, permsLink)
			tag2 := e2eETag(t, res)
			if tag2 == tag {
				t.Errorf("ETag did not move")
			}
			if p := perms(); p != `["MANAGE_ROLES","SEND_MESSAGES","ADD_REACTIONS"]` {
				t.Errorf("after add_perm %s", p)
			}
			// Adding what is there is a no-op.
			seq := e2eSeq(t, e)
			res = legacy("add_perm", e.Owner, map[string]any{"permissions": []string{"ADD_REACTIONS"}}, nil)
			if res.Status != http.StatusOK || e2eETag(t, res) != tag2 {
				t.Errorf("no-op add_perm: %s", res)
			}
			e2eNoEvent(t, e, seq)
			res = legacy("remove_perm", e.Owner, map[string]any{"permissions": []string{"SEND_MESSAGES", "MENTION_EVERYONE"}}, e2eIfMatch(tag2))
			if res.Status != http.StatusOK || e2eJSON(res.Map(t)["permissions"]) != `["MANAGE_ROLES","ADD_REACTIONS"]` {
				t.Fatalf("remove_perm: %s", res)
			}
			e2eLegacyHeaders(t, res, permsLink)
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"role.permissions.set"}) {
				t.Errorf("events %v (successor's type expected)", ev)
			}
		})
		t.Run("add_perm and remove_perm errors", func(t *testing.T) {
			before := perms()
			seq := e2eSeq(t, e)
			for _, op := range []string{"add_perm", "remove_perm"} {
				body := map[string]any{"permissions": []string{"VIEW_CHANNEL"}}
				res := legacy(op, e.Owner, body, e2eIfMatch(`"999"`))
				e2eProblem(t, res, http.StatusPreconditionFailed, "precondition_failed")
				e2eLegacyHeaders(t, res, permsLink)
				res = e.Do(testenv.Req{Method: "POST", Path: "/roles/none/" + op, Token: e.Owner, Body: body})
				e2eProblem(t, res, http.StatusNotFound, "not_found")
				e2eLegacyHeaders(t, res, "/api/roles/none/permissions")
				res = legacy(op, e.Owner, map[string]any{"permissions": []string{"FLY"}}, nil)
				p := e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, "body.permissions[0]")
				e2eLegacyHeaders(t, res, permsLink)
				res = legacy(op, plain.Token, body, nil)
				e2eProblem(t, res, http.StatusForbidden, "forbidden")
				e2eLegacyHeaders(t, res, permsLink)
				res = legacy(op, "", body, nil)
				e2eProblem(t, res, http.StatusUnauthorized, "unauthenticated")
				e2eLegacyHeaders(t, res, permsLink)
				res = e.Do(testenv.Req{Method: "POST", Path: "/roles/mods/" + op, Token: e.Owner, Body: `{"permissions":[]}`, Type: "text/plain"})
				e2eProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
				e2eLegacyHeaders(t, res, permsLink)
			}
			if after := perms(); after != before {
				t.Errorf("changed: %s -> %s", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("add_user and remove_user", func(t *testing.T) {
			link := "/api/users/" + alice.ID + "/roles/mods"
			seq := e2eSeq(t, e)
			res := legacy("add_user", e.Owner, map[string]any{"user_id": alice.ID}, nil)
			if res.Status != http.StatusNoContent {
				t.Fatalf("add_user: %s", res)
			}
			e2eLegacyHeaders(t, res, link)
			if roles := e2eGet(t, e, "/users/"+alice.ID)["roles"]; e2eJSON(roles) != `["mods"]` {
				t.Errorf("alice's roles %v", roles)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"user.role.assigned"}) {
				t.Errorf("events %v", ev)
			}
			seq = e2eSeq(t, e)
			res = legacy("add_user", e.Owner, map[string]any{"user_id": alice.ID}, nil)
			if res.Status != http.StatusNoContent {
				t.Fatalf("add_user again: %s", res)
			}
			e2eLegacyHeaders(t, res, link)
			e2eNoEvent(t, e, seq)
			res = legacy("remove_user", e.Owner, map[string]any{"user_id": alice.ID}, nil)
			if res.Status != http.StatusNoContent {
				t.Fatalf("remove_user: %s", res)
			}
			e2eLegacyHeaders(t, res, link)
			if roles := e2eGet(t, e, "/users/"+alice.ID)["roles"]; e2eJSON(roles) != `[]` {
				t.Errorf("alice's roles %v", roles)
			}
			seq = e2eSeq(t, e)
			res = legacy("remove_user", e.Owner, map[string]any{"user_id": alice.ID}, nil)
			if res.Status != http.StatusNoContent {
				t.Fatalf("remove_user again: %s", res)
			}
			e2eLegacyHeaders(t, res, link)
			e2eNoEvent(t, e, seq)
		})
		t.Run("add_user and remove_user errors", func(t *testing.T) {
			seq := e2eSeq(t, e)
			ghost := "0192f1a0-0000-7000-8000-000000000000"
			for _, op := range []string{"add_user", "remove_user"} {
				res := legacy(op, e.Owner, map[string]any{"user_id": ghost}, nil)
				e2eProblem(t, res, http.StatusNotFound, "not_found")
				e2eLegacyHeaders(t, res, "/api/users/"+ghost+"/roles/mods")
				res = e.Do(testenv.Req{Method: "POST", Path: "/roles/none/" + op, Token: e.Owner, Body: map[string]any{"user_id": alice.ID}})
				e2eProblem(t, res, http.StatusNotFound, "not_found")
				e2eLegacyHeaders(t, res, "/api/users/"+alice.ID+"/roles/none")
				res = legacy(op, e.Owner, map[string]any{"user_id": "not-a-uuid"}, nil)
				p := e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, "body.user_id")
				e2eLegacyHeaders(t, res, "/api/users/%7BuserID%7D/roles/mods")
				res = legacy(op, plain.Token, map[string]any{"user_id": alice.ID}, nil)
				e2eProblem(t, res, http.StatusForbidden, "forbidden")
				e2eLegacyHeaders(t, res, "/api/users/"+alice.ID+"/roles/mods")
				// Refused before the body is read: the Link cannot name the user.
				res = legacy(op, "", map[string]any{"user_id": alice.ID}, nil)
				e2eProblem(t, res, http.StatusUnauthorized, "unauthenticated")
				e2eLegacyHeaders(t, res, "/api/users/%7BuserID%7D/roles/mods")
				res = e.Do(testenv.Req{Method: "POST", Path: "/roles/mods/" + op, Token: e.Owner, Body: `{"user_id":"` + alice.ID + `"}`, Type: "text/plain"})
				e2eProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
				e2eLegacyHeaders(t, res, "/api/users/%7BuserID%7D/roles/mods")
			}
			if roles := e2eGet(t, e, "/users/"+alice.ID)["roles"]; e2eJSON(roles) != `[]` {
				t.Errorf("alice's roles %v", roles)
			}
			e2eNoEvent(t, e, seq)
		})
	})
}

// Assigning and removing roles, and a user's role list.
func TestRolesUserRoles(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		alice := e.NewUser("alice")
		e.NewRole("low", "ADD_REACTIONS")
		e.NewRole("high", "MANAGE_MESSAGES")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/high/move", Token: e.Owner, Body: map[string]any{"position": 2}})
		assign := func(token, user, role string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/users/" + user + "/roles/" + role, Token: token})
		}
		remove := func(token, user, role string) *testenv.Response {
			return e.Do(testenv.Req{Method: "DELETE", Path: "/users/" + user + "/roles/" + role, Token: token})
		}
		userRoles := func() []string {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/roles", Token: plain.Token})
			return e2eRoleIDs(e2eDecodeRoles(t, res).Items)
		}

		tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}))
		seq := e2eSeq(t, e)
		for _, role := range []string{"low", "high"} {
			if res := assign(e.Owner, alice.ID, role); res.Status != http.StatusNoContent || len(res.Body) != 0 {
				t.Fatalf("assign %s: %s", role, res)
			}
		}
		if got := userRoles(); !slices.Equal(got, []string{"high", "low"}) {
			t.Errorf("user roles %v, want by position descending", got)
		}
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
		if roles := res.Map(t)["roles"]; e2eJSON(roles) != `["high","low"]` {
			t.Errorf("user.roles %v", roles)
		}
		tag2 := e2eETag(t, res)
		if tag2 == tag {
			t.Errorf("user ETag did not move on assignment")
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"user.role.assigned", "user.role.assigned"}) {
			t.Errorf("events %v", ev)
		}

		t.Run("assign again and remove unassigned are quiet 204s", func(t *testing.T) {
			seq := e2eSeq(t, e)
			if res := assign(e.Owner, alice.ID, "low"); res.Status != http.StatusNoContent {
				t.Errorf("assign again: %s", res)
			}
			if res := remove(e.Owner, plain.ID, "low"); res.Status != http.StatusNoContent {
				t.Errorf("remove unassigned: %s", res)
			}
			e2eNoEvent(t, e, seq)
			if tg := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})); tg != tag2 {
				t.Errorf("ETag moved on a no-op: %s -> %s", tag2, tg)
			}
		})
		t.Run("moving a role reorders the user's roles and moves its ETag", func(t *testing.T) {
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/low/move", Token: e.Owner, Body: map[string]any{"position": 2}})
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
			if roles := res.Map(t)["roles"]; e2eJSON(roles) != `["low","high"]` {
				t.Errorf("user.roles %v", roles)
			}
			if e2eETag(t, res) == tag2 {
				t.Errorf("the user's roles changed order but the ETag %s did not", tag2)
			}
			if got := userRoles(); !slices.Equal(got, []string{"low", "high"}) {
				t.Errorf("user roles %v", got)
			}
		})
		t.Run("errors change nothing", func(t *testing.T) {
			seq := e2eSeq(t, e)
			ghost := "0192f1a0-0000-7000-8000-000000000000"
			for _, f := range []func(token, user, role string) *testenv.Response{assign, remove} {
				e2eProblem(t, f(e.Owner, ghost, "low"), http.StatusNotFound, "not_found")
				e2eProblem(t, f(e.Owner, alice.ID, "none"), http.StatusNotFound, "not_found")
				p := e2eProblem(t, f(e.Owner, "nope", "low"), http.StatusBadRequest, "validation")
				e2eField(t, p, "path.userID")
				p = e2eProblem(t, f(e.Owner, alice.ID, "LOW"), http.StatusBadRequest, "validation")
				e2eField(t, p, "path.roleID")
				p = e2eProblem(t, f(plain.Token, alice.ID, "low"), http.StatusForbidden, "forbidden")
				if p.MissingPermissions == nil || !slices.Contains(*p.MissingPermissions, "MANAGE_ROLES") {
					t.Errorf("403 %+v", p)
				}
				e2eProblem(t, f("", alice.ID, "low"), http.StatusUnauthorized, "unauthenticated")
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + ghost + "/roles", Token: e.Owner}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/x/roles", Token: e.Owner}), http.StatusBadRequest, "validation")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/roles"}), http.StatusUnauthorized, "unauthenticated")
			if got := userRoles(); !slices.Equal(got, []string{"low", "high"}) {
				t.Errorf("user roles %v", got)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("remove", func(t *testing.T) {
			seq := e2eSeq(t, e)
			if res := remove(e.Owner, alice.ID, "high"); res.Status != http.StatusNoContent {
				t.Fatalf("remove: %s", res)
			}
			if got := userRoles(); !slices.Equal(got, []string{"low"}) {
				t.Errorf("user roles %v", got)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"user.role.removed"}) {
				t.Errorf("events %v", ev)
			}
		})
	})
}

func e2eDecodeRoles(t testing.TB, res *testenv.Response) api.RoleList {
	t.Helper()
	var l api.RoleList
	res.JSON(t, &l)
	if !l.NextCursor.IsNull() {
		t.Errorf("a whole list has next_cursor: %s", res.Body)
	}
	return l
}

func e2eRoleIDs(items []api.Role) []string {
	out := make([]string, len(items))
	for i, r := range items {
		out[i] = r.Id
	}
	return out
}

// e2eRoleOrder lists the role IDs by position descending, checking that
// positions run N..1 without holes.
func e2eRoleOrder(t testing.TB, e *testenv.Env) []string {
	t.Helper()
	l := e2eDecodeRoles(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}))
	for i, r := range l.Items {
		if want := len(l.Items) - i; r.Position != want {
			t.Fatalf("role %s at position %d, want %d (positions must run N..1): %s", r.Id, r.Position, want, e2eJSON(l))
		}
	}
	return e2eRoleIDs(l.Items)
}

// Concurrent writes on a PostgreSQL database whose default isolation is
// REPEATABLE READ: every write still sees what the writers before it
// committed (positions stay 1..N, no 5xx).
func TestRolesConcurrentCreatesRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	testenv.RequirePostgres(t)
	e := testenv.Start(t, testenv.Postgres, testenv.WithConfig(func(c *config.Config) {
		c.DatabaseURL += "&default_transaction_isolation=repeatable%20read"
	}))
	const writers, each = 8, 5
	statuses := make(chan int, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := "r" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				code, body, err := sseRawDo(context.Background(), e, e.Owner, "POST", "/roles/"+id+"/create", map[string]any{"name": id})
				if err != nil || code != http.StatusCreated {
					t.Errorf("create %s: %d %s %v", id, code, body, err)
				}
				statuses <- code
			}
		})
	}
	wg.Wait()
	var list struct {
		Items []struct {
			ID       string `json:"id"`
			Position int    `json:"position"`
		} `json:"items"`
	}
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}).JSON(t, &list)
	if len(list.Items) != writers*each {
		t.Fatalf("%d roles after %d creates", len(list.Items), writers*each)
	}
	for i, r := range list.Items { // by position, descending
		if want := writers*each - i; r.Position != want {
			t.Errorf("role %s at position %d, want %d: positions are not 1..N", r.ID, r.Position, want)
		}
	}
}

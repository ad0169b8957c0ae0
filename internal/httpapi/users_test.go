package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/oapi-codegen/nullable"
	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/testenv"
)

var e2eUUIDv7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// The typed contract of users: create, get, replace, list, delete.
func TestUsersContract(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		c := e.Client(e.Owner)
		ctx := t.Context()

		created, err := c.CreateUserWithResponse(ctx, nil, api.UserCreate{Username: "alice"})
		if err != nil || created.JSON201 == nil {
			t.Fatalf("create: %v %d %s", err, created.StatusCode(), created.Body)
		}
		u := created.JSON201
		if !e2eUUIDv7.MatchString(u.Id) || u.Username != "alice" || u.DisplayName != "alice" || u.Status != api.UserStatusActive ||
			u.IsOwner || len(u.Roles) != 0 || u.Roles == nil {
			t.Errorf("created %s", created.Body)
		}
		if !u.Email.IsSpecified() || !u.Email.IsNull() {
			t.Errorf("email of a user created without one should be null for MANAGE_USERS: %s", created.Body)
		}
		e2eCheckTimestamps(t, u.CreatedAt.Time(), u.UpdatedAt.Time())
		if loc := created.HTTPResponse.Header.Get("Location"); loc != "/api/users/"+u.Id {
			t.Errorf("Location %q", loc)
		}
		tag := created.HTTPResponse.Header.Get("ETag")
		if tag == "" {
			t.Fatal("no ETag")
		}

		dn := "Bob Builder"
		bobRes, err := c.CreateUserWithResponse(ctx, nil, api.UserCreate{Username: "Bob", DisplayName: &dn,
			Email: nullable.NewNullableWithValue(openapi_types.Email("Bob@Example.com"))})
		if err != nil || bobRes.JSON201 == nil {
			t.Fatalf("create bob: %v %s", err, bobRes.Body)
		}
		bob := bobRes.JSON201
		if bob.Username != "Bob" || bob.DisplayName != "Bob Builder" || bob.Email.MustGet() != "Bob@Example.com" {
			t.Errorf("bob %s", bobRes.Body)
		}
		if bob.Id <= u.Id {
			t.Errorf("user IDs are not time-ordered: %s then %s", u.Id, bob.Id)
		}

		got, err := c.GetUserWithResponse(ctx, u.Id)
		if err != nil || got.JSON200 == nil {
			t.Fatalf("get: %v %s", err, got.Body)
		}
		if e2eJSON(got.JSON200) != e2eJSON(u) || got.HTTPResponse.Header.Get("ETag") != tag {
			t.Errorf("get %s (ETag %s) != created %s (ETag %s)", got.Body, got.HTTPResponse.Header.Get("ETag"), e2eJSON(u), tag)
		}

		upd, err := c.UpdateUserWithResponse(ctx, u.Id, &api.UpdateUserParams{IfMatch: &tag}, api.UpdateUserJSONRequestBody{
			Username: "alice2", DisplayName: "Alice", Status: api.UserUpdateStatusActive,
			Email: nullable.NewNullableWithValue(openapi_types.Email("alice@example.com"))})
		if err != nil || upd.JSON200 == nil {
			t.Fatalf("update: %v %s", err, upd.Body)
		}
		if upd.JSON200.Username != "alice2" || upd.JSON200.DisplayName != "Alice" || upd.JSON200.Email.MustGet() != "alice@example.com" ||
			!upd.JSON200.CreatedAt.Time().Equal(u.CreatedAt.Time()) || !upd.JSON200.UpdatedAt.Time().After(u.UpdatedAt.Time()) {
			t.Errorf("updated %s", upd.Body)
		}
		if tag2 := upd.HTTPResponse.Header.Get("ETag"); tag2 == "" || tag2 == tag {
			t.Errorf("ETag after update %q (before %q)", tag2, tag)
		}

		list, err := c.ListUsersWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list: %v %s", err, list.Body)
		}
		var names []string
		for _, x := range list.JSON200.Items {
			names = append(names, x.Username)
		}
		if !slices.Equal(names, []string{"owner", "alice2", "Bob"}) || !list.JSON200.NextCursor.IsNull() {
			t.Errorf("list %s", list.Body)
		}
		if !list.JSON200.Items[0].IsOwner {
			t.Errorf("the owner is not marked is_owner: %s", list.Body)
		}

		del, err := c.DeleteUserWithResponse(ctx, bob.Id, nil)
		if err != nil || del.StatusCode() != http.StatusNoContent {
			t.Fatalf("delete: %v %s", err, del.Body)
		}
		gone, _ := c.GetUserWithResponse(ctx, bob.Id)
		if gone.ApplicationproblemJSON404 == nil {
			t.Errorf("get after delete: %d %s", gone.StatusCode(), gone.Body)
		}
	})
}

func TestUsersCreate(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner,
			Body: map[string]any{"username": "alice", "email": "Alice@Example.com"}})
		create := func(token string, body any) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/users", Token: token, Body: body})
		}
		count := func() int {
			var l api.UserList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=200", Token: e.Owner}).JSON(t, &l)
			return len(l.Items)
		}
		n := count()
		seq := e2eSeq(t, e)

		conflicts := []struct{ name, username, email string }{
			{"same username", "alice", ""},
			{"username differing in case", "ALICE", ""},
			{"the owner's username in another case", "Owner", ""},
			{"same email", "alice3", "Alice@Example.com"},
			{"email differing in case", "alice4", "alice@EXAMPLE.com"},
		}
		for _, tc := range conflicts {
			t.Run("409 "+tc.name, func(t *testing.T) {
				body := map[string]any{"username": tc.username}
				if tc.email != "" {
					body["email"] = tc.email
				}
				e2eProblem(t, create(e.Owner, body), http.StatusConflict, "conflict")
			})
		}
		invalid := []struct {
			name     string
			body     any
			location string
		}{
			{"invalid email", map[string]any{"username": "x1", "email": "not-an-email"}, "body.email"},
			{"email without domain dot", map[string]any{"username": "x1", "email": "a@b"}, "body.email"},
			{"username too short", map[string]any{"username": "x"}, "body.username"},
			{"username too long", map[string]any{"username": strings.Repeat("x", 33)}, "body.username"},
			{"username with a space", map[string]any{"username": "a b"}, "body.username"},
			{"no username", map[string]any{"display_name": "x"}, "body.username"},
			{"display name too long", map[string]any{"username": "x1", "display_name": strings.Repeat("d", 101)}, "body.display_name"},
			{"display name with a newline", map[string]any{"username": "x1", "display_name": "a\nb"}, "body.display_name"},
			{"status is not settable on create", map[string]any{"username": "x1", "status": "suspended"}, "body.status"},
			{"is_owner is read-only", map[string]any{"username": "x1", "is_owner": true}, "body.is_owner"},
		}
		for _, tc := range invalid {
			t.Run("400 "+tc.name, func(t *testing.T) {
				p := e2eProblem(t, create(e.Owner, tc.body), http.StatusBadRequest, "validation")
				e2eField(t, p, tc.location)
			})
		}
		e2eProblem(t, create("", map[string]any{"username": "x1"}), http.StatusUnauthorized, "unauthenticated")
		p := e2eProblem(t, create(plain.Token, map[string]any{"username": "x1"}), http.StatusForbidden, "forbidden")
		if p.MissingPermissions == nil || !slices.Equal(*p.MissingPermissions, []api.PermissionName{"MANAGE_USERS"}) {
			t.Errorf("403 %+v", p)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: `{"username":"x1"}`, Type: "text/plain"}),
			http.StatusUnsupportedMediaType, "unsupported_media_type")
		e2eProblem(t, create(e.Owner, map[string]any{"username": "x1", "display_name": strings.Repeat("d", 1<<20)}),
			http.StatusRequestEntityTooLarge, "payload_too_large")
		if got := count(); got != n {
			t.Errorf("%d users after refused creates, want %d", got, n)
		}
		e2eNoEvent(t, e, seq)

		// An email freed by a change can be taken again; a display name may be 100 multibyte characters.
		res := create(e.Owner, map[string]any{"username": "x.y-z_1", "display_name": strings.Repeat("é", 100), "email": "x@example.org"})
		if res.Status != http.StatusCreated {
			t.Fatalf("valid create: %s", res)
		}
	})
}

func TestUsersReplace(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		alice := e.NewUser("alice")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner,
			Body: map[string]any{"username": "alice", "display_name": "Alice", "email": "alice@example.com", "status": "active"}})
		put := func(token, id string, body any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PUT", Path: "/users/" + id, Token: token, Body: body, Headers: headers})
		}
		full := func(username, display, status string) map[string]any {
			return map[string]any{"username": username, "display_name": display, "status": status}
		}

		t.Run("omitted email becomes null", func(t *testing.T) {
			res := put(e.Owner, alice.ID, full("alice", "Alice", "active"), nil)
			m := res.Map(t)
			if v, ok := m["email"]; res.Status != http.StatusOK || !ok || v != nil || m["display_name"] != "Alice" {
				t.Errorf("%s", res)
			}
			if v, ok := e2eGet(t, e, "/users/"+alice.ID)["email"]; !ok || v != nil {
				t.Errorf("email read back %v", v)
			}
		})
		t.Run("no-op writes nothing", func(t *testing.T) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
			tag := e2eETag(t, res)
			seq := e2eSeq(t, e)
			res = put(e.Owner, alice.ID, full("alice", "Alice", "active"), e2eIfMatch(tag))
			if res.Status != http.StatusOK || e2eETag(t, res) != tag {
				t.Errorf("no-op: %s", res)
			}
			e2eNoEvent(t, e, seq)
		})
		// docs/design.md §12 "Editing oneself": own username and display name
		// without a permission (the email: TestUsersOwnEmail); never one's own
		// status, nor anybody else.
		t.Run("self may change the own names, not the status", func(t *testing.T) {
			res := put(alice.Token, alice.ID, full("alice", "Ally", "active"), nil)
			if res.Status != http.StatusOK || res.Map(t)["display_name"] != "Ally" {
				t.Fatalf("own display name: %s", res)
			}
			res = put(alice.Token, alice.ID, full("alicia", "Ally", "active"), nil)
			if m := res.Map(t); res.Status != http.StatusOK || m["username"] != "alicia" {
				t.Fatalf("own username: %s", res)
			}
			res = put(alice.Token, alice.ID, full("alice", "Ally", "active"), nil)
			if m := res.Map(t); res.Status != http.StatusOK || m["username"] != "alice" {
				t.Fatalf("own username back: %s", res)
			}
			e.NewRole("floor")
			before := e2eGet(t, e, "/users/"+alice.ID)
			seq := e2eSeq(t, e)
			e2eProblem(t, put(alice.Token, alice.ID, full("alice", "Ally", "suspended"), nil), http.StatusForbidden, "forbidden")
			e2eProblem(t, put(alice.Token, alice.ID, full("alicia", "Ally", "suspended"), nil), http.StatusForbidden, "forbidden")
			e2eProblem(t, put(plain.Token, alice.ID, full("alice", "By plain", "active"), nil), http.StatusForbidden, "forbidden")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/roles/floor", Token: alice.Token}), http.StatusForbidden, "forbidden")
			if after := e2eGet(t, e, "/users/"+alice.ID); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors change nothing", func(t *testing.T) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
			before := res.Map(t)
			tag := e2eETag(t, res)
			seq := e2eSeq(t, e)
			ghost := "0192f1a0-0000-7000-8000-000000000000"
			e2eProblem(t, put(e.Owner, alice.ID, full("alice", "Stale", "active"), e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, put(e.Owner, ghost, full("ghost", "Ghost", "active"), e2eIfMatch(`"999"`)), http.StatusNotFound, "not_found")
			e2eProblem(t, put(e.Owner, alice.ID, full("PLAIN", "Alice", "active"), nil), http.StatusConflict, "conflict")
			e2eProblem(t, put(e.Owner, "nope", full("alice", "Alice", "active"), nil), http.StatusBadRequest, "validation")
			p := e2eProblem(t, put(e.Owner, alice.ID, map[string]any{"username": "alice", "display_name": "Alice"}, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.status")
			p = e2eProblem(t, put(e.Owner, alice.ID, full("alice", "Alice", "banned"), nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.status")
			e2eProblem(t, put("", alice.ID, full("alice", "Alice", "active"), nil), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner, Body: `{}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, put(e.Owner, alice.ID, full("alice", strings.Repeat("x", 1<<20), "active"), nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			res = e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
			if after := res.Map(t); e2eJSON(after) != e2eJSON(before) || e2eETag(t, res) != tag {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("email taken ignoring case on replace", func(t *testing.T) {
			if res := put(e.Owner, plain.ID, map[string]any{"username": "plain", "display_name": "plain", "status": "active",
				"email": "plain@example.com"}, nil); res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			e2eProblem(t, put(e.Owner, alice.ID, map[string]any{"username": "alice", "display_name": "Ally", "status": "active",
				"email": "PLAIN@Example.COM"}, nil), http.StatusConflict, "conflict")
			// Changing the case of one's own username or email is no conflict.
			res := put(e.Owner, plain.ID, map[string]any{"username": "Plain", "display_name": "plain", "status": "active",
				"email": "Plain@example.com"}, nil)
			if m := res.Map(t); res.Status != http.StatusOK || m["username"] != "Plain" || m["email"] != "Plain@example.com" {
				t.Errorf("case change of own username and email: %s", res)
			}
		})
	})
}

// TestUsersOwnEmail: changing one's own email needs MANAGE_USERS (without a
// hierarchy check on oneself), in PUT and PATCH alike; and whether an address
// is taken is told only to callers who may see emails, so a caller without
// MANAGE_USERS gets the same refusal for a taken address as for a free one.
func TestUsersOwnEmail(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		// hr holds MANAGE_USERS in a role at its own top: no one is below it.
		hr := e2eMember(t, e, "hr", "MANAGE_USERS")
		for _, u := range []testenv.User{alice, bob, hr} {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
				Body: map[string]any{"username": u.Username, "display_name": u.Username, "email": u.Username + "@example.com", "status": "active"}})
		}
		put := func(u testenv.User, email any) *testenv.Response {
			body := map[string]any{"username": u.Username, "display_name": u.Username, "status": "active"}
			if email != nil {
				body["email"] = email
			}
			return e.Do(testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: u.Token, Body: body})
		}
		patch := func(u testenv.User, body string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PATCH", Path: "/users/" + u.ID, Token: u.Token,
				Type: "application/merge-patch+json", Body: body})
		}

		t.Run("without MANAGE_USERS: 403, whether the address is free or taken", func(t *testing.T) {
			before := e2eGet(t, e, "/users/"+alice.ID)
			seq := e2eSeq(t, e)
			cases := []struct {
				name string
				res  func() *testenv.Response
			}{
				{"PUT a free address", func() *testenv.Response { return put(alice, "free@example.com") }},
				{"PUT a taken address", func() *testenv.Response { return put(alice, "bob@example.com") }},
				{"PUT a taken address in another case", func() *testenv.Response { return put(alice, "BOB@Example.com") }},
				{"PUT without an email (removing it)", func() *testenv.Response { return put(alice, nil) }},
				{"PATCH a free address", func() *testenv.Response { return patch(alice, `{"email":"free@example.com"}`) }},
				{"PATCH a taken address", func() *testenv.Response { return patch(alice, `{"email":"bob@example.com"}`) }},
				{"PATCH a taken address with a new display name", func() *testenv.Response {
					return patch(alice, `{"display_name":"Ally","email":"bob@example.com"}`)
				}},
				{"PATCH the email to null", func() *testenv.Response { return patch(alice, `{"email":null}`) }},
			}
			var first api.Problem
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					p := e2eProblem(t, tc.res(), http.StatusForbidden, "forbidden")
					if p.Reason == nil || string(*p.Reason) != "missing_permissions" || p.MissingPermissions == nil ||
						len(*p.MissingPermissions) != 1 || string((*p.MissingPermissions)[0]) != "MANAGE_USERS" {
						t.Errorf("problem %+v", p)
					}
					// Nothing in the answer tells a taken address from a free one.
					if i == 0 {
						first = p
					} else if e2eJSON(p.Detail) != e2eJSON(first.Detail) || p.Title != first.Title || p.Type != first.Type {
						t.Errorf("answer differs from a free address's: %+v vs %+v", p, first)
					}
				})
			}
			if after := e2eGet(t, e, "/users/"+alice.ID); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("without MANAGE_USERS, the own names with the email unchanged", func(t *testing.T) {
			res := e.Do(testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: alice.Token,
				Body: map[string]any{"username": "alicia", "display_name": "Ally", "status": "active", "email": "alice@example.com"}})
			if m := res.Map(t); res.Status != http.StatusOK || m["username"] != "alicia" || m["email"] != "alice@example.com" {
				t.Fatalf("%s", res)
			}
			res = patch(alice, `{"username":"alice","email":"alice@example.com"}`)
			if m := res.Map(t); res.Status != http.StatusOK || m["username"] != "alice" || m["email"] != "alice@example.com" {
				t.Fatalf("%s", res)
			}
		})
		t.Run("with MANAGE_USERS: one's own email without a hierarchy check", func(t *testing.T) {
			res := put(hr, "hr.new@example.com")
			if m := res.Map(t); res.Status != http.StatusOK || m["email"] != "hr.new@example.com" {
				t.Fatalf("PUT: %s", res)
			}
			res = patch(hr, `{"email":"hr@example.com"}`)
			if m := res.Map(t); res.Status != http.StatusOK || m["email"] != "hr@example.com" {
				t.Fatalf("PATCH: %s", res)
			}
			// Who may see emails is told that an address is taken.
			e2eProblem(t, put(hr, "BOB@example.com"), http.StatusConflict, "conflict")
			e2eProblem(t, patch(hr, `{"email":"bob@example.com"}`), http.StatusConflict, "conflict")
			// Their own status still needs the hierarchy.
			e2eProblem(t, patch(hr, `{"status":"suspended"}`), http.StatusForbidden, "forbidden")
		})
	})
}

func TestUsersSuspend(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		second := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/tokens", Token: alice.Token,
			Body: map[string]any{"name": "second"}}).Map(t)["token"].(string)
		status := func(s string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner,
				Body: map[string]any{"username": "alice", "display_name": "alice", "status": s}})
		}
		works := func(token string) int {
			return e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: token}).Status
		}
		if res := status("suspended"); res.Status != http.StatusOK || res.Map(t)["status"] != "suspended" {
			t.Fatalf("suspend: %s", res)
		}
		for _, tok := range []string{alice.Token, second} {
			res := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: tok})
			e2eProblem(t, res, http.StatusUnauthorized, "unauthenticated")
			if res.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			// Writes too: a suspended user changes nothing.
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/profile/link", Token: tok, Body: map[string]any{"links": map[string]any{}}}),
				http.StatusUnauthorized, "unauthenticated")
		}
		if got := e2eGet(t, e, "/users/"+alice.ID)["status"]; got != "suspended" {
			t.Errorf("status %v", got)
		}
		if res := status("active"); res.Status != http.StatusOK || res.Map(t)["status"] != "active" {
			t.Fatalf("reactivate: %s", res)
		}
		for _, tok := range []string{alice.Token, second} {
			if s := works(tok); s != http.StatusOK {
				t.Errorf("token after reactivation: %d", s)
			}
		}
	})
}

// The owner cannot be suspended or deleted, not even by themself.
func TestUsersOwnerProtected(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		admin := e2eMember(t, e, "admin", "ADMINISTRATOR")
		var l api.UserList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?limit=1", Token: e.Owner}).JSON(t, &l)
		owner := l.Items[0]
		if !owner.IsOwner || owner.Username != "owner" {
			t.Fatalf("first user %+v", owner)
		}
		before := e2eGet(t, e, "/users/"+owner.Id)
		seq := e2eSeq(t, e)

		suspend := map[string]any{"username": "owner", "display_name": owner.DisplayName, "status": "suspended"}
		e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/users/" + owner.Id, Token: e.Owner, Body: suspend}), http.StatusConflict, "conflict")
		e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: "/users/" + owner.Id, Token: e.Owner}), http.StatusConflict, "conflict")
		p := e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/users/" + owner.Id, Token: admin.Token, Body: suspend}), http.StatusForbidden, "forbidden")
		if p.UserId == nil || *p.UserId != owner.Id {
			t.Errorf("403 without user_id: %+v", p)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: "/users/" + owner.Id, Token: admin.Token}), http.StatusForbidden, "forbidden")
		if after := e2eGet(t, e, "/users/"+owner.Id); e2eJSON(after) != e2eJSON(before) {
			t.Errorf("owner changed: %v -> %v", before, after)
		}
		e2eNoEvent(t, e, seq)
		if s := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}).Status; s != http.StatusOK {
			t.Errorf("owner token after refused changes: %d", s)
		}
	})
}

func TestUsersDelete(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		alice := e.NewUser("alice")
		e.NewRole("mods", "MANAGE_MESSAGES")
		e.Assign(alice.ID, "mods")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "user", alice.ID, []string{"MENTION_EVERYONE"}, nil)
		e.SetOverwrite("ops", "user", plain.ID, []string{"MENTION_EVERYONE"}, nil)
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/profile/link", Token: alice.Token,
			Body: map[string]any{"links": map[string]any{"github": "https://github.com/alice"}}})
		tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}))
		del := func(token, id string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "DELETE", Path: "/users/" + id, Token: token, Headers: headers})
		}

		seq := e2eSeq(t, e)
		e2eProblem(t, del(e.Owner, alice.ID, e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
		e2eProblem(t, del(e.Owner, "0192f1a0-0000-7000-8000-000000000000", e2eIfMatch(`"999"`)), http.StatusNotFound, "not_found")
		e2eProblem(t, del(plain.Token, alice.ID, nil), http.StatusForbidden, "forbidden")
		e2eProblem(t, del("", alice.ID, nil), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, del(e.Owner, "ALICE", nil), http.StatusBadRequest, "validation")
		e2eNoEvent(t, e, seq)
		if s := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}).Status; s != http.StatusOK {
			t.Fatalf("alice's token after refused deletes: %d", s)
		}

		if res := del(e.Owner, alice.ID, e2eIfMatch(tag)); res.Status != http.StatusNoContent || len(res.Body) != 0 {
			t.Fatalf("delete: %s", res)
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"user.deleted"}) {
			t.Errorf("events %v, want one user.deleted", ev)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/roles", Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}), http.StatusUnauthorized, "unauthenticated")
		if got := e2eTargets(e2eDecodeOverwrites(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner}))); !slices.Equal(got, []string{"user:" + plain.ID}) {
			t.Errorf("overwrites after delete %v", got)
		}
		// Role assignments and profile links went too (nothing in the API
		// reaches a deleted user's, so ask the store).
		if p, err := e.App.Store.GetProfile(t.Context(), alice.ID); err != nil || len(p.Links) != 0 || p.Version != 0 {
			t.Errorf("profile of the deleted user: %+v %v", p, err)
		}
		if toks, err := e.App.Store.ListTokens(t.Context(), alice.ID); err != nil || len(toks) != 0 {
			t.Errorf("tokens of the deleted user: %v %v", toks, err)
		}
		// The role survives, held by nobody.
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/mods", Token: e.Owner})
		e2eProblem(t, del(e.Owner, alice.ID, nil), http.StatusNotFound, "not_found")
		// The username is free again.
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": "Alice"}})
	})
}

// email is shown only to the user themself and to holders of MANAGE_USERS.
func TestUsersEmailVisibility(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		hr := e2eMember(t, e, "hr", "MANAGE_USERS")
		for _, u := range []testenv.User{alice, bob} {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + u.ID, Token: e.Owner,
				Body: map[string]any{"username": u.Username, "display_name": u.Username, "email": u.Username + "@example.com", "status": "active"}})
		}
		emailOf := func(token, id string) (any, bool) {
			m := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + id, Token: token}).Map(t)
			v, ok := m["email"]
			return v, ok
		}
		if v, ok := emailOf(alice.Token, alice.ID); !ok || v != "alice@example.com" {
			t.Errorf("alice sees her email as %v", v)
		}
		if v, ok := emailOf(bob.Token, alice.ID); ok {
			t.Errorf("bob sees alice's email %v", v)
		}
		if v, ok := emailOf(hr.Token, alice.ID); !ok || v != "alice@example.com" {
			t.Errorf("MANAGE_USERS sees %v", v)
		}
		// In lists as well.
		var l api.UserList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users", Token: bob.Token}).JSON(t, &l)
		for _, u := range l.Items {
			if u.Id == bob.ID {
				if u.Email.MustGet() != "bob@example.com" {
					t.Errorf("bob's own entry: %v", u.Email)
				}
			} else if u.Email.IsSpecified() {
				t.Errorf("bob sees %s's email field %v", u.Username, u.Email)
			}
		}
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users", Token: hr.Token}).JSON(t, &l)
		for _, u := range l.Items {
			if !u.Email.IsSpecified() {
				t.Errorf("MANAGE_USERS does not see %s's email field", u.Username)
			}
		}
		// Nor does the audit log give it away (users without MANAGE_USERS may read it with VIEW_AUDIT_LOG).
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=user.*", Token: e.Owner})
		if strings.Contains(string(res.Body), "@example.com") {
			t.Errorf("the audit log carries emails: %s", res.Body)
		}
	})
}

func TestUsersGetAndList(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: alice.Token})
		if m := res.Map(t); m["username"] != "alice" || m["is_owner"] != false {
			t.Errorf("%s", res)
		}
		e2eETag(t, res)
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/0192f1a0-0000-7000-8000-000000000000", Token: alice.Token}), http.StatusNotFound, "not_found")
		p := e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/alice", Token: alice.Token}), http.StatusBadRequest, "validation")
		e2eField(t, p, "path.userID")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users/" + alice.ID}), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users"}), http.StatusUnauthorized, "unauthenticated")
		p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/users?limit=201", Token: alice.Token}), http.StatusBadRequest, "validation")
		e2eField(t, p, "query.limit")
	})
}

// Searching users: q is a case-insensitive prefix of the username or display
// name (and of the email, only for MANAGE_USERS), matches are listed in the
// order of the name they match by, role and status filter exactly, filters
// combine, pages walk every match once, and a cursor is bound to its
// filters.
func TestUsersSearch(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		mk := func(username, display, email string) string {
			body := map[string]any{"username": username, "display_name": display}
			if email != "" {
				body["email"] = email
			}
			return e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: body}).Map(t)["id"].(string)
		}
		alice := mk("alice", "Alice Liddell", "wonder@example.com")
		alistair := mk("Alistair", "Al", "")
		bob := mk("bob", "ALIen Bob", "bob@example.com")
		zoe := mk("zoe", "Zoë Éclair", "zoe@ali.example")
		pct := mk("per_cent", "100% sure", "")
		viewer := e.NewUser("viewer") // no MANAGE_USERS
		e.NewRole("mods")
		e.Assign(alice, "mods")
		e.Assign(zoe, "mods")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + bob, Token: e.Owner,
			Body: map[string]any{"username": "bob", "display_name": "ALIen Bob", "email": "bob@example.com", "status": "suspended"}})
		owner := e2eOwnerID(t, e)

		search := func(token, query string) []string {
			t.Helper()
			return e2eWalk(t, e, token, "/users?"+query, 2, nil)
		}
		for _, tc := range []struct {
			name, token, query string
			want               []string
		}{
			// In the order of the name matched: "alice", "alien bob", "alistair".
			{"username or display name prefix, any case", e.Owner, "q=ALI", []string{alice, bob, alistair}},
			{"display name after the first word is no prefix", e.Owner, "q=liddell", nil},
			{"email prefix for MANAGE_USERS", e.Owner, "q=wonder", []string{alice}},
			{"email never matches without MANAGE_USERS", viewer.Token, "q=wonder", nil},
			// Alistair by the least of the names that match: "al" (display), not "alistair".
			{"names still match without MANAGE_USERS", viewer.Token, "q=al", []string{alistair, alice, bob}},
			{"non-ASCII lower-cased", e.Owner, "q=" + url.QueryEscape("ZOË"), []string{zoe}},
			{"LIKE wildcards are literal", e.Owner, "q=" + url.QueryEscape("100%"), []string{pct}},
			{"underscore is literal", e.Owner, "q=per_", []string{pct}},
			{"underscore matches no other character", e.Owner, "q=pe_", nil},
			{"role", e.Owner, "role=mods", []string{alice, zoe}},
			{"unknown role matches nobody", e.Owner, "role=nobody", nil},
			{"status suspended", e.Owner, "status=suspended", []string{bob}},
			{"status active", e.Owner, "status=active", []string{owner, alice, alistair, zoe, pct, viewer.ID}},
			{"filters combine", e.Owner, "q=ali&status=active&role=mods", []string{alice}},
			{"role and status without q", e.Owner, "role=mods&status=active", []string{alice, zoe}},
			{"role and a status none of its holders has", e.Owner, "role=mods&status=suspended", nil},
			{"no match", e.Owner, "q=xyz", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := search(tc.token, tc.query)
				if !slices.Equal(got, tc.want) {
					t.Errorf("GET /users?%s: %v, want %v", tc.query, got, tc.want)
				}
			})
		}

		t.Run("a page ending at the longest name has a cursor the list takes", func(t *testing.T) {
			// A search's cursor holds the name it stopped at: 100 emoji
			// (400 bytes), 100 of "&" and 100 of "<" (which JSON would
			// escape as HTML, 6 bytes each: the longest a name can be).
			long := mk("emoji", strings.Repeat("😀", 100), "")
			longer := mk("emoji2", strings.Repeat("😀", 99)+"😃", "")
			amps := mk("amps", strings.Repeat("&", 100), "")
			mk("amps2", strings.Repeat("&", 99)+"x", "")
			if got := e2eWalk(t, e, e.Owner, "/users?q="+url.QueryEscape("&"), 1, nil); len(got) != 2 || !slices.Contains(got, amps) {
				t.Errorf("q=&: %v", got)
			}
			angles := mk("angles", strings.Repeat("<", 100), "")
			if got, want := e2eWalk(t, e, e.Owner, "/users?q="+url.QueryEscape("😀"), 1, nil), []string{long, longer}; !slices.Equal(got, want) {
				t.Errorf("q=😀: %v, want %v", got, want)
			}
			if got := e2eWalk(t, e, e.Owner, "/users?q="+url.QueryEscape("<"), 1, nil); !slices.Equal(got, []string{angles}) {
				t.Errorf("q=<: %v", got)
			}
			mk("angles2", strings.Repeat("<", 99)+">", "")
			if got := e2eWalk(t, e, e.Owner, "/users?q="+url.QueryEscape("<<"), 1, nil); len(got) != 2 || got[0] != angles {
				t.Errorf("q=<<: %v", got)
			}
		})

		t.Run("a filter few pass ends a page short, not reading every match", func(t *testing.T) {
			// 1,100 users named "hx…", of whom the last alone is suspended:
			// a page reads at most 1,000 entries of each name's index, so
			// the first page is empty and goes on, and the walk finds them.
			const n = 1100
			var last string
			if _, err := e.App.Store.Write(t.Context(), func(tx *store.Tx) error {
				for i := range n {
					now := model.Now()
					u := model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: fmt.Sprintf("hx%04d", i),
						DisplayName: fmt.Sprintf("hx%04d", i), Status: model.StatusActive, CreatedAt: now, UpdatedAt: now}
					if i == n-1 {
						u.Status = model.StatusSuspended
						last = u.ID
					}
					if _, err := tx.InsertUser(t.Context(), u); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			first := e2eFetchPage(t, e, e.Owner, "/users?q=hx&status=suspended", "", 50)
			if len(first.IDs) != 0 || first.Next == "" {
				t.Errorf("first page: %d users, next %q; want none and a cursor", len(first.IDs), first.Next)
			}
			if got := e2eWalk(t, e, e.Owner, "/users?q=hx&status=suspended", 50, nil); !slices.Equal(got, []string{last}) {
				t.Errorf("q=hx&status=suspended: %v, want [%s]", got, last)
			}
		})

		t.Run("a cursor is bound to its filters", func(t *testing.T) {
			p := e2eFetchPage(t, e, e.Owner, "/users?q=al", "", 1)
			if p.Next == "" {
				t.Fatal("expected a second page")
			}
			res := e.Do(testenv.Req{Method: "GET", Path: "/users?q=bo&cursor=" + p.Next, Token: e.Owner})
			if pr := res.Problem(t); res.Status != http.StatusBadRequest || pr.Errors == nil || (*pr.Errors)[0].Location != "query.cursor" {
				t.Errorf("cursor of q=al used with q=bo: %s", res)
			}
			res = e.Do(testenv.Req{Method: "GET", Path: "/users?cursor=" + p.Next, Token: e.Owner})
			if res.Status != http.StatusBadRequest {
				t.Errorf("cursor of q=al used without filters: %s", res)
			}
		})

		t.Run("bad filters are a 400 naming the parameter", func(t *testing.T) {
			for query, loc := range map[string]string{
				"status=gone":                   "query.status",
				"role=Not%20A%20Role":           "query.role",
				"q=":                            "query.q",
				"q=a%01b":                       "query.q",
				"q=" + strings.Repeat("a", 101): "query.q",
			} {
				res := e.Do(testenv.Req{Method: "GET", Path: "/users?" + query, Token: e.Owner})
				if res.Status != http.StatusBadRequest {
					t.Errorf("GET /users?%s: %s, want 400", query, res)
					continue
				}
				if pr := res.Problem(t); pr.Errors == nil || (*pr.Errors)[0].Location != loc {
					t.Errorf("GET /users?%s: %s, want the error at %s", query, res.Body, loc)
				}
			}
		})
	})
}

// GET /me answers who the token belongs to, as GET /users/{userID} shows that
// user to themself (email included), with the same ETag; without a valid
// token it is a 401.
func TestGetMe(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		ctx := t.Context()
		alice := e.NewUser("alice")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner,
			Body: map[string]any{"username": "alice", "display_name": "Alice", "email": "alice@example.com", "status": "active"}})
		e.NewRole("mods")
		e.Assign(alice.ID, "mods")

		for _, tc := range []struct {
			name, token, username, email string
			owner                        bool
			roles                        []string
		}{
			{name: "owner", token: e.Owner, username: "owner", owner: true, roles: []string{}},
			{name: "a user without MANAGE_USERS sees their own email", token: alice.Token, username: "alice", email: "alice@example.com", roles: []string{"mods"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := e.Client(tc.token)
				me, err := c.GetMeWithResponse(ctx)
				if err != nil || me.JSON200 == nil {
					t.Fatalf("GET /me: %v %d %s", err, me.StatusCode(), me.Body)
				}
				u := me.JSON200
				if u.Username != tc.username || u.IsOwner != tc.owner || !slices.Equal(u.Roles, tc.roles) {
					t.Errorf("GET /me = %s", me.Body)
				}
				if tc.email != "" && (!u.Email.IsSpecified() || u.Email.MustGet() != openapi_types.Email(tc.email)) {
					t.Errorf("email %s, want %s", me.Body, tc.email)
				}
				got, err := c.GetUserWithResponse(ctx, u.Id)
				if err != nil || got.JSON200 == nil {
					t.Fatalf("GET /users/%s: %v %s", u.Id, err, got.Body)
				}
				if e2eJSON(got.JSON200) != e2eJSON(u) || got.HTTPResponse.Header.Get("ETag") != me.HTTPResponse.Header.Get("ETag") ||
					me.HTTPResponse.Header.Get("ETag") == "" {
					t.Errorf("GET /me %s (ETag %s) differs from GET /users/{id} %s (ETag %s)", me.Body, me.HTTPResponse.Header.Get("ETag"),
						got.Body, got.HTTPResponse.Header.Get("ETag"))
				}
			})
		}

		t.Run("no token", func(t *testing.T) {
			res := e.Do(testenv.Req{Method: "GET", Path: "/me"})
			if p := res.Problem(t); res.Status != http.StatusUnauthorized || p.Code != api.ProblemCodeUnauthenticated {
				t.Errorf("GET /me without a token: %s", res)
			}
		})
		t.Run("suspended", func(t *testing.T) {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner,
				Body: map[string]any{"username": "alice", "display_name": "Alice", "status": "suspended"}})
			if res := e.Do(testenv.Req{Method: "GET", Path: "/me", Token: alice.Token}); res.Status != http.StatusUnauthorized {
				t.Errorf("GET /me of a suspended user: %s", res)
			}
		})
	})
}

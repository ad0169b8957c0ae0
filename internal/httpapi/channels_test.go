package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// The typed contract of channel create, get, patch, rename and delete.
func TestChannelsContract(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		c := e.Client(e.Owner)
		ctx := t.Context()

		created, err := c.CreateChannelWithResponse(ctx, "ops", nil,
			api.ChannelCreate{Name: "Operations", Topic: nullable.NewNullableWithValue("Where ops meet")})
		if err != nil {
			t.Fatal(err)
		}
		if created.StatusCode() != http.StatusCreated || created.JSON201 == nil {
			t.Fatalf("create: %d %s", created.StatusCode(), created.Body)
		}
		ch := created.JSON201
		if ch.Id != "ops" || ch.Name != "Operations" || ch.Topic.MustGet() != "Where ops meet" {
			t.Errorf("created channel %+v", ch)
		}
		e2eCheckTimestamps(t, ch.CreatedAt.Time(), ch.UpdatedAt.Time())
		if !ch.CreatedAt.Time().Equal(ch.UpdatedAt.Time()) {
			t.Errorf("a new channel's created_at %v != updated_at %v", ch.CreatedAt, ch.UpdatedAt)
		}
		if loc := created.HTTPResponse.Header.Get("Location"); loc != "/api/channels/ops" {
			t.Errorf("Location %q", loc)
		}
		tag := created.HTTPResponse.Header.Get("ETag")
		if tag == "" {
			t.Fatal("create: no ETag")
		}

		got, err := c.GetChannelWithResponse(ctx, "ops")
		if err != nil || got.JSON200 == nil {
			t.Fatalf("get: %v %s", err, got.Body)
		}
		if e2eJSON(got.JSON200) != e2eJSON(ch) {
			t.Errorf("get %s != created %s", e2eJSON(got.JSON200), e2eJSON(ch))
		}
		if got.HTTPResponse.Header.Get("ETag") != tag {
			t.Errorf("get ETag %q != create ETag %q", got.HTTPResponse.Header.Get("ETag"), tag)
		}

		// Without a topic, topic is null (present).
		bare, err := c.CreateChannelWithResponse(ctx, "bare", nil, api.ChannelCreate{Name: "Bare"})
		if err != nil || bare.JSON201 == nil {
			t.Fatalf("create bare: %v %s", err, bare.Body)
		}
		if !bare.JSON201.Topic.IsNull() || !strings.Contains(string(bare.Body), `"topic":null`) {
			t.Errorf("topic of a channel created without one: %s", bare.Body)
		}

		renamed, err := c.RenameChannelWithResponse(ctx, "ops", &api.RenameChannelParams{IfMatch: &tag}, api.RenameRequest{Name: "Ops"})
		if err != nil || renamed.JSON200 == nil {
			t.Fatalf("rename: %v %s", err, renamed.Body)
		}
		if renamed.JSON200.Name != "Ops" || renamed.JSON200.Topic.MustGet() != "Where ops meet" {
			t.Errorf("renamed %+v", renamed.JSON200)
		}
		if !renamed.JSON200.UpdatedAt.Time().After(ch.UpdatedAt.Time()) || !renamed.JSON200.CreatedAt.Time().Equal(ch.CreatedAt.Time()) {
			t.Errorf("timestamps after rename: created %v updated %v (before %v)", renamed.JSON200.CreatedAt, renamed.JSON200.UpdatedAt, ch.UpdatedAt)
		}
		tag2 := renamed.HTTPResponse.Header.Get("ETag")
		if tag2 == "" || tag2 == tag {
			t.Errorf("ETag after rename %q (before %q)", tag2, tag)
		}

		patched, err := c.UpdateChannelWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, "ops", nil,
			api.ChannelPatch{Topic: nullable.NewNullNullable[string]()})
		if err != nil || patched.JSON200 == nil {
			t.Fatalf("patch: %v %s", err, patched.Body)
		}
		if !patched.JSON200.Topic.IsNull() || patched.JSON200.Name != "Ops" {
			t.Errorf("patched %s", patched.Body)
		}

		deleted, err := c.DeleteChannelWithResponse(ctx, "ops", nil)
		if err != nil || deleted.StatusCode() != http.StatusNoContent || len(deleted.Body) != 0 {
			t.Fatalf("delete: %v %d %s", err, deleted.StatusCode(), deleted.Body)
		}
		gone, err := c.GetChannelWithResponse(ctx, "ops")
		if err != nil || gone.ApplicationproblemJSON404 == nil || gone.ApplicationproblemJSON404.Code != api.ProblemCodeNotFound {
			t.Fatalf("get after delete: %v %d %s", err, gone.StatusCode(), gone.Body)
		}

		list, err := c.ListChannelsWithResponse(ctx, nil)
		if err != nil || list.JSON200 == nil {
			t.Fatalf("list: %v %s", err, list.Body)
		}
		if len(list.JSON200.Items) != 1 || list.JSON200.Items[0].Id != "bare" || !list.JSON200.NextCursor.IsNull() {
			t.Errorf("list %s", list.Body)
		}
	})
}

func TestChannelsCreate(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		maker := e2eMember(t, e, "maker", "MANAGE_CHANNELS")
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner,
			Body: map[string]any{"name": "Operations", "topic": "t"}})
		before := e2eGet(t, e, "/channels/ops")
		seq := e2eSeq(t, e)

		t.Run("taken ID is 409 and changes nothing", func(t *testing.T) {
			res := e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "Other"}})
			e2eProblem(t, res, http.StatusConflict, "conflict")
			if after := e2eGet(t, e, "/channels/ops"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("channel changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("400 invalid ID and body", func(t *testing.T) {
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/Ops/create", Token: e.Owner, Body: map[string]any{"name": "x"}}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "path.channelID")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/x/create", Token: e.Owner, Body: map[string]any{"topic": "x"}}),
				http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/x/create", Token: e.Owner,
				Body: map[string]any{"name": "x", "topic": strings.Repeat("t", 1025)}}), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.topic")
			e2eNoEvent(t, e, seq)
		})
		t.Run("401 and 403", func(t *testing.T) {
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "x"}}),
				http.StatusUnauthorized, "unauthenticated")
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/x/create", Token: plain.Token, Body: map[string]any{"name": "x"}}),
				http.StatusForbidden, "forbidden")
			if p.Reason == nil || *p.Reason != api.MissingPermissions || p.MissingPermissions == nil ||
				!slices.Equal(*p.MissingPermissions, []api.PermissionName{"MANAGE_CHANNELS"}) {
				t.Errorf("403 body: %+v", p)
			}
			e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/channels/x", Token: e.Owner})
			e2eNoEvent(t, e, seq)
		})
		t.Run("MANAGE_CHANNELS may create", func(t *testing.T) {
			res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/made/create", Token: maker.Token, Body: map[string]any{"name": "Made"}})
			if res.Header.Get("Location") != "/api/channels/made" {
				t.Errorf("Location %q", res.Header.Get("Location"))
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"channel.created"}) {
				t.Errorf("events %v", ev)
			}
		})
	})
}

func TestChannelsGetAndList(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		for _, id := range []string{"a", "b", "c", "d"} {
			e.NewChannel(id)
		}
		e.SetOverwrite("b", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("d", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("d", "user", alice.ID, []string{"VIEW_CHANNEL"}, nil)

		ids := func(token string) []string {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels", Token: token})
			var l api.ChannelList
			res.JSON(t, &l)
			var out []string
			for _, c := range l.Items {
				out = append(out, c.Id)
			}
			if !l.NextCursor.IsNull() {
				t.Errorf("next_cursor of a complete list: %s", res.Body)
			}
			return out
		}
		if got := ids(e.Owner); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			t.Errorf("owner sees %v", got)
		}
		if got := ids(alice.Token); !slices.Equal(got, []string{"a", "c", "d"}) {
			t.Errorf("alice sees %v, want a c d (b hidden, d allowed to her)", got)
		}
		// A channel alice cannot view is, to her, a missing one (docs/design.md §12).
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/b", Token: alice.Token}), http.StatusNotFound, "not_found")
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/d", Token: alice.Token})
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/zz", Token: alice.Token}), http.StatusNotFound, "not_found")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/-x", Token: alice.Token}), http.StatusBadRequest, "validation")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/a"}), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels"}), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels?limit=0", Token: alice.Token}), http.StatusBadRequest, "validation")
	})
}

func TestChannelsPatch(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner,
			Body: map[string]any{"name": "Operations", "topic": "Original"}})
		patch := func(body string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: e.Owner, Body: body,
				Type: "application/merge-patch+json", Headers: headers})
		}
		state := func() (map[string]any, string) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner})
			return res.Map(t), e2eETag(t, res)
		}

		t.Run("absent keeps, name changes", func(t *testing.T) {
			res := patch(`{"name":"Ops"}`, nil)
			if res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			m := res.Map(t)
			if m["name"] != "Ops" || m["topic"] != "Original" {
				t.Errorf("after name patch: %s", res.Body)
			}
		})
		t.Run("empty patch is a no-op", func(t *testing.T) {
			before, tag := state()
			seq := e2eSeq(t, e)
			res := patch(`{}`, nil)
			if res.Status != http.StatusOK || e2eETag(t, res) != tag {
				t.Fatalf("empty patch: %s (ETag %s, before %s)", res, res.Header.Get("ETag"), tag)
			}
			if after, _ := state(); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("topic null clears", func(t *testing.T) {
			_, tag := state()
			res := patch(`{"topic":null}`, e2eIfMatch(tag))
			if res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			m := res.Map(t)
			if v, ok := m["topic"]; !ok || v != nil || m["name"] != "Ops" {
				t.Errorf("after topic null: %s", res.Body)
			}
			if e2eETag(t, res) == tag {
				t.Errorf("ETag did not move")
			}
		})
		t.Run("both members", func(t *testing.T) {
			res := patch(`{"name":"Ops 2","topic":"New"}`, nil)
			m := res.Map(t)
			if res.Status != http.StatusOK || m["name"] != "Ops 2" || m["topic"] != "New" {
				t.Errorf("%s", res)
			}
		})
		t.Run("stale If-Match is 412 and changes nothing", func(t *testing.T) {
			before, tag := state()
			seq := e2eSeq(t, e)
			p := e2eProblem(t, patch(`{"name":"Stale"}`, e2eIfMatch(`"1"`)), http.StatusPreconditionFailed, "precondition_failed")
			if p.Detail == nil || !strings.Contains(*p.Detail, tag) {
				t.Errorf("412 detail does not name the current ETag %s: %v", tag, p.Detail)
			}
			if after, _ := state(); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors", func(t *testing.T) {
			before, _ := state()
			seq := e2eSeq(t, e)
			// 404 before 412.
			e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/channels/none", Token: e.Owner, Body: `{"name":"x"}`,
				Type: "application/merge-patch+json", Headers: e2eIfMatch(`"999"`)}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: plain.Token, Body: `{"name":"x"}`,
				Type: "application/merge-patch+json"}), http.StatusForbidden, "forbidden")
			e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"name":"x"}`,
				Type: "application/merge-patch+json"}), http.StatusUnauthorized, "unauthenticated")
			p := e2eProblem(t, patch(`{"name":""}`, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			p = e2eProblem(t, patch(`{"name":null}`, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			p = e2eProblem(t, patch(`{"color":"#ffffff"}`, nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.color")
			// A merge patch is not application/json.
			e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: e.Owner, Body: `{"name":"x"}`,
				Type: "application/json"}), http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, patch(`{"name":"`+strings.Repeat("x", 1<<20)+`"}`, nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			if after, _ := state(); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
	})
}

func TestChannelsRename(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.NewChannel("ops")
		rename := func(name string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: e.Owner, Body: map[string]any{"name": name}, Headers: headers})
		}
		first := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner})
		tag := e2eETag(t, first)

		seq := e2eSeq(t, e)
		res := rename("Operations", e2eIfMatch(tag))
		if res.Status != http.StatusOK || res.Map(t)["name"] != "Operations" {
			t.Fatalf("rename: %s", res)
		}
		tag2 := e2eETag(t, res)
		if tag2 == tag {
			t.Errorf("ETag did not move on rename")
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"channel.renamed"}) {
			t.Errorf("events %v", ev)
		}

		t.Run("same name is a no-op", func(t *testing.T) {
			before := e2eGet(t, e, "/channels/ops")
			seq := e2eSeq(t, e)
			res := rename("Operations", e2eIfMatch(tag2))
			if res.Status != http.StatusOK || e2eETag(t, res) != tag2 {
				t.Fatalf("no-op rename: %s ETag %s (want %s)", res, res.Header.Get("ETag"), tag2)
			}
			if after := e2eGet(t, e, "/channels/ops"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("errors change nothing", func(t *testing.T) {
			before := e2eGet(t, e, "/channels/ops")
			seq := e2eSeq(t, e)
			e2eProblem(t, rename("Stale", e2eIfMatch(tag)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, rename("Weak", e2eIfMatch("W/"+tag2)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/none/rename", Token: e.Owner, Body: map[string]any{"name": "x"},
				Headers: e2eIfMatch(`"999"`)}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: plain.Token, Body: map[string]any{"name": "x"}}),
				http.StatusForbidden, "forbidden")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "x"}}),
				http.StatusUnauthorized, "unauthenticated")
			p := e2eProblem(t, rename(strings.Repeat("n", 101), nil), http.StatusBadRequest, "validation")
			e2eField(t, p, "body.name")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: e.Owner, Body: `{"name":"x"}`, Type: "text/plain"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, rename(strings.Repeat("n", 1<<20), nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			if after := e2eGet(t, e, "/channels/ops"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("matching and wildcard If-Match succeed", func(t *testing.T) {
			res := rename("Ops A", e2eIfMatch(`"1", `+tag2))
			if res.Status != http.StatusOK {
				t.Fatalf("list If-Match: %s", res)
			}
			res = rename("Ops B", e2eIfMatch("*"))
			if res.Status != http.StatusOK || res.Map(t)["name"] != "Ops B" {
				t.Fatalf("* If-Match: %s", res)
			}
		})
		t.Run("MANAGE_CHANNELS in the channel suffices", func(t *testing.T) {
			e.SetOverwrite("ops", "user", plain.ID, []string{"MANAGE_CHANNELS"}, nil)
			res := e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: plain.Token, Body: map[string]any{"name": "By plain"}})
			if res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
		})
	})
}

func TestChannelsDelete(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		e.NewRole("mods")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "everyone", "", nil, []string{"SEND_MESSAGES"})
		e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
		e.SetOverwrite("ops", "user", plain.ID, []string{"MENTION_EVERYONE"}, nil)
		tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner}))
		del := func(token, id string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/channels/" + id + "/delete", Token: token, Headers: headers})
		}

		seq := e2eSeq(t, e)
		e2eProblem(t, del(e.Owner, "ops", e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
		e2eProblem(t, del(plain.Token, "ops", nil), http.StatusForbidden, "forbidden")
		e2eProblem(t, del("", "ops", nil), http.StatusUnauthorized, "unauthenticated")
		e2eProblem(t, del(e.Owner, "none", e2eIfMatch(`"999"`)), http.StatusNotFound, "not_found")
		e2eProblem(t, del(e.Owner, "a/b", nil), http.StatusNotFound, "not_found") // not a route
		e2eProblem(t, del(e.Owner, "A", nil), http.StatusBadRequest, "validation")
		e2eNoEvent(t, e, seq)
		if n := len(e2eOverwrites(t, e, "ops")); n != 3 {
			t.Fatalf("refused deletes changed the overwrites: %d left", n)
		}

		res := del(e.Owner, "ops", e2eIfMatch(tag))
		if res.Status != http.StatusNoContent || len(res.Body) != 0 {
			t.Fatalf("delete: %s", res)
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"channel.deleted"}) {
			t.Errorf("events %v, want one channel.deleted", ev)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner}), http.StatusNotFound, "not_found")
		e2eProblem(t, del(e.Owner, "ops", nil), http.StatusNotFound, "not_found")

		// The overwrites went with it: a channel re-created at the ID starts bare.
		e.NewChannel("ops")
		if got := e2eOverwrites(t, e, "ops"); len(got) != 0 {
			t.Errorf("re-created channel has overwrites %v", got)
		}
		res = e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + plain.ID + "/permissions?channelID=ops", Token: e.Owner})
		if perms := res.Map(t)["permissions"].([]any); slices.Contains(perms, any("MENTION_EVERYONE")) {
			t.Errorf("the deleted channel's user overwrite still applies: %v", perms)
		}
	})
}

// Overwrites: list order, upsert, removal and validation.
func TestChannelsOverwrites(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("low")
		e.NewRole("mid")
		e.NewRole("high")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/high/move", Token: e.Owner, Body: map[string]any{"position": 3}})
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/low/move", Token: e.Owner, Body: map[string]any{"position": 1}})
		// Positions now: high 3, mid 2, low 1.
		u1, u2 := e.NewUser("zed"), e.NewUser("amy")
		e.NewChannel("ops")
		post := func(body any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner, Body: body, Headers: headers})
		}
		ow := func(tt, id string, allow, deny []string) map[string]any {
			m := map[string]any{"target_type": tt, "allow": allow, "deny": deny}
			if id != "" {
				m["target_id"] = id
			}
			return m
		}

		t.Run("upsert answers the whole list in order", func(t *testing.T) {
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner,
				Body: ow("user", u2.ID, []string{"SEND_MESSAGES"}, []string{})})
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner,
				Body: ow("role", "low", []string{}, []string{"ADD_REACTIONS"})})
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner,
				Body: ow("user", u1.ID, []string{}, []string{"SEND_MESSAGES"})})
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner,
				Body: ow("role", "high", []string{"MANAGE_MESSAGES"}, []string{})})
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner,
				Body: ow("everyone", "", []string{}, []string{"MENTION_EVERYONE"})})
			res := post(ow("role", "mid", []string{"EMBED_LINKS", "ATTACH_FILES"}, []string{"READ_MESSAGE_HISTORY"}), nil)
			if res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			var list api.OverwriteList
			res.JSON(t, &list)
			userOrder := []string{u1.ID, u2.ID}
			slices.Sort(userOrder)
			want := []string{"everyone:", "role:high", "role:mid", "role:low", "user:" + userOrder[0], "user:" + userOrder[1]}
			if got := e2eTargets(list); !slices.Equal(got, want) {
				t.Errorf("POST answer order %v, want %v", got, want)
			}
			if !list.NextCursor.IsNull() {
				t.Errorf("next_cursor %s", res.Body)
			}
			// Names in catalog order in answers.
			for _, o := range list.Items {
				if o.TargetId != nil && *o.TargetId == "mid" {
					if e2eJSON(o.Allow) != `["ATTACH_FILES","EMBED_LINKS"]` || e2eJSON(o.Deny) != `["READ_MESSAGE_HISTORY"]` {
						t.Errorf("mid overwrite %s", e2eJSON(o))
					}
				}
				if o.TargetType == "everyone" && o.TargetId != nil {
					t.Errorf("everyone overwrite has a target_id: %s", e2eJSON(o))
				}
			}
			getRes := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner})
			var got api.OverwriteList
			getRes.JSON(t, &got)
			if e2eJSON(got) != e2eJSON(list) {
				t.Errorf("GET %s != POST answer %s", getRes.Body, res.Body)
			}
			if e2eETag(t, getRes) != e2eETag(t, res) {
				t.Errorf("GET ETag %s != POST ETag %s", getRes.Header.Get("ETag"), res.Header.Get("ETag"))
			}
		})
		t.Run("order follows role positions", func(t *testing.T) {
			tag := e2eETag(t, e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner}))
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/low/move", Token: e.Owner, Body: map[string]any{"position": 3}})
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner})
			got := e2eTargets(e2eDecodeOverwrites(t, res))
			if !slices.Equal(got[1:4], []string{"role:low", "role:high", "role:mid"}) {
				t.Errorf("order after moving low to the top: %v", got)
			}
			// The representation changed, so the list's ETag must move.
			if e2eETag(t, res) == tag {
				t.Errorf("the overwrite list's order changed but its ETag %s did not", tag)
			}
		})
		t.Run("replacing keeps one overwrite per target", func(t *testing.T) {
			res := post(ow("role", "mid", []string{"SEND_MESSAGES"}, []string{}), nil)
			list := e2eDecodeOverwrites(t, res)
			if len(list.Items) != 6 {
				t.Fatalf("%d overwrites after replacing one", len(list.Items))
			}
			for _, o := range list.Items {
				if o.TargetId != nil && *o.TargetId == "mid" && (e2eJSON(o.Allow) != `["SEND_MESSAGES"]` || len(o.Deny) != 0) {
					t.Errorf("replaced overwrite %s", e2eJSON(o))
				}
			}
		})
		t.Run("empty allow and deny removes", func(t *testing.T) {
			seq := e2eSeq(t, e)
			res := post(ow("role", "mid", []string{}, []string{}), nil)
			got := e2eTargets(e2eDecodeOverwrites(t, res))
			if slices.Contains(got, "role:mid") || len(got) != 5 {
				t.Errorf("after removal %v", got)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"channel.overwrite.removed"}) {
				t.Errorf("events %v", ev)
			}
			// Removing what is absent: 200 with the list, no event, no version change.
			tag := e2eETag(t, res)
			seq = e2eSeq(t, e)
			res = post(ow("role", "mid", []string{}, []string{}), nil)
			if res.Status != http.StatusOK || e2eETag(t, res) != tag || len(e2eDecodeOverwrites(t, res).Items) != 5 {
				t.Errorf("removing an absent overwrite: %s", res)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("invalid overwrites are 400 and change nothing", func(t *testing.T) {
			before := e2eOverwrites(t, e, "ops")
			seq := e2eSeq(t, e)
			cases := []struct {
				name     string
				body     any
				location string
				message  string
			}{
				{"same name in allow and deny", ow("everyone", "", []string{"SEND_MESSAGES"}, []string{"SEND_MESSAGES"}), "body.deny", "both"},
				{"ADMINISTRATOR is not channel-scoped", ow("everyone", "", []string{"ADMINISTRATOR"}, []string{}), "body.allow", "channel-scoped"},
				{"MANAGE_USERS is not channel-scoped", ow("role", "low", []string{}, []string{"MANAGE_USERS"}), "body.deny", "channel-scoped"},
				{"VIEW_AUDIT_LOG is not channel-scoped", ow("user", u1.ID, []string{"VIEW_AUDIT_LOG"}, []string{}), "body.allow", "channel-scoped"},
				{"unknown role", ow("role", "ghost", []string{"SEND_MESSAGES"}, []string{}), "body.target_id", "ghost"},
				{"unknown user", ow("user", "0192f1a0-0000-7000-8000-000000000000", []string{"SEND_MESSAGES"}, []string{}), "body.target_id", ""},
				{"target_id with everyone", ow("everyone", "low", []string{"SEND_MESSAGES"}, []string{}), "body.target_id", ""},
				{"role without target_id", ow("role", "", []string{"SEND_MESSAGES"}, []string{}), "body.target_id", ""},
				{"unknown target type", ow("group", "low", []string{}, []string{}), "body.target_type", ""},
				{"unknown permission", ow("everyone", "", []string{"SEND_MESSAGES", "FLY"}, []string{}), "body.allow[1]", `unknown permission "FLY"`},
				{"duplicate permission", ow("everyone", "", []string{"SEND_MESSAGES", "SEND_MESSAGES"}, []string{}), "body.allow[1]", "duplicate"},
				{"missing deny", map[string]any{"target_type": "everyone", "allow": []string{}}, "body.deny", ""},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					p := e2eProblem(t, post(tc.body, nil), http.StatusBadRequest, "validation")
					if msg := e2eField(t, p, tc.location); !strings.Contains(msg, tc.message) {
						t.Errorf("message %q lacks %q", msg, tc.message)
					}
				})
			}
			if after := e2eOverwrites(t, e, "ops"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("ETag, 404, 403, 401", func(t *testing.T) {
			plain := e.NewUser("plain")
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: e.Owner})
			tag := e2eETag(t, res)
			before := e2eOverwrites(t, e, "ops")
			seq := e2eSeq(t, e)
			body := ow("everyone", "", []string{}, []string{"ADD_REACTIONS"})
			e2eProblem(t, post(body, e2eIfMatch(`"12345"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/none/permissions", Token: e.Owner, Body: body,
				Headers: e2eIfMatch(`"12345"`)}), http.StatusNotFound, "not_found")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/none/permissions", Token: e.Owner}), http.StatusNotFound, "not_found")
			p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: plain.Token, Body: body}),
				http.StatusForbidden, "forbidden")
			if p.ChannelId == nil || *p.ChannelId != "ops" {
				t.Errorf("403 without channel_id: %+v", p)
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: body}), http.StatusUnauthorized, "unauthenticated")
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/ops/permissions"}), http.StatusUnauthorized, "unauthenticated")
			if after := e2eOverwrites(t, e, "ops"); e2eJSON(after) != e2eJSON(before) {
				t.Errorf("changed: %v -> %v", before, after)
			}
			e2eNoEvent(t, e, seq)
			res = post(body, e2eIfMatch(tag))
			if res.Status != http.StatusOK || e2eETag(t, res) == tag {
				t.Errorf("matching If-Match: %s (ETag %s, before %s)", res, res.Header.Get("ETag"), tag)
			}
			// A user who cannot see the channel cannot read its overwrites:
			// for them it does not exist (docs/design.md §12).
			e.SetOverwrite("ops", "user", plain.ID, nil, []string{"VIEW_CHANNEL"})
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/ops/permissions", Token: plain.Token}), http.StatusNotFound, "not_found")
		})
	})
}

// e2eCheckTimestamps checks docs/design.md's timestamp rules: UTC, microseconds.
func e2eCheckTimestamps(t testing.TB, ts ...time.Time) {
	t.Helper()
	for _, x := range ts {
		if x.IsZero() || x.Location() != time.UTC || x.Nanosecond()%1000 != 0 {
			t.Errorf("timestamp %v is not UTC with microsecond precision", x)
		}
	}
}

func e2eDecodeOverwrites(t testing.TB, res *testenv.Response) api.OverwriteList {
	t.Helper()
	if res.Status != http.StatusOK {
		t.Fatalf("overwrites: %s", res)
	}
	var l api.OverwriteList
	res.JSON(t, &l)
	return l
}

// e2eOverwrites reads a channel's overwrites as the owner.
func e2eOverwrites(t testing.TB, e *testenv.Env, channel string) []api.Overwrite {
	t.Helper()
	return e2eDecodeOverwrites(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/" + channel + "/permissions", Token: e.Owner})).Items
}

// e2eTargets names each overwrite's target as "type:id".
func e2eTargets(l api.OverwriteList) []string {
	out := make([]string, len(l.Items))
	for i, o := range l.Items {
		id := ""
		if o.TargetId != nil {
			id = *o.TargetId
		}
		out[i] = string(o.TargetType) + ":" + id
	}
	return out
}

// A channel holds at most 500 overwrites: the next is a 409 limit_exceeded
// naming the limit; replacing or removing one at the limit still works.
func TestChannelsOverwriteLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 500 overwrites")
	}
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		set := func(body map[string]any) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Token: e.Owner, Body: body})
		}
		deny := []string{"ADD_REACTIONS"}
		if res := set(map[string]any{"target_type": "everyone", "allow": []string{}, "deny": deny}); res.Status != http.StatusOK {
			t.Fatalf("%s", res)
		}
		n := 1
		for i := 0; n < 500 && i < 250; i++ {
			id := fmt.Sprintf("r%d", i)
			e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/roles/" + id + "/create", Token: e.Owner, Body: map[string]any{"name": id}})
			if res := set(map[string]any{"target_type": "role", "target_id": id, "allow": []string{}, "deny": deny}); res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			n++
		}
		newUser := func(i int) string {
			return e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner,
				Body: map[string]any{"username": fmt.Sprintf("u%d", i)}}).Map(t)["id"].(string)
		}
		var last string
		for i := 0; n < 500; i++ {
			last = newUser(i)
			if res := set(map[string]any{"target_type": "user", "target_id": last, "allow": []string{}, "deny": deny}); res.Status != http.StatusOK {
				t.Fatalf("%s", res)
			}
			n++
		}
		if got := len(e2eOverwrites(t, e, "ops")); got != 500 {
			t.Fatalf("%d overwrites, want 500", got)
		}
		extra := newUser(9999)
		seq := e2eSeq(t, e)
		p := e2eProblem(t, set(map[string]any{"target_type": "user", "target_id": extra, "allow": []string{}, "deny": deny}),
			http.StatusConflict, "limit_exceeded")
		if p.Limit == nil || *p.Limit != "overwrites_per_channel" {
			t.Errorf("limit %v", p.Limit)
		}
		e2eNoEvent(t, e, seq)
		if got := len(e2eOverwrites(t, e, "ops")); got != 500 {
			t.Fatalf("%d overwrites after the refusal", got)
		}
		// At the limit, replacing and removing still work, and then adding fits.
		if res := set(map[string]any{"target_type": "user", "target_id": last, "allow": []string{"SEND_MESSAGES"}, "deny": []string{}}); res.Status != http.StatusOK {
			t.Errorf("replace at the limit: %s", res)
		}
		if res := set(map[string]any{"target_type": "user", "target_id": last, "allow": []string{}, "deny": []string{}}); res.Status != http.StatusOK {
			t.Errorf("remove at the limit: %s", res)
		}
		if res := set(map[string]any{"target_type": "user", "target_id": extra, "allow": []string{}, "deny": deny}); res.Status != http.StatusOK {
			t.Errorf("add after a removal: %s", res)
		}
	})
}

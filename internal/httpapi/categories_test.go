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

// catChannels lists every channel as the token sees it, in the list's order.
func catChannels(t *testing.T, e *testenv.Env, token, query string) []api.Channel {
	t.Helper()
	var out []api.Channel
	cursor := ""
	for {
		path := "/channels?limit=200" + query
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page api.ChannelList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: token}).JSON(t, &page)
		out = append(out, page.Items...)
		if page.NextCursor.IsNull() {
			return out
		}
		cursor = page.NextCursor.MustGet()
	}
}

func catIDs(list []api.Channel) []string {
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.Id
	}
	return ids
}

func catGet(t *testing.T, e *testenv.Env, id string) api.Channel {
	t.Helper()
	var c api.Channel
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + id, Token: e.Owner}).JSON(t, &c)
	return c
}

func catCreate(e *testenv.Env, token, id string, body map[string]any) *testenv.Response {
	if body["name"] == nil {
		body["name"] = id
	}
	return e.Do(testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Token: token, Body: body})
}

func catPatch(e *testenv.Env, token, id, body string) *testenv.Response {
	return e.Do(testenv.Req{Method: "PATCH", Path: "/channels/" + id, Token: token, Type: "application/merge-patch+json", Body: body})
}

func catWant(t *testing.T, res *testenv.Response, status int) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status %d, want %d: %s", res.Status, status, res.Body)
	}
}

func catOverwrites(t *testing.T, e *testenv.Env, id string) string {
	t.Helper()
	var list api.OverwriteList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + id + "/permissions", Token: e.Owner}).JSON(t, &list)
	return e2eJSON(list.Items)
}

// Categories: a channel created in one starts with a copy of its
// overwrites (synced); a change on the category reaches the channels synced
// before it and no other; a change on a channel unsyncs it; lock_permissions
// syncs it again; deleting the category keeps its channels.
func TestCategoriesSyncByCopy(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods", "MANAGE_MESSAGES")
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category", "name": "Staff"}), http.StatusCreated)
		e.SetOverwrite("staff", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		for _, id := range []string{"ops", "logs", "misc"} {
			res := catCreate(e, e.Owner, id, map[string]any{"parent_id": "staff"})
			if res.Status != http.StatusCreated {
				t.Fatalf("create %s: %s", id, res)
			}
			var c api.Channel
			res.JSON(t, &c)
			if c.Kind != "text" || c.ParentId.MustGet() != "staff" || !c.Synced {
				t.Errorf("created in a category: %s", res.Body)
			}
		}
		if got, want := catOverwrites(t, e, "ops"), catOverwrites(t, e, "staff"); got != want {
			t.Errorf("a channel created in a category has %s, the category %s", got, want)
		}
		if pos := []int{catGet(t, e, "ops").Position, catGet(t, e, "logs").Position, catGet(t, e, "misc").Position}; !slices.Equal(pos, []int{0, 1, 2}) {
			t.Errorf("positions in creation order: %v", pos)
		}

		// misc gets an overwrite of its own: unsynced.
		e.SetOverwrite("misc", "role", "mods", []string{"VIEW_CHANNEL"}, nil)
		if c := catGet(t, e, "misc"); c.Synced {
			t.Errorf("a channel with an overwrite of its own is synced: %+v", c)
		}
		// A change on the category reaches ops and logs, not misc.
		e.SetOverwrite("staff", "role", "mods", []string{"VIEW_CHANNEL", "SEND_MESSAGES"}, nil)
		for _, id := range []string{"ops", "logs"} {
			if got, want := catOverwrites(t, e, id), catOverwrites(t, e, "staff"); got != want {
				t.Errorf("%s has %s after the category's change, want %s", id, got, want)
			}
			if !catGet(t, e, id).Synced {
				t.Errorf("%s no longer synced", id)
			}
		}
		if got := catOverwrites(t, e, "misc"); got == catOverwrites(t, e, "staff") {
			t.Errorf("an unsynced channel took the category's change: %s", got)
		}
		// The category's change wrote one event per channel it reached.
		var log api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=channel.overwrite.set&limit=200", Token: e.Owner}).JSON(t, &log)
		synced := 0
		for _, ev := range log.Items {
			if ev.Data["synced_from"] == "staff" {
				synced++
			}
		}
		if synced != 2 {
			t.Errorf("%d events of synced channels, want 2", synced)
		}

		// explain names the category an overwrite of a synced channel came from.
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "mods")
		var perms api.UserPermissions
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?channelID=ops&explain=true", Token: e.Owner}).JSON(t, &perms)
		from := 0
		for _, ex := range *perms.Explain {
			for _, st := range ex.Steps {
				if st.FromCategory != nil {
					if *st.FromCategory != "staff" || (st.Kind != "overwrite_everyone" && st.Kind != "overwrite_role") {
						t.Errorf("step %+v", st)
					}
					from++
				}
			}
		}
		if from == 0 {
			t.Errorf("no explain step names the category: %s", e2eJSON(perms.Explain))
		}

		// lock_permissions syncs misc again: one event per overwrite it
		// changes (mods' on misc, from staff), none for what is already so.
		var last api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &last)
		res := catPatch(e, e.Owner, "misc", `{"lock_permissions":true}`)
		if res.Status != http.StatusOK {
			t.Fatalf("lock: %s", res)
		}
		var locked api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=10", Token: e.Owner}).JSON(t, &locked)
		var lockEvents []api.Event
		for _, ev := range locked.Items {
			if ev.Seq > last.Items[0].Seq {
				lockEvents = append(lockEvents, ev)
			}
		}
		if len(lockEvents) != 1 || lockEvents[0].Type != "channel.overwrite.set" || lockEvents[0].Subject != "channel:misc" ||
			lockEvents[0].Data["synced_from"] != "staff" || lockEvents[0].Data["target_id"] != "mods" {
			t.Errorf("the lock's events: %s", e2eJSON(lockEvents))
		}
		catWant(t, catPatch(e, e.Owner, "misc", `{"lock_permissions":true}`), http.StatusOK)
		var again api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &again)
		if again.Items[0].Seq != locked.Items[0].Seq {
			t.Errorf("locking a synced channel wrote %s", e2eJSON(again.Items))
		}
		if c := catGet(t, e, "misc"); !c.Synced || catOverwrites(t, e, "misc") != catOverwrites(t, e, "staff") {
			t.Errorf("after lock_permissions misc is %+v with %s", c, catOverwrites(t, e, "misc"))
		}

		// Deleting the category keeps its channels, out of any category,
		// with their overwrites.
		before := catOverwrites(t, e, "ops")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/staff/delete", Token: e.Owner})
		c := catGet(t, e, "ops")
		if !c.ParentId.IsNull() || c.Synced {
			t.Errorf("a channel of a deleted category: %+v", c)
		}
		if after := catOverwrites(t, e, "ops"); after != before {
			t.Errorf("overwrites %s became %s", before, after)
		}
	})
}

// The list is in tree order (a category, then its channels by position;
// ties by ID), filters by parent_id, and a user sees only the channels they
// may view, whatever the category.
func TestCategoriesTreeOrderAndFilter(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for _, c := range []struct {
			id   string
			body map[string]any
		}{
			{"zeta", map[string]any{}},
			{"staff", map[string]any{"kind": "category"}},
			{"b-ops", map[string]any{"parent_id": "staff"}},
			{"a-logs", map[string]any{"parent_id": "staff"}},
			{"games", map[string]any{"kind": "category"}},
			{"chess", map[string]any{"parent_id": "games"}},
			{"alpha", map[string]any{}},
		} {
			catWant(t, catCreate(e, e.Owner, c.id, c.body), http.StatusCreated)
		}
		want := []string{"zeta", "staff", "b-ops", "a-logs", "games", "chess", "alpha"}
		if got := catIDs(catChannels(t, e, e.Owner, "")); !slices.Equal(got, want) {
			t.Errorf("tree order %v, want %v", got, want)
		}
		// Moving a-logs to position 0 puts it before b-ops; moving alpha to
		// 0 at the root puts it first, tied with zeta and before it by ID.
		catWant(t, catPatch(e, e.Owner, "a-logs", `{"position":0}`), http.StatusOK)
		catWant(t, catPatch(e, e.Owner, "b-ops", `{"position":1}`), http.StatusOK)
		catWant(t, catPatch(e, e.Owner, "alpha", `{"position":0}`), http.StatusOK)
		want = []string{"alpha", "zeta", "staff", "a-logs", "b-ops", "games", "chess"}
		if got := catIDs(catChannels(t, e, e.Owner, "")); !slices.Equal(got, want) {
			t.Errorf("after moves %v, want %v", got, want)
		}
		if got := catIDs(catChannels(t, e, e.Owner, "&parent_id=staff")); !slices.Equal(got, []string{"a-logs", "b-ops"}) {
			t.Errorf("?parent_id=staff: %v", got)
		}
		// Pages of one keep the order.
		if got := e2eWalk(t, e, e.Owner, "/channels", 1, nil); !slices.Equal(got, want) {
			t.Errorf("walk by ones %v", got)
		}
		// Visibility is per channel: alice sees a category's channel she may
		// view even when the category is hidden from her.
		e.SetOverwrite("staff", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("b-ops", "everyone", "", []string{"VIEW_CHANNEL"}, nil)
		alice := e.NewUser("alice")
		// A channel of a hidden category comes after the tree she can view.
		if got := catIDs(catChannels(t, e, alice.Token, "")); !slices.Equal(got, []string{"alpha", "zeta", "games", "chess", "b-ops"}) {
			t.Errorf("alice sees %v", got)
		}
	})
}

// The visible channels of a category the caller cannot view are listed with
// parent_id null after the whole tree the caller can view, by their own
// position (ties by ID), positions as stored: neither their place nor their
// order tells where, or how many, hidden categories there are. Pages of any
// size see each channel once (what a cursor holds is sealed, so only the
// pages it leads to can tell anything). A
// holder of MANAGE_CHANNELS (or MANAGE_ROLES) in base knows every channel:
// they are listed all of them in tree order, those they cannot view with
// viewable false; nobody else is ever shown viewable.
func TestCategoriesHiddenCategoryListedLast(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for _, c := range []struct {
			id   string
			body map[string]any
		}{
			{"alpha", map[string]any{}},
			{"staff", map[string]any{"kind": "category"}},
			{"s1", map[string]any{"parent_id": "staff"}},
			{"s2", map[string]any{"parent_id": "staff"}},
			{"s3", map[string]any{"parent_id": "staff"}},
			{"games", map[string]any{"kind": "category"}},
			{"chess", map[string]any{"parent_id": "games"}},
			{"vault", map[string]any{"kind": "category"}},
			{"v1", map[string]any{"parent_id": "vault"}},
			{"zeta", map[string]any{}},
		} {
			catWant(t, catCreate(e, e.Owner, c.id, c.body), http.StatusCreated)
		}
		// Orphans by their own order (v1 0, s2 1, s1 5) differ from their
		// categories' order (staff's s2 s1, then vault's v1).
		catWant(t, catPatch(e, e.Owner, "v1", `{"position":0}`), http.StatusOK)
		catWant(t, catPatch(e, e.Owner, "s2", `{"position":1}`), http.StatusOK)
		catWant(t, catPatch(e, e.Owner, "s3", `{"position":2}`), http.StatusOK)
		catWant(t, catPatch(e, e.Owner, "s1", `{"position":5}`), http.StatusOK)
		// staff and vault hidden from everyone; s1, s2 and v1 visible again.
		for _, id := range []string{"staff", "vault"} {
			e.SetOverwrite(id, "everyone", "", nil, []string{"VIEW_CHANNEL"})
		}
		for _, id := range []string{"s1", "s2", "v1"} {
			e.SetOverwrite(id, "everyone", "", []string{"VIEW_CHANNEL"}, nil)
		}
		tree := []string{"alpha", "staff", "s2", "s3", "s1", "games", "chess", "vault", "v1", "zeta"}
		if got := catIDs(catChannels(t, e, e.Owner, "")); !slices.Equal(got, tree) {
			t.Fatalf("owner's tree %v, want %v", got, tree)
		}
		stored := map[string]api.Channel{}
		for _, c := range catChannels(t, e, e.Owner, "") {
			stored[c.Id] = c
			if c.Viewable != nil {
				t.Errorf("the owner is shown viewable on %s", c.Id)
			}
		}

		alice := e.NewUser("alice")
		want := []string{"alpha", "games", "chess", "zeta", "v1", "s2", "s1"}
		list := catChannels(t, e, alice.Token, "")
		if got := catIDs(list); !slices.Equal(got, want) {
			t.Errorf("alice sees %v, want %v", got, want)
		}
		for _, c := range list {
			if c.Viewable != nil {
				t.Errorf("alice is shown viewable on %s", c.Id)
			}
			if strings.HasPrefix(c.Id, "s") || c.Id == "v1" {
				if !c.ParentId.IsNull() || c.Synced || c.Position != stored[c.Id].Position {
					t.Errorf("orphan %s: parent %v, synced %v, position %d (stored %d)", c.Id, c.ParentId, c.Synced, c.Position, stored[c.Id].Position)
				}
			}
		}
		for _, limit := range []int{1, 2, 3, 4, 5} {
			if got := e2eWalk(t, e, alice.Token, "/channels", limit, nil); !slices.Equal(got, want) {
				t.Errorf("alice's walk by %d: %v, want %v", limit, got, want)
			}
		}
		// A hidden category is answered as a missing one.
		hidden := e2eField(t, e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels?parent_id=staff", Token: alice.Token}),
			http.StatusBadRequest, "validation"), "query.parent_id")
		missing := e2eField(t, e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels?parent_id=staffx", Token: alice.Token}),
			http.StatusBadRequest, "validation"), "query.parent_id")
		if strings.ReplaceAll(missing, "staffx", "staff") != hidden {
			t.Errorf("a hidden category %q, a missing one %q", hidden, missing)
		}
		if got := catIDs(catChannels(t, e, alice.Token, "&parent_id=games")); !slices.Equal(got, []string{"chess"}) {
			t.Errorf("alice's ?parent_id=games: %v", got)
		}

		// bob manages channels: every channel, in tree order, the ones he
		// cannot view marked.
		bob := e2eMember(t, e, "bob", "MANAGE_CHANNELS")
		unviewable := map[string]bool{"staff": true, "s3": true, "vault": true}
		check := func(t *testing.T, list []api.Channel) {
			t.Helper()
			for _, c := range list {
				switch {
				case unviewable[c.Id] && (c.Viewable == nil || *c.Viewable):
					t.Errorf("bob's %s: viewable %v, want false", c.Id, c.Viewable)
				case !unviewable[c.Id] && c.Viewable != nil:
					t.Errorf("bob's %s: viewable %v, want absent", c.Id, *c.Viewable)
				}
				if c.ParentId.IsNull() != stored[c.Id].ParentId.IsNull() {
					t.Errorf("bob's %s: parent %v", c.Id, c.ParentId)
				}
			}
		}
		list = catChannels(t, e, bob.Token, "")
		if got := catIDs(list); !slices.Equal(got, tree) {
			t.Errorf("bob sees %v, want %v", got, tree)
		}
		check(t, list)
		if got := e2eWalk(t, e, bob.Token, "/channels", 2, nil); !slices.Equal(got, tree) {
			t.Errorf("bob's walk by 2: %v", got)
		}
		list = catChannels(t, e, bob.Token, "&parent_id=staff")
		if got := catIDs(list); !slices.Equal(got, []string{"s2", "s3", "s1"}) {
			t.Errorf("bob's ?parent_id=staff: %v", got)
		}
		check(t, list)
		// The marker is the list's alone: a channel he cannot view is still
		// refused to him one by one.
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/s3", Token: bob.Token}), http.StatusForbidden, "forbidden")
	})
}

// Moves need MANAGE_CHANNELS in the channel and in the destination, and
// lock_permissions MANAGE_ROLES there too; a refused move changes nothing.
func TestCategoriesMovePermissions(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category"}), http.StatusCreated)
		catWant(t, catCreate(e, e.Owner, "lobby", map[string]any{"kind": "category"}), http.StatusCreated)
		e.NewChannel("ops")
		e.NewRole("builders", "MANAGE_CHANNELS", "VIEW_CHANNEL")
		bob := e.NewUser("bob")
		e.Assign(bob.ID, "builders")
		// staff denies bob's role MANAGE_CHANNELS.
		e.SetOverwrite("staff", "role", "builders", nil, []string{"MANAGE_CHANNELS"})

		before := catGet(t, e, "ops")
		p := e2eProblem(t, catPatch(e, bob.Token, "ops", `{"parent_id":"staff"}`), http.StatusForbidden, "forbidden")
		if p.ChannelId == nil || *p.ChannelId != "staff" || e2eJSON(p.MissingPermissions) != `["MANAGE_CHANNELS"]` {
			t.Errorf("refused move: %+v", p)
		}
		if after := catGet(t, e, "ops"); e2eJSON(after) != e2eJSON(before) {
			t.Errorf("a refused move changed the channel: %s", e2eJSON(after))
		}
		catWant(t, catPatch(e, bob.Token, "ops", `{"parent_id":"lobby"}`), http.StatusOK)
		// lock_permissions also needs MANAGE_ROLES in the destination.
		e2eProblem(t, catPatch(e, bob.Token, "ops", `{"lock_permissions":true}`), http.StatusForbidden, "forbidden")
		catWant(t, catPatch(e, e.Owner, "ops", `{"lock_permissions":true}`), http.StatusOK)
		// Out of any category.
		res := catPatch(e, bob.Token, "ops", `{"parent_id":null}`)
		catWant(t, res, http.StatusOK)
		var c api.Channel
		res.JSON(t, &c)
		if !c.ParentId.IsNull() || c.Synced {
			t.Errorf("out of its category: %s", res.Body)
		}
		var log api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=channel.moved", Token: e.Owner}).JSON(t, &log)
		if len(log.Items) != 2 { // the lock moved nothing
			t.Errorf("%d channel.moved events, want 2: %s", len(log.Items), e2eJSON(log.Items))
		}
	})
}

// Bad category input is a 400 at the member and changes nothing; the limits
// of a category and of all channels are 409 limit_exceeded.
func TestCategoriesBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category"}), http.StatusCreated)
		e.NewChannel("ops")
		snapshot := func() string { return e2eJSON(catChannels(t, e, e.Owner, "")) }
		before := snapshot()
		for _, c := range []struct {
			name     string
			res      *testenv.Response
			location string
		}{
			{"a category in a category", catCreate(e, e.Owner, "sub", map[string]any{"kind": "category", "parent_id": "staff"}), "body.parent_id"},
			{"a parent that is not a category", catCreate(e, e.Owner, "x", map[string]any{"parent_id": "ops"}), "body.parent_id"},
			{"an unknown parent", catCreate(e, e.Owner, "x", map[string]any{"parent_id": "nope"}), "body.parent_id"},
			{"an unknown kind", catCreate(e, e.Owner, "x", map[string]any{"kind": "voice"}), "body.kind"},
			{"the ID of another operation's path", catCreate(e, e.Owner, "reorder", map[string]any{}), "path.channelID"},
			{"moving a category into a category", catPatch(e, e.Owner, "staff", `{"parent_id":"staff"}`), "body.parent_id"},
			{"moving into a text channel", catPatch(e, e.Owner, "ops", `{"parent_id":"ops"}`), "body.parent_id"},
			{"a negative position", catPatch(e, e.Owner, "ops", `{"position":-1}`), "body.position"},
			{"a reorder with an unknown channel", e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner,
				Body: map[string]any{"positions": []any{map[string]any{"id": "ops", "position": 5}, map[string]any{"id": "nope", "position": 0}}}}),
				"body.positions[1].id"},
			{"a reorder listing a channel twice", e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner,
				Body: map[string]any{"positions": []any{map[string]any{"id": "ops", "position": 5}, map[string]any{"id": "ops", "position": 0}}}}),
				"body.positions[1].id"},
			{"a reorder into a text channel", e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner,
				Body: map[string]any{"positions": []any{map[string]any{"id": "staff", "position": 3}, map[string]any{"id": "ops", "position": 0, "parent_id": "ops"}}}}),
				"body.positions[1].parent_id"},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := e2eProblem(t, c.res, http.StatusBadRequest, "validation")
				if p.Errors == nil || !slices.ContainsFunc(*p.Errors, func(f api.FieldError) bool { return f.Location == c.location }) {
					t.Errorf("errors %s, want one at %s", e2eJSON(p.Errors), c.location)
				}
			})
		}
		if after := snapshot(); after != before {
			t.Errorf("bad input changed the channels:\n%s\n%s", before, after)
		}
		big := make([]any, 501)
		for i := range big {
			big[i] = map[string]any{"id": "ops", "position": i}
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner, Body: map[string]any{"positions": big}}),
			http.StatusBadRequest, "validation")

		// 50 channels in a category, then 409; synced, every one of them
		// takes a change of the category.
		for i := range 49 {
			catWant(t, catCreate(e, e.Owner, fmt.Sprintf("c%02d", i), map[string]any{"parent_id": "staff"}), http.StatusCreated)
		}
		catWant(t, catPatch(e, e.Owner, "ops", `{"parent_id":"staff","lock_permissions":true}`), http.StatusOK)
		p := e2eProblem(t, catCreate(e, e.Owner, "one-more", map[string]any{"parent_id": "staff"}), http.StatusConflict, "limit_exceeded")
		if p.Limit == nil || *p.Limit != "channels_per_category" {
			t.Errorf("limit %+v", p)
		}
		e.NewChannel("outside")
		e2eProblem(t, catPatch(e, e.Owner, "outside", `{"parent_id":"staff"}`), http.StatusConflict, "limit_exceeded")
		e.SetOverwrite("staff", "everyone", "", nil, []string{"SEND_MESSAGES"})
		want := catOverwrites(t, e, "staff")
		for _, c := range catChannels(t, e, e.Owner, "&parent_id=staff") {
			if got := catOverwrites(t, e, c.Id); got != want || !c.Synced {
				t.Fatalf("%s: %s synced=%v, want %s", c.Id, got, c.Synced, want)
			}
		}
	})
}

// A reorder applies every move at once, or none.
func TestCategoriesReorderAllOrNothing(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category"}), http.StatusCreated)
		for _, id := range []string{"a", "b", "c"} {
			e.NewChannel(id)
		}
		res := e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner, Body: map[string]any{"positions": []any{
			map[string]any{"id": "c", "position": 0},
			map[string]any{"id": "a", "position": 1, "parent_id": "staff"},
			map[string]any{"id": "b", "position": 0, "parent_id": "staff"},
			map[string]any{"id": "staff", "position": 1},
		}}})
		catWant(t, res, http.StatusOK)
		var moved api.ChannelList
		res.JSON(t, &moved)
		if got := catIDs(moved.Items); !slices.Equal(got, []string{"c", "a", "b", "staff"}) {
			t.Errorf("the answer lists %v", got)
		}
		if got := catIDs(catChannels(t, e, e.Owner, "")); !slices.Equal(got, []string{"c", "staff", "b", "a"}) {
			t.Errorf("after the reorder %v", got)
		}
		// b and a were created outside the category: moved in, they are not
		// synced until locked.
		if catGet(t, e, "a").Synced != (catOverwrites(t, e, "a") == catOverwrites(t, e, "staff")) {
			t.Error("synced does not say whether the overwrites are the category's")
		}

		// A reorder that bob may not make in one channel moves none.
		e.NewRole("builders", "MANAGE_CHANNELS", "VIEW_CHANNEL")
		bob := e.NewUser("bob")
		e.Assign(bob.ID, "builders")
		e.SetOverwrite("staff", "role", "builders", nil, []string{"MANAGE_CHANNELS"})
		before := e2eJSON(catChannels(t, e, e.Owner, ""))
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: bob.Token, Body: map[string]any{"positions": []any{
			map[string]any{"id": "c", "position": 7},
			map[string]any{"id": "b", "position": 0, "parent_id": nil},
		}}}), http.StatusForbidden, "forbidden")
		if after := e2eJSON(catChannels(t, e, e.Owner, "")); after != before {
			t.Errorf("a refused reorder moved channels:\n%s\n%s", before, after)
		}
	})
}

// A lock writes overwrites as PUT does: the caller must hold, in the
// channel, every permission it adds or removes (403 cannot_grant_unheld,
// before the If-Match check, changing nothing); a lock within what the
// caller holds succeeds.
func TestCategoriesLockNeedsGrant(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category"}), http.StatusCreated)
		catWant(t, catCreate(e, e.Owner, "ops", map[string]any{"parent_id": "staff"}), http.StatusCreated)
		e.NewRole("arrangers", "MANAGE_CHANNELS", "MANAGE_ROLES", "VIEW_CHANNEL", "SEND_MESSAGES")
		bob := e.NewUser("bob")
		e.Assign(bob.ID, "arrangers")
		// ops leaves the sync with an overwrite of its own; then the
		// category comes to deny MENTION_EVERYONE, which bob does not hold.
		e.SetOverwrite("ops", "role", "arrangers", []string{"SEND_MESSAGES"}, nil)
		e.SetOverwrite("staff", "everyone", "", nil, []string{"MENTION_EVERYONE"})
		before, overwrites := catGet(t, e, "ops"), catOverwrites(t, e, "ops")
		for _, ifMatch := range []string{"", `"stale"`} {
			res := e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: bob.Token, Type: "application/merge-patch+json",
				Body: `{"lock_permissions":true}`, Headers: ifMatchHeader(ifMatch)})
			p := e2eProblem(t, res, http.StatusForbidden, "forbidden")
			if p.Reason == nil || *p.Reason != api.CannotGrantUnheld || e2eJSON(p.MissingPermissions) != `["MENTION_EVERYONE"]` ||
				p.ChannelId == nil || *p.ChannelId != "ops" {
				t.Errorf("If-Match %q: %s", ifMatch, res.Body)
			}
		}
		if e2eJSON(catGet(t, e, "ops")) != e2eJSON(before) || catOverwrites(t, e, "ops") != overwrites {
			t.Error("a refused lock changed the channel")
		}
		// Within what bob holds, the lock goes through.
		e.SetOverwrite("staff", "everyone", "", nil, []string{"SEND_MESSAGES"})
		if catGet(t, e, "ops").Synced {
			t.Fatal("ops is synced before the lock")
		}
		res := catPatch(e, bob.Token, "ops", `{"lock_permissions":true}`)
		catWant(t, res, http.StatusOK)
		if got, want := catOverwrites(t, e, "ops"), catOverwrites(t, e, "staff"); got != want {
			t.Errorf("locked overwrites %s, want the category's %s", got, want)
		}
	})
}

// A move into a category is bounded by the category's limit, not by the
// limit of all channels: it adds no channel. With 500 channels (the limit
// of all), moving one into a category succeeds.
func TestCategoriesMoveAtChannelLimit(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		channels := []map[string]any{{"id": "staff", "kind": "category", "name": "staff", "parent_id": nil, "position": 0, "topic": nil, "overwrites": []any{}}}
		for i := range 499 {
			channels = append(channels, map[string]any{"id": fmt.Sprintf("c%03d", i), "kind": "text", "name": "c", "parent_id": nil,
				"position": i, "topic": nil, "overwrites": []any{}})
		}
		tplChanges(t, tplImport(e, e.Owner, "", map[string]any{"format": "guildhall-template/1", "global_permissions": []string{},
			"roles": []any{}, "channels": channels}))
		catWant(t, catCreate(e, e.Owner, "one-more", map[string]any{}), http.StatusConflict)
		res := catPatch(e, e.Owner, "c007", `{"parent_id":"staff"}`)
		catWant(t, res, http.StatusOK)
		res = e.Do(testenv.Req{Method: "POST", Path: "/channels/reorder", Token: e.Owner,
			Body: map[string]any{"positions": []any{map[string]any{"id": "c008", "position": 0, "parent_id": "staff"}}}})
		catWant(t, res, http.StatusOK)
	})
}

// Deleting a category changes its channels (they leave it): their ETags
// and updated_at move, so an If-Match read before the delete is stale.
func TestCategoryDeleteChangesChildren(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		catWant(t, catCreate(e, e.Owner, "staff", map[string]any{"kind": "category"}), http.StatusCreated)
		catWant(t, catCreate(e, e.Owner, "ops", map[string]any{"parent_id": "staff"}), http.StatusCreated)
		read := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner})
		tag := read.Header.Get("ETag")
		var before api.Channel
		read.JSON(t, &before)
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/staff/delete", Token: e.Owner})

		after := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner})
		var c api.Channel
		after.JSON(t, &c)
		if !c.ParentId.IsNull() {
			t.Errorf("still in the deleted category: %s", after.Body)
		}
		if after.Header.Get("ETag") == tag {
			t.Errorf("ETag %s did not change", tag)
		}
		if !c.UpdatedAt.Time().After(before.UpdatedAt.Time()) {
			t.Errorf("updated_at %v, before %v", c.UpdatedAt, before.UpdatedAt)
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: e.Owner, Type: "application/merge-patch+json",
			Body: `{"name":"renamed"}`, Headers: ifMatchHeader(tag)}), http.StatusPreconditionFailed, "precondition_failed")
	})
}

// ifMatchHeader is an If-Match header with tag, or none for "".
func ifMatchHeader(tag string) map[string]string {
	if tag == "" {
		return nil
	}
	return map[string]string{"If-Match": tag}
}

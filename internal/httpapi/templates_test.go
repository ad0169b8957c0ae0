package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// tplExport answers GET /export's body and ETag.
func tplExport(t *testing.T, e *testenv.Env) ([]byte, string) {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/export", Token: e.Owner})
	tag := res.Header.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag")
	}
	return res.Body, tag
}

func tplImport(e *testenv.Env, token, query string, body any) *testenv.Response {
	return e.Do(testenv.Req{Method: "POST", Path: "/import" + query, Token: token, Body: body})
}

// tplImportIf imports with If-Match: tag.
func tplImportIf(e *testenv.Env, token, query string, body any, tag string) *testenv.Response {
	return e.Do(testenv.Req{Method: "POST", Path: "/import" + query, Token: token, Body: body, Headers: e2eIfMatch(tag)})
}

func tplChanges(t *testing.T, res *testenv.Response) []api.TemplateChange {
	t.Helper()
	catWant(t, res, http.StatusOK)
	var r api.ImportResult
	res.JSON(t, &r)
	return r.Changes
}

// tplCommunity builds a small community with every kind of structure.
func tplCommunity(t *testing.T, e *testenv.Env) {
	t.Helper()
	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner, Body: map[string]any{"permissions": []string{"VIEW_CHANNEL", "SEND_MESSAGES"}}})
	e.NewRole("helpers", "MANAGE_MESSAGES")
	e.NewRole("mods", "MANAGE_ROLES", "MODERATE_MEMBERS")
	e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/roles/mods", Token: e.Owner, Type: "application/merge-patch+json", Body: `{"color":"#3498db"}`})
	e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/staff/create", Token: e.Owner, Body: map[string]any{"name": "Staff", "kind": "category"}})
	e.SetOverwrite("staff", "everyone", "", nil, []string{"VIEW_CHANNEL"})
	e.SetOverwrite("staff", "role", "mods", []string{"VIEW_CHANNEL"}, nil)
	e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "Operations", "parent_id": "staff", "topic": "t"}})
	e.NewChannel("general")
	alice := e.NewUser("alice")
	e.SetOverwrite("general", "user", alice.ID, nil, []string{"SEND_MESSAGES"}) // not in a template
	e.Assign(alice.ID, "helpers")
}

// Exporting, importing the document into a fresh instance and exporting
// there gives the same bytes and ETag; importing what was just exported
// changes nothing.
func TestTemplateRoundTrip(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		tplCommunity(t, e)
		doc, tag := tplExport(t, e)
		var tpl api.Template
		if err := json.Unmarshal(doc, &tpl); err != nil {
			t.Fatal(err)
		}
		if tpl.Format != "guildhall-template/1" || len(tpl.Roles) != 2 || len(tpl.Channels) != 3 {
			t.Fatalf("export %s", doc)
		}
		for _, c := range tpl.Channels {
			for _, o := range c.Overwrites {
				if o.TargetType == "user" {
					t.Errorf("a user overwrite in the export: %s", doc)
				}
			}
		}
		if ids := []string{tpl.Channels[0].Id, tpl.Channels[1].Id, tpl.Channels[2].Id}; !slices.Equal(ids, []string{"staff", "ops", "general"}) {
			t.Errorf("channels not in tree order: %v", ids)
		}
		if again, tag2 := tplExport(t, e); string(again) != string(doc) || tag2 != tag {
			t.Errorf("two exports differ")
		}
		if changes := tplChanges(t, tplImport(e, e.Owner, "", json.RawMessage(doc))); len(changes) != 0 {
			t.Errorf("importing the export changed %s", e2eJSON(changes))
		}

		fresh := testenv.Start(t, kind)
		_, freshTag := tplExport(t, fresh)
		changes := tplChanges(t, tplImportIf(fresh, fresh.Owner, "?prune=true", json.RawMessage(doc), freshTag))
		if len(changes) == 0 {
			t.Fatal("importing into a fresh instance changed nothing")
		}
		doc2, tag2 := tplExport(t, fresh)
		if string(doc2) != string(doc) || tag2 != tag {
			t.Errorf("export after import differs:\n%s %s\n%s %s", doc, tag, doc2, tag2)
		}
		// Each change wrote its usual event.
		var log api.EventList
		fresh.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200", Token: fresh.Owner}).JSON(t, &log)
		types := map[string]int{}
		for _, ev := range log.Items {
			types[string(ev.Type)]++
		}
		if types["role.created"] != 2 || types["channel.created"] != 3 || types["channel.overwrite.set"] < 3 || types["global.permissions.set"] != 1 {
			t.Errorf("events %v", types)
		}
	})
}

// A dry run lists the changes and makes none; prune deletes what the
// template leaves out; without it the rest stays, below the template's roles.
func TestTemplateDryRunAndPrune(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		tplCommunity(t, e)
		doc, _ := tplExport(t, e)
		var tpl api.Template
		_ = json.Unmarshal(doc, &tpl)

		// Change the community after the export.
		e.NewRole("extra")
		e.NewChannel("random")
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: e.Owner, Type: "application/merge-patch+json", Body: `{"topic":"changed"}`})
		e.SetOverwrite("general", "everyone", "", []string{"ADD_REACTIONS"}, nil)
		now, nowTag := tplExport(t, e)
		var lastSeq api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &lastSeq)

		// Pruning what was made since the export is a choice made knowing
		// the community now: its current ETag.
		dry := tplChanges(t, tplImportIf(e, e.Owner, "?dry_run=true&prune=true", tpl, nowTag))
		got := map[string]string{}
		for _, c := range dry {
			got[string(c.Kind)+" "+c.Id] = string(c.Op)
		}
		want := map[string]string{"role extra": "delete", "channel random": "delete", "channel ops": "update",
			"overwrite general/everyone": "delete", "role helpers": "update", "role mods": "update"}
		// extra sat at 1: helpers and mods move down one when it goes.
		for k, v := range want {
			if got[k] != v {
				t.Errorf("dry run: %s is %q, want %q; all: %s", k, got[k], v, e2eJSON(dry))
			}
		}
		if len(got) != len(want) {
			t.Errorf("dry run lists %v, want %v", got, want)
		}
		if after, tag := tplExport(t, e); string(after) != string(now) || tag != nowTag {
			t.Error("a dry run changed the community")
		}
		var seq api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &seq)
		if seq.Items[0].Seq != lastSeq.Items[0].Seq {
			t.Error("a dry run wrote an event")
		}

		// Without prune: extra and random stay; extra stays below the
		// template's roles (helpers above mods).
		real := tplChanges(t, tplImport(e, e.Owner, "", tpl))
		var roles []api.Role
		var list api.RoleList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}).JSON(t, &list)
		roles = list.Items
		if ids := []string{roles[0].Id, roles[1].Id, roles[2].Id}; !slices.Equal(ids, []string{"helpers", "mods", "extra"}) {
			t.Errorf("roles after import %v (changes %s)", ids, e2eJSON(real))
		}
		if got := catIDs(catChannels(t, e, e.Owner, "")); !slices.Contains(got, "random") {
			t.Errorf("without prune random went: %v", got)
		}
		// The user overwrite stays in any case.
		if ow := catOverwrites(t, e, "general"); !json.Valid([]byte(ow)) || !containsUserOverwrite(ow) {
			t.Errorf("general's overwrites %s", ow)
		}
		// With prune: the community is the template again.
		_, tag := tplExport(t, e)
		tplChanges(t, tplImportIf(e, e.Owner, "?prune=true", tpl, tag))
		after, _ := tplExport(t, e)
		if string(after) != string(doc) {
			t.Errorf("after a pruning import:\n%s\nwant\n%s", after, doc)
		}
		if ow := catOverwrites(t, e, "general"); !containsUserOverwrite(ow) {
			t.Errorf("prune took a user overwrite: %s", ow)
		}
	})
}

// An import honours If-Match with the export's ETag: a template exported
// before the community changed is a 412 naming the current ETag, with or
// without prune, dry run or not, and changes nothing; a pruning import
// without If-Match (or with "*") is a 428, so a stale template cannot
// delete what was made after its export (here a channel with an
// attachment). Without prune, If-Match stays optional.
func TestTemplateImportIfMatch(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		tplCommunity(t, e)
		doc, old := tplExport(t, e)
		// Made after the export.
		e.NewChannel("late")
		e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/late/attachment?attachmentID=notes.txt", Token: e.Owner,
			Body: "kept", Type: "text/plain"})
		now, current := tplExport(t, e)
		if current == old {
			t.Fatal("the ETag did not change with the community")
		}
		state := func() string {
			return authzState(t, e, "/export", "/channels?limit=200", "/channels/late/attachments", "/channels/late/attachment?attachmentID=notes.txt")
		}
		before, seq := state(), e2eSeq(t, e)
		body := json.RawMessage(doc)
		for _, tc := range []struct {
			name, query string
			ifMatch     string // "" for none
			status      int
			code        string
		}{
			{"prune with a stale ETag", "?prune=true", old, http.StatusPreconditionFailed, "precondition_failed"},
			{"dry run of a prune with a stale ETag", "?dry_run=true&prune=true", old, http.StatusPreconditionFailed, "precondition_failed"},
			{"import with a stale ETag", "", old, http.StatusPreconditionFailed, "precondition_failed"},
			{"dry run with a stale ETag", "?dry_run=true", old, http.StatusPreconditionFailed, "precondition_failed"},
			{"prune with a weak ETag", "?prune=true", "W/" + current, http.StatusPreconditionFailed, "precondition_failed"},
			{"prune without If-Match", "?prune=true", "", http.StatusPreconditionRequired, "precondition_required"},
			{"dry run of a prune without If-Match", "?dry_run=true&prune=true", "", http.StatusPreconditionRequired, "precondition_required"},
			{"prune with If-Match *", "?prune=true", "*", http.StatusPreconditionRequired, "precondition_required"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := testenv.Req{Method: "POST", Path: "/import" + tc.query, Token: e.Owner, Body: body}
				if tc.ifMatch != "" {
					req.Headers = e2eIfMatch(tc.ifMatch)
				}
				p := e2eProblem(t, e.Do(req), tc.status, tc.code)
				if tc.status == http.StatusPreconditionFailed && !strings.Contains(authzDeref(p.Detail), current) {
					t.Errorf("the 412 does not name the current ETag %s: %s", current, authzDeref(p.Detail))
				}
			})
		}
		if after := state(); after != before {
			t.Errorf("a refused import changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
		// Owner only comes first: a caller who may not import learns nothing
		// of the precondition.
		e.NewRole("admins", "ADMINISTRATOR")
		admin := e.NewUser("admin")
		e.Assign(admin.ID, "admins")
		p := e2eProblem(t, tplImport(e, admin.Token, "?prune=true", body), http.StatusForbidden, "forbidden")
		if authzDeref(p.Reason) != api.OwnerOnly {
			t.Errorf("reason %v", authzDeref(p.Reason))
		}
		_, current = tplExport(t, e)

		// Without prune If-Match is optional, and "*" matches.
		if changes := tplChanges(t, tplImport(e, e.Owner, "?dry_run=true", json.RawMessage(now))); len(changes) != 0 {
			t.Errorf("importing the current export changes %s", e2eJSON(changes))
		}
		tplChanges(t, tplImportIf(e, e.Owner, "?dry_run=true", json.RawMessage(now), "*"))
		// With the current ETag, a prune of the old template lists and then
		// makes the deletion of what came since.
		dry := tplChanges(t, tplImportIf(e, e.Owner, "?dry_run=true&prune=true", body, `"x", `+current))
		if !slices.ContainsFunc(dry, func(c api.TemplateChange) bool { return c.Id == "late" && c.Op == "delete" }) {
			t.Errorf("dry run %s", e2eJSON(dry))
		}
		tplChanges(t, tplImportIf(e, e.Owner, "?prune=true", body, current))
		e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/channels/late", Token: e.Owner})
		if res := e2eRaw(t, e, "GET", "/problems/precondition_required"); res.Status != http.StatusOK {
			t.Errorf("problem page: %s", res)
		}
	})
}

func containsUserOverwrite(list string) bool {
	var items []api.Overwrite
	_ = json.Unmarshal([]byte(list), &items)
	return slices.ContainsFunc(items, func(o api.Overwrite) bool { return o.TargetType == "user" })
}

// A bad template is a 400 at the offending member and changes nothing;
// limits and kind changes are 409; only the owner may import or export.
func TestTemplateRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		tplCommunity(t, e)
		doc, tag := tplExport(t, e)
		edit := func(f func(m map[string]any)) map[string]any {
			var m map[string]any
			_ = json.Unmarshal(doc, &m)
			f(m)
			return m
		}
		roles := func(m map[string]any) []any { return m["roles"].([]any) }
		channels := func(m map[string]any) []any { return m["channels"].([]any) }
		field := func(list []any, i int) map[string]any { return list[i].(map[string]any) }
		for _, c := range []struct {
			name     string
			body     map[string]any
			location string
		}{
			{"an unknown format", edit(func(m map[string]any) { m["format"] = "guildhall-template/9" }), "body.format"},
			{"a duplicate role", edit(func(m map[string]any) { field(roles(m), 1)["id"] = field(roles(m), 0)["id"] }), "body.roles[1].id"},
			{"positions not 1..N", edit(func(m map[string]any) { field(roles(m), 0)["position"] = 5 }), "body.roles[0].position"},
			{"a duplicate channel", edit(func(m map[string]any) { field(channels(m), 2)["id"] = "ops" }), "body.channels[2].id"},
			{"a parent that is not a category", edit(func(m map[string]any) { field(channels(m), 1)["parent_id"] = "general" }), "body.channels[1].parent_id"},
			{"a category in a category", edit(func(m map[string]any) {
				field(channels(m), 0)["parent_id"] = "staff"
			}), "body.channels[0].parent_id"},
			{"an overwrite of a role not in the template", edit(func(m map[string]any) {
				var kept []any // all but mods, at 1..N
				for _, r := range roles(m) {
					if r.(map[string]any)["id"] != "mods" {
						r.(map[string]any)["position"] = len(kept) + 1
						kept = append(kept, r)
					}
				}
				m["roles"] = kept
			}), "body.channels[0].overwrites[1].target_id"},
			{"an unknown permission", edit(func(m map[string]any) { field(roles(m), 0)["permissions"] = []string{"FLY"} }), "body.roles[0].permissions[0]"},
			{"ADMINISTRATOR as a global permission", edit(func(m map[string]any) { m["global_permissions"] = []string{"ADMINISTRATOR"} }), "body.global_permissions"},
			{"a user overwrite", edit(func(m map[string]any) {
				field(channels(m), 2)["overwrites"] = []any{map[string]any{"target_type": "user", "target_id": "u", "allow": []string{}, "deny": []string{}}}
			}), "body.channels[2].overwrites[0].target_type"},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := e2eProblem(t, tplImport(e, e.Owner, "", c.body), http.StatusBadRequest, "validation")
				if !slices.Contains(locations(p), c.location) {
					t.Errorf("errors %s, want one at %s", e2eJSON(p.Errors), c.location)
				}
			})
		}
		// A kind that changes is a conflict with the community as it is.
		e2eProblem(t, tplImport(e, e.Owner, "", edit(func(m map[string]any) {
			field(channels(m), 2)["kind"] = "category"
		})), http.StatusConflict, "conflict")
		// More roles than the limit.
		many := edit(func(m map[string]any) {
			var list []any
			for i := range 251 {
				list = append(list, map[string]any{"id": fmt.Sprintf("r%03d", i), "name": "r", "position": i + 1, "color": nil, "permissions": []string{}})
			}
			m["roles"] = list
			m["channels"] = []any{}
		})
		p := e2eProblem(t, tplImportIf(e, e.Owner, "?prune=true", many, tag), http.StatusConflict, "limit_exceeded")
		if p.Limit == nil || *p.Limit != "roles" {
			t.Errorf("limit %+v", p)
		}
		// Only the owner.
		e.NewRole("admins", "ADMINISTRATOR")
		admin := e.NewUser("admin")
		e.Assign(admin.ID, "admins")
		p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/export", Token: admin.Token}), http.StatusForbidden, "forbidden")
		if p.Reason == nil || *p.Reason != "owner_only" {
			t.Errorf("refusal %+v", p)
		}
		e2eProblem(t, tplImport(e, admin.Token, "?dry_run=true", json.RawMessage(doc)), http.StatusForbidden, "forbidden")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/admins/delete", Token: e.Owner})
		if after, tag2 := tplExport(t, e); string(after) != string(doc) || tag2 != tag {
			t.Errorf("refused imports changed the community:\n%s\n%s", doc, after)
		}
	})
}

// tplEvents are the audit log's events after seq (the newest 200 at most),
// and the newest seq.
func tplEvents(t *testing.T, e *testenv.Env, after int64) ([]api.Event, int64) {
	t.Helper()
	var log api.EventList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200", Token: e.Owner}).JSON(t, &log)
	var out []api.Event
	last := after
	for _, ev := range log.Items {
		if ev.Seq > after {
			out = append(out, ev)
		}
		last = max(last, ev.Seq)
	}
	return out, last
}

// An import writes the events of the single operations that make its
// changes: a rename is role.updated, a permission change
// role.permissions.set, a move channel.moved, a new topic channel.updated,
// each with that operation's data. An empty overwrite in a template removes
// the target's overwrite (channel.overwrite.removed).
func TestTemplateImportEvents(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		tplCommunity(t, e)
		body, _ := tplExport(t, e)
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		for _, r := range doc["roles"].([]any) {
			r := r.(map[string]any)
			switch r["id"] {
			case "mods":
				r["permissions"] = []string{"MANAGE_ROLES"} // permissions only
			case "helpers":
				r["name"] = "Helpers" // name only
			}
		}
		for _, c := range doc["channels"].([]any) {
			c := c.(map[string]any)
			switch c["id"] {
			case "general":
				c["position"] = 7 // a move only
			case "ops":
				c["topic"] = "new" // the topic only
			case "staff": // its everyone overwrite, emptied
				for _, ow := range c["overwrites"].([]any) {
					if ow := ow.(map[string]any); ow["target_type"] == "everyone" {
						ow["allow"], ow["deny"] = []string{}, []string{}
					}
				}
			}
		}
		_, last := tplEvents(t, e, 0)
		changes := tplChanges(t, tplImport(e, e.Owner, "", doc))
		events, _ := tplEvents(t, e, last)
		got := map[string]string{}
		for _, ev := range events {
			got[string(ev.Type)+" "+ev.Subject] = e2eJSON(ev.Data)
		}
		want := map[string]string{
			"role.permissions.set role:mods":          `{"after":["MANAGE_ROLES"],"before":["MANAGE_ROLES","MODERATE_MEMBERS"]}`,
			"role.updated role:helpers":               `{"after":{"color":null,"name":"Helpers"},"before":{"color":null,"name":"helpers"}}`,
			"channel.moved channel:general":           `{"after":{"parent_id":null,"position":7},"before":{"parent_id":null,"position":1},"lock_permissions":false}`,
			"channel.updated channel:ops":             `{"after":{"name":"Operations","topic":"new"},"before":{"name":"Operations","topic":"t"}}`,
			"channel.overwrite.removed channel:staff": `{"after":null,"before":{"allow":[],"deny":["VIEW_CHANNEL"]},"target_id":null,"target_type":"everyone"}`,
		}
		if len(events) != len(want) {
			t.Errorf("%d events, want %d: %v", len(events), len(want), got)
		}
		for k, data := range want {
			if got[k] != data {
				t.Errorf("%s: data %s, want %s", k, got[k], data)
			}
		}
		var removed []string
		for _, c := range changes {
			if c.Op == "delete" {
				removed = append(removed, c.Id)
			}
		}
		if !slices.Equal(removed, []string{"staff/everyone"}) {
			t.Errorf("deletions %v, want staff/everyone", removed)
		}
		if list := catOverwrites(t, e, "staff"); strings.Contains(list, `"everyone"`) {
			t.Errorf("staff keeps its everyone overwrite: %s", list)
		}
	})
}

// A big import (the limits' worth of roles and channels, 6,241 events)
// commits in one request, and the roles take the template's order.
func TestTemplateImportAtTheLimits(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		// A second or two of work: more database budget than the default,
		// so that a loaded machine running the other tests beside it does
		// not answer 503.
		e := testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) { c.DBTimeout = time.Minute }))
		const nRoles = 240
		doc := bigTemplate(10, 49, nRoles) // structure_bench_test.go: 10 overwrites of roles and everyone's on each
		channels, overwrites := doc["channels"].([]map[string]any), 11
		_, last := tplEvents(t, e, 0)
		changes := tplChanges(t, tplImport(e, e.Owner, "", doc))
		want := 1 + nRoles + len(channels) + len(channels)*overwrites // 1: the global permissions
		if len(changes) != want {
			t.Errorf("%d changes, want %d", len(changes), want)
		}
		events, newest := tplEvents(t, e, last)
		if newest-last != int64(want) {
			t.Errorf("%d events, want %d (the newest: %s)", newest-last, want, e2eJSON(events[:min(3, len(events))]))
		}
		var list api.RoleList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: e.Owner}).JSON(t, &list)
		var got []string
		for _, r := range list.Items {
			got = append(got, r.Id)
		}
		for i, id := range got {
			if id != fmt.Sprintf("r%03d", i) {
				t.Fatalf("roles in the order %v…, want r000 first", got[:min(len(got), 5)])
			}
		}
		if len(got) != nRoles {
			t.Errorf("%d roles", len(got))
		}
	})
}

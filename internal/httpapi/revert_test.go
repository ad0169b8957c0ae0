package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// rvCommunity builds a community every revertible change can be made in:
// a category staff with a synced channel ops, a channel general, roles
// mods (above) and helpers, users alice (helpers) and bob.
type rvCommunity struct {
	alice, bob testenv.User
}

func rvBuild(t *testing.T, e *testenv.Env) rvCommunity {
	t.Helper()
	e.NewRole("helpers", "MANAGE_MESSAGES")
	e.NewRole("mods", "MANAGE_ROLES", "MODERATE_MEMBERS")
	e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/staff/create", Token: e.Owner, Body: map[string]any{"name": "Staff", "kind": "category"}})
	e.SetOverwrite("staff", "everyone", "", nil, []string{"VIEW_CHANNEL"})
	e.SetOverwrite("staff", "role", "mods", []string{"VIEW_CHANNEL"}, nil)
	e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "Operations", "parent_id": "staff", "topic": "t"}})
	e.NewChannel("general")
	e.SetOverwrite("general", "everyone", "", nil, []string{"EMBED_LINKS"})
	c := rvCommunity{alice: e.NewUser("alice"), bob: e.NewUser("bob")}
	e.Assign(c.alice.ID, "helpers")
	e.Assign(c.bob.ID, "mods")
	return c
}

// rvState is everything a revert may set back, as the API shows it (no
// timestamps), with every user's base and effective permissions in every
// channel; and the entity tags of what has one.
type rvState struct {
	State string
	Tags  map[string]string
}

func rvSnapshot(t *testing.T, e *testenv.Env) rvState {
	t.Helper()
	tags := map[string]string{}
	get := func(path string) map[string]any {
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner})
		if tag := res.Header.Get("ETag"); tag != "" {
			tags[path] = tag
		}
		return res.Map(t)
	}
	strip := func(items any) []any {
		list, _ := items.([]any)
		for _, x := range list {
			m := x.(map[string]any)
			delete(m, "created_at")
			delete(m, "updated_at")
		}
		return list
	}
	state := map[string]any{}
	state["global"] = get("/permissions/global")["permissions"]
	roles := strip(get("/roles")["items"])
	state["roles"] = roles
	for _, r := range roles {
		get("/roles/" + r.(map[string]any)["id"].(string))
	}
	channels := strip(get("/channels?limit=200")["items"])
	state["channels"] = channels
	var channelIDs []string
	for _, c := range channels {
		id := c.(map[string]any)["id"].(string)
		channelIDs = append(channelIDs, id)
		get("/channels/" + id)
		state["overwrites:"+id] = get("/channels/" + id + "/permissions")["items"]
	}
	users := strip(get("/users?limit=200")["items"])
	state["users"] = users
	for _, u := range users {
		id := u.(map[string]any)["id"].(string)
		get("/users/" + id)
		state["base:"+id] = get("/users/" + id + "/permissions")["permissions"]
		for _, c := range channelIDs {
			state["in:"+c+":"+id] = get("/users/" + id + "/permissions?channelID=" + c)["permissions"]
		}
	}
	b, err := json.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	return rvState{State: string(b), Tags: tags}
}

// rvLastSeq is the seq of the newest event of a type about a subject.
func rvLastSeq(t *testing.T, e *testenv.Env, typ, subject string) int64 {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1&type=" + typ + "&subject=" + subject, Token: e.Owner})
	var l api.EventList
	res.JSON(t, &l)
	if len(l.Items) != 1 {
		t.Fatalf("no %s event about %s", typ, subject)
	}
	return l.Items[0].Seq
}

func rvRevert(e *testenv.Env, token string, seq int64, query string, headers map[string]string) *testenv.Response {
	return e.Do(testenv.Req{Method: "POST", Path: fmt.Sprintf("/audit-log/%d/revert%s", seq, query), Token: token, Headers: headers})
}

func rvChanges(t *testing.T, res *testenv.Response) []api.TemplateChange {
	t.Helper()
	catWant(t, res, http.StatusOK)
	var r api.RevertResult
	res.JSON(t, &r)
	return r.Changes
}

// A revert of each supported type sets its subject back: the whole state
// (effective permissions of every user in every channel included) is what
// it was before the change; its dry run lists the same changes and writes
// nothing (no event, no entity tag moves); the events it writes say
// "revert of <seq>"; and reverting the same event again is a conflict.
func TestRevertRestoresBefore(t *testing.T) {
	t.Parallel()
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	type change struct {
		name         string
		do           func(e *testenv.Env, c rvCommunity)
		typ, subject func(c rvCommunity) string
		kinds        []string // the kinds of the changes listed, in order
	}
	fixed := func(s string) func(rvCommunity) string { return func(rvCommunity) string { return s } }
	owner := func(e *testenv.Env, method, path, ct string, body any) {
		want := http.StatusOK
		if method == "DELETE" {
			want = http.StatusNoContent
		}
		e.Must(want, testenv.Req{Method: method, Path: path, Token: e.Owner, Type: ct, Body: body})
	}
	cases := []change{
		{name: "overwrite of a category, with its synced channel", typ: fixed("channel.overwrite.set"), subject: fixed("channel:staff"),
			do: func(e *testenv.Env, c rvCommunity) {
				e.SetOverwrite("staff", "role", "mods", []string{"VIEW_CHANNEL", "SEND_MESSAGES"}, []string{"ADD_REACTIONS"})
			}, kinds: []string{"overwrite", "overwrite"}},
		{name: "overwrite removed", typ: fixed("channel.overwrite.removed"), subject: fixed("channel:general"),
			do:    func(e *testenv.Env, c rvCommunity) { e.SetOverwrite("general", "everyone", "", nil, nil) },
			kinds: []string{"overwrite"}},
		{name: "user overwrite created", typ: fixed("channel.overwrite.set"), subject: fixed("channel:general"),
			do: func(e *testenv.Env, c rvCommunity) {
				e.SetOverwrite("general", "user", c.alice.ID, nil, []string{"VIEW_CHANNEL"})
			}, kinds: []string{"user_overwrite"}},
		{name: "role permissions", typ: fixed("role.permissions.set"), subject: fixed("role:mods"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PUT", "/roles/mods/permissions", "", map[string]any{"permissions": []string{"MANAGE_CHANNELS", "VIEW_AUDIT_LOG"}})
			}, kinds: []string{"role"}},
		{name: "global permissions", typ: fixed("global.permissions.set"), subject: fixed("global:permissions"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PUT", "/permissions/global", "", map[string]any{"permissions": []string{"VIEW_CHANNEL"}})
			}, kinds: []string{"global"}},
		{name: "role assigned", typ: fixed("user.role.assigned"), subject: func(c rvCommunity) string { return "user:" + c.bob.ID },
			do: func(e *testenv.Env, c rvCommunity) { e.Assign(c.bob.ID, "helpers") }, kinds: []string{"membership"}},
		{name: "role removed", typ: fixed("user.role.removed"), subject: func(c rvCommunity) string { return "user:" + c.alice.ID },
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "DELETE", "/users/"+c.alice.ID+"/roles/helpers", "", nil)
			},
			kinds: []string{"membership"}},
		{name: "role updated", typ: fixed("role.updated"), subject: fixed("role:mods"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PATCH", "/roles/mods", "application/merge-patch+json", `{"name":"Moderation","color":"#123456"}`)
			}, kinds: []string{"role"}},
		{name: "role renamed", typ: fixed("role.renamed"), subject: fixed("role:helpers"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "POST", "/roles/helpers/rename", "", map[string]any{"name": "Helpers"})
			},
			kinds: []string{"role"}},
		{name: "role moved", typ: fixed("role.moved"), subject: fixed("role:helpers"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "POST", "/roles/helpers/move", "", map[string]any{"position": 1})
			},
			kinds: []string{"role"}},
		{name: "channel updated", typ: fixed("channel.updated"), subject: fixed("channel:ops"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PATCH", "/channels/ops", "application/merge-patch+json", `{"topic":null}`)
			}, kinds: []string{"channel"}},
		{name: "channel renamed", typ: fixed("channel.renamed"), subject: fixed("channel:general"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "POST", "/channels/general/rename", "", map[string]any{"name": "General"})
			}, kinds: []string{"channel"}},
		{name: "channel moved out of its category", typ: fixed("channel.moved"), subject: fixed("channel:ops"),
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PATCH", "/channels/ops", "application/merge-patch+json", `{"parent_id":null,"position":7}`)
			}, kinds: []string{"channel"}},
		{name: "timeout", typ: fixed("user.timeout"), subject: func(c rvCommunity) string { return "user:" + c.alice.ID },
			do: func(e *testenv.Env, c rvCommunity) {
				owner(e, "PATCH", "/users/"+c.alice.ID, "application/merge-patch+json", `{"timeout_until":"`+until+`"}`)
			}, kinds: []string{"timeout"}},
	}
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := testenv.Start(t, kind)
				c := rvBuild(t, e)
				before := rvSnapshot(t, e)
				tc.do(e, c)
				seq := rvLastSeq(t, e, tc.typ(c), tc.subject(c))
				changed := rvSnapshot(t, e)
				if changed.State == before.State {
					t.Fatal("the change changed nothing")
				}
				last := e2eSeq(t, e)

				dry := rvChanges(t, rvRevert(e, e.Owner, seq, "?dry_run=true", nil))
				if got := e2eSeq(t, e); got != last {
					t.Fatalf("a dry run wrote events: newest seq %d, was %d", got, last)
				}
				if after := rvSnapshot(t, e); !reflect.DeepEqual(after, changed) {
					t.Fatalf("a dry run changed the state or a version:\n%v\nwant\n%v", after, changed)
				}
				done := rvChanges(t, rvRevert(e, e.Owner, seq, "", nil))
				if !reflect.DeepEqual(dry, done) {
					t.Fatalf("the dry run listed %+v, the revert %+v", dry, done)
				}
				var kinds []string
				for _, x := range done {
					kinds = append(kinds, string(x.Kind))
				}
				if !reflect.DeepEqual(kinds, tc.kinds) {
					t.Fatalf("kinds %v, want %v: %+v", kinds, tc.kinds, done)
				}
				if after := rvSnapshot(t, e); after.State != before.State {
					t.Fatalf("after the revert:\n%s\nbefore the change:\n%s", after.State, before.State)
				}
				// Its events say what they revert.
				res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=50", Token: e.Owner})
				var l api.EventList
				res.JSON(t, &l)
				n := 0
				for _, ev := range l.Items {
					if ev.Seq > last {
						n++
						if r, _ := ev.Reason.Get(); r != fmt.Sprintf("revert of %d", seq) {
							t.Fatalf("event %d (%s) has reason %q", ev.Seq, ev.Type, r)
						}
					}
				}
				if n != len(done) {
					t.Fatalf("%d events for %d changes", n, len(done))
				}
				// Reverting it again would undo the revert: a later event changed it.
				p := rvRevert(e, e.Owner, seq, "", nil).Problem(t)
				if p.Status != http.StatusConflict || p.ConflictingSeq == nil || *p.ConflictingSeq <= last {
					t.Fatalf("a second revert: %+v", p)
				}
			})
		}
	})
}

// A revert that a later change stands in the way of is a 409 naming it,
// and changes nothing; the later change can be reverted, and then the
// earlier one still cannot (the revert is itself a later change).
func TestRevertConflicts(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		c := rvBuild(t, e)
		perms := func(names ...string) {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/helpers/permissions", Token: e.Owner, Body: map[string]any{"permissions": names}})
		}
		conflict := func(seq, want int64) {
			t.Helper()
			before, last := rvSnapshot(t, e), e2eSeq(t, e)
			for _, q := range []string{"?dry_run=true", ""} {
				p := rvRevert(e, e.Owner, seq, q, nil).Problem(t)
				if p.Status != http.StatusConflict || p.Code != api.ProblemCodeConflict || p.ConflictingSeq == nil || *p.ConflictingSeq != want {
					t.Fatalf("revert %d%s: %+v, want a conflict naming %d", seq, q, p, want)
				}
			}
			if after := rvSnapshot(t, e); !reflect.DeepEqual(after, before) || e2eSeq(t, e) != last {
				t.Fatal("a refused revert changed something")
			}
		}

		perms("MANAGE_MESSAGES", "ADD_REACTIONS")
		first := rvLastSeq(t, e, "role.permissions.set", "role:helpers")
		perms("ADD_REACTIONS")
		second := rvLastSeq(t, e, "role.permissions.set", "role:helpers")
		conflict(first, second)
		rvChanges(t, rvRevert(e, e.Owner, second, "", nil))
		conflict(first, e2eSeq(t, e))

		// A subject removed since: a conflict naming its deletion.
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/mods/rename", Token: e.Owner, Body: map[string]any{"name": "Mods"}})
		renamed := rvLastSeq(t, e, "role.renamed", "role:mods")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/mods/delete", Token: e.Owner})
		conflict(renamed, rvLastSeq(t, e, "role.deleted", "role:mods"))

		// An overwrite whose role went with it.
		e.NewRole("guests")
		e.SetOverwrite("general", "role", "guests", []string{"ADD_REACTIONS"}, nil)
		set := rvLastSeq(t, e, "channel.overwrite.set", "channel:general")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/guests/delete", Token: e.Owner})
		conflict(set, rvLastSeq(t, e, "role.deleted", "role:guests"))

		// A role's position shifts when another role is created.
		e.NewRole("guides")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/helpers/move", Token: e.Owner, Body: map[string]any{"position": 1}})
		moved := rvLastSeq(t, e, "role.moved", "role:helpers")
		e.NewRole("newcomers")
		conflict(moved, rvLastSeq(t, e, "role.created", "role:newcomers"))

		// A membership changed by a bulk change since.
		e.Assign(c.bob.ID, "helpers")
		assigned := rvLastSeq(t, e, "user.role.assigned", "user:"+c.bob.ID)
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/helpers/members", Token: e.Owner, Body: map[string]any{"remove": []string{c.bob.ID}}})
		conflict(assigned, rvLastSeq(t, e, "user.role.removed", "user:"+c.bob.ID))
	})
}

// Bad requests change nothing: an unknown seq (404), a seq that is no
// number (400), a type no revert sets back (400 not_revertible), a caller
// without VIEW_AUDIT_LOG or without what the change by hand needs (403),
// an event about a channel hidden from the caller (404).
func TestRevertRefusals(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		c := rvBuild(t, e)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		e.NewChannel("secret")
		e.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/secret/rename", Token: e.Owner, Body: map[string]any{"name": "Secret"}})
		hidden := rvLastSeq(t, e, "channel.renamed", "channel:secret")
		e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/helpers/permissions", Token: e.Owner, Body: map[string]any{"permissions": []string{"ADD_REACTIONS"}}})
		perms := rvLastSeq(t, e, "role.permissions.set", "role:helpers")
		created := rvLastSeq(t, e, "role.created", "role:auditors")
		last := e2eSeq(t, e)
		before := rvSnapshot(t, e)

		cases := []struct {
			name   string
			path   string
			token  string
			status int
			code   api.ProblemCode
			check  func(p api.Problem) bool
		}{
			{"unknown seq", fmt.Sprintf("/audit-log/%d/revert", last+1000), e.Owner, 404, api.ProblemCodeNotFound, nil},
			{"seq not a number", "/audit-log/abc/revert", e.Owner, 400, api.ProblemCodeValidation, nil},
			{"seq zero", "/audit-log/0/revert", e.Owner, 400, api.ProblemCodeValidation, nil},
			{"type not revertible", fmt.Sprintf("/audit-log/%d/revert", created), e.Owner, 400, api.ProblemCodeNotRevertible, nil},
			{"type not revertible, dry run", fmt.Sprintf("/audit-log/%d/revert?dry_run=true", created), e.Owner, 400, api.ProblemCodeNotRevertible, nil},
			{"no VIEW_AUDIT_LOG", fmt.Sprintf("/audit-log/%d/revert", perms), c.bob.Token, 403, api.ProblemCodeForbidden,
				func(p api.Problem) bool {
					return p.MissingPermissions != nil && fmt.Sprint(*p.MissingPermissions) == "[VIEW_AUDIT_LOG]"
				}},
			{"not what the change needs", fmt.Sprintf("/audit-log/%d/revert", perms), auditor.Token, 403, api.ProblemCodeForbidden,
				func(p api.Problem) bool {
					return p.MissingPermissions != nil && fmt.Sprint(*p.MissingPermissions) == "[MANAGE_ROLES]"
				}},
			{"not what the change needs, dry run", fmt.Sprintf("/audit-log/%d/revert?dry_run=true", perms), auditor.Token, 403, api.ProblemCodeForbidden, nil},
			{"an event of a hidden channel", fmt.Sprintf("/audit-log/%d/revert", hidden), auditor.Token, 404, api.ProblemCodeNotFound, nil},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := e.WithT(t).Do(testenv.Req{Method: "POST", Path: tc.path, Token: tc.token})
				p := res.Problem(t)
				if p.Status != tc.status || p.Code != tc.code || (tc.check != nil && !tc.check(p)) {
					t.Fatalf("%s", res.Body)
				}
			})
		}
		if after := rvSnapshot(t, e); !reflect.DeepEqual(after, before) || e2eSeq(t, e) != last {
			t.Fatal("a refused revert changed something")
		}

		// X-Audit-Reason names the events' reason; the owner may revert
		// the hidden channel's event (nothing is hidden from them).
		rvChanges(t, rvRevert(e, e.Owner, hidden, "", map[string]string{"X-Audit-Reason": "typo"}))
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner})
		var l api.EventList
		res.JSON(t, &l)
		if r, _ := l.Items[0].Reason.Get(); l.Items[0].Type != "channel.renamed" || r != "typo" {
			t.Fatalf("the revert's event: %+v", l.Items[0])
		}
	})
}

// A move back to a position the roles no longer reach (one was deleted
// since) is a conflict naming the deletion, never a 400 at a body the
// request does not have.
func TestRevertOfAMovePastTheRoles(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for _, id := range []string{"a", "b", "c"} {
			e.NewRole(id)
		}
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/a/move", Token: e.Owner, Body: map[string]any{"position": 1}})
		moved := rvLastSeq(t, e, "role.moved", "role:a")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/b/delete", Token: e.Owner})
		deleted := rvLastSeq(t, e, "role.deleted", "role:b")
		before, last := rvSnapshot(t, e), e2eSeq(t, e)
		for _, q := range []string{"?dry_run=true", ""} {
			p := rvRevert(e, e.Owner, moved, q, nil).Problem(t)
			if p.Status != http.StatusConflict || p.ConflictingSeq == nil || *p.ConflictingSeq != deleted {
				t.Fatalf("revert%s: %+v, want a conflict naming %d", q, p, deleted)
			}
		}
		if after := rvSnapshot(t, e); !reflect.DeepEqual(after, before) || e2eSeq(t, e) != last {
			t.Fatal("a refused revert changed something")
		}
	})
}

package httpapi_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/testenv"
)

// historyPerms are the permissions random changes pick from.
var historyPerms = []string{"VIEW_CHANNEL", "SEND_MESSAGES", "ATTACH_FILES", "MANAGE_MESSAGES", "ADD_REACTIONS", "READ_MESSAGE_HISTORY"}

func historyPick(r *rand.Rand) []string {
	out := []string{}
	for _, p := range historyPerms {
		if r.IntN(3) == 0 {
			out = append(out, p)
		}
	}
	return out
}

// historyWorld is what a random history has made so far, to pick from.
type historyWorld struct {
	roles, users, channels, categories []string
	n                                  int
}

func pickOf(r *rand.Rand, l []string) (string, bool) {
	if len(l) == 0 {
		return "", false
	}
	return l[r.IntN(len(l))], true
}

func without(l []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(l), func(y string) bool { return y == x })
}

// historyStep makes one random change through the API as the owner.
func historyStep(t *testing.T, e *testenv.Env, r *rand.Rand, w *historyWorld) {
	t.Helper()
	w.n++
	do := func(status int, method, path string, body any) {
		e.Must(status, testenv.Req{Method: method, Path: path, Token: e.Owner, Body: body})
	}
	switch k := r.IntN(15); {
	case k == 0 || len(w.roles) < 2:
		id := fmt.Sprintf("r%d", w.n)
		do(http.StatusCreated, "POST", "/roles/"+id+"/create", map[string]any{"name": id, "permissions": historyPick(r)})
		w.roles = append(w.roles, id)
	case k == 1 || len(w.users) < 2:
		u := e.NewUser(fmt.Sprintf("u%d", w.n))
		w.users = append(w.users, u.ID)
	case k == 2 || len(w.channels) < 2:
		id := fmt.Sprintf("c%d", w.n)
		body := map[string]any{"name": id}
		if p, ok := pickOf(r, w.categories); ok && r.IntN(2) == 0 {
			body["parent_id"] = p
		}
		do(http.StatusCreated, "POST", "/channels/"+id+"/create", body)
		w.channels = append(w.channels, id)
	case k == 3 && len(w.categories) < 2:
		id := fmt.Sprintf("k%d", w.n)
		do(http.StatusCreated, "POST", "/channels/"+id+"/create", map[string]any{"name": id, "kind": "category"})
		w.categories = append(w.categories, id)
	case k == 4:
		role, _ := pickOf(r, w.roles)
		do(http.StatusOK, "PUT", "/roles/"+role+"/permissions", map[string]any{"permissions": historyPick(r)})
	case k == 5:
		u, _ := pickOf(r, w.users)
		role, _ := pickOf(r, w.roles)
		if r.IntN(3) == 0 {
			do(http.StatusNoContent, "DELETE", "/users/"+u+"/roles/"+role, nil)
		} else {
			do(http.StatusNoContent, "POST", "/users/"+u+"/roles/"+role, nil)
		}
	case k == 6 || k == 7:
		c, _ := pickOf(r, slices.Concat(w.channels, w.categories))
		body := map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{}}
		switch r.IntN(3) {
		case 1:
			body["target_type"], body["target_id"] = "role", w.roles[r.IntN(len(w.roles))]
		case 2:
			body["target_type"], body["target_id"] = "user", w.users[r.IntN(len(w.users))]
		}
		if r.IntN(4) != 0 {
			p := historyPick(r)
			split := r.IntN(len(p) + 1)
			body["allow"], body["deny"] = p[:split], p[split:]
		}
		do(http.StatusOK, "POST", "/channels/"+c+"/permissions", body)
	case k == 8:
		u, _ := pickOf(r, w.users)
		var until any
		if r.IntN(3) != 0 {
			until = time.Now().Add(time.Duration(1+r.IntN(48)) * time.Hour).UTC().Format(time.RFC3339)
		}
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/users/" + u, Token: e.Owner, Type: "application/merge-patch+json",
			Body: mustJSON(map[string]any{"timeout_until": until})})
	case k == 9:
		c, _ := pickOf(r, w.channels)
		body := map[string]any{"parent_id": nil}
		if p, ok := pickOf(r, w.categories); ok && r.IntN(3) != 0 {
			body["parent_id"] = p
			body["lock_permissions"] = r.IntN(2) == 0
		}
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/" + c, Token: e.Owner, Type: "application/merge-patch+json",
			Body: mustJSON(body)})
	case k == 10 && len(w.roles) > 2:
		role, _ := pickOf(r, w.roles)
		do(http.StatusOK, "POST", "/roles/"+role+"/move", map[string]any{"position": 1 + r.IntN(len(w.roles))})
	case k == 11 && len(w.roles) > 2:
		role, _ := pickOf(r, w.roles)
		do(http.StatusNoContent, "POST", "/roles/"+role+"/delete", nil)
		w.roles = without(w.roles, role)
	case k == 12 && len(w.users) > 2:
		u, _ := pickOf(r, w.users)
		do(http.StatusNoContent, "DELETE", "/users/"+u, nil)
		w.users = without(w.users, u)
	case k == 13 && len(w.channels)+len(w.categories) > 3:
		all := slices.Concat(w.channels, w.categories)
		c, _ := pickOf(r, all)
		do(http.StatusNoContent, "POST", "/channels/"+c+"/delete", nil)
		w.channels, w.categories = without(w.channels, c), without(w.categories, c)
	case k == 14:
		historyImport(t, e, r, w)
	default:
		do(http.StatusOK, "PUT", "/permissions/global", map[string]any{"permissions": historyPick(r)})
	}
}

// historyImport exports the community and imports it back with its roles
// placed in another order, a new role among them, and a new channel (in a
// category when there is one): an import sets role positions as given.
func historyImport(t *testing.T, e *testenv.Env, r *rand.Rand, w *historyWorld) {
	t.Helper()
	var tpl map[string]any
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/export", Token: e.Owner}).JSON(t, &tpl)
	roles, _ := tpl["roles"].([]any)
	r.Shuffle(len(roles), func(i, j int) { roles[i], roles[j] = roles[j], roles[i] })
	id := fmt.Sprintf("t%d", w.n)
	at := r.IntN(len(roles) + 1)
	roles = slices.Insert(roles, at, any(map[string]any{"id": id, "name": id, "position": 0, "color": nil, "permissions": historyPick(r)}))
	for i, x := range roles {
		x.(map[string]any)["position"] = i + 1
	}
	tpl["roles"] = roles
	ch := map[string]any{"id": "i" + id, "name": id, "kind": "text", "parent_id": nil, "position": 7, "topic": nil,
		"overwrites": []any{map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{"VIEW_CHANNEL"}}}}
	if p, ok := pickOf(r, w.categories); ok {
		ch["parent_id"] = p
	}
	tpl["channels"] = append(tpl["channels"].([]any), ch)
	e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner, Body: tpl})
	w.roles = append(w.roles, id)
	w.channels = append(w.channels, "i"+id)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// historyLog reads the whole audit log, oldest first.
func historyLog(t *testing.T, e *testenv.Env) []history.Event {
	t.Helper()
	var out []history.Event
	cursor := ""
	for {
		q := url.Values{"limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?" + q.Encode(), Token: e.Owner}).JSON(t, &page)
		for _, ev := range page.Items {
			out = append(out, history.Event{Seq: ev.Seq, Type: string(ev.Type), Subject: ev.Subject, Data: mustJSON(ev.Data),
				CreatedAt: time.Time(ev.CreatedAt)})
		}
		if page.NextCursor.IsNull() {
			break
		}
		cursor = page.NextCursor.MustGet()
	}
	slices.Reverse(out)
	return out
}

// TestHistoryEqualsReplay: for random histories of roles, overwrites,
// memberships, timeouts, categories with sync, deletions and imports, and
// random instants, every history answer equals a replay of the audit log from its
// first event up to the instant, computed here with the permission engine.
func TestHistoryEqualsReplay(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		for seed := range uint64(3) {
			e := testenv.Start(t, kind)
			r := rand.New(rand.NewPCG(seed, 0x5eed))
			w := &historyWorld{}
			var instants []time.Time
			for range 60 {
				historyStep(t, e, r, w)
				if r.IntN(6) == 0 {
					time.Sleep(2 * time.Millisecond)
					instants = append(instants, time.Now().UTC().Truncate(time.Microsecond))
					time.Sleep(2 * time.Millisecond)
				}
			}
			log := historyLog(t, e)
			for _, at := range instants {
				var upTo []history.Event
				for _, ev := range log {
					if !ev.CreatedAt.After(at) {
						upTo = append(upTo, ev)
					}
				}
				historyCompare(t, e, history.Replay(upTo), at)
			}
		}
	})
}

// historyCompare checks every history answer at at against want.
func historyCompare(t *testing.T, e *testenv.Env, want *history.State, at time.Time) {
	t.Helper()
	q := "at=" + url.QueryEscape(at.Format(time.RFC3339Nano))
	var roles api.RoleList
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles?" + q, Token: e.Owner}).JSON(t, &roles)
	var gotRoles, wantRoles []string
	for _, r := range roles.Items {
		gotRoles = append(gotRoles, fmt.Sprint(r.Id, r.Name, r.Position, r.Permissions))
	}
	for _, r := range want.RolesByPosition() {
		wantRoles = append(wantRoles, fmt.Sprint(r.ID, r.Name, r.Position, permNames(r.Permissions)))
	}
	if !slices.Equal(gotRoles, wantRoles) {
		t.Fatalf("roles at %s: got %v, want %v", at, gotRoles, wantRoles)
	}
	for id, c := range want.Channels {
		var list api.OverwriteList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + id + "/permissions?" + q, Token: e.Owner}).JSON(t, &list)
		var got, wantO []string
		for _, o := range list.Items {
			got = append(got, fmt.Sprint(o.TargetType, deref(o.TargetId), o.Allow, o.Deny))
		}
		for _, o := range c.List() {
			wantO = append(wantO, fmt.Sprint(o.TargetType, o.TargetID, permNames(o.Allow), permNames(o.Deny)))
		}
		sort.Strings(got)
		sort.Strings(wantO)
		if !slices.Equal(got, wantO) {
			t.Fatalf("overwrites of %s at %s: got %v, want %v", id, at, got, wantO)
		}
		var holders []string
		for uid, u := range want.Users {
			if permissions.InChannel(want.Subject(u, at), want.ChannelFor(id, uid)).Has(permissions.ViewChannel) {
				holders = append(holders, uid)
			}
		}
		var access api.UserList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/" + id + "/access?limit=200&" + q, Token: e.Owner}).JSON(t, &access)
		gotH := accessIDs(access.Items)
		sort.Strings(gotH)
		sort.Strings(holders)
		if !slices.Equal(gotH, holders) {
			t.Fatalf("access to %s at %s: got %v, want %v", id, at, gotH, holders)
		}
	}
	for uid, u := range want.Users {
		var base api.UserPermissions
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + uid + "/permissions?explain=true&" + q, Token: e.Owner}).JSON(t, &base)
		if w := permNames(permissions.Base(want.Subject(u, at))); fmt.Sprint(base.Permissions) != fmt.Sprint(w) {
			t.Fatalf("base of %s at %s: got %v, want %v", uid, at, base.Permissions, w)
		}
		for cid := range want.Channels {
			var in api.UserPermissions
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + uid + "/permissions?channelID=" + cid + "&" + q, Token: e.Owner}).JSON(t, &in)
			if w := permNames(permissions.InChannel(want.Subject(u, at), want.ChannelFor(cid, uid))); fmt.Sprint(in.Permissions) != fmt.Sprint(w) {
				t.Fatalf("%s in %s at %s: got %v, want %v", uid, cid, at, in.Permissions, w)
			}
		}
	}
}

func permNames(s permissions.Set) []string { return s.Names() }

// The rules of ?at=: VIEW_AUDIT_LOG besides the operation's permission, a
// 400 at query.at for an instant in the future or before the oldest event,
// a user deleted since answered as they were, a channel deleted since
// answered to who may know of it.
func TestHistoryRules(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		plain := e.NewUser("plain")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "user", plain.ID, []string{"ADD_REACTIONS"}, nil)
		time.Sleep(2 * time.Millisecond)
		at := time.Now().UTC()
		time.Sleep(2 * time.Millisecond)
		e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + plain.ID, Token: e.Owner})
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/ops/delete", Token: e.Owner})
		q := "at=" + url.QueryEscape(at.Format(time.RFC3339Nano))

		// A user deleted since, in a channel deleted since: as they were.
		var p api.UserPermissions
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + plain.ID + "/permissions?channelID=ops&" + q, Token: e.Owner}).JSON(t, &p)
		if !slices.Contains(p.Permissions, "ADD_REACTIONS") || !slices.Contains(p.Permissions, "VIEW_CHANNEL") {
			t.Fatalf("as they were: %v", p.Permissions)
		}
		var list api.OverwriteList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions?" + q, Token: e.Owner}).JSON(t, &list)
		if len(list.Items) != 1 || deref(list.Items[0].TargetId) != plain.ID {
			t.Fatalf("ops's overwrites as they were: %+v", list.Items)
		}
		// The auditor could view ops then: it is answered to them too.
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops/permissions?" + q, Token: auditor.Token})
		// Without VIEW_AUDIT_LOG: 403; the answer of now needs nothing.
		other := e.NewUser("other")
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles", Token: other.Token})
		p403 := accessStatus(t, e, other.Token, "/roles?"+q, http.StatusForbidden)
		if p403.MissingPermissions == nil || !slices.Contains(*p403.MissingPermissions, "VIEW_AUDIT_LOG") {
			t.Fatalf("403 without VIEW_AUDIT_LOG: %+v", p403)
		}
		// Without VIEW_AUDIT_LOG, nothing about the instant is told: 403, not
		// the 404 of a channel that did not exist then.
		accessStatus(t, e, other.Token, "/channels/nowhere/permissions?"+q, http.StatusForbidden)
		accessStatus(t, e, other.Token, "/users/"+plain.ID+"/permissions?"+q, http.StatusForbidden)
		// The future, and before the first event: 400 at query.at.
		for _, bad := range []time.Time{time.Now().Add(time.Hour), time.Now().Add(-24 * time.Hour)} {
			pb := accessStatus(t, e, e.Owner, "/roles?at="+url.QueryEscape(bad.UTC().Format(time.RFC3339)), http.StatusBadRequest)
			accessLocation(t, pb, "query.at")
		}
		// A channel that did not exist then: 404.
		accessStatus(t, e, e.Owner, "/channels/nowhere/permissions?"+q, http.StatusNotFound)
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

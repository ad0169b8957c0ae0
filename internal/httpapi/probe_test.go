package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// unknownMembers is a JSON object with the given members and n unknown
// ones, k0 to k(n-1).
func unknownMembers(known string, n int) string {
	var b strings.Builder
	b.WriteString("{" + known)
	for i := range n {
		if i > 0 || known != "" {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	b.WriteString("}")
	return b.String()
}

// A body's problems are each reported once, and an answer costs no more
// than its request: 10,000 unknown members are a 400 with 100 of them
// named and one entry counting the rest, on every operation that takes a
// JSON object, from a caller with no permissions (validation comes before
// authorization).
func TestManyUnknownMembersReportedOnceAndBounded(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	e.NewRole("low")
	e.NewChannel("ops")
	nobody := e.NewUser("nobody")
	merge := "application/merge-patch+json"
	cases := []struct {
		name, method, path, known, ctype string
	}{
		{"role rename", "POST", "/roles/low/rename", `"name":"x"`, ""},
		{"role create", "POST", "/roles/new/create", `"name":"x"`, ""},
		{"role patch", "PATCH", "/roles/low", `"name":"x"`, merge},
		{"user create", "POST", "/users", `"username":"bob"`, ""},
		{"channel create", "POST", "/channels/new/create", `"name":"x"`, ""},
		{"channel patch", "PATCH", "/channels/ops", `"name":"x"`, merge},
		{"overwrite", "POST", "/channels/ops/permissions", `"target_type":"everyone","allow":[],"deny":[]`, ""},
		{"profile links", "PUT", "/profile/link", `"links":{}`, ""},
		{"profile links patch", "PATCH", "/profile/link", `"links":{}`, merge},
	}
	const n = 10000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := unknownMembers(tc.known, n)
			ctype := tc.ctype
			if ctype == "" {
				ctype = "application/json"
			}
			res := e.Do(testenv.Req{Method: tc.method, Path: tc.path, Token: nobody.Token, Body: body, Type: ctype})
			p := e2eProblem(t, res, http.StatusBadRequest, "validation")
			errs := *p.Errors
			if len(errs) != 101 {
				t.Fatalf("%d entries in errors, want 100 and a count of the rest", len(errs))
			}
			seen := map[api.FieldError]bool{}
			for _, f := range errs[:100] {
				if seen[f] {
					t.Errorf("reported twice: %+v", f)
				}
				seen[f] = true
				if !strings.HasPrefix(f.Location, "body.k") || f.Message != "is not a known field" {
					t.Errorf("entry %+v, want an unknown member", f)
				}
			}
			if last := errs[100]; last.Location != "request" || last.Message != fmt.Sprintf("%d more problems are not listed", n-100) {
				t.Errorf("last entry %+v, want the count of the %d not listed", last, n-100)
			}
			if len(res.Body) > len(body) {
				t.Errorf("an answer of %d bytes to a request of %d", len(res.Body), len(body))
			}
		})
	}
}

// The answer to a body with few problems lists each of them once.
func TestFewUnknownMembersEachListed(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	e.NewRole("low")
	res := e.Do(testenv.Req{Method: "POST", Path: "/roles/low/rename", Token: e.Owner,
		Body: `{"name":"x","a":1,"b":2,"c":3}`, Type: "application/json"})
	p := e2eProblem(t, res, http.StatusBadRequest, "validation")
	var got []string
	for _, f := range *p.Errors {
		got = append(got, f.Location)
	}
	if strings.Join(got, " ") != "body.a body.b body.c" {
		t.Errorf("errors at %v, want body.a body.b body.c, each once", got)
	}
}

// Names and display names refuse the invisible characters that make one
// name look like another, at the field, and change nothing.
func TestNamesRefuseBidiAndZeroWidth(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods")
		e.NewChannel("ops")
		alice := e.NewUser("alice")
		merge := "application/merge-patch+json"
		cases := []struct {
			name     string
			req      testenv.Req
			location string
		}{
			{"right-to-left override in a display name", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": "bob", "display_name": "evil\u202egnp.exe"}}, "body.display_name"},
			{"zero-width space in a display name", testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Body: `{"username":"alice","display_name":"al\u200bice","status":"active"}`, Type: "application/json"}, "body.display_name"},
			{"zero-width joiner in a role name", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": "mo\u200dds"}}, "body.name"},
			{"byte order mark in a channel name", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "\ufeffops"}}, "body.name"},
			{"left-to-right isolate in a rename", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "o\u2066ps"}}, "body.name"},
			{"arabic letter mark in a role patch", testenv.Req{Method: "PATCH", Path: "/roles/mods", Body: `{"name":"m\u061cods"}`, Type: merge}, "body.name"},
			{"word joiner in a token name", testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/tokens", Body: map[string]any{"name": "c\u2060i"}}, "body.name"},
			{"right-to-left mark in a display name on replace", testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Body: map[string]any{"username": "alice", "display_name": "a\u200flice", "status": "active"}}, "body.display_name"},
		}
		before := e2eState(t, e, alice)
		seq := e2eSeq(t, e)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.req.Token = e.Owner
				p := e2eProblem(t, e.Do(tc.req), http.StatusBadRequest, "validation")
				if msg := e2eField(t, p, tc.location); !strings.HasPrefix(msg, "must not contain control, format, separator, private-use, default-ignorable or blank characters") {
					t.Errorf("message %q", msg)
				}
			})
		}
		if after := e2eState(t, e, alice); after != before {
			t.Errorf("refused names changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
		// What looks alike but is visible stays allowed.
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/fine/create", Token: e.Owner,
			Body: map[string]any{"name": "caf\u00e9 e\u0301 日本 😀"}})
	})
}

// A number no float64 holds is refused in the API's words, not a library's.
func TestNumberOutOfRangeMessage(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	e.NewRole("mods")
	p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/mods/move", Token: e.Owner,
		Body: `{"position":1e400}`, Type: "application/json"}), http.StatusBadRequest, "validation")
	if msg := e2eField(t, p, "body.position"); msg != "is a number out of range" {
		t.Errorf("message %q", msg)
	}
}

// rawExchange writes a request as bytes and reads the answer; net/http's
// client refuses to send most of these requests.
func rawExchange(t *testing.T, e *testenv.Env, request string, keepOpen bool) *http.Response {
	t.Helper()
	u, _ := url.Parse(e.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Bounds a server that never answers; every answer here comes at once.
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, request); err != nil && !keepOpen {
		t.Logf("write: %v (the server may answer before reading all)", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// problemOf decodes a raw answer's problem.
func problemOf(t *testing.T, res *http.Response, status int, code string) api.Problem {
	t.Helper()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s %s, want a %d problem", res.StatusCode, res.Header.Get("Content-Type"), body, status)
	}
	var p api.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if p.Status != status || string(p.Code) != code || p.Type != "/problems/"+code || p.RequestId == "" ||
		res.Header.Get("X-Request-Id") != p.RequestId {
		t.Fatalf("problem %s, want status %d and code %s with a request ID", body, status, code)
	}
	return p
}

// Requests net/http refuses before any handler runs are problems too.
func TestHeaderAndLengthErrorsAreProblems(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) {
		// A body that is awaited would take this long to fail: the 413
		// below comes from the declared length alone.
		c.BodyIdleTimeout = 10 * time.Minute
	}))
	e.NewRole("mods")
	host := strings.TrimPrefix(e.URL, "http://")
	auth := "Authorization: Bearer " + e.Owner + "\r\n"
	t.Run("control character in X-Audit-Reason", func(t *testing.T) {
		res := rawExchange(t, e, "POST /api/roles/mods/rename HTTP/1.1\r\nHost: "+host+"\r\n"+auth+
			"Content-Type: application/json\r\nContent-Length: 12\r\nX-Audit-Reason: a\x01b\r\n\r\n{\"name\":\"x\"}", false)
		p := problemOf(t, res, http.StatusBadRequest, "validation")
		if p.Errors == nil || len(*p.Errors) != 1 || (*p.Errors)[0].Location != "request" {
			t.Errorf("errors %+v, want one at request", p.Errors)
		}
	})
	t.Run("oversized header", func(t *testing.T) {
		res := rawExchange(t, e, "GET /api/roles HTTP/1.1\r\nHost: "+host+"\r\n"+auth+
			"X-Filler: "+strings.Repeat("f", 2<<20)+"\r\n\r\n", false)
		problemOf(t, res, http.StatusRequestHeaderFieldsTooLarge, "header_too_large")
	})
	t.Run("unknown transfer coding", func(t *testing.T) {
		res := rawExchange(t, e, "POST /api/roles/mods/rename HTTP/1.1\r\nHost: "+host+"\r\n"+auth+
			"Content-Type: application/json\r\nTransfer-Encoding: zip\r\n\r\n", false)
		problemOf(t, res, http.StatusNotImplemented, "not_implemented")
	})
	t.Run("declared Content-Length over the limit", func(t *testing.T) {
		res := rawExchange(t, e, "POST /api/roles/mods/rename HTTP/1.1\r\nHost: "+host+"\r\n"+auth+
			"Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n{\"name\":\"x\"}", true)
		problemOf(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
	})
	// Nothing was renamed.
	if got := e2eGet(t, e, "/roles/mods")["name"]; got != "mods" {
		t.Errorf("role renamed to %q", got)
	}
}

// A refusal never outlives the change that ends it: a suspended user's
// token, refused (and the refusal possibly remembered by an instance),
// works on the very next request after the user is reactivated, on the
// instance that refused it and on another sharing the store.
func TestReactivatedUsersTokenWorksAtOnce(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		alice := e1.NewUser("alice")
		for _, pair := range []struct {
			name           string
			reader, writer *testenv.Env
		}{{"same instance", e1, e1}, {"other instance", e1, e2}, {"reactivated elsewhere", e2, e1}, {"both on two", e2, e2}} {
			authzSuspend(t, pair.writer, alice, "suspended")
			for range 3 {
				e2Problem(t, pair.reader, alice.Token, http.StatusUnauthorized)
			}
			authzSuspend(t, pair.writer, alice, "active")
			if res := pair.reader.Do(testenv.Req{Method: "GET", Path: "/roles", Token: alice.Token}); res.Status != http.StatusOK {
				t.Fatalf("%s: the reactivated user's token on the next request: %s", pair.name, res)
			}
		}
	})
}

// e2Problem expects GET /roles with token to be refused with status.
func e2Problem(t *testing.T, e *testenv.Env, token string, status int) {
	t.Helper()
	res := e.Do(testenv.Req{Method: "GET", Path: "/roles", Token: token})
	code := map[int]string{401: "unauthenticated", 403: "forbidden"}[status]
	e2eProblem(t, res, status, code)
}

// Deleting a role needs what taking it away piece by piece needs: holding
// its permissions (as removing it from a holder does) and, in each channel
// where it has an overwrite, MANAGE_ROLES and what the overwrite allows and
// denies. Otherwise the 403 names what is missing and nothing is deleted.
func TestDeleteRoleNeedsWhatRemovingItNeeds(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mod", "MANAGE_ROLES", "SEND_MESSAGES", "VIEW_CHANNEL") // the moderator's: new roles go below it
		e.NewRole("mc", "MANAGE_CHANNELS")
		e.NewRole("pinned", "SEND_MESSAGES")
		e.NewRole("guarded")
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mod")
		holder := e.NewUser("holder")
		e.Assign(holder.ID, "mc")
		e.NewChannel("open")
		e.NewChannel("locked")
		e.SetOverwrite("open", "role", "pinned", []string{"SEND_MESSAGES"}, nil)
		e.SetOverwrite("locked", "role", "guarded", []string{"SEND_MESSAGES"}, nil)
		e.SetOverwrite("locked", "role", "mod", nil, []string{"MANAGE_ROLES"})
		e.SetOverwrite("open", "role", "guarded", nil, []string{"MENTION_EVERYONE"})

		// Removing mc from its holder is refused, one way or another...
		for _, req := range []testenv.Req{
			{Method: "DELETE", Path: "/users/" + holder.ID + "/roles/mc"},
			{Method: "POST", Path: "/roles/mc/remove_user", Body: map[string]any{"user_id": holder.ID}},
			{Method: "POST", Path: "/roles/mc/remove_perm", Body: map[string]any{"permissions": []string{"MANAGE_CHANNELS"}}},
			{Method: "PUT", Path: "/roles/mc/permissions", Body: map[string]any{"permissions": []string{}}},
		} {
			req.Token = mod.Token
			p := e2eProblem(t, e.Do(req), http.StatusForbidden, "forbidden")
			if authzDeref(p.Reason) != api.CannotGrantUnheld {
				t.Errorf("%s %s: reason %v", req.Method, req.Path, authzDeref(p.Reason))
			}
		}
		state := func() string {
			return authzState(t, e, "/roles", "/users?limit=200", "/channels/open/permissions", "/channels/locked/permissions")
		}
		before := state()
		seq := e2eSeq(t, e)
		// ...and so is deleting it.
		p := e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/mc/delete", Token: mod.Token}), http.StatusForbidden, "forbidden")
		if authzDeref(p.Reason) != api.CannotGrantUnheld || e2eJSON(authzDeref(p.MissingPermissions)) != `["MANAGE_CHANNELS"]` || p.ChannelId != nil {
			t.Errorf("deleting mc: %+v", p)
		}
		// A role with an overwrite in a channel where the moderator lacks
		// MANAGE_ROLES: the channel is named.
		p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/guarded/delete", Token: mod.Token}), http.StatusForbidden, "forbidden")
		if authzDeref(p.Reason) != api.MissingPermissions || e2eJSON(authzDeref(p.MissingPermissions)) != `["MANAGE_ROLES"]` || authzDeref(p.ChannelId) != "locked" {
			t.Errorf("deleting guarded: %+v", p)
		}
		if after := state(); after != before {
			t.Errorf("a refused delete changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
		for _, id := range []string{"mc", "guarded"} {
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/roles/" + id, Token: e.Owner})
		}
		// What the moderator could remove piece by piece, they may delete.
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/pinned/delete", Token: mod.Token})
		// With MENTION_EVERYONE unheld in "open", guarded's deny there cannot go
		// either, once MANAGE_ROLES in "locked" is back.
		e.SetOverwrite("locked", "role", "mod", nil, nil)
		p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/roles/guarded/delete", Token: mod.Token}), http.StatusForbidden, "forbidden")
		if authzDeref(p.Reason) != api.CannotGrantUnheld || e2eJSON(authzDeref(p.MissingPermissions)) != `["MENTION_EVERYONE"]` || authzDeref(p.ChannelId) != "open" {
			t.Errorf("deleting guarded with an unheld deny: %+v", p)
		}
	})
}

// Deleting a role also needs what taking it from each holder needs: a
// holder other than the caller at or above the caller's top role, or the
// owner (for anyone but the owner), makes it a 403 role_hierarchy naming
// that holder, and nothing is deleted.
func TestDeleteRoleChecksEveryHolder(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		// New roles take position 1: admin 4, mod 3, low 2, plain 1.
		e.NewRole("admin", "MANAGE_ROLES")
		e.NewRole("mod", "MANAGE_ROLES")
		e.NewRole("low")
		e.NewRole("plain")
		admin, mod, peer, member := e.NewUser("admin"), e.NewUser("mod"), e.NewUser("peer"), e.NewUser("member")
		e.Assign(admin.ID, "admin")
		e.Assign(mod.ID, "mod")
		e.Assign(peer.ID, "mod")
		e.Assign(member.ID, "low")
		owner := e2eOwnerID(t, e)
		state := func() string { return authzState(t, e, "/roles", "/users?limit=200") }
		del := func(token string) *testenv.Response {
			return e.Do(testenv.Req{Method: "POST", Path: "/roles/plain/delete", Token: token})
		}
		refused := func(t *testing.T, holder string) {
			t.Helper()
			before, seq := state(), e2eSeq(t, e)
			// Taking it from that holder alone is refused...
			p := e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: "/users/" + holder + "/roles/plain", Token: mod.Token}),
				http.StatusForbidden, "forbidden")
			if authzDeref(p.Reason) != api.RoleHierarchy {
				t.Errorf("removing plain from %s: %+v", holder, p)
			}
			// ...and so is deleting it, naming that holder.
			p = e2eProblem(t, del(mod.Token), http.StatusForbidden, "forbidden")
			if authzDeref(p.Reason) != api.RoleHierarchy || authzDeref(p.UserId) != holder || p.RoleId != nil ||
				p.MissingPermissions == nil || len(*p.MissingPermissions) != 0 {
				t.Errorf("deleting plain held by %s: %+v", holder, p)
			}
			if after := state(); after != before {
				t.Errorf("a refused delete changed state:\nbefore %s\nafter  %s", before, after)
			}
			e2eNoEvent(t, e, seq)
		}
		e.Assign(member.ID, "plain")
		e.Assign(mod.ID, "plain") // the caller's own holding is no obstacle

		t.Run("held by the owner", func(t *testing.T) {
			e.Assign(owner, "plain")
			refused(t, owner)
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + owner + "/roles/plain", Token: e.Owner})
		})
		t.Run("held by a user above the caller", func(t *testing.T) {
			e.Assign(admin.ID, "plain")
			refused(t, admin.ID)
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + admin.ID + "/roles/plain", Token: e.Owner})
		})
		t.Run("held by a user at the caller's top", func(t *testing.T) {
			e.Assign(peer.ID, "plain")
			refused(t, peer.ID)
			e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + peer.ID + "/roles/plain", Token: e.Owner})
		})
		t.Run("held by the caller and users below: deleted", func(t *testing.T) {
			if res := del(mod.Token); res.Status != http.StatusNoContent {
				t.Fatalf("%s", res)
			}
			e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/roles/plain", Token: e.Owner})
		})
		t.Run("the owner deletes a role whoever holds it", func(t *testing.T) {
			e.NewRole("plain")
			e.Assign(admin.ID, "plain")
			e.Assign(owner, "plain")
			if res := del(e.Owner); res.Status != http.StatusNoContent {
				t.Fatalf("%s", res)
			}
		})
	})
}

// A timestamp the API reads is RFC 3339 to the letter: an hour of 24, or
// an offset beyond ±23:59, is a 400 at the field, in a body (a timeout, a
// token's expiry) as in a query (the audit log's since and until), and
// changes nothing; the same instants written within range are taken.
func TestTimestampsOutOfRangeAre400(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("floor")
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "floor")
		// A day ahead, at the widest offsets, and written at another.
		at := func(zone string) string {
			loc := map[string]*time.Location{"+23:59": time.FixedZone("", 23*3600+59*60), "-23:59": time.FixedZone("", -(23*3600 + 59*60))}[zone]
			return time.Now().Add(48 * time.Hour).In(loc).Format(time.RFC3339)
		}
		day := time.Now().Add(48 * time.Hour).UTC().Format("2006-01-02")
		bad := []struct{ name, value string }{
			{"offset +24:00", day + "T10:00:00+24:00"},
			{"offset -24:00", day + "T10:00:00-24:00"},
			{"offset +23:60", day + "T10:00:00+23:60"},
			{"offset -00:60", day + "T10:00:00-00:60"},
			{"offset +99:00", day + "T10:00:00+99:00"},
			{"hour 24, Z", day + "T24:00:00Z"},
			{"hour 24 with a fraction and an offset", day + "T24:00:00.5+01:00"},
		}
		before := authzState(t, e, "/users/"+alice.ID, "/users/"+alice.ID+"/tokens")
		seq := e2eSeq(t, e)
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				p := e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/users/" + alice.ID, Token: e.Owner,
					Type: "application/merge-patch+json", Body: `{"timeout_until":"` + tc.value + `"}`}), http.StatusBadRequest, "validation")
				e2eField(t, p, "body.timeout_until")
				p = e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/tokens", Token: alice.Token,
					Body: map[string]any{"name": "ci", "expires_at": tc.value}}), http.StatusBadRequest, "validation")
				e2eField(t, p, "body.expires_at")
				for _, q := range []string{"since", "until"} {
					p = e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/audit-log?" + q + "=" + url.QueryEscape(tc.value), Token: e.Owner}),
						http.StatusBadRequest, "validation")
					e2eField(t, p, "query."+q)
				}
			})
		}
		if after := authzState(t, e, "/users/"+alice.ID, "/users/"+alice.ID+"/tokens"); after != before {
			t.Errorf("a refused timestamp changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
		for _, zone := range []string{"+23:59", "-23:59"} {
			v := at(zone)
			if !strings.HasSuffix(v, zone) {
				t.Fatalf("%s is not at %s", v, zone)
			}
			res := e.Do(testenv.Req{Method: "PATCH", Path: "/users/" + alice.ID, Token: e.Owner,
				Type: "application/merge-patch+json", Body: `{"timeout_until":"` + v + `"}`})
			want, _ := time.Parse(time.RFC3339, v)
			var u api.User
			res.JSON(t, &u)
			if res.Status != http.StatusOK || u.TimeoutUntil == nil || !u.TimeoutUntil.Equal(want) {
				t.Errorf("timeout until %s: %s", v, res)
			}
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?since=" + url.QueryEscape(v) + "&until=" + url.QueryEscape(v), Token: e.Owner})
		}
	})
}

// A Range header that cannot be parsed is ignored (200 with the whole
// body), however long; so are several ranges. A parseable one still
// answers 206, also with digits that make it long.
func TestRangeUnparseableIgnoredAtAnyLength(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, "sqlite")
	e.NewChannel("ops")
	body := strings.Repeat("0123456789", 10)
	e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/ops/attachment?attachmentID=a.txt", Token: e.Owner,
		Body: body, Type: "text/plain"})
	many := make([]string, 2000)
	for i := range many {
		many[i] = fmt.Sprintf("%d-%d", i, i)
	}
	for _, tc := range []struct {
		name, rng string
		status    int
		want      string
	}{
		{"garbage of 257 characters", strings.Repeat("x", 257), http.StatusOK, body},
		{"garbage of 64 KiB", strings.Repeat("bytes=", 11000), http.StatusOK, body},
		{"another unit, long", "items=" + strings.Repeat("1", 1000), http.StatusOK, body},
		{"a range of 300 characters whose end precedes its start", "bytes=9-" + strings.Repeat("0", 292) + "1", http.StatusOK, body},
		{"2,000 ranges", "bytes=" + strings.Join(many, ","), http.StatusOK, body},
		{"one range written long", "bytes=" + strings.Repeat("0", 300) + "5-9", http.StatusPartialContent, body[5:10]},
		{"one short range", "bytes=0-3", http.StatusPartialContent, body[:4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{"GET", "HEAD"} {
				res := e.Do(testenv.Req{Method: method, Path: "/channels/ops/attachment?attachmentID=a.txt", Token: e.Owner,
					Headers: map[string]string{"Range": tc.rng}})
				status := tc.status
				if method == "HEAD" {
					status = http.StatusOK // Range is GET's alone
				}
				if res.Status != status {
					t.Fatalf("%s: status %d, want %d: %s", method, res.Status, status, res.Body)
				}
				if method == "GET" && string(res.Body) != tc.want {
					t.Errorf("GET: body %q, want %q", res.Body, tc.want)
				}
			}
		})
	}
}

// The audit log and the event stream follow non-disclosure: a caller with
// VIEW_AUDIT_LOG who cannot view a channel reads nothing about it, in any
// filter or on the stream, while it exists and after it is deleted; one who
// may know of every channel (MANAGE_CHANNELS in base) reads it all.
func TestAuditLogAndStreamHideHiddenChannels(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		e.NewRole("builders", "VIEW_AUDIT_LOG", "MANAGE_CHANNELS")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		builder := e.NewUser("builder")
		e.Assign(builder.ID, "builders")
		e.NewChannel("open")
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/secret/create", Token: e.Owner,
			Body: map[string]any{"name": "Secret plans", "topic": "the heist"}})
		e.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		stream := sseOpen(t, e, auditor.Token, "", nil)
		builderStream := sseOpen(t, e, builder.Token, "", nil)
		e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/secret/attachment?attachmentID=plan.txt", Token: e.Owner,
			Body: []byte("rob the bank"), Type: "text/plain"})
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/secret/rename", Token: e.Owner, Body: map[string]any{"name": "Still secret"}})
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/open/rename", Token: e.Owner, Body: map[string]any{"name": "Open"}})

		// The stream shows the open channel's rename, and nothing before it.
		if ev := stream.nextEvent(t); ev.Subject != "channel:open" || ev.Type != "channel.renamed" {
			t.Errorf("the auditor's stream shows %s first", evJSON(ev))
		}
		// The builder's shows everything.
		for _, want := range []string{"attachment:secret/plan.txt", "channel:secret", "channel:open"} {
			if ev := builderStream.nextEvent(t); ev.Subject != want {
				t.Errorf("the builder's stream shows %s, want an event about %s", evJSON(ev), want)
			}
		}
		e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/channels/secret", Token: auditor.Token}), http.StatusNotFound, "not_found")
		hidden := func(step string) {
			t.Helper()
			for _, q := range []string{"limit=200", "subject=channel:secret", "subject=attachment:secret/plan.txt", "type=channel.*&limit=1"} {
				res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?" + q, Token: auditor.Token})
				if strings.Contains(string(res.Body), "secret") || strings.Contains(string(res.Body), "heist") {
					t.Errorf("%s: the auditor's audit log (%s) tells of the hidden channel: %s", step, q, res.Body)
				}
			}
			var all api.EventList
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?subject=channel:secret", Token: builder.Token}).JSON(t, &all)
			if len(all.Items) == 0 {
				t.Errorf("%s: the builder reads nothing about the channel", step)
			}
		}
		hidden("while it exists")
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/secret/delete", Token: e.Owner})
		hidden("once deleted")
		// A channel made visible shows its history.
		e.SetOverwrite("open", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e.SetOverwrite("open", "everyone", "", nil, nil)
		var open api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?subject=channel:open", Token: auditor.Token}).JSON(t, &open)
		if len(open.Items) < 3 {
			t.Errorf("the auditor reads %d events about the open channel", len(open.Items))
		}
	})
}

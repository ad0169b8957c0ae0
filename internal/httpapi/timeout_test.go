package httpapi_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

func toPatchUser(e *testenv.Env, token, userID, body string) *testenv.Response {
	return e.Do(testenv.Req{Method: "PATCH", Path: "/users/" + userID, Token: token, Type: "application/merge-patch+json", Body: body})
}

func toBase(t *testing.T, e *testenv.Env, userID string) []string {
	t.Helper()
	var p api.UserPermissions
	e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + userID + "/permissions", Token: e.Owner}).JSON(t, &p)
	out := make([]string, len(p.Permissions))
	for i, n := range p.Permissions {
		out[i] = string(n)
	}
	return out
}

func toUntil(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339Nano) }

// A timeout cuts a member's base and channel permissions to VIEW_CHANNEL
// and READ_MESSAGE_HISTORY until it ends; explain names it; the refusals
// follow docs/design.md §13; bad input changes nothing.
func TestTimeout(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("members", "VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY", "MANAGE_CHANNELS")
		e.NewRole("mods", "MODERATE_MEMBERS", "VIEW_CHANNEL") // above members
		e.NewRole("admins", "ADMINISTRATOR")
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/admins/move", Token: e.Owner, Body: map[string]any{"position": 3}})
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/mods/move", Token: e.Owner, Body: map[string]any{"position": 2}})
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "members")
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mods")
		admin := e.NewUser("admin")
		e.Assign(admin.ID, "admins")
		plain := e.NewUser("plain")
		e.Assign(plain.ID, "members")
		e.NewChannel("ops")
		full := toBase(t, e, alice.ID)

		// Bad input first: nothing changes.
		before := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner})
		for _, c := range []struct {
			name, body string
			status     int
			code       string
			token      string
		}{
			{"more than 28 days ahead", `{"timeout_until":"` + toUntil(29*24*time.Hour) + `"}`, 400, "validation", mod.Token},
			{"not a time", `{"timeout_until":"tomorrow"}`, 400, "validation", mod.Token},
			{"without MODERATE_MEMBERS", `{"timeout_until":"` + toUntil(time.Hour) + `"}`, 403, "forbidden", plain.Token},
			{"oneself", `{"timeout_until":"` + toUntil(time.Hour) + `"}`, 403, "forbidden", alice.Token},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := e2eProblem(t, toPatchUser(e, c.token, alice.ID, c.body), c.status, c.code)
				if c.status == 400 && (p.Errors == nil || (*p.Errors)[0].Location != "body.timeout_until") {
					t.Errorf("errors %s", e2eJSON(p.Errors))
				}
			})
		}
		if after := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}); string(after.Body) != string(before.Body) {
			t.Errorf("refused timeouts changed alice: %s", after.Body)
		}
		e2eProblem(t, toPatchUser(e, mod.Token, e2eOwnerID(t, e), `{"timeout_until":"`+toUntil(time.Hour)+`"}`), 403, "forbidden")
		e2eProblem(t, toPatchUser(e, e.Owner, admin.ID, `{"timeout_until":"`+toUntil(time.Hour)+`"}`), 403, "forbidden")
		e2eProblem(t, toPatchUser(e, mod.Token, admin.ID, `{"timeout_until":"`+toUntil(time.Hour)+`"}`), 403, "forbidden")

		// The timeout.
		until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
		res := toPatchUser(e, mod.Token, alice.ID, `{"timeout_until":"`+until.Format(time.RFC3339Nano)+`"}`)
		catWant(t, res, http.StatusOK)
		var u api.User
		res.JSON(t, &u)
		if u.TimeoutUntil == nil || !u.TimeoutUntil.Equal(until) {
			t.Errorf("timeout_until %v, want %v", u.TimeoutUntil, until)
		}
		if got := toBase(t, e, alice.ID); !slices.Equal(got, []string{"VIEW_CHANNEL", "READ_MESSAGE_HISTORY"}) {
			t.Errorf("base while timed out %v", got)
		}
		var inOps api.UserPermissions
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?channelID=ops&explain=true", Token: e.Owner}).JSON(t, &inOps)
		if e2eJSON(inOps.Permissions) != `["VIEW_CHANNEL","READ_MESSAGE_HISTORY"]` {
			t.Errorf("in ops while timed out %v", inOps.Permissions)
		}
		named := false
		for _, ex := range *inOps.Explain {
			for _, st := range ex.Steps {
				if st.Kind == "timeout" {
					named = true
					if st.Until == nil || !st.Until.Time().Equal(until) {
						t.Errorf("timeout step %+v, want until %v", st, until)
					}
				}
			}
		}
		if !named {
			t.Errorf("explain does not name the timeout: %s", e2eJSON(inOps.Explain))
		}
		// What alice could do, she cannot.
		e2eProblem(t, e.Do(testenv.Req{Method: "POST", Path: "/channels/new/create", Token: alice.Token, Body: map[string]any{"name": "n"}}),
			http.StatusForbidden, "forbidden")
		var log api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?type=user.timeout", Token: e.Owner}).JSON(t, &log)
		if len(log.Items) != 1 || log.Items[0].Data["before"] != nil || log.Items[0].Data["after"] == nil {
			t.Errorf("user.timeout events %s", e2eJSON(log.Items))
		}

		// null ends it at once, and the user no longer has one.
		res = toPatchUser(e, mod.Token, alice.ID, `{"timeout_until":null}`)
		catWant(t, res, http.StatusOK)
		if _, has := res.Map(t)["timeout_until"]; has {
			t.Errorf("an ended timeout is still shown: %s", res.Body)
		}
		if got := toBase(t, e, alice.ID); !slices.Equal(got, full) {
			t.Errorf("base after the timeout ended %v, want %v", got, full)
		}

		// A timeout ends by itself, with no write: the first request after
		// its end sees the full permissions.
		end := time.Now().Add(1500 * time.Millisecond)
		catWant(t, toPatchUser(e, mod.Token, alice.ID, `{"timeout_until":"`+end.UTC().Format(time.RFC3339Nano)+`"}`), http.StatusOK)
		if got := toBase(t, e, alice.ID); slices.Equal(got, full) {
			t.Fatal("not timed out")
		}
		var last api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).JSON(t, &last)
		time.Sleep(time.Until(end) + 50*time.Millisecond) // the wall clock is what ends it
		if got := toBase(t, e, alice.ID); !slices.Equal(got, full) {
			t.Errorf("base after the end %v, want %v", got, full)
		}
		e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/new/create", Token: alice.Token, Body: map[string]any{"name": "n"}})
		var now api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=2", Token: e.Owner}).JSON(t, &now)
		if now.Items[0].Type != "channel.created" || now.Items[1].Seq != last.Items[0].Seq {
			t.Errorf("something was written when the timeout ended: %s", e2eJSON(now.Items))
		}
	})
}

// A timeout set on one instance holds on the very next request on another.
func TestTimeoutHoldsOnTheOtherInstance(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config)
		e1.NewRole("builders", "MANAGE_CHANNELS", "VIEW_CHANNEL")
		alice := e1.NewUser("alice")
		e1.Assign(alice.ID, "builders")
		e1.NewChannel("ops")
		patch := testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: alice.Token, Type: "application/merge-patch+json", Body: `{"topic":"t"}`}
		for round := range 5 {
			e1.Must(http.StatusOK, patch)
			catWant(t, toPatchUser(e2, e2.Owner, alice.ID, `{"timeout_until":"`+toUntil(time.Hour)+`"}`), http.StatusOK)
			if res := e1.Do(patch); res.Status != http.StatusForbidden {
				t.Fatalf("round %d: timed out on the other instance, the next request: %s", round, res)
			}
			catWant(t, toPatchUser(e2, e2.Owner, alice.ID, `{"timeout_until":null}`), http.StatusOK)
		}
	})
}

// A moderator times out only users strictly below their top role, and the
// user a timeout answers with keeps its email hidden from a moderator who
// may not see it (MODERATE_MEMBERS is not MANAGE_USERS).
func TestTimeoutHierarchyAndEmail(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("members", "VIEW_CHANNEL")
		e.NewRole("mods", "MODERATE_MEMBERS")
		e.NewRole("seniors", "VIEW_CHANNEL")
		for _, m := range []struct {
			id string
			at int
		}{{"seniors", 3}, {"mods", 2}, {"members", 1}} {
			e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/roles/" + m.id + "/move", Token: e.Owner, Body: map[string]any{"position": m.at}})
		}
		mod := e.NewUser("mod")
		e.Assign(mod.ID, "mods")
		peer := e.NewUser("peer")
		e.Assign(peer.ID, "mods")
		senior := e.NewUser("senior")
		e.Assign(senior.ID, "seniors")
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "members")
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/users/" + alice.ID, Token: e.Owner,
			Type: "application/merge-patch+json", Body: `{"email":"alice@example.com"}`})

		for _, target := range []testenv.User{peer, senior} {
			before := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + target.ID, Token: e.Owner}).Body
			p := e2eProblem(t, toPatchUser(e, mod.Token, target.ID, `{"timeout_until":"`+toUntil(time.Hour)+`"}`), 403, "forbidden")
			if p.Reason == nil || *p.Reason != api.RoleHierarchy {
				t.Errorf("timing out %s: reason %v, want role_hierarchy", target.Username, p.Reason)
			}
			after := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + target.ID, Token: e.Owner}).Body
			if string(before) != string(after) {
				t.Errorf("a refused timeout changed %s: %s -> %s", target.Username, before, after)
			}
		}

		res := toPatchUser(e, mod.Token, alice.ID, `{"timeout_until":"`+toUntil(time.Hour)+`"}`)
		catWant(t, res, http.StatusOK)
		m := res.Map(t)
		if _, ok := m["email"]; ok {
			t.Errorf("the moderator was shown the email: %s", res.Body)
		}
		if m["timeout_until"] == nil {
			t.Errorf("no timeout in the answer: %s", res.Body)
		}
		// The owner still sees it: it was hidden from the answer, not lost.
		if got := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e.Owner}).Map(t)["email"]; got != "alice@example.com" {
			t.Errorf("email %v", got)
		}
	})
}

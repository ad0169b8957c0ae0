package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// namesOf are the ways a name reaches the server, each with where a bad one
// is reported: channel and role names (create, edit, rename), display names
// (create, replace, edit), token names, the names of an import, and the
// X-Audit-Reason of a change.
func namesOf(aliceID, aliceName string) []struct {
	name     string
	req      func(v string) testenv.Req
	location string
} {
	const patch = "application/merge-patch+json"
	return []struct {
		name     string
		req      func(v string) testenv.Req
		location string
	}{
		{"channel created", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/fresh/create", Body: map[string]any{"name": v}}
		}, "body.name"},
		{"channel edited", func(v string) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: map[string]any{"name": v}, Type: patch}
		}, "body.name"},
		{"channel renamed", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": v}}
		}, "body.name"},
		{"role created", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/fresh/create", Body: map[string]any{"name": v}}
		}, "body.name"},
		{"role edited", func(v string) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/roles/mods", Body: map[string]any{"name": v}, Type: patch}
		}, "body.name"},
		{"role renamed", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": v}}
		}, "body.name"},
		{"user created", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": "fresh", "display_name": v}}
		}, "body.display_name"},
		{"user replaced", func(v string) testenv.Req {
			return testenv.Req{Method: "PUT", Path: "/users/" + aliceID,
				Body: map[string]any{"username": aliceName, "display_name": v, "status": "active"}}
		}, "body.display_name"},
		{"user edited", func(v string) testenv.Req {
			return testenv.Req{Method: "PATCH", Path: "/users/" + aliceID, Body: map[string]any{"display_name": v}, Type: patch}
		}, "body.display_name"},
		{"token created", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/users/" + aliceID + "/tokens", Body: map[string]any{"name": v}}
		}, "body.name"},
		{"role imported", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/import?dry_run=true", Body: map[string]any{"format": "guildhall-template/1",
				"global_permissions": []string{}, "channels": []any{},
				"roles": []any{map[string]any{"id": "fresh", "name": v, "position": 1, "color": nil, "permissions": []string{}}}}}
		}, "body.roles[0].name"},
		{"channel imported", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/import?dry_run=true", Body: map[string]any{"format": "guildhall-template/1",
				"global_permissions": []string{}, "roles": []any{},
				"channels": []any{map[string]any{"id": "fresh", "name": v, "topic": nil, "kind": "text", "parent_id": nil, "position": 0, "overwrites": []any{}}}}}
		}, "body.channels[0].name"},
		{"X-Audit-Reason", func(v string) testenv.Req {
			return testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "Operations 2"},
				Headers: map[string]string{"X-Audit-Reason": "why: " + v}}
		}, "header.X-Audit-Reason"},
	}
}

// Names refuse every invisible code point the probe found, wherever a name
// arrives (400 at the member, nothing changed, no event), and take emoji.
func TestNamesRefuseInvisibleCharacters(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, alice := e2eBadInputEnv(t, kind)
		invisible := map[string]string{
			"U+3164": "a\u3164", "U+115F": "a\u115F", "U+FFA0": "a\uFFA0", "U+2800": "a\u2800",
			"U+E0020": "a\U000E0020", "U+180E": "a\u180E", "U+00AD": "a\u00AD", "U+034F": "a\u034F",
			"U+2065": "a\u2065", "U+206A": "a\u206A", "U+206F": "a\u206F", "U+FFF9": "a\uFFF9",
			"U+1D173": "a\U0001D173", "U+17B4": "a\u17B4", "U+2028": "a\u2028", "U+202E": "a\u202E",
			"U+200B": "ad\u200Bmin", "VS16 first": "\uFE0Fa", "ZWJ between letters": "a\u200Db",
			"Hangul filler alone": "\u3164",
		}
		before := e2eState(t, e, alice)
		seq := lastSeq(t, e)
		for _, n := range namesOf(alice.ID, "alice") {
			for what, v := range invisible {
				if n.location == "header.X-Audit-Reason" && what == "Hangul filler alone" {
					continue // a reason may be blank: only what it holds counts
				}
				req := n.req(v)
				req.Token = e.Owner
				res := e.Do(req)
				if res.Status != http.StatusBadRequest {
					t.Errorf("%s, %s: status %d, want 400; %s", n.name, what, res.Status, res.Body)
					continue
				}
				if p := res.Problem(t); p.Errors == nil || len(*p.Errors) == 0 || (*p.Errors)[0].Location != n.location {
					t.Errorf("%s, %s: %s, want the error at %s", n.name, what, res.Body, n.location)
				}
			}
		}
		if after := e2eState(t, e, alice); after != before {
			t.Errorf("refused names changed the state:\nbefore %s\nafter %s", before, after)
		}
		if s := lastSeq(t, e); s != seq {
			t.Errorf("refused names wrote events: last seq %v, was %v", s, seq)
		}

		// Emoji pass everywhere.
		for i, n := range namesOf(alice.ID, "alice") {
			for _, v := range []string{"👩‍💻", "❤️", "🏳️‍🌈", "1️⃣ Ops"} {
				req := n.req(v)
				req.Token = e.Owner
				if res := e.Do(req); res.Status/100 != 2 {
					t.Errorf("%s, %+q: status %d; %s", n.name, v, res.Status, res.Body)
				}
				if n.name == "channel created" || n.name == "role created" {
					del := "/channels/fresh/delete"
					if i >= 3 {
						del = "/roles/fresh/delete"
					}
					e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: del, Token: e.Owner})
				}
				if n.name == "user created" {
					users := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users?q=fresh", Token: e.Owner}).Map(t)
					id := users["items"].([]any)[0].(map[string]any)["id"].(string)
					e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + id, Token: e.Owner})
				}
			}
		}
	})
}

// lastSeq is the seq of the newest audit event.
func lastSeq(t *testing.T, e *testenv.Env) float64 {
	t.Helper()
	page := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner}).Map(t)
	items := page["items"].([]any)
	if len(items) == 0 {
		return 0
	}
	return items[0].(map[string]any)["seq"].(float64)
}

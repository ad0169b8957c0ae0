package httpapi_test

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the operator's PostgreSQL driver

	"github.com/guildhall/guildhall/internal/guild"
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

// operatorExec runs statements on an instance's database behind its back,
// as an earlier release (or psql, sqlite3) would have written them.
func operatorExec(t *testing.T, e *testenv.Env, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	var db *sql.DB
	var err error
	if e.Kind == testenv.Postgres {
		db, err = sql.Open("pgx", e.Config.DatabaseURL)
	} else {
		db, err = sql.Open("sqlite3", "file:"+filepath.Join(e.Config.DataDir, "guildhall.db")+"?_busy_timeout=10000")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// Names stored under an earlier, looser rule are cleaned when the server
// starts, so that every answer matches the contract (the instances here
// check each one): the refused characters removed, a name left blank
// becoming its ID (a display name, the username), each change an event by
// the system. Starting again changes nothing; an export imported back
// changes nothing; a user PUT back unchanged is 200.
func TestStoredNamesCleanedAtStart(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		cfg := testenv.Config(t, kind)
		e := testenv.StartWith(t, kind, cfg)
		e.NewRole("mods", "MANAGE_MESSAGES")
		e.NewChannel("ops")
		e.NewChannel("blank")
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		e.NewUser("carol") // "Ça va ❤️" is left alone
		operatorExec(t, e,
			"UPDATE channels SET name = 'ad\u200Bmin' WHERE id = 'ops'",
			"UPDATE channels SET name = '\u3164' WHERE id = 'blank'",
			"UPDATE roles SET name = 'Mod\u200Berator' WHERE id = 'mods'",
			"UPDATE users SET display_name = 'Ali\u200Bce' WHERE username = 'alice'",
			"UPDATE users SET display_name = '' WHERE username = 'bob'",
			"UPDATE users SET display_name = 'Ça va ❤️' WHERE username = 'carol'",
			"UPDATE tokens SET name = 'lap\u202Etop' WHERE user_id = '"+alice.ID+"'")
		seq := lastSeq(t, e)

		e2 := testenv.StartWith(t, kind, cfg) // checks every answer against the contract
		get := func(path, field string) string {
			t.Helper()
			return e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e2.Owner}).Map(t)[field].(string)
		}
		for _, c := range []struct{ path, field, want string }{
			{"/channels/ops", "name", "admin"},
			{"/channels/blank", "name", "blank"},
			{"/roles/mods", "name", "Moderator"},
			{"/users/" + alice.ID, "display_name", "Alice"},
			{"/users/" + bob.ID, "display_name", "bob"},
		} {
			if got := get(c.path, c.field); got != c.want {
				t.Errorf("%s %s = %+q, want %+q", c.path, c.field, got, c.want)
			}
		}
		tokens := e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e2.Owner}).Map(t)
		if got := tokens["items"].([]any)[0].(map[string]any)["name"]; got != "laptop" {
			t.Errorf("token name = %+q, want laptop", got)
		}
		for _, path := range []string{"/users?limit=200", "/roles", "/channels?limit=200", "/export", "/audit-log?limit=200"} {
			e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e2.Owner})
		}

		// Each change is an event by the system, with the reason.
		page := e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200", Token: e2.Owner}).Map(t)
		got := map[string]bool{}
		for _, it := range page["items"].([]any) {
			ev := it.(map[string]any)
			if ev["seq"].(float64) <= seq {
				continue
			}
			if ev["actor_id"] != nil || ev["reason"] != guild.CleanReason {
				t.Errorf("event %v: want the system's, with the reason %q", ev, guild.CleanReason)
			}
			got[ev["type"].(string)+" "+ev["subject"].(string)] = true
		}
		want := []string{"channel.renamed channel:ops", "channel.renamed channel:blank", "role.renamed role:mods",
			"user.updated user:" + alice.ID, "user.updated user:" + bob.ID, "user.token.renamed user:" + alice.ID}
		for _, w := range want {
			if !got[w] {
				t.Errorf("no event %s among %v", w, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("events %v, want %v", got, want)
		}

		// Idempotent: a start with nothing to clean writes nothing.
		seq = lastSeq(t, e2)
		e3 := testenv.StartWith(t, kind, cfg)
		if s := lastSeq(t, e3); s != seq {
			t.Errorf("a second start wrote events: last seq %v, was %v", s, seq)
		}

		// A start checks the subjects of the events since the last check (an
		// earlier release serving beside this one writes such events), and
		// every name when the rule changed since.
		e.NewChannel("later")
		operatorExec(t, e,
			"UPDATE channels SET name = 'la\u00ADter' WHERE id = 'later'",
			"UPDATE roles SET name = 'Mod\u2028s' WHERE id = 'mods'") // no event: left to the next full check
		e4 := testenv.StartWith(t, kind, cfg)
		if got := e2eGet(t, e4, "/channels/later")["name"]; got != "later" {
			t.Errorf("a name written after the last check: %+q, want it cleaned", got)
		}
		operatorExec(t, e, "UPDATE names_checked SET rule = 'an earlier rule'")
		e5 := testenv.StartWith(t, kind, cfg)
		if got := e2eGet(t, e5, "/roles/mods")["name"]; got != "Mods" {
			t.Errorf("a name checked under an earlier rule: %+q, want it cleaned", got)
		}

		// What was just exported imports back with no change; a user PUT back
		// as read is 200.
		exported := e3.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/export", Token: e3.Owner})
		res := e3.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import?dry_run=true", Token: e3.Owner,
			Body: exported.Body, Type: "application/json"}).Map(t)
		if ch := res["changes"].([]any); len(ch) != 0 {
			t.Errorf("import of the export lists changes: %v", ch)
		}
		u := e3.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID, Token: e3.Owner}).Map(t)
		e3.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e3.Owner,
			Body: map[string]any{"username": u["username"], "display_name": u["display_name"], "status": u["status"]}})
	})
}

// Names stored longer than the contract's 100 characters (a token named by
// an earlier `guildhall token create --name`, an owner's display name from
// GUILDHALL_OWNER) are cut to 100 when the server starts, each cut an event
// by the system; a cut that leaves a joiner with no emoji after it drops
// the joiner too.
func TestStoredNamesCutToLength(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		cfg := testenv.Config(t, kind)
		e := testenv.StartWith(t, kind, cfg)
		e.NewChannel("emoji")
		alice := e.NewUser("alice")
		long := strings.Repeat("é", 300)
		joined := strings.Repeat("😀", 99) + "\u200D💻" // 101 characters, the 100th a joiner
		operatorExec(t, e,
			"UPDATE tokens SET name = '"+long+"' WHERE user_id = '"+alice.ID+"'",
			"UPDATE users SET display_name = '"+strings.Repeat("O", 150)+"' WHERE username = 'owner'",
			"UPDATE channels SET name = '"+joined+"' WHERE id = 'emoji'",
			"UPDATE names_checked SET rule = 'an earlier rule'") // as after an upgrade
		seq := lastSeq(t, e)

		e2 := testenv.StartWith(t, kind, cfg) // checks every answer against the contract
		tokens := e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e2.Owner}).Map(t)
		if got := tokens["items"].([]any)[0].(map[string]any)["name"]; got != strings.Repeat("é", 100) {
			t.Errorf("token name = %+q, want it cut to 100 characters", got)
		}
		if got := e2eGet(t, e2, "/me")["display_name"]; got != strings.Repeat("O", 100) {
			t.Errorf("owner's display name = %+q, want it cut to 100 characters", got)
		}
		if got := e2eGet(t, e2, "/channels/emoji")["name"]; got != strings.Repeat("😀", 99) {
			t.Errorf("channel name = %+q, want the 99 emoji without the joiner", got)
		}
		page := e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200", Token: e2.Owner}).Map(t)
		var got []string
		for _, it := range page["items"].([]any) {
			if ev := it.(map[string]any); ev["seq"].(float64) > seq && ev["reason"] == guild.CleanReason {
				got = append(got, ev["type"].(string))
			}
		}
		slices.Sort(got)
		if want := []string{"channel.renamed", "user.token.renamed", "user.updated"}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})
}

package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
)

// e2eState reads everything a bad request could have changed, as the owner.
func e2eState(t testing.TB, e *testenv.Env, users ...testenv.User) string {
	t.Helper()
	var b strings.Builder
	paths := []string{"/roles", "/channels?limit=200", "/users?limit=200", "/permissions/global", "/channels/ops/permissions",
		"/profile/link", "/roles/mods/permissions", "/channels/ops/attachments"}
	for _, u := range users {
		paths = append(paths, "/users/"+u.ID+"/tokens", "/users/"+u.ID+"/roles")
	}
	for _, p := range paths {
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: p, Token: e.Owner})
		b.WriteString(p + " " + res.Header.Get("ETag") + " ")
		b.Write(res.Body)
		b.WriteString("\n")
	}
	for _, u := range users { // each user's own profile
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/profile/link", Token: u.Token})
		b.WriteString(u.ID + " profile " + res.Header.Get("ETag") + " ")
		b.Write(res.Body)
		b.WriteString("\n")
	}
	return b.String()
}

// e2eBadInputEnv is an instance with one of each resource.
func e2eBadInputEnv(t *testing.T, kind string) (*testenv.Env, testenv.User) {
	t.Helper()
	e := testenv.Start(t, kind)
	e.NewRole("mods", "MANAGE_MESSAGES")
	e.NewChannel("ops")
	alice := e.NewUser("alice")
	e.Assign(alice.ID, "mods")
	e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
	e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/profile/link", Token: e.Owner,
		Body: map[string]any{"links": map[string]any{"home": "https://example.com"}}})
	return e, alice
}

// A table of bad inputs: each is a 4xx problem (never a 500), names where
// it is wrong, and changes nothing (no state, no audit event).
func TestBadInput(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, alice := e2eBadInputEnv(t, kind)
		const js = "application/json"
		deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
		cases := []struct {
			name     string
			req      testenv.Req
			status   int
			location string // "" when not applicable
			message  string // a substring of the message at location
		}{
			// wrong types
			{"name is a number", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": 123}}, 400, "body.name", ""},
			{"permissions is a string", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": "x", "permissions": "VIEW_CHANNEL"}}, 400, "body.permissions", ""},
			{"permission is a number", testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Body: map[string]any{"permissions": []any{"VIEW_CHANNEL", 7}}}, 400, "body.permissions[1]", ""},
			{"position is a string", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: map[string]any{"position": "1"}}, 400, "body.position", ""},
			{"position is a fraction", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: map[string]any{"position": 1.5}}, 400, "body.position", ""},
			{"position overflows", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: `{"position":99999999999999999999999}`, Type: js}, 400, "", ""},
			{"position 1e309", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: `{"position":1e309}`, Type: js}, 400, "", ""},
			{"username is a bool", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": true}}, 400, "body.username", ""},
			{"topic is a number", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "x", "topic": 5}}, 400, "body.topic", ""},
			{"allow is an object", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: map[string]any{"target_type": "everyone", "allow": map[string]any{"a": 1}, "deny": []string{}}}, 400, "body.allow", ""},
			{"links is an array", testenv.Req{Method: "PUT", Path: "/profile/link", Body: map[string]any{"links": []string{"https://example.com"}}}, 400, "body.links", ""},
			{"user_id is a number", testenv.Req{Method: "POST", Path: "/roles/mods/add_user", Body: map[string]any{"user_id": 1}}, 400, "body.user_id", ""},
			{"body is an array", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `[{"name":"x"}]`, Type: js}, 400, "body", ""},
			{"body is a string", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `"x"`, Type: js}, 400, "body", ""},
			{"body is null", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `null`, Type: js}, 400, "body", ""},
			// unknown fields
			{"unknown field", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": "x", "extra": 1}}, 400, "body.extra", "not a known field"},
			{"read-only id in rename", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "x", "id": "y"}}, 400, "body.id", ""},
			{"unknown field in a patch", testenv.Req{Method: "PATCH", Path: "/roles/mods", Body: `{"position":3}`, Type: "application/merge-patch+json"}, 400, "body.position", ""},
			{"field in the wrong case", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"Username": "bob"}}, 400, "body.Username", ""},
			// invalid JSON
			{"truncated JSON", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":`, Type: js}, 400, "body", "not valid JSON"},
			{"unquoted key", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{name:"x"}`, Type: js}, 400, "body", "not valid JSON"},
			{"single quotes", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{'name':'x'}`, Type: js}, 400, "body", "not valid JSON"},
			{"trailing comma", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x",}`, Type: js}, 400, "body", "not valid JSON"},
			{"nested too deep", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: deep, Type: js}, 400, "body", ""},
			// trailing data
			{"two values", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"} {"name":"y"}`, Type: js}, 400, "body", "after its JSON value"},
			{"trailing garbage", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}garbage`, Type: js}, 400, "body", ""},
			{"trailing bracket", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}]`, Type: js}, 400, "body", ""},
			// invalid UTF-8
			{"invalid UTF-8 in a string", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: []byte("{\"name\":\"a\xffb\"}"), Type: js}, 400, "body.name", "UTF-8"},
			{"overlong UTF-8", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: []byte("{\"name\":\"\xc0\xaf\"}"), Type: js}, 400, "body.name", "UTF-8"},
			{"UTF-16 surrogate bytes", testenv.Req{Method: "POST", Path: "/users", Body: []byte("{\"username\":\"ab\",\"display_name\":\"\xed\xa0\x80\"}"), Type: js}, 400, "body.display_name", "UTF-8"},
			{"invalid UTF-8 in a member name", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: []byte("{\"name\":\"x\",\"\xff\":1}"), Type: js}, 400, "body", "UTF-8"},
			{"invalid UTF-8 in an array", testenv.Req{Method: "PUT", Path: "/roles/mods/permissions", Body: []byte("{\"permissions\":[\"VIEW_CHANNEL\",\"\xfe\"]}"), Type: js}, 400, "body.permissions[1]", "UTF-8"},
			// strict JSON: what encoding/json would silently accept
			{"duplicate member", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x","name":"y"}`, Type: js}, 400, "body.name", "twice"},
			{"duplicate member, escaped", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x","n\u0061me":"y"}`, Type: js}, 400, "body.name", "twice"},
			{"duplicate nested member", testenv.Req{Method: "PUT", Path: "/profile/link", Body: `{"links":{"gh":"https://a.example","gh":"https://b.example"}}`, Type: js}, 400, "body.links.gh", "twice"},
			{"duplicate member among many", testenv.Req{Method: "PUT", Path: "/profile/link", Body: `{"links":{` + manyLinks(20) + `,"l3":"https://c.example"}}`, Type: js}, 400, "body.links.l3", "twice"},
			{"lone high surrogate", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"a\ud800b"}`, Type: js}, 400, "body.name", "surrogate"},
			{"lone low surrogate", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: `{"name":"x","topic":"\udc00"}`, Type: js}, 400, "body.topic", "surrogate"},
			{"high surrogate before a letter", testenv.Req{Method: "POST", Path: "/users", Body: `{"username":"bob","display_name":"\ud83d\u0041"}`, Type: js}, 400, "body.display_name", "surrogate"},
			{"surrogate in an array", testenv.Req{Method: "PUT", Path: "/permissions/global", Body: `{"permissions":["\udfff"]}`, Type: js}, 400, "body.permissions[0]", "surrogate"},
			{"surrogate in a member name", testenv.Req{Method: "PUT", Path: "/profile/link", Body: `{"links":{"\ud800":"https://a.example"}}`, Type: js}, 400, "body.links", "surrogate"},
			{"JSON in Latin-1", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}`, Type: "application/json; charset=latin1"}, 415, "", ""},
			{"merge patch in UTF-16", testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"name":"x"}`, Type: "application/merge-patch+json; charset=utf-16"}, 415, "", ""},
			{"gzip JSON", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}`, Type: js, Headers: map[string]string{"Content-Encoding": "gzip"}}, 415, "", ""},
			{"deflate merge patch", testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"name":"x"}`, Type: "application/merge-patch+json", Headers: map[string]string{"Content-Encoding": "deflate"}}, 415, "", ""},
			// empty bodies
			{"empty body", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: "", Type: js}, 400, "body", ""},
			{"no body at all", testenv.Req{Method: "PUT", Path: "/permissions/global"}, 400, "body", ""},
			{"whitespace body", testenv.Req{Method: "POST", Path: "/users", Body: "  \n", Type: js}, 400, "body", ""},
			{"empty object where fields are required", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{}}, 400, "body.username", "required"},
			// oversized strings and characters
			{"name of 101 characters", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": strings.Repeat("n", 101)}}, 400, "body.name", ""},
			{"name of 101 multibyte characters", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": strings.Repeat("日", 101)}}, 400, "body.name", ""},
			{"empty name", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": ""}}, 400, "body.name", ""},
			{"empty display name on create", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": "bob", "display_name": ""}}, 400, "body.display_name", ""},
			{"empty display name on replace", testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Body: map[string]any{"username": "alice", "display_name": "", "status": "active"}}, 400, "body.display_name", ""},
			{"empty token name", testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/tokens", Body: map[string]any{"name": ""}}, 400, "body.name", ""},
			{"empty role name in a patch", testenv.Req{Method: "PATCH", Path: "/roles/mods", Body: `{"name":""}`, Type: "application/merge-patch+json"}, 400, "body.name", ""},
			{"topic of 1025 characters", testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"topic":"` + strings.Repeat("t", 1025) + `"}`, Type: "application/merge-patch+json"}, 400, "body.topic", ""},
			{"NUL in a name", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": "a\x00b"}}, 400, "body.name", ""},
			{"newline in a name", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Body: map[string]any{"name": "a\nb"}}, 400, "body.name", ""},
			{"tab in a name", testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": "a\tb"}}, 400, "body.name", ""},
			{"DEL in a name", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "a\x7fb"}}, 400, "body.name", ""},
			{"C1 control in a name", testenv.Req{Method: "PATCH", Path: "/roles/mods", Body: `{"name":"a\u0085b"}`, Type: "application/merge-patch+json"}, 400, "body.name", ""},
			{"escape in a display name", testenv.Req{Method: "POST", Path: "/users", Body: map[string]any{"username": "bob", "display_name": "\x1b[31mred"}}, 400, "body.display_name", ""},
			{"NUL in a topic", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "x", "topic": "a\x00b"}}, 400, "body.topic", ""},
			{"NUL in a topic patch", testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"topic":"a\u0000b"}`, Type: "application/merge-patch+json"}, 400, "body.topic", ""},
			{"escape in a topic", testenv.Req{Method: "POST", Path: "/channels/x/create", Body: map[string]any{"name": "x", "topic": "\x1b[31mred"}}, 400, "body.topic", ""},
			{"NUL in a link URL", testenv.Req{Method: "PUT", Path: "/profile/link", Body: map[string]any{"links": map[string]any{"home": "https://example.com/a\x00b"}}}, 400, "body.links.home", "NUL"},
			{"NUL in a member name", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x","a\u0000":1}`, Type: js}, 400, "body", "NUL"},
			{"NUL in a token name", testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/tokens", Body: map[string]any{"name": "a\x00"}}, 400, "body.name", ""},
			{"position 2.0", testenv.Req{Method: "POST", Path: "/roles/mods/move", Body: `{"position":2.0}`, Type: js}, 400, "body.position", "must be an integer"},
			{"name missing", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"permissions":[]}`, Type: js}, 400, "body.name", "is required"},
			// permission names
			{"unknown permission", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: map[string]any{"name": "x", "permissions": []string{"VIEW_CHANNEL", "FLY"}}}, 400, "body.permissions[1]", `unknown permission "FLY"`},
			{"lower-case permission", testenv.Req{Method: "POST", Path: "/roles/mods/add_perm", Body: map[string]any{"permissions": []string{"view_channel"}}}, 400, "body.permissions[0]", "unknown permission"},
			{"duplicate permission", testenv.Req{Method: "PUT", Path: "/permissions/global", Body: map[string]any{"permissions": []string{"VIEW_CHANNEL", "SEND_MESSAGES", "VIEW_CHANNEL"}}}, 400, "body.permissions[2]", "duplicate"},
			{"unknown permission in deny", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{"SEND_MESSAGES", "FLY"}}}, 400, "body.deny[1]", `unknown permission "FLY"`},
			// invalid IDs
			{"uppercase role ID", testenv.Req{Method: "POST", Path: "/roles/Mods/create", Body: map[string]any{"name": "x"}}, 400, "path.roleID", ""},
			{"role ID of 65 characters", testenv.Req{Method: "POST", Path: "/roles/" + strings.Repeat("r", 65) + "/create", Body: map[string]any{"name": "x"}}, 400, "path.roleID", ""},
			{"role ID ..", testenv.Req{Method: "POST", Path: "/roles/../create", Body: map[string]any{"name": "x"}}, 400, "path.roleID", ""},
			{"role ID ../ escaped", testenv.Req{Method: "POST", Path: "/roles/..%2F/create", Body: map[string]any{"name": "x"}}, 400, "path.roleID", ""},
			{"role ID %2e%2e%2f", testenv.Req{Method: "POST", Path: "/roles/%2e%2e%2f/create", Body: map[string]any{"name": "x"}}, 400, "path.roleID", ""},
			{"channel ID %2e%2e%2f", testenv.Req{Method: "POST", Path: "/channels/%2e%2e%2fops/create", Body: map[string]any{"name": "x"}}, 400, "path.channelID", ""},
			{"channel ID with a slash", testenv.Req{Method: "POST", Path: "/channels/a%2Fb/create", Body: map[string]any{"name": "x"}}, 400, "path.channelID", ""},
			{"channel ID with NUL", testenv.Req{Method: "GET", Path: "/channels/ops%00"}, 400, "path.channelID", ""},
			{"channel ID starting with -", testenv.Req{Method: "GET", Path: "/channels/-ops"}, 400, "path.channelID", ""},
			{"user ID not a UUID", testenv.Req{Method: "GET", Path: "/users/alice"}, 400, "path.userID", ""},
			{"user ID in capitals", testenv.Req{Method: "GET", Path: "/users/" + strings.ToUpper(alice.ID)}, 400, "path.userID", ""},
			{"user ID ../", testenv.Req{Method: "DELETE", Path: "/users/..%2F"}, 400, "path.userID", ""},
			{"token ID not a UUID", testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/tokens/%2e%2e%2f"}, 400, "path.tokenID", ""},
			{"target_id not an ID", testenv.Req{Method: "POST", Path: "/channels/ops/permissions", Body: map[string]any{"target_type": "role", "target_id": "../mods", "allow": []string{"SEND_MESSAGES"}, "deny": []string{}}}, 400, "body.target_id", ""},
			// headers and queries
			{"audit reason over 512", testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": "x"}, Headers: map[string]string{"X-Audit-Reason": strings.Repeat("r", 513)}}, 400, "header.X-Audit-Reason", ""},
			{"If-Match over 256", testenv.Req{Method: "POST", Path: "/roles/mods/rename", Body: map[string]any{"name": "x"}, Headers: map[string]string{"If-Match": `"` + strings.Repeat("1", 300) + `"`}}, 400, "header.If-Match", ""},
			{"limit abc", testenv.Req{Method: "GET", Path: "/users?limit=abc"}, 400, "query.limit", ""},
			{"limit given twice", testenv.Req{Method: "GET", Path: "/users?limit=1&limit=2"}, 400, "query.limit", ""},
			{"attachmentID given twice", testenv.Req{Method: "GET", Path: "/channels/ops/attachment?attachmentID=a&attachmentID=b"}, 400, "query.attachmentID", ""},
			{"explain not a bool", testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/permissions?explain=yes"}, 400, "query.explain", ""},
			// size and media type
			{"body over 1 MiB", testenv.Req{Method: "POST", Path: "/users", Body: `{"username":"bob","display_name":"` + strings.Repeat("d", 1<<20) + `"}`, Type: js}, 413, "", ""},
			{"body over 1 MiB of whitespace", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"` + strings.Repeat(" ", 1<<20) + `}`, Type: js}, 413, "", ""},
			{"text/plain", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}`, Type: "text/plain"}, 415, "", ""},
			{"application/xml", testenv.Req{Method: "POST", Path: "/users", Body: `<user/>`, Type: "application/xml"}, 415, "", ""},
			{"form encoded", testenv.Req{Method: "POST", Path: "/users", Body: `username=bob`, Type: "application/x-www-form-urlencoded"}, 415, "", ""},
			{"no Content-Type", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: []byte(`{"name":"x"}`)}, 415, "", ""},
			{"malformed Content-Type", testenv.Req{Method: "POST", Path: "/roles/x/create", Body: `{"name":"x"}`, Type: "application/"}, 415, "", ""},
			{"merge patch where JSON is expected", testenv.Req{Method: "PUT", Path: "/profile/link", Body: `{"links":{}}`, Type: "application/merge-patch+json"}, 415, "", ""},
			{"JSON where a merge patch is expected", testenv.Req{Method: "PATCH", Path: "/channels/ops", Body: `{"name":"x"}`, Type: js}, 415, "", ""},
		}
		before := e2eState(t, e, alice)
		seq := e2eSeq(t, e)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.req.Token = e.Owner
				res := e.Do(tc.req)
				code := map[int]string{400: "validation", 404: "not_found", 413: "payload_too_large", 415: "unsupported_media_type"}[tc.status]
				p := e2eProblem(t, res, tc.status, code)
				if tc.location != "" {
					if msg := e2eField(t, p, tc.location); !strings.Contains(msg, tc.message) {
						t.Errorf("message at %s is %q, want it to contain %q", tc.location, msg, tc.message)
					}
				}
				if tc.status == 400 && (p.Errors == nil || len(*p.Errors) == 0) {
					t.Errorf("a 400 without errors: %s", res.Body)
				}
			})
		}
		if after := e2eState(t, e, alice); after != before {
			t.Errorf("bad input changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
	})
}

// manyLinks is n profile links, l0 to l(n-1), as JSON members.
func manyLinks(n int) string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf(`"l%d":"https://%d.example"`, i, i)
	}
	return strings.Join(m, ",")
}

// Names are counted in characters, not bytes.
func TestBadInputNamesInCharacters(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for _, name := range []string{strings.Repeat("日", 100), strings.Repeat("é", 100), strings.Repeat("😀", 100), strings.Repeat("n", 100)} {
			res := e.Do(testenv.Req{Method: "POST", Path: "/channels/c/create", Token: e.Owner, Body: map[string]any{"name": name}})
			if res.Status != http.StatusCreated || res.Map(t)["name"] != name {
				t.Errorf("channel named %d × %q: %s", 100, []rune(name)[0], res)
			}
			res = e.Do(testenv.Req{Method: "POST", Path: "/channels/c/rename", Token: e.Owner, Body: map[string]any{"name": name + "x"}})
			e2eProblem(t, res, http.StatusBadRequest, "validation")
			e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/c/delete", Token: e.Owner})
			res = e.Do(testenv.Req{Method: "POST", Path: "/roles/r/create", Token: e.Owner, Body: map[string]any{"name": name}})
			if res.Status != http.StatusCreated || res.Map(t)["name"] != name {
				t.Errorf("role named %q: %s", name, res)
			}
			if got := e2eGet(t, e, "/roles/r")["name"]; got != name {
				t.Errorf("role name read back %q", got)
			}
			e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/r/delete", Token: e.Owner})
		}
		// A topic may hold tabs and line breaks.
		res := e.Do(testenv.Req{Method: "POST", Path: "/channels/t/create", Token: e.Owner, Body: map[string]any{"name": "t", "topic": "line 1\r\nline 2\tend"}})
		if res.Status != http.StatusCreated || res.Map(t)["topic"] != "line 1\r\nline 2\tend" {
			t.Errorf("a topic with tabs and line breaks: %s", res)
		}
		// Visible characters are fine, and so are spaces of every kind and
		// combining marks (invisible ones are not:
		// TestNamesRefuseInvisibleCharacters).
		res = e.Do(testenv.Req{Method: "POST", Path: "/channels/u/create", Token: e.Owner, Body: map[string]any{"name": "a\u00a0b\u3000e\u0301"}})
		if res.Status != http.StatusCreated {
			t.Errorf("non-control characters: %s", res)
		}
	})
}

// Every operation of the contract: no token is a 401 (and carries the
// deprecation headers on legacy operations), an invalid path parameter a
// 400 naming it, and for JSON bodies a wrong type is a 415, an oversized
// body a 413 and an empty one a 400; none changes anything.
func TestBadInputEveryOperation(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, alice := e2eBadInputEnv(t, kind)
		tok := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e.Owner}).Map(t)["items"].([]any)[0].(map[string]any)["id"].(string)
		ids := map[string]string{"channelID": "ops", "roleID": "mods", "userID": alice.ID, "tokenID": tok,
			"webhookID": "0192f1a0-0000-7000-8000-000000000000", "deliveryID": "msg_1", "seq": "1"}
		bad := map[string]string{"channelID": "Bad..ID", "roleID": "Bad..ID", "userID": "not-a-uuid", "tokenID": "not-a-uuid",
			"webhookID": "not-a-uuid", "deliveryID": "a.b", "seq": "abc"}
		param := regexp.MustCompile(`\{([A-Za-z]+)\}`)
		before := e2eState(t, e, alice)
		seq := e2eSeq(t, e)
		ops := e2eContractOps(t)
		for _, key := range e2eContractPaths(t) {
			op := ops[key]
			t.Run(op.ID, func(t *testing.T) {
				path := e2eFill(op, ids)
				if !op.Public {
					for _, token := range []string{"", "gh_not_a_token", strings.Repeat("x", 600)} {
						res := e.Do(testenv.Req{Method: op.Method, Path: path, Token: token})
						if op.Method == "HEAD" {
							if res.Status != http.StatusUnauthorized {
								t.Errorf("HEAD without a valid token: %d", res.Status)
							}
							continue
						}
						e2eProblem(t, res, http.StatusUnauthorized, "unauthenticated")
						if op.Deprecated {
							link := res.Header.Get("Link")
							if !e2eDeprecation.MatchString(res.Header.Get("Deprecation")) || !strings.HasPrefix(link, "</api/") ||
								!strings.HasSuffix(link, `>; rel="successor-version"`) {
								t.Errorf("401 of a legacy operation: Deprecation %q Link %q", res.Header.Get("Deprecation"), link)
							}
						}
					}
				}
				for _, m := range param.FindAllStringSubmatch(op.Path, -1) {
					name := m[1]
					withBad := map[string]string{}
					for k, v := range ids {
						withBad[k] = v
					}
					withBad[name] = bad[name]
					req := testenv.Req{Method: op.Method, Path: e2eFill(op, withBad), Token: e.Owner}
					if len(op.BodyTypes) > 0 && !strings.Contains(op.BodyTypes[0], "*") {
						req.Body, req.Type = `{}`, op.BodyTypes[0] // a body that parses, so the parameters are checked
					}
					res := e.Do(req)
					if op.Method == "HEAD" {
						if res.Status != http.StatusBadRequest {
							t.Errorf("HEAD with a bad %s: %d", name, res.Status)
						}
						continue
					}
					p := e2eProblem(t, res, http.StatusBadRequest, "validation")
					e2eField(t, p, "path."+name)
				}
				if len(op.BodyTypes) == 0 || strings.Contains(op.BodyTypes[0], "*") {
					return
				}
				want := op.BodyTypes[0]
				res := e.Do(testenv.Req{Method: op.Method, Path: path, Token: e.Owner, Body: `{}`, Type: "text/plain"})
				e2eProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
				res = e.Do(testenv.Req{Method: op.Method, Path: path, Token: e.Owner, Body: `{"x":"` + strings.Repeat("x", 1<<20) + `"}`, Type: want})
				e2eProblem(t, res, http.StatusRequestEntityTooLarge, "payload_too_large")
				res = e.Do(testenv.Req{Method: op.Method, Path: path, Token: e.Owner, Body: ``, Type: want})
				p := e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, "body")
				res = e.Do(testenv.Req{Method: op.Method, Path: path, Token: e.Owner, Body: `{"x":1} {}`, Type: want})
				p = e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, "body")
			})
		}
		if after := e2eState(t, e, alice); after != before {
			t.Errorf("bad input changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
	})
}

// A JSON body that cannot be read (a malformed chunked encoding, or fewer
// bytes than its Content-Length) is the client's fault: a 400, not a 500.
func TestBadInputUnreadableBody(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e, alice := e2eBadInputEnv(t, kind)
		host := strings.TrimPrefix(e.URL, "http://")
		before := e2eState(t, e, alice)
		seq := e2eSeq(t, e)
		head := "POST /api/channels/ops/rename HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + e.Owner +
			"\r\nContent-Type: application/json\r\n"
		for _, tc := range []struct{ name, request string }{
			{"malformed chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"},
			{"shorter than Content-Length", head + "Content-Length: 100\r\n\r\n{\"name\":"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				conn, err := net.Dial("tcp", host)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.Write([]byte(tc.request)); err != nil {
					t.Fatal(err)
				}
				_ = conn.(*net.TCPConn).CloseWrite() // the client sends no more
				_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("read the answer: %v", err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				res := &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
				p := e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, "body")
			})
		}
		if after := e2eState(t, e, alice); after != before {
			t.Errorf("an unreadable body changed state:\nbefore %s\nafter  %s", before, after)
		}
		e2eNoEvent(t, e, seq)
	})
}

// TestBadInputHeaderGivenTwice: a header the contract declares once, sent
// twice, is a 400 at its location (the validator reads only the first
// value; nothing is changed).
func TestBadInputHeaderGivenTwice(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("mods")
		seq := e2eSeq(t, e)
		req, err := http.NewRequest("POST", e.URL+"/api/roles/mods/rename", strings.NewReader(`{"name":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.Owner)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("If-Match", `"1"`)
		req.Header.Add("If-Match", `"2"`)
		resp, err := e.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		p := e2eProblem(t, &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, http.StatusBadRequest, "validation")
		if msg := e2eField(t, p, "header.If-Match"); !strings.Contains(msg, "more than once") {
			t.Fatalf("header.If-Match: %q", msg)
		}
		e2eNoEvent(t, e, seq)
	})
}

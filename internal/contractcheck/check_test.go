package contractcheck_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/contractcheck"
	"github.com/guildhall/guildhall/internal/httpapi"
)

// The checker against the real contract, with handlers that answer what
// each case says: what it must catch, and what it must let through.
func TestChecker(t *testing.T) {
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	c, err := contractcheck.New(doc, httpapi.SchemaOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	const (
		problem404 = `{"type":"/problems/not_found","title":"Not found","status":404,"code":"not_found","request_id":"r"}`
		problem405 = `{"type":"/problems/method_not_allowed","title":"Method not allowed","status":405,"code":"method_not_allowed","request_id":"r"}`
		problem400 = `{"type":"/problems/validation","title":"Request is invalid","status":400,"code":"validation","request_id":"r"}`
		roles      = `{"items":[],"next_cursor":null}`
		event      = `{"seq":7,"type":"role.created","actor_id":null,"subject":"role:mods","data":{},"reason":null,"created_at":"2026-11-22T08:15:30.123456Z"}`
	)
	type answer struct {
		status int
		header map[string]string
		body   string
	}
	for _, tc := range []struct {
		name, method, path string
		answer             answer
		want               []string // substrings of the findings; none for a conforming answer
	}{
		{"conforming", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json", "X-Request-Id": "r", "RateLimit-Limit": "40"}, roles}, nil},
		{"conforming HEAD", "HEAD", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json", "X-Request-Id": "r"}, ""}, nil},
		{"outside the contract", "GET", "/metrics", answer{200, map[string]string{"X-Anything": "1"}, "x"}, nil},
		{"undeclared header", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json", "X-Secret": "1"}, roles},
			[]string{"listRoles 200", "does not declare", "X-Secret"}},
		{"undeclared status", "GET", "/api/roles", answer{418, map[string]string{"Content-Type": "application/problem+json"}, problem400},
			[]string{"status 418 is not declared for listRoles"}},
		{"header of the wrong type", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json", "RateLimit-Limit": "many"}, roles},
			[]string{"RateLimit-Limit", "not an integer"}},
		{"body off its schema", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json"}, `{"items":[{"id":"NOT AN ID"}],"next_cursor":null}`},
			[]string{"listRoles 200"}},
		{"undeclared media type", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "text/html"}, "<p>"},
			[]string{`Content-Type "text/html" is not declared`}},
		{"error that is not a problem", "GET", "/api/roles/mods", answer{404, map[string]string{"Content-Type": "application/json"}, `{"error":"no"}`},
			[]string{"application/problem+json"}},
		{"problem with another status", "GET", "/api/roles/mods", answer{404, map[string]string{"Content-Type": "application/problem+json"}, problem400},
			[]string{"the problem says status 400"}},
		{"body on a 204", "DELETE", "/api/profile/link", answer{204, map[string]string{"Content-Type": "text/plain"}, "gone"},
			[]string{"declares no body"}},
		{"unknown path as 404", "GET", "/api/nope", answer{404, map[string]string{"Content-Type": "application/problem+json"}, problem404}, nil},
		{"final parameter over a slash", "GET", "/api/users/u/roles/a/b", answer{405, map[string]string{"Content-Type": "application/problem+json", "Allow": "DELETE, OPTIONS, POST"}, problem405},
			[]string{"must be 404, not 405"}},
		{"empty parameter", "POST", "/api/roles//create", answer{400, map[string]string{"Content-Type": "application/problem+json"}, problem400},
			[]string{"must be 404, not 400"}},
		{"wrong method", "DELETE", "/api/roles", answer{405, map[string]string{"Content-Type": "application/problem+json", "Allow": "GET, HEAD, OPTIONS"}, problem405}, nil},
		{"wrong method, wrong Allow", "DELETE", "/api/roles", answer{405, map[string]string{"Content-Type": "application/problem+json", "Allow": "GET"}, problem405},
			[]string{"Allow is"}},
		{"wrong method answered 404", "DELETE", "/api/roles", answer{404, map[string]string{"Content-Type": "application/problem+json"}, problem404},
			[]string{"must be 405, not 404"}},
		{"OPTIONS", "OPTIONS", "/api/roles", answer{204, map[string]string{"Allow": "OPTIONS, GET, HEAD"}, ""}, nil},
		{"OPTIONS answered 200", "OPTIONS", "/api/roles", answer{200, map[string]string{"Allow": "OPTIONS, GET, HEAD"}, ""},
			[]string{"OPTIONS must answer 204"}},
		{"CORS headers", "GET", "/api/roles", answer{200, map[string]string{"Content-Type": "application/json", "Access-Control-Allow-Origin": "https://a.example", "Vary": "Origin"}, roles}, nil},
		{"event stream", "GET", "/api/events", answer{200, map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
			": stream open\nretry: 2000\n\nid: 7\nevent: role.created\ndata: " + event + "\n\n"}, nil},
		{"event stream cut short", "GET", "/api/events", answer{200, map[string]string{"Content-Type": "text/event-stream"},
			"id: 7\nevent: role.created\ndata: " + event + "\n\nid: 8\nevent: role.cr"}, nil},
		{"event off its schema", "GET", "/api/events", answer{200, map[string]string{"Content-Type": "text/event-stream"},
			"id: 7\nevent: role.created\ndata: {\"seq\":7}\n\n"}, []string{"does not match Event"}},
		{"event whose id is not its seq", "GET", "/api/events", answer{200, map[string]string{"Content-Type": "text/event-stream"},
			"id: 8\nevent: role.created\ndata: " + event + "\n\n"}, []string{"differ from its data"}},
		{"bytes of any type", "GET", "/api/channels/ops/attachment?attachmentID=a.bin", answer{200, map[string]string{"Content-Type": "application/x-anything"}, "\x00\x01"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found []string
			h := c.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.answer.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.answer.status)
				_, _ = io.WriteString(w, tc.answer.body)
			}), func(msg string) { found = append(found, msg) })
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
			if len(tc.want) == 0 {
				if len(found) != 0 {
					t.Fatalf("a conforming answer was reported: %s", found)
				}
				return
			}
			if len(found) != 1 {
				t.Fatalf("%d reports, want 1: %s", len(found), found)
			}
			for _, w := range tc.want {
				if !strings.Contains(found[0], w) {
					t.Errorf("report %q does not say %q", found[0], w)
				}
			}
			if !strings.Contains(found[0], tc.method+" "+tc.path) {
				t.Errorf("report %q does not name the request", found[0])
			}
		})
	}
}

// The client-side check sees what the server-side one sees, and leaves the
// body readable.
func TestTransport(t *testing.T) {
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	c, err := contractcheck.New(doc, httpapi.SchemaOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/roles" {
			w.Header().Set("X-Powered-By", "hope")
		}
		_, _ = io.WriteString(w, `{"items":[],"next_cursor":null}`)
	}))
	defer srv.Close()
	var found []string
	client := &http.Client{Transport: c.Transport(http.DefaultTransport, func(msg string) { found = append(found, msg) })}
	for _, path := range []string{"/api/roles", "/api/users"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != `{"items":[],"next_cursor":null}` {
			t.Errorf("%s: the body read back is %q", path, body)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "GET /api/roles") || !strings.Contains(found[0], "X-Powered-By") {
		t.Errorf("reports %q, want one about X-Powered-By on GET /api/roles", found)
	}
}

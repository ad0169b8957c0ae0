package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
	"github.com/guildhall/guildhall/openapi"
)

// Unknown routes, wrong methods and the problem-type pages.
func TestProblemsRoutes(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)

		t.Run("unknown route is a 404 problem", func(t *testing.T) {
			for _, path := range []string{"/nope", "/roles/mods/fly", "/channels/ops/permissions/extra"} {
				res := e.Do(testenv.Req{Method: "GET", Path: path, Token: e.Owner})
				p := e2eProblem(t, res, http.StatusNotFound, "not_found")
				if p.Instance == nil || *p.Instance != "/api"+path {
					t.Errorf("%s: instance %v, want /api%s", path, p.Instance, path)
				}
			}
			// Also without a token: the route does not exist, so no 401.
			e2eProblem(t, e.Do(testenv.Req{Method: "GET", Path: "/nope"}), http.StatusNotFound, "not_found")
		})

		t.Run("wrong method is a 405 problem with Allow", func(t *testing.T) {
			cases := []struct {
				method, path string
				allow        []string // every method the route takes
			}{
				{"DELETE", "/roles", []string{"GET"}},
				{"PUT", "/roles/mods/create", []string{"POST"}},
				{"DELETE", "/channels/ops", []string{"GET", "PATCH"}},
				{"POST", "/users/0192f1a0-0000-7000-8000-000000000000", []string{"GET", "PUT", "DELETE"}},
				{"POST", "/profile/link", []string{"GET", "PUT", "PATCH", "DELETE"}},
				{"PATCH", "/permissions/global", []string{"GET", "PUT"}},
			}
			for _, tc := range cases {
				t.Run(tc.method+" "+tc.path, func(t *testing.T) {
					res := e.Do(testenv.Req{Method: tc.method, Path: tc.path, Token: e.Owner})
					e2eProblem(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
					allow := res.Header.Get("Allow")
					if allow == "" {
						t.Fatalf("no Allow header")
					}
					got := map[string]bool{}
					for _, m := range strings.Split(allow, ",") {
						got[strings.TrimSpace(m)] = true
					}
					for _, m := range tc.allow {
						if !got[m] {
							t.Errorf("Allow %q lacks %s", allow, m)
						}
					}
					if got[tc.method] {
						t.Errorf("Allow %q lists the refused method %s", allow, tc.method)
					}
				})
			}
		})

		t.Run("problem pages describe every code", func(t *testing.T) {
			codes := []api.ProblemCode{api.ProblemCodeValidation, api.ProblemCodeUnauthenticated, api.ProblemCodeForbidden,
				api.ProblemCodeNotFound, api.ProblemCodeMethodNotAllowed, api.ProblemCodeConflict, api.ProblemCodeLimitExceeded,
				api.ProblemCodePreconditionFailed, api.ProblemCodePayloadTooLarge, api.ProblemCodeUnsupportedMediaType,
				api.ProblemCodeRangeNotSatisfiable, api.ProblemCodeRateLimited, api.ProblemCodeInternal,
				api.ProblemCodeRequestTimeout, api.ProblemCodeUnavailable, api.ProblemCodeInsufficientStorage}
			for _, code := range codes {
				res := e2eRaw(t, e, "GET", "/problems/"+string(code))
				if res.Status != http.StatusOK {
					t.Errorf("/problems/%s: status %d", code, res.Status)
					continue
				}
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
					t.Errorf("/problems/%s: Content-Type %q", code, ct)
				}
				if !bytes.Contains(res.Body, []byte(string(code))) || !bytes.Contains(res.Body, []byte("<h1>")) {
					t.Errorf("/problems/%s: body does not describe the code: %s", code, res.Body)
				}
			}
			res := e2eRaw(t, e, "GET", "/problems/no_such_code")
			e2eProblem(t, res, http.StatusNotFound, "not_found")
		})

		t.Run("the type of every problem answered is a page", func(t *testing.T) {
			// Provoke several codes and follow their type.
			answers := []*testenv.Response{
				e.Do(testenv.Req{Method: "GET", Path: "/roles"}),                                                             // 401
				e.Do(testenv.Req{Method: "GET", Path: "/roles/nope", Token: e.Owner}),                                        // 404
				e.Do(testenv.Req{Method: "GET", Path: "/users?limit=0", Token: e.Owner}),                                     // 400
				e.Do(testenv.Req{Method: "DELETE", Path: "/roles", Token: e.Owner}),                                          // 405
				e.Do(testenv.Req{Method: "PUT", Path: "/permissions/global", Token: e.Owner, Body: "x", Type: "text/plain"}), // 415
			}
			for _, res := range answers {
				var p api.Problem
				res.JSON(t, &p)
				page := e2eRaw(t, e, "GET", p.Type)
				if page.Status != http.StatusOK {
					t.Errorf("type %s of a %d answers %d", p.Type, res.Status, page.Status)
				}
			}
		})
	})
}

// Every error of every kind is problem+json: Echo's default {"message": ...}
// never appears.
func TestProblemsNeverEchoDefault(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("ops")
		alice := e.NewUser("alice")
		big := `{"name":"` + strings.Repeat("a", 2<<20) + `"}`
		cases := []struct {
			name string
			req  testenv.Req
			want int
		}{
			{"no token", testenv.Req{Method: "GET", Path: "/roles"}, 401},
			{"bad scheme", testenv.Req{Method: "GET", Path: "/roles", Headers: map[string]string{"Authorization": "Basic YTpi"}}, 401},
			{"unknown token", testenv.Req{Method: "GET", Path: "/roles", Token: "gh_nope"}, 401},
			{"forbidden", testenv.Req{Method: "POST", Path: "/roles/x/create", Token: alice.Token, Body: map[string]any{"name": "x"}}, 403},
			{"not found", testenv.Req{Method: "GET", Path: "/channels/none", Token: e.Owner}, 404},
			{"no route", testenv.Req{Method: "GET", Path: "/nowhere", Token: e.Owner}, 404},
			{"no route outside /api", testenv.Req{Method: "GET", Path: "/../nowhere"}, 404},
			{"wrong method", testenv.Req{Method: "PATCH", Path: "/roles", Token: e.Owner}, 405},
			{"conflict", testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: e.Owner, Body: map[string]any{"name": "x"}}, 409},
			{"stale", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: e.Owner, Body: map[string]any{"name": "x"},
				Headers: map[string]string{"If-Match": `"999"`}}, 412},
			{"too large", testenv.Req{Method: "POST", Path: "/channels/big/create", Token: e.Owner, Body: big, Type: "application/json"}, 413},
			{"media type", testenv.Req{Method: "POST", Path: "/channels/x/create", Token: e.Owner, Body: `{"name":"x"}`, Type: "text/plain"}, 415},
			{"invalid JSON", testenv.Req{Method: "POST", Path: "/channels/x/create", Token: e.Owner, Body: `{"name":`, Type: "application/json"}, 400},
			{"bad query", testenv.Req{Method: "GET", Path: "/channels?limit=abc", Token: e.Owner}, 400},
			{"bad path", testenv.Req{Method: "GET", Path: "/channels/UPPER", Token: e.Owner}, 400},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := e.Do(tc.req)
				if res.Status != tc.want {
					t.Fatalf("status %d, want %d; body %s", res.Status, tc.want, res.Body)
				}
				res.Problem(t)
				var m map[string]any
				res.JSON(t, &m)
				if _, ok := m["message"]; ok {
					t.Errorf("Echo's default error body leaked: %s", res.Body)
				}
			})
		}
	})
}

// The contract is served byte for byte, and as JSON with the same paths.
func TestProblemsMetaContract(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		want := e2eContractYAML(t)

		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/openapi.yaml"}) // no token needed
		if !bytes.Equal(res.Body, want) {
			t.Fatalf("GET /openapi.yaml: %d bytes differ from openapi/openapi.yaml (%d bytes)", len(res.Body), len(want))
		}
		if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, "yaml") {
			t.Errorf("Content-Type %q", ct)
		}
		typed, err := e.Client("").GetOpenAPIYAMLWithResponse(t.Context())
		if err != nil {
			t.Fatalf("typed client: %v", err)
		}
		if typed.StatusCode() != http.StatusOK || !bytes.Equal(typed.Body, want) || typed.YAML200 == nil || (*typed.YAML200)["openapi"] != "3.0.3" {
			t.Fatalf("typed client: status %d, %d bytes, decoded %v", typed.StatusCode(), len(typed.Body), typed.YAML200 != nil)
		}

		res = e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/openapi.json"})
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q", ct)
		}
		var doc struct {
			OpenAPI string                    `json:"openapi"`
			Paths   map[string]map[string]any `json:"paths"`
		}
		res.JSON(t, &doc)
		if doc.OpenAPI != "3.0.3" {
			t.Errorf("openapi %q", doc.OpenAPI)
		}
		yamlPaths := e2eContractPaths(t)
		var jsonPaths []string
		for p, item := range doc.Paths {
			for m := range item {
				if m != "parameters" {
					jsonPaths = append(jsonPaths, strings.ToUpper(m)+" "+p)
				}
			}
		}
		slices.Sort(jsonPaths)
		if !slices.Equal(jsonPaths, yamlPaths) {
			t.Errorf("JSON operations differ from YAML:\njson %v\nyaml %v", jsonPaths, yamlPaths)
		}
	})
}

// ---------------------------------------------------------------- helpers
// Shared by the end-to-end tests of this package (prefixed e2e so they do not
// collide with other test files' helpers).

// e2eProblem checks that res is a problem of the status and code given.
func e2eProblem(t testing.TB, res *testenv.Response, status int, code string) api.Problem {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status %d, want %d (%s); body %s", res.Status, status, code, res.Body)
	}
	p := res.Problem(t)
	if string(p.Code) != code {
		t.Fatalf("code %q, want %q; body %s", p.Code, code, res.Body)
	}
	var m map[string]any
	res.JSON(t, &m)
	if _, ok := m["message"]; ok {
		t.Fatalf("Echo's default error body leaked: %s", res.Body)
	}
	return p
}

// e2eField returns the message of the problem's error at location, failing
// when there is none.
func e2eField(t testing.TB, p api.Problem, location string) string {
	t.Helper()
	if p.Errors != nil {
		for _, f := range *p.Errors {
			if f.Location == location {
				return f.Message
			}
		}
	}
	b, _ := json.Marshal(p.Errors)
	t.Fatalf("no error at %s; errors %s", location, b)
	return ""
}

// e2eETag returns the ETag of an answer, failing when it has none.
func e2eETag(t testing.TB, res *testenv.Response) string {
	t.Helper()
	tag := res.Header.Get("ETag")
	if tag == "" || !strings.HasPrefix(tag, `"`) || !strings.HasSuffix(tag, `"`) {
		t.Fatalf("ETag %q is not a strong tag; %s", tag, res)
	}
	return tag
}

// e2eIfMatch is the header set of a conditional request.
func e2eIfMatch(tag string) map[string]string { return map[string]string{"If-Match": tag} }

// e2eSeq returns the newest audit event's seq (0 for an empty log).
func e2eSeq(t testing.TB, e *testenv.Env) int64 {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1", Token: e.Owner})
	var l struct {
		Items []struct {
			Seq  int64  `json:"seq"`
			Type string `json:"type"`
		} `json:"items"`
	}
	res.JSON(t, &l)
	if len(l.Items) == 0 {
		return 0
	}
	return l.Items[0].Seq
}

// e2eNoEvent fails when an audit event newer than seq exists.
func e2eNoEvent(t testing.TB, e *testenv.Env, seq int64) {
	t.Helper()
	if now := e2eSeq(t, e); now != seq {
		res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=5", Token: e.Owner})
		t.Fatalf("an audit event appeared (seq %d -> %d): %s", seq, now, res.Body)
	}
}

// e2eEvents returns the types of the events newer than seq, oldest first.
func e2eEvents(t testing.TB, e *testenv.Env, seq int64) []string {
	t.Helper()
	res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=200", Token: e.Owner})
	var l struct {
		Items []struct {
			Seq  int64  `json:"seq"`
			Type string `json:"type"`
		} `json:"items"`
	}
	res.JSON(t, &l)
	var out []string
	for i := len(l.Items) - 1; i >= 0; i-- {
		if l.Items[i].Seq > seq {
			out = append(out, l.Items[i].Type)
		}
	}
	return out
}

// e2eMember creates a user holding a fresh role (ID "<name>-role") with the
// permissions given.
func e2eMember(t testing.TB, e *testenv.Env, name string, perms ...string) testenv.User {
	t.Helper()
	u := e.NewUser(name)
	e.NewRole(name+"-role", perms...)
	e.Assign(u.ID, name+"-role")
	return u
}

// e2eRaw sends a request outside /api (the problem pages).
func e2eRaw(t testing.TB, e *testenv.Env, method, path string) *testenv.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// e2eGet reads a resource as the owner and decodes it.
func e2eGet(t testing.TB, e *testenv.Env, path string) map[string]any {
	t.Helper()
	return e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner}).Map(t)
}

// e2eJSON is the canonical encoding of v, for comparing decoded answers.
func e2eJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// e2eContractYAML is the contract on disk, which must also be the embedded one.
func e2eContractYAML(t testing.TB) []byte {
	t.Helper()
	disk, err := os.ReadFile("../../openapi/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(disk, openapi.YAML) {
		t.Fatal("the embedded contract differs from openapi/openapi.yaml")
	}
	return disk
}

// e2eOperation is one operation of the contract.
type e2eOperation struct {
	Method, Path, ID string
	BodyTypes        []string // media types of the request body
	Public           bool     // security: []
	Deprecated       bool
}

// e2eContractOps lists the contract's operations, keyed "METHOD /path".
func e2eContractOps(t testing.TB) map[string]e2eOperation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openapi.YAML, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]e2eOperation{}
	for p, item := range doc.Paths {
		for m, node := range item {
			if m == "parameters" {
				continue
			}
			var op struct {
				ID          string                            `yaml:"operationId"`
				Security    *[]map[string]any                 `yaml:"security"`
				Deprecated  bool                              `yaml:"deprecated"`
				RequestBody *struct{ Content map[string]any } `yaml:"requestBody"`
			}
			if err := node.Decode(&op); err != nil {
				t.Fatal(err)
			}
			o := e2eOperation{Method: strings.ToUpper(m), Path: p, ID: op.ID, Deprecated: op.Deprecated,
				Public: op.Security != nil && len(*op.Security) == 0}
			if op.RequestBody != nil {
				for ct := range op.RequestBody.Content {
					o.BodyTypes = append(o.BodyTypes, ct)
				}
				slices.Sort(o.BodyTypes)
			}
			out[o.Method+" "+p] = o
		}
	}
	return out
}

// e2eContractPaths is the sorted list of e2eContractOps' keys.
func e2eContractPaths(t testing.TB) []string {
	t.Helper()
	var out []string
	for k := range e2eContractOps(t) {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// e2eFill puts IDs into an operation's path (and the attachment ID, which
// is a required query parameter).
func e2eFill(op e2eOperation, ids map[string]string) string {
	p := op.Path
	for k, v := range ids {
		p = strings.ReplaceAll(p, "{"+k+"}", v)
	}
	if strings.HasSuffix(p, "/attachment") {
		p += "?attachmentID=a.txt"
	}
	return p
}

// docs/design.md §11: 401 → 400 → 404 → 403 → 412 → 409.
func TestProblemsOrderOfChecks(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		plain := e.NewUser("plain")
		alice := e.NewUser("alice")
		e.NewChannel("ops")
		e.NewRole("mods")
		ghost := "0192f1a0-0000-7000-8000-000000000000"
		stale := e2eIfMatch(`"999"`)
		cases := []struct {
			name   string
			req    testenv.Req
			status int
			code   string
		}{
			{"401 before 400", testenv.Req{Method: "POST", Path: "/roles/BAD/create", Body: map[string]any{"name": 1}}, 401, "unauthenticated"},
			{"401 before 404", testenv.Req{Method: "GET", Path: "/channels/none"}, 401, "unauthenticated"},
			{"400 before 404", testenv.Req{Method: "POST", Path: "/channels/none/rename", Token: e.Owner, Body: map[string]any{"name": ""}}, 400, "validation"},
			{"400 before 403", testenv.Req{Method: "POST", Path: "/roles/x/create", Token: plain.Token, Body: map[string]any{"name": "x", "permissions": []string{"FLY"}}}, 400, "validation"},
			{"404 before 403", testenv.Req{Method: "POST", Path: "/channels/none/rename", Token: plain.Token, Body: map[string]any{"name": "x"}}, 404, "not_found"},
			{"404 before 403 on roles", testenv.Req{Method: "POST", Path: "/roles/none/delete", Token: plain.Token}, 404, "not_found"},
			{"404 before 403 on users", testenv.Req{Method: "DELETE", Path: "/users/" + ghost, Token: plain.Token}, 404, "not_found"},
			{"404 before 412", testenv.Req{Method: "POST", Path: "/roles/none/rename", Token: e.Owner, Body: map[string]any{"name": "x"}, Headers: stale}, 404, "not_found"},
			{"403 before 412", testenv.Req{Method: "POST", Path: "/channels/ops/rename", Token: plain.Token, Body: map[string]any{"name": "x"}, Headers: stale}, 403, "forbidden"},
			{"403 before 409", testenv.Req{Method: "POST", Path: "/channels/ops/create", Token: plain.Token, Body: map[string]any{"name": "x"}}, 403, "forbidden"},
			{"412 before 409", testenv.Req{Method: "PUT", Path: "/users/" + alice.ID, Token: e.Owner, Headers: stale,
				Body: map[string]any{"username": "plain", "display_name": "x", "status": "active"}}, 412, "precondition_failed"},
		}
		seq := e2eSeq(t, e)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				e2eProblem(t, e.Do(tc.req), tc.status, tc.code)
			})
		}
		e2eNoEvent(t, e, seq)
	})
}

package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// FuzzRequestBodies sends arbitrary bodies to operations that parse JSON:
// whatever arrives, the answer is never a 5xx, every refusal is a
// problem+json, and a refused request changes nothing.
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Mods","permissions":["MANAGE_MESSAGES"],"color":"#3498db"}`,
		`{"name":"x","permissions":["FLY"]}`,
		`{"target_type":"role","target_id":"mods","allow":["VIEW_CHANNEL"],"deny":[]}`,
		`{"links":{"gh":"https://github.com/a","x":null}}`,
		`{"name":"x","a":1,"b":2,"c":3}`, `{"name":"x","a":1,"a":2}`, `{"links":{"x":1,"y":2},"z":[1,2]}`,
		`{"name":"a"} trailing`, "\xff\xfe", `{"name":"` + "\u0000" + `"}`, `[]`, `null`, ``,
	} {
		f.Add(seed, uint8(0))
		f.Add(seed, uint8(1))
		f.Add(seed, uint8(2))
	}
	e := testenv.Start(f, testenv.SQLite)
	e.NewRole("mods", "MANAGE_MESSAGES")
	e.NewChannel("ops")
	targets := []struct{ method, path, ctype string }{
		{"POST", "/roles/fuzzed/create", "application/json"},
		{"POST", "/channels/ops/permissions", "application/json"},
		{"PATCH", "/profile/link", "application/merge-patch+json"},
	}
	f.Fuzz(func(t *testing.T, body string, which uint8) {
		e := e.WithT(t)
		target := targets[int(which)%len(targets)]
		res := e.Do(testenv.Req{Method: target.method, Path: target.path, Token: e.Owner, Body: []byte(body), Type: target.ctype})
		if res.Status >= 500 {
			t.Fatalf("%s %s with %q: %d %s", target.method, target.path, body, res.Status, res.Body)
		}
		if res.Status >= 400 {
			p := res.Problem(t)
			// Each problem once, at most 100 and a count of the rest, and
			// an answer that grows no faster than its request.
			if p.Errors != nil {
				seen := map[api.FieldError]bool{}
				for _, fe := range *p.Errors {
					if seen[fe] {
						t.Fatalf("%q: %+v reported twice in %s", body, fe, res.Body)
					}
					seen[fe] = true
				}
				if len(*p.Errors) > 101 {
					t.Fatalf("%q: %d entries in errors", body, len(*p.Errors))
				}
			}
			if len(res.Body) > 16<<10+2*len(body) {
				t.Fatalf("an answer of %d bytes to a body of %d: %s", len(res.Body), len(body), res.Body)
			}
		}
		if target.path == "/roles/fuzzed/create" && res.Status == http.StatusCreated {
			e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/roles/fuzzed/delete", Token: e.Owner})
		} else if target.path == "/roles/fuzzed/create" {
			e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/roles/fuzzed", Token: e.Owner})
		}
	})
}

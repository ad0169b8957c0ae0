package httpapi_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/testenv"
)

func TestProfileLinks(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		bob := e.NewUser("bob")
		get := func(token string) (string, string) {
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/profile/link", Token: token})
			return strings.TrimSpace(string(res.Body)), e2eETag(t, res)
		}
		put := func(links any, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PUT", Path: "/profile/link", Token: alice.Token, Body: map[string]any{"links": links}, Headers: headers})
		}
		patch := func(body string, headers map[string]string) *testenv.Response {
			return e.Do(testenv.Req{Method: "PATCH", Path: "/profile/link", Token: alice.Token, Body: body,
				Type: "application/merge-patch+json", Headers: headers})
		}

		body, tag := get(alice.Token)
		if body != `{"links":{}}` {
			t.Fatalf("empty profile: %s", body)
		}
		seq := e2eSeq(t, e)
		res := put(map[string]any{"github": "https://github.com/alice", "blog": "http://alice.example.com/x?y=1"}, e2eIfMatch(tag))
		if res.Status != http.StatusOK || e2eJSON(res.Map(t)) != `{"links":{"blog":"http://alice.example.com/x?y=1","github":"https://github.com/alice"}}` {
			t.Fatalf("put: %s", res)
		}
		tag2 := e2eETag(t, res)
		if b, tg := get(alice.Token); tg != tag2 || tag2 == tag || !strings.Contains(b, "github.com/alice") {
			t.Errorf("after put: %s %s", b, tg)
		}
		if b, _ := get(bob.Token); b != `{"links":{}}` {
			t.Errorf("bob sees %s", b)
		}
		if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"profile.links.set"}) {
			t.Errorf("events %v", ev)
		}

		t.Run("patch merges; null removes", func(t *testing.T) {
			res := patch(`{"links":{"blog":null,"mastodon":"https://social.example/@alice","absent":null}}`, e2eIfMatch(tag2))
			if res.Status != http.StatusOK || e2eJSON(res.Map(t)) != `{"links":{"github":"https://github.com/alice","mastodon":"https://social.example/@alice"}}` {
				t.Fatalf("patch: %s", res)
			}
			if b, _ := get(alice.Token); !strings.Contains(b, "mastodon") || strings.Contains(b, "blog") {
				t.Errorf("read back %s", b)
			}
			// An empty patch changes nothing.
			_, tg := get(alice.Token)
			seq := e2eSeq(t, e)
			res = patch(`{"links":{}}`, nil)
			if res.Status != http.StatusOK || e2eETag(t, res) != tg {
				t.Errorf("empty patch: %s", res)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("more than 10 after the merge is 409 limit_exceeded", func(t *testing.T) {
			links := map[string]any{}
			for i := range 10 {
				links[fmt.Sprintf("l%d", i)] = fmt.Sprintf("https://example.com/%d", i)
			}
			if res := put(links, nil); res.Status != http.StatusOK {
				t.Fatalf("10 links: %s", res)
			}
			before, tg := get(alice.Token)
			seq := e2eSeq(t, e)
			p := e2eProblem(t, patch(`{"links":{"l10":"https://example.com/10"}}`, nil), http.StatusConflict, "limit_exceeded")
			if p.Limit == nil || *p.Limit != "profile_links" {
				t.Errorf("limit %v", p.Limit)
			}
			if after, tg2 := get(alice.Token); after != before || tg2 != tg {
				t.Errorf("changed: %s -> %s", before, after)
			}
			e2eNoEvent(t, e, seq)
			// Replacing one and adding one in the same patch stays at 10.
			if res := patch(`{"links":{"l0":null,"l10":"https://example.com/10"}}`, nil); res.Status != http.StatusOK || len(res.Map(t)["links"].(map[string]any)) != 10 {
				t.Errorf("swap within the limit: %s", res)
			}
			// A PUT of 11 is a 400 (the body itself breaks the schema).
			links["l10"], links["l11"] = "https://example.com/10", "https://example.com/11"
			e2eProblem(t, put(links, nil), http.StatusBadRequest, "validation")
		})
		t.Run("invalid links are 400 and change nothing", func(t *testing.T) {
			before, tg := get(alice.Token)
			seq := e2eSeq(t, e)
			cases := []struct {
				name  string
				links map[string]any
				label string
			}{
				{"uppercase label", map[string]any{"GitHub": "https://github.com/a"}, "GitHub"},
				{"label with a dot", map[string]any{"a.b": "https://example.com"}, "a.b"},
				{"label too long", map[string]any{strings.Repeat("l", 33): "https://example.com"}, strings.Repeat("l", 33)},
				{"empty label", map[string]any{"": "https://example.com"}, ""},
				{"ftp URL", map[string]any{"files": "ftp://example.com/x"}, "files"},
				{"javascript URL", map[string]any{"x": "javascript:alert(1)"}, "x"},
				{"relative URL", map[string]any{"x": "/alice"}, "x"},
				{"no host", map[string]any{"x": "https://"}, "x"},
				{"URL with a space", map[string]any{"x": "https://example.com/a b"}, "x"},
				{"URL too long", map[string]any{"x": "https://example.com/" + strings.Repeat("a", 2048)}, "x"},
				{"URL not a string", map[string]any{"x": 42}, "x"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					res := put(tc.links, nil)
					p := e2eProblem(t, res, http.StatusBadRequest, "validation")
					e2eField(t, p, "body.links."+tc.label)
					body, _ := e2eMarshalPatch(tc.links)
					e2eProblem(t, patch(body, nil), http.StatusBadRequest, "validation")
				})
			}
			e2eProblem(t, put("not an object", nil), http.StatusBadRequest, "validation")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/profile/link", Token: alice.Token, Body: map[string]any{}}), http.StatusBadRequest, "validation")
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/profile/link", Token: alice.Token, Body: map[string]any{"links": map[string]any{}, "extra": 1}}),
				http.StatusBadRequest, "validation")
			if after, tg2 := get(alice.Token); after != before || tg2 != tg {
				t.Errorf("changed: %s -> %s", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("412, 401, 413, 415", func(t *testing.T) {
			before, tg := get(alice.Token)
			seq := e2eSeq(t, e)
			e2eProblem(t, put(map[string]any{}, e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, patch(`{"links":{}}`, e2eIfMatch(`"999"`)), http.StatusPreconditionFailed, "precondition_failed")
			e2eProblem(t, e.Do(testenv.Req{Method: "DELETE", Path: "/profile/link", Token: alice.Token, Headers: e2eIfMatch(`"999"`)}),
				http.StatusPreconditionFailed, "precondition_failed")
			for _, m := range []string{"GET", "PUT", "PATCH", "DELETE"} {
				e2eProblem(t, e.Do(testenv.Req{Method: m, Path: "/profile/link", Body: `{"links":{}}`, Type: "application/json"}),
					http.StatusUnauthorized, "unauthenticated")
			}
			e2eProblem(t, e.Do(testenv.Req{Method: "PUT", Path: "/profile/link", Token: alice.Token, Body: `{"links":{}}`, Type: "application/merge-patch+json"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, e.Do(testenv.Req{Method: "PATCH", Path: "/profile/link", Token: alice.Token, Body: `{"links":{}}`, Type: "application/json"}),
				http.StatusUnsupportedMediaType, "unsupported_media_type")
			e2eProblem(t, put(map[string]any{"x": "https://example.com/" + strings.Repeat("a", 1<<20)}, nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			e2eProblem(t, patch(`{"links":{"x":"https://example.com/`+strings.Repeat("a", 1<<20)+`"}}`, nil), http.StatusRequestEntityTooLarge, "payload_too_large")
			if after, tg2 := get(alice.Token); after != before || tg2 != tg {
				t.Errorf("changed: %s -> %s", before, after)
			}
			e2eNoEvent(t, e, seq)
		})
		t.Run("delete is 204, also when there are none", func(t *testing.T) {
			_, tg := get(alice.Token)
			seq := e2eSeq(t, e)
			res := e.Do(testenv.Req{Method: "DELETE", Path: "/profile/link", Token: alice.Token, Headers: e2eIfMatch(tg)})
			if res.Status != http.StatusNoContent || len(res.Body) != 0 {
				t.Fatalf("delete: %s", res)
			}
			if b, _ := get(alice.Token); b != `{"links":{}}` {
				t.Errorf("after delete: %s", b)
			}
			if ev := e2eEvents(t, e, seq); !slices.Equal(ev, []string{"profile.links.deleted"}) {
				t.Errorf("events %v", ev)
			}
			seq = e2eSeq(t, e)
			for _, tok := range []string{alice.Token, bob.Token} {
				if res := e.Do(testenv.Req{Method: "DELETE", Path: "/profile/link", Token: tok}); res.Status != http.StatusNoContent {
					t.Errorf("delete with none: %s", res)
				}
			}
			e2eNoEvent(t, e, seq)
		})
	})
}

// e2eMarshalPatch encodes links as a merge-patch body.
func e2eMarshalPatch(links map[string]any) (string, error) {
	return e2eJSON(map[string]any{"links": links}), nil
}

// The label rule the server enforces is the contract's x-property-names
// (OpenAPI 3.0 cannot constrain member names): each label is accepted
// exactly when its pattern matches.
func TestProfileLinkLabelsFollowTheContract(t *testing.T) {
	t.Parallel()
	doc, err := httpapi.LoadContract()
	if err != nil {
		t.Fatal(err)
	}
	names := doc.Components.Schemas["ProfileLinks"].Value.Properties["links"].Value.Extensions["x-property-names"].(map[string]any)
	label := regexp.MustCompile(names["pattern"].(string))
	e := testenv.Start(t, testenv.SQLite)
	for _, l := range []string{"a", "github", "my_site-2", strings.Repeat("x", 32), strings.Repeat("x", 33), "", "GitHub",
		"a.b", "a b", "é", "a/b", "-", "_"} {
		for _, method := range []string{"PUT", "PATCH"} {
			ct := "application/json"
			if method == "PATCH" {
				ct = "application/merge-patch+json"
			}
			res := e.Do(testenv.Req{Method: method, Path: "/profile/link", Token: e.Owner, Type: ct,
				Body: map[string]any{"links": map[string]any{l: "https://example.com"}}})
			if want := label.MatchString(l); want != (res.Status == http.StatusOK) {
				t.Errorf("%s label %q: %d, want accepted=%v (the contract's x-property-names)", method, l, res.Status, want)
			}
		}
	}
}

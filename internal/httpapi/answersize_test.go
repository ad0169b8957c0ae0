package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// No answer but an attachment's bytes exceeds 8 MiB (docs/design.md
// §14). These are the answers whose size grows with the product of two
// limits, each at the limits.
const maxAnswer = 8 << 20

// An audit-log page of 200 of the heaviest events (profile-links changes
// of ten URLs of 2,048 characters each way, every character one that JSON
// escapes to six) ends early under 8 MiB, and the pages still list every
// event once.
func TestAuditLogPageOfHeavyEventsStaysUnder8MiB(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		links := func(n int) map[string]any {
			l := map[string]any{}
			for i := range 10 {
				prefix := fmt.Sprintf("https://example.com/%d/%d?", n, i)
				l[fmt.Sprintf("link%d", i)] = prefix + strings.Repeat("&", 2048-len(prefix))
			}
			return map[string]any{"links": l}
		}
		const events = 201
		for n := range events {
			e.Must(http.StatusOK, testenv.Req{Method: "PUT", Path: "/profile/link", Token: e.Owner, Body: links(n)})
		}
		seen, pages, cursor := map[int64]bool{}, 0, ""
		for {
			path := "/audit-log?type=profile.links.set&limit=200"
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner})
			if len(res.Body) > maxAnswer {
				t.Fatalf("page %d of the audit log is %d bytes, over 8 MiB", pages+1, len(res.Body))
			}
			var page api.EventList
			res.JSON(t, &page)
			pages++
			for _, ev := range page.Items {
				if seen[ev.Seq] {
					t.Fatalf("event %d listed twice", ev.Seq)
				}
				seen[ev.Seq] = true
			}
			if page.NextCursor.IsNull() {
				break
			}
			cursor = page.NextCursor.MustGet()
		}
		if len(seen) != events || pages < 2 {
			t.Errorf("%d events in %d pages, want %d in several", len(seen), pages, events)
		}
	})
}

// A community whose channels each hold an overwrite of every one of 250
// roles (IDs of 64 characters): its template would weigh about 10 MB, and
// a prune that takes those overwrites away would list about 17 MB of
// changes. Both are a 409 limit_exceeded at answer_bytes, before anything
// is done; a dry run that lists little still answers.
func TestTemplateAnswersStayUnder8MiB(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		full := widestTemplate(250, 1)
		cat := full["channels"].([]map[string]any)[0]
		var channels []map[string]any
		for k := range 4 {
			c := map[string]any{}
			for key, v := range cat {
				c[key] = v
			}
			c["id"], c["position"] = widestID("k", k), k
			channels = append(channels, c)
		}
		e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import", Token: e.Owner,
			Body: map[string]any{"format": full["format"], "global_permissions": full["global_permissions"], "roles": full["roles"], "channels": channels}})
		bare := func(id string, parent any, position int, kind string) map[string]any {
			return map[string]any{"id": id, "name": "c", "kind": kind, "parent_id": parent, "position": position, "topic": nil, "overwrites": []any{}}
		}
		var pruned []map[string]any
		for k := range 4 {
			parent := widestID("k", k)
			pruned = append(pruned, bare(parent, nil, k, "category"))
			for i := range 35 {
				id := widestID(fmt.Sprintf("k%d-", k), i)
				e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Token: e.Owner,
					Body: map[string]any{"name": "c", "parent_id": parent}})
				pruned = append(pruned, bare(id, parent, i, "text"))
			}
		}
		// The refusal still names the template's ETag, the one a pruning
		// import needs in If-Match to shrink such a community.
		var tag string
		for _, method := range []string{"GET", "HEAD"} {
			res := e.Do(testenv.Req{Method: method, Path: "/export", Token: e.Owner})
			if res.Status != http.StatusConflict {
				t.Fatalf("%s /export: status %d (%d bytes), want 409", method, res.Status, len(res.Body))
			}
			if method == "GET" {
				if p := e2eProblem(t, res, http.StatusConflict, "limit_exceeded"); p.Limit == nil || *p.Limit != "answer_bytes" {
					t.Errorf("export refused with %s", res.Body)
				}
				tag = res.Header.Get("ETag")
			} else if got := res.Header.Get("ETag"); got != tag {
				t.Errorf("HEAD /export: ETag %q, GET gave %q", got, tag)
			}
		}
		if tag == "" {
			t.Fatal("the refused export names no ETag")
		}
		template := map[string]any{"format": full["format"], "global_permissions": full["global_permissions"], "roles": full["roles"], "channels": pruned}
		res := e.Do(testenv.Req{Method: "POST", Path: "/import?dry_run=true&prune=true", Token: e.Owner, Body: template,
			Headers: map[string]string{"If-Match": tag}})
		if p := e2eProblem(t, res, http.StatusConflict, "limit_exceeded"); p.Limit == nil || *p.Limit != "answer_bytes" {
			t.Errorf("a prune of %d overwrites refused with %s", 144*251, res.Body)
		}
		template["channels"] = []any{}
		res = e.Must(http.StatusOK, testenv.Req{Method: "POST", Path: "/import?dry_run=true", Token: e.Owner, Body: template})
		if len(res.Body) > maxAnswer {
			t.Errorf("a dry run is %d bytes", len(res.Body))
		}
	})
}

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

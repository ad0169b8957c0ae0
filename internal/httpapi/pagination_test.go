package httpapi_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// e2ePage is one page of a keyset list: the IDs on it and the next cursor.
type e2ePage struct {
	IDs  []string
	Next string // "" for null
}

func e2eFetchPage(t testing.TB, e *testenv.Env, token, list, cursor string, limit int) e2ePage {
	t.Helper()
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	sep := "?"
	if strings.Contains(list, "?") { // the list carries filters
		sep = "&"
	}
	res := e.Do(testenv.Req{Method: "GET", Path: list + sep + q.Encode(), Token: token})
	if res.Status != http.StatusOK {
		t.Fatalf("GET %s?%s: %s", list, q.Encode(), res)
	}
	var body struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	res.JSON(t, &body)
	if body.Items == nil || !strings.Contains(string(res.Body), `"next_cursor":`) {
		t.Fatalf("not a list envelope: %s", res.Body)
	}
	var p e2ePage
	for _, it := range body.Items {
		p.IDs = append(p.IDs, it.ID)
	}
	if limit > 0 && len(p.IDs) > limit {
		t.Fatalf("page of %d items with limit %d", len(p.IDs), limit)
	}
	if body.NextCursor != nil {
		if *body.NextCursor == "" {
			t.Fatalf("empty next_cursor: %s", res.Body)
		}
		p.Next = *body.NextCursor
	}
	return p
}

// e2eWalk reads every page, calling between (if not nil) after each one, and
// returns the IDs seen in order.
func e2eWalk(t testing.TB, e *testenv.Env, token, list string, limit int, between func(page int, p e2ePage)) []string {
	t.Helper()
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 1000 {
			t.Fatalf("the walk of %s does not end", list)
		}
		p := e2eFetchPage(t, e, token, list, cursor, limit)
		seen = append(seen, p.IDs...)
		if between != nil {
			between(page, p)
		}
		if p.Next == "" {
			return seen
		}
		cursor = p.Next
	}
}

// e2eOnce checks that every ID of want appears exactly once in seen, and that
// nothing appears twice.
func e2eOnce(t testing.TB, seen, want []string) {
	t.Helper()
	e2eOnceInOrder(t, seen, want, func(ids []string) bool { return slices.IsSorted(ids) })
}

// e2eOnceInOrder is e2eOnce with the list's own order check (nil: none).
func e2eOnceInOrder(t testing.TB, seen, want []string, ordered func([]string) bool) {
	t.Helper()
	count := map[string]int{}
	for _, id := range seen {
		count[id]++
		if count[id] == 2 {
			t.Errorf("%s seen twice", id)
		}
	}
	for _, id := range want {
		if count[id] != 1 {
			t.Errorf("%s seen %d times, want once", id, count[id])
		}
	}
	if ordered != nil && !ordered(seen) {
		t.Errorf("not in the list's order: %v", seen)
	}
}

func TestPaginationUsers(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		all := []string{e2eOwnerID(t, e), alice.ID}
		for i := range 21 {
			res := e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": fmt.Sprintf("u%02d", i)}})
			all = append(all, res.Map(t)["id"].(string))
		}

		for _, limit := range []int{1, 2, 5, 7, 23, 200} {
			t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
				seen := e2eWalk(t, e, alice.Token, "/users", limit, nil)
				if !slices.Equal(seen, all) {
					t.Errorf("walk %v, want %v", seen, all)
				}
			})
		}
		t.Run("default limit is 50", func(t *testing.T) {
			for i := range 30 {
				e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": fmt.Sprintf("v%02d", i)}})
			}
			p := e2eFetchPage(t, e, alice.Token, "/users", "", 0)
			if len(p.IDs) != 50 || p.Next == "" {
				t.Errorf("first default page: %d items, next %q", len(p.IDs), p.Next)
			}
			p = e2eFetchPage(t, e, alice.Token, "/users", p.Next, 0)
			if len(p.IDs) != 3 || p.Next != "" {
				t.Errorf("second default page: %d items, next %q", len(p.IDs), p.Next)
			}
		})
		t.Run("inserts and deletes during the walk", func(t *testing.T) {
			before := e2eWalk(t, e, alice.Token, "/users", 200, nil)
			var deleted []string
			n := 0
			seen := e2eWalk(t, e, alice.Token, "/users", 4, func(page int, p e2ePage) {
				// New users (IDs after every existing one) and a deletion of the
				// item the cursor points at.
				for range 2 {
					e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: e.Owner, Body: map[string]any{"username": fmt.Sprintf("w%03d", n)}})
					n++
				}
				if page%3 == 1 && len(p.IDs) > 0 && p.IDs[len(p.IDs)-1] != alice.ID && p.Next != "" {
					last := p.IDs[len(p.IDs)-1]
					if last != all[0] { // not the owner
						e.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + last, Token: e.Owner})
						deleted = append(deleted, last)
					}
				}
			})
			var survivors []string
			for _, id := range before {
				if !slices.Contains(deleted, id) {
					survivors = append(survivors, id)
				}
			}
			if len(deleted) == 0 {
				t.Fatal("the walk deleted nothing; the test proves less than it claims")
			}
			e2eOnce(t, seen, survivors)
			if len(seen) <= len(before) {
				t.Errorf("users created during the walk (after every cursor) were not seen: %d seen, %d before", len(seen), len(before))
			}
		})
	})
}

func TestPaginationChannels(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		alice := e.NewUser("alice")
		var visible, all []string
		for i := range 40 {
			id := fmt.Sprintf("c%02d", i)
			e.NewChannel(id)
			all = append(all, id)
			// c10..c29 are hidden from alice: 20 in a row, more than a
			// few pages' worth of reading at small limits.
			if i >= 10 && i < 30 {
				e.SetOverwrite(id, "everyone", "", nil, []string{"VIEW_CHANNEL"})
			} else {
				visible = append(visible, id)
			}
		}

		for _, limit := range []int{1, 3, 10, 200} {
			t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
				if seen := e2eWalk(t, e, e.Owner, "/channels", limit, nil); !slices.Equal(seen, all) {
					t.Errorf("owner walk %v", seen)
				}
				if seen := e2eWalk(t, e, alice.Token, "/channels", limit, nil); !slices.Equal(seen, visible) {
					t.Errorf("alice's walk %v, want %v", seen, visible)
				}
			})
		}
		// The channels are read from memory, so a page skips every hidden
		// channel: pages are full until the last, and a cursor names the
		// last channel of its page, one the caller sees (a hidden ID in a
		// cursor would tell that it exists).
		t.Run("pages are full and cursors name only visible channels", func(t *testing.T) {
			var pages []e2ePage
			seen := e2eWalk(t, e, alice.Token, "/channels", 2, func(_ int, p e2ePage) { pages = append(pages, p) })
			for i, p := range pages {
				if p.Next != "" && len(p.IDs) != 2 {
					t.Errorf("page %d of %v is short yet not the last", i, p.IDs)
				}
				raw, _ := base64.RawURLEncoding.DecodeString(p.Next)
				for _, id := range all {
					if !slices.Contains(visible, id) && strings.Contains(string(raw), `"`+id+`"`) {
						t.Errorf("the cursor of page %d names the hidden channel %s: %s", i, id, raw)
					}
				}
			}
			if !slices.Equal(seen, visible) {
				t.Errorf("the walk saw %v, want %v", seen, visible)
			}
		})
		// Channels list in tree order: a channel created outside any
		// category goes last, after every cursor, so a walk sees each one
		// created before its last page, in the order of the list.
		t.Run("inserts and deletes during the walk", func(t *testing.T) {
			before := e2eWalk(t, e, alice.Token, "/channels", 200, nil)
			var deleted, created, createdLast []string
			n := 0
			seen := e2eWalk(t, e, alice.Token, "/channels", 3, func(page int, p e2ePage) {
				var now []string
				now = append(now, fmt.Sprintf("a%03d", n))
				if page%2 == 0 {
					now = append(now, fmt.Sprintf("z%03d", n))
				}
				if len(p.IDs) > 0 {
					now = append(now, p.IDs[len(p.IDs)-1]+fmt.Sprintf("-%d", n))
				}
				for _, id := range now {
					e.NewChannel(id)
				}
				created = append(created, createdLast...)
				createdLast = now
				if len(p.IDs) > 0 && page%2 == 0 && p.Next != "" {
					last := p.IDs[len(p.IDs)-1]
					e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/" + last + "/delete", Token: e.Owner})
					deleted = append(deleted, last)
				}
				n++
			})
			var survivors []string
			for _, id := range before {
				if !slices.Contains(deleted, id) {
					survivors = append(survivors, id)
				}
			}
			if len(deleted) == 0 {
				t.Fatal("nothing deleted during the walk")
			}
			e2eOnceInOrder(t, seen, append(survivors, created...), nil)
			final := e2eWalk(t, e, e.Owner, "/channels", 200, nil)
			var kept []string
			for _, id := range seen {
				if !slices.Contains(deleted, id) {
					kept = append(kept, id)
				}
			}
			if !isSubsequence(kept, final) {
				t.Errorf("the walk's order %v is not the list's %v", kept, final)
			}
		})
	})
}

// isSubsequence reports whether sub appears in list in the same order.
func isSubsequence(sub, list []string) bool {
	i := 0
	for _, x := range list {
		if i < len(sub) && sub[i] == x {
			i++
		}
	}
	return i == len(sub)
}

// Cursors are bound to their list and filters; garbage is a 400.
func TestPaginationBadCursorsAndLimits(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		for i := range 3 {
			e.NewChannel(fmt.Sprintf("c%d", i))
			e.NewUser(fmt.Sprintf("u%d", i))
		}
		usersCursor := e2eFetchPage(t, e, e.Owner, "/users", "", 1).Next
		channelsCursor := e2eFetchPage(t, e, e.Owner, "/channels", "", 1).Next
		var events api.EventList
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/audit-log?limit=1&type=user.created", Token: e.Owner}).JSON(t, &events)
		auditCursor := events.NextCursor.MustGet()
		if usersCursor == "" || channelsCursor == "" || auditCursor == "" {
			t.Fatal("no cursors to misuse")
		}
		enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		cases := []struct {
			name, path, location string
		}{
			{"a users cursor on channels", "/channels?cursor=" + usersCursor, "query.cursor"},
			{"a channels cursor on users", "/users?cursor=" + channelsCursor, "query.cursor"},
			{"an audit cursor with another type", "/audit-log?type=channel.created&cursor=" + auditCursor, "query.cursor"},
			{"an audit cursor without its filter", "/audit-log?cursor=" + auditCursor, "query.cursor"},
			{"an audit cursor with an added filter", "/audit-log?type=user.created&subject=user:x&cursor=" + auditCursor, "query.cursor"},
			{"a users cursor on the audit log", "/audit-log?cursor=" + usersCursor, "query.cursor"},
			{"garbage", "/users?cursor=garbage", "query.cursor"},
			{"not base64url", "/channels?cursor=" + url.QueryEscape("a+b/c=="), "query.cursor"},
			{"base64 of non-JSON", "/channels?cursor=" + enc("hello"), "query.cursor"},
			{"base64 of an empty key", "/channels?cursor=" + enc(`{"k":""}`), "query.cursor"},
			{"base64 of a JSON array", "/users?cursor=" + enc(`[1,2]`), "query.cursor"},
			{"base64 of a forged filter", "/users?cursor=" + enc(`{"k":"zzz","f":"0000000000000000"}`), "query.cursor"},
			{"a cursor over 1,000 characters", "/users?cursor=" + strings.Repeat("A", 1001), "query.cursor"},
			{"an empty cursor", "/users?cursor=", "query.cursor"},
			{"limit 0", "/users?limit=0", "query.limit"},
			{"limit 201", "/channels?limit=201", "query.limit"},
			{"limit abc", "/users?limit=abc", "query.limit"},
			{"limit -1", "/channels?limit=-1", "query.limit"},
			{"limit 1.5", "/users?limit=1.5", "query.limit"},
			{"limit empty", "/users?limit=", "query.limit"},
			{"limit huge", "/users?limit=99999999999999999999", "query.limit"},
		}
		seq := e2eSeq(t, e)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := e.Do(testenv.Req{Method: "GET", Path: tc.path, Token: e.Owner})
				p := e2eProblem(t, res, http.StatusBadRequest, "validation")
				e2eField(t, p, tc.location)
			})
		}
		e2eNoEvent(t, e, seq)
		// The good cursors still work where they belong, and limits 1 and 200 are fine.
		for _, path := range []string{"/users?cursor=" + usersCursor, "/channels?cursor=" + channelsCursor,
			"/audit-log?type=user.created&cursor=" + auditCursor, "/users?limit=1", "/channels?limit=200"} {
			e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: e.Owner})
		}
	})
}

package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// Walking every list and reading every answer as a user who sees little
// finds no hidden channel's ID: not in a body, a header, or a cursor
// however it is decoded. The hidden channels include a category holding a
// channel the user may view, moves and synced changes in the audit log, and
// a deleted channel.
func TestWalkAsAUserWhoSeesLittle(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		hidden := []string{"zz-secret-cat", "zz-secret-chan", "zz-gone"}
		create := func(id string, body map[string]any) {
			body["name"] = "n"
			e.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/channels/" + id + "/create", Token: e.Owner, Body: body})
		}
		create("zz-secret-cat", map[string]any{"kind": "category"})
		e.SetOverwrite("zz-secret-cat", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		create("lobby", map[string]any{"parent_id": "zz-secret-cat"}) // synced: hidden
		create("zz-secret-chan", map[string]any{"parent_id": "zz-secret-cat"})
		create("ops", map[string]any{"parent_id": "zz-secret-cat"})
		e.SetOverwrite("ops", "everyone", "", []string{"VIEW_CHANNEL"}, nil) // visible, in a hidden category
		create("public", map[string]any{})
		create("zz-gone", map[string]any{})
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/public", Token: e.Owner, Type: "application/merge-patch+json",
			Body: `{"parent_id":"zz-secret-cat"}`})
		e.Must(http.StatusOK, testenv.Req{Method: "PATCH", Path: "/channels/public", Token: e.Owner, Type: "application/merge-patch+json",
			Body: `{"parent_id":null}`})
		e.SetOverwrite("zz-secret-cat", "everyone", "", []string{"SEND_MESSAGES"}, []string{"VIEW_CHANNEL"}) // reaches lobby, zz-secret-chan
		e.Must(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/channels/zz-gone/delete", Token: e.Owner})
		e.NewRole("watchers", "VIEW_AUDIT_LOG", "VIEW_CHANNEL")
		alice := e.NewUser("alice")
		e.Assign(alice.ID, "watchers")

		leaks := func(what string, res *testenv.Response) {
			t.Helper()
			texts := []string{string(res.Body)}
			for name, vals := range res.Header {
				texts = append(texts, name+": "+strings.Join(vals, ","))
			}
			m := map[string]any{}
			if res.Status == 200 && strings.HasPrefix(string(res.Body), "{") {
				res.JSON(t, &m)
				if c, ok := m["next_cursor"].(string); ok {
					raw, _ := base64.RawURLEncoding.DecodeString(c)
					texts = append(texts, string(raw))
				}
			}
			for _, text := range texts {
				for _, id := range hidden {
					if strings.Contains(text, id) {
						t.Errorf("%s shows the hidden %s: %s", what, id, text)
					}
				}
			}
		}
		walk := func(list string) {
			for _, limit := range []string{"1", "2", "200"} {
				cursor := ""
				for page := 0; page < 100; page++ {
					path := list + "limit=" + limit
					if cursor != "" {
						path += "&cursor=" + cursor
					}
					res := e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: path, Token: alice.Token})
					leaks("GET "+path, res)
					next, _ := res.Map(t)["next_cursor"].(string)
					if next == "" {
						break
					}
					cursor = next
				}
			}
		}
		walk("/channels?")
		walk("/audit-log?")
		walk("/users?")
		walk("/channels/ops/attachments?")
		for _, path := range []string{"/channels/ops", "/channels/ops/permissions", "/roles", "/me",
			"/users/" + alice.ID + "/permissions?channelID=ops&explain=true", "/users/" + alice.ID + "/permissions?explain=true"} {
			leaks("GET "+path, e.Do(testenv.Req{Method: "GET", Path: path, Token: alice.Token}))
		}
		// Naming a hidden channel is answered word for word like naming one
		// that never existed (but for the ID she gave).
		for _, path := range []string{"/channels/zz-secret-chan", "/channels/zz-secret-cat/permissions", "/channels?parent_id=zz-secret-cat",
			"/users/" + alice.ID + "/permissions?channelID=zz-secret-chan", "/channels/zz-gone"} {
			for _, id := range hidden {
				if !strings.Contains(path, id) {
					continue
				}
				never := strings.ReplaceAll(path, id, "zz-never")
				got := e.Do(testenv.Req{Method: "GET", Path: path, Token: alice.Token})
				want := e.Do(testenv.Req{Method: "GET", Path: never, Token: alice.Token})
				g, w := got.Map(t), want.Map(t)
				delete(g, "request_id")
				delete(w, "request_id")
				if got.Status != want.Status || strings.ReplaceAll(e2eJSON(g), id, "zz-never") != e2eJSON(w) {
					t.Errorf("GET %s: %s\nlike a channel that never was: %s", path, got, want)
				}
			}
		}
		// What alice may see of ops: it is there, outside any category she
		// knows of.
		var ops map[string]any
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: alice.Token}).JSON(t, &ops)
		if ops["parent_id"] != nil || ops["synced"] != false {
			t.Errorf("ops as alice sees it: %v", ops)
		}
		// The owner sees the category.
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/ops", Token: e.Owner}).JSON(t, &ops)
		if ops["parent_id"] != "zz-secret-cat" {
			t.Errorf("ops as the owner sees it: %v", ops)
		}
	})
}

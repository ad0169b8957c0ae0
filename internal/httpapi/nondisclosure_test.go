package httpapi_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/testenv"
)

// docs/design.md §12 "Non-disclosure": a channel the caller cannot view is answered
// exactly like a missing one, in every operation of the contract that names
// a channel, ?channelID= and explain included. Each request is sent for a
// hidden channel and for one that does not exist: the answers must be the
// same but for the channel's ID and the request ID.
func TestHiddenChannelsAnswerLikeMissingOnes(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewChannel("secret")
		e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/secret/attachment?attachmentID=a.txt", Token: e.Owner,
			Body: "hidden bytes", Type: "text/plain"})
		// A member may do much in a channel, but not see this one; nothing in
		// their base manages channels.
		e.NewRole("member", "SEND_MESSAGES", "ATTACH_FILES", "MANAGE_MESSAGES", "READ_MESSAGE_HISTORY")
		u := e.NewUser("member")
		e.Assign(u.ID, "member")
		e.SetOverwrite("secret", "everyone", "", nil, []string{"VIEW_CHANNEL"})

		doc, err := httpapi.LoadContract()
		if err != nil {
			t.Fatal(err)
		}
		bodies := map[string]testenv.Req{
			"updateChannel":       {Body: `{"name":"x"}`, Type: "application/merge-patch+json"},
			"renameChannel":       {Body: map[string]any{"name": "x"}},
			"createChannel":       {Body: map[string]any{"name": "x"}},
			"setChannelOverwrite": {Body: map[string]any{"target_type": "everyone", "allow": []string{}, "deny": []string{}}},
			"putAttachment":       {Body: "new bytes", Type: "text/plain"},
		}
		requestID := regexp.MustCompile(`"request_id":"[^"]*"`)
		same := func(t *testing.T, hidden, missing *testenv.Response) {
			t.Helper()
			norm := func(r *testenv.Response, id string) string {
				return requestID.ReplaceAllString(strings.ReplaceAll(string(r.Body), id, "<channel>"), "")
			}
			if hidden.Status != missing.Status || hidden.Header.Get("Content-Type") != missing.Header.Get("Content-Type") ||
				norm(hidden, "secret") != norm(missing, "nosuch") {
				t.Errorf("hidden: %d %s\nmissing: %d %s", hidden.Status, hidden.Body, missing.Status, missing.Body)
			}
		}
		n := 0
		for path, item := range doc.Paths.Map() {
			if !strings.Contains(path, "{channelID}") {
				continue
			}
			for method, op := range item.Operations() {
				n++
				t.Run(op.OperationID, func(t *testing.T) {
					for _, attachment := range []string{"a.txt", "nope.txt"} { // one that exists, one that does not
						req := bodies[op.OperationID]
						req.Method, req.Token = method, u.Token
						url := func(channel string) string {
							p := strings.ReplaceAll(path, "{channelID}", channel)
							if strings.HasSuffix(path, "/attachment") {
								p += "?attachmentID=" + attachment
							}
							return p
						}
						req.Path = url("secret")
						hidden := e.Do(req)
						req.Path = url("nosuch")
						missing := e.Do(req)
						same(t, hidden, missing)
						if hidden.Status == http.StatusForbidden && op.OperationID != "createChannel" {
							t.Errorf("a 403 tells that the hidden channel exists: %s", hidden.Body)
						}
					}
				})
			}
		}
		if n < 12 {
			t.Errorf("only %d operations name a channel", n)
		}
		for _, q := range []string{"", "&explain=true"} {
			t.Run("getUserPermissions channelID"+q, func(t *testing.T) {
				hidden := e.Do(testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/permissions?channelID=secret" + q, Token: u.Token})
				missing := e.Do(testenv.Req{Method: "GET", Path: "/users/" + u.ID + "/permissions?channelID=nosuch" + q, Token: u.Token})
				same(t, hidden, missing)
			})
		}
		if got := e.Do(testenv.Req{Method: "GET", Path: "/channels?limit=200", Token: u.Token}); strings.Contains(string(got.Body), "secret") {
			t.Errorf("the channel list shows the hidden channel: %s", got.Body)
		}

		// Those who manage channels or their overwrites know every channel:
		// denied VIEW_CHANNEL there, they are refused with a 403 (and the
		// owner, with everything, is served).
		for _, perm := range []string{"MANAGE_CHANNELS", "MANAGE_ROLES"} {
			e.NewRole("r-"+strings.ToLower(perm), perm)
			m := e.NewUser(strings.ToLower(strings.ReplaceAll(perm, "_", "")))
			e.Assign(m.ID, "r-"+strings.ToLower(perm))
			e.SetOverwrite("secret", "user", m.ID, nil, []string{"VIEW_CHANNEL"})
			if res := e.Do(testenv.Req{Method: "GET", Path: "/channels/secret", Token: m.Token}); res.Status != http.StatusForbidden {
				t.Errorf("%s without VIEW_CHANNEL: %d, want 403: %s", perm, res.Status, res.Body)
			}
			if res := e.Do(testenv.Req{Method: "GET", Path: "/users/" + m.ID + "/permissions?channelID=secret&explain=true", Token: m.Token}); res.Status != http.StatusOK {
				t.Errorf("%s asking about their own permissions in the channel: %d: %s", perm, res.Status, res.Body)
			}
		}
		e.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/channels/secret", Token: e.Owner})
	})
}

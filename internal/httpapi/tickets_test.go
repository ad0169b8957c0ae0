package httpapi_test

import (
	"net/url"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// Event tickets belong to the token that minted them and are consumed only
// by a stream that opens (docs/design.md §12).
func TestEventTicketsBoundToToken(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		e.NewRole("auditors", "VIEW_AUDIT_LOG")
		auditor := e.NewUser("auditor")
		e.Assign(auditor.ID, "auditors")
		mint := func(token string) string {
			var tk api.StreamTicket
			e.Must(201, testenv.Req{Method: "POST", Path: "/events/ticket", Token: token}).JSON(t, &tk)
			return "?ticket=" + url.QueryEscape(tk.Ticket)
		}

		t.Run("a 400 does not burn the ticket", func(t *testing.T) {
			q := mint(auditor.Token)
			res := e.Do(testenv.Req{Method: "GET", Path: "/events" + q, Headers: map[string]string{"Last-Event-ID": "not-a-seq"}})
			if res.Status != 400 {
				t.Fatalf("a bad Last-Event-ID: %s", res)
			}
			s := sseOpen(t, e, "", q, nil) // the same ticket still opens a stream
			s.Close()
			if res := e.Do(testenv.Req{Method: "GET", Path: "/events" + q}); res.Status != 401 {
				t.Fatalf("after the stream opened, the ticket is used: %s", res)
			}
		})
		t.Run("a 403 does not burn the ticket", func(t *testing.T) {
			q := mint(auditor.Token)
			e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + auditor.ID + "/roles/auditors", Token: e.Owner})
			if res := e.Do(testenv.Req{Method: "GET", Path: "/events" + q}); res.Status != 403 {
				t.Fatalf("without VIEW_AUDIT_LOG: %s", res)
			}
			e.Assign(auditor.ID, "auditors")
			sseOpen(t, e, "", q, nil).Close()
		})
		t.Run("revoking the minting token invalidates the ticket", func(t *testing.T) {
			var tok struct {
				ID    string `json:"id"`
				Token string `json:"token"`
			}
			e.Must(201, testenv.Req{Method: "POST", Path: "/users/" + auditor.ID + "/tokens", Token: auditor.Token,
				Body: map[string]any{"name": "browser"}}).JSON(t, &tok)
			q := mint(tok.Token)
			q2 := mint(auditor.Token) // another token's ticket is untouched
			e.Must(204, testenv.Req{Method: "DELETE", Path: "/users/" + auditor.ID + "/tokens/" + tok.ID, Token: auditor.Token})
			res := e.Do(testenv.Req{Method: "GET", Path: "/events" + q})
			if res.Status != 401 {
				t.Fatalf("the ticket of a revoked token: %s", res)
			}
			res.Problem(t)
			sseOpen(t, e, "", q2, nil).Close()
		})
	})
}

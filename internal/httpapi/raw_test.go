package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// The raw operations (attachment download and upload, the event stream, and
// their HEAD twins) confirm cached credentials like every other operation:
// on a warm instance, a change made on another instance (a role removed, a
// token revoked) decides the very next answer, and nothing is stored or
// streamed on the stale state.
func TestRawOperationsConfirmCachedCredentials(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		e1.NewChannel("vault")
		e1.SetOverwrite("vault", "everyone", "", nil, []string{"VIEW_CHANNEL"})
		e1.NewRole("readers")
		e1.SetOverwrite("vault", "role", "readers", []string{"VIEW_CHANNEL", "ATTACH_FILES"}, nil)
		e1.NewRole("auditors", "VIEW_AUDIT_LOG")
		alice := e1.NewUser("alice")
		e1.Assign(alice.ID, "readers")
		e1.Assign(alice.ID, "auditors")
		e1.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: attPath("vault", "a.txt"), Token: e1.Owner, Body: "secret", Type: "text/plain"})
		var ticket api.StreamTicket
		e2.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/events/ticket", Token: alice.Token}).JSON(t, &ticket)

		// stream opens GET /events on e2 and reports its status (a stream
		// that opens is closed at once).
		stream := func(token, query string) int {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), sseWait)
			defer cancel()
			resp, err := sseDial(ctx, e2, token, query, nil)
			if err != nil {
				t.Fatalf("GET /events%s: %v", query, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			return resp.StatusCode
		}
		type check struct {
			name string
			req  testenv.Req
		}
		download := testenv.Req{Method: "GET", Path: attPath("vault", "a.txt"), Token: alice.Token}
		head := testenv.Req{Method: "HEAD", Path: attPath("vault", "a.txt"), Token: alice.Token}
		upload := func(id string) testenv.Req {
			return testenv.Req{Method: "PUT", Path: attPath("vault", id), Token: alice.Token, Body: "new", Type: "text/plain"}
		}
		headEvents := testenv.Req{Method: "HEAD", Path: "/events", Token: alice.Token}
		expect := func(t *testing.T, checks []check, want int) {
			t.Helper()
			for _, c := range checks {
				if res := e2.Do(c.req); res.Status != want {
					t.Errorf("%s: %s, want %d", c.name, res, want)
				}
			}
		}

		// Warm: e2 caches alice's credentials and its snapshot.
		expect(t, []check{{"download", download}, {"HEAD download", head}, {"HEAD /events", headEvents}}, http.StatusOK)
		expect(t, []check{{"upload", upload("warm.txt")}}, http.StatusCreated)
		if got := stream(alice.Token, ""); got != http.StatusOK {
			t.Fatalf("GET /events, warm: %d", got)
		}

		t.Run("role removed on another instance", func(t *testing.T) {
			e1.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/readers", Token: e1.Owner})
			e1.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/auditors", Token: e1.Owner})
			// The channel is hidden from her now: answered like a missing one.
			expect(t, []check{{"download", download}, {"HEAD download", head}, {"upload", upload("late.txt")}}, http.StatusNotFound)
			expect(t, []check{{"HEAD /events", headEvents}}, http.StatusForbidden)
			if got := stream(alice.Token, ""); got != http.StatusForbidden {
				t.Errorf("GET /events: %d, want 403", got)
			}
			e1.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: attPath("vault", "late.txt"), Token: e1.Owner})
		})

		t.Run("token revoked on another instance", func(t *testing.T) {
			var tokens api.TokenList
			e1.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e1.Owner}).JSON(t, &tokens)
			for _, tok := range tokens.Items {
				e1.Must(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/tokens/" + tok.Id, Token: e1.Owner})
			}
			expect(t, []check{{"download", download}, {"HEAD download", head}, {"upload", upload("revoked.txt")},
				{"HEAD /events", headEvents}}, http.StatusUnauthorized)
			if got := stream(alice.Token, ""); got != http.StatusUnauthorized {
				t.Errorf("GET /events: %d, want 401", got)
			}
			if got := stream("", "?ticket="+url.QueryEscape(ticket.Ticket)); got != http.StatusUnauthorized {
				t.Errorf("GET /events with a ticket of the revoked token: %d, want 401", got)
			}
			e1.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: attPath("vault", "revoked.txt"), Token: e1.Owner})
		})
	})
}

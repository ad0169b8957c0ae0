package httpapi_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/testenv"
)

// TestChangesHoldOnTheNextRequestUnderConcurrentWrites: while a client
// creates users without pause on one instance (every write moving the
// change log, as a community where people join all day), a permission
// taken away, a role removed, a user suspended or a token revoked on the
// other instance governs the very next request on the first, and given back
// governs the next one again, on two instances of one PostgreSQL database
// and on two stores opened on one SQLite file.
func TestChangesHoldOnTheNextRequestUnderConcurrentWrites(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e1 := testenv.Start(t, kind)
		e2 := testenv.StartWith(t, kind, e1.Config) // the same database
		e1.NewRole("builders", "MANAGE_CHANNELS")
		alice := e1.NewUser("alice")
		e1.Assign(alice.ID, "builders")
		e1.NewChannel("ops")

		stop := make(chan struct{})
		var created atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res := e1.Do(testenv.Req{Method: "POST", Path: "/users", Token: e1.Owner,
					Body: map[string]any{"username": fmt.Sprintf("joiner%d", i)}})
				if res.Status != http.StatusCreated {
					t.Errorf("a background create: %s", res)
					return
				}
				created.Add(1)
			}
		})
		defer func() {
			close(stop)
			wg.Wait()
			if created.Load() == 0 {
				t.Error("no user was created in the background")
			}
		}()

		rename := testenv.Req{Method: "PATCH", Path: "/channels/ops", Token: alice.Token,
			Type: "application/merge-patch+json", Body: `{"topic":"t"}`}
		expect := func(step string, want int) {
			t.Helper()
			if res := e1.Do(rename); res.Status != want {
				t.Fatalf("%s: the next request on the other instance: %s, want %d", step, res, want)
			}
		}
		owner := func(want int, r testenv.Req) {
			t.Helper()
			r.Token = e2.Owner
			e2.Must(want, r)
		}
		tokenID := func() string {
			var tokens api.TokenList
			e2.Must(http.StatusOK, testenv.Req{Method: "GET", Path: "/users/" + alice.ID + "/tokens", Token: e2.Owner}).JSON(t, &tokens)
			return tokens.Items[0].Id
		}
		for round := range 10 {
			expect(fmt.Sprint("round ", round, ", before"), http.StatusOK)
			owner(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/builders/permissions", Body: map[string]any{"permissions": []string{}}})
			expect("permission taken away", http.StatusForbidden)
			owner(http.StatusOK, testenv.Req{Method: "PUT", Path: "/roles/builders/permissions", Body: map[string]any{"permissions": []string{"MANAGE_CHANNELS"}}})
			expect("permission given back", http.StatusOK)
			owner(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/roles/builders"})
			expect("role removed", http.StatusForbidden)
			owner(http.StatusNoContent, testenv.Req{Method: "POST", Path: "/users/" + alice.ID + "/roles/builders"})
			expect("role given back", http.StatusOK)
			owner(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions",
				Body: map[string]any{"target_type": "user", "target_id": alice.ID, "allow": []string{}, "deny": []string{"MANAGE_CHANNELS"}}})
			expect("denied in the channel", http.StatusForbidden)
			owner(http.StatusOK, testenv.Req{Method: "POST", Path: "/channels/ops/permissions",
				Body: map[string]any{"target_type": "user", "target_id": alice.ID, "allow": []string{}, "deny": []string{}}})
			expect("the overwrite removed", http.StatusOK)
			authzSuspend(t, e2, alice, "suspended")
			expect("suspended", http.StatusUnauthorized)
			authzSuspend(t, e2, alice, "active")
			expect("reactivated", http.StatusOK)
		}
		owner(http.StatusNoContent, testenv.Req{Method: "DELETE", Path: "/users/" + alice.ID + "/tokens/" + tokenID()})
		expect("token revoked", http.StatusUnauthorized)
	})
}

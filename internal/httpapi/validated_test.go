package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// TestRememberedValidationRefusesBadInputAlike: a request that passed the
// contract's check is not checked again, and that changes no answer: a bad
// value of the same parameter, before or after, is still a 400 problem
// naming it, and the good one is still served.
func TestRememberedValidationRefusesBadInputAlike(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind)
		h := e.App.HTTP.Echo
		u := e.NewUser("someone")
		for i, c := range []struct {
			path string
			code int
		}{
			{"/api/users?limit=500", http.StatusBadRequest},
			{"/api/users?limit=50", http.StatusOK},
			{"/api/users?limit=50", http.StatusOK},
			{"/api/users?limit=500", http.StatusBadRequest},
			{"/api/users?limit=0", http.StatusBadRequest},
			{"/api/users?limit=50&limit=500", http.StatusBadRequest},
			{"/api/users?limit=50&limit=500", http.StatusBadRequest},
			{"/api/users?limit=50&limit=50", http.StatusBadRequest},
			{"/api/users?limit=50&" + strings.Repeat("x", 300) + "=1", http.StatusOK},
			{"/api/users?limit=500&" + strings.Repeat("x", 300) + "=1", http.StatusBadRequest},
			{"/api/users/x", http.StatusBadRequest},
			{"/api/users/" + u.ID, http.StatusOK},
			{"/api/users/" + u.ID, http.StatusOK},
			{"/api/users/x", http.StatusBadRequest},
			{"/api/users/" + u.ID + "x", http.StatusBadRequest},
			{"/api/users/" + u.ID + "/permissions?channelID=", http.StatusBadRequest},
			{"/api/users/" + u.ID + "/permissions", http.StatusOK},
			{"/api/users/" + u.ID + "/permissions", http.StatusOK},
			{"/api/users/" + u.ID + "/permissions?channelID=", http.StatusBadRequest},
		} {
			w := serveStack(h, e.Owner, "GET", c.path, "")
			if w.Code != c.code {
				t.Fatalf("request %d, GET %s: %d %s, want %d", i, c.path, w.Code, w.Body.String(), c.code)
			}
			if c.code == http.StatusBadRequest {
				var p struct {
					Code string `json:"code"`
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Code == "" {
					t.Fatalf("request %d, GET %s: %s %q, want a problem", i, c.path, ct, w.Body.String())
				}
			}
		}
	})
}

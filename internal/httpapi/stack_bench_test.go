package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// The whole HTTP stack in process (middlewares, validator, handler,
// service, store; no network): what a request costs the server beyond what
// any Echo server pays for the connection. make bench runs them.
//
//	go test -run '^$' -bench Stack -benchmem ./internal/httpapi

func benchStack(b *testing.B, setup func(e *testenv.Env) (method, path, body string)) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			e := testenv.StartUnchecked(b, kind)
			method, path, body := setup(e)
			h := e.App.HTTP.Echo
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				var req *http.Request
				if body != "" {
					n++
					req = httptest.NewRequest(method, path, strings.NewReader(fmt.Sprintf(body, n)))
					req.Header.Set("Content-Type", "application/json")
				} else {
					req = httptest.NewRequest(method, path, nil)
				}
				req.Header.Set("Authorization", "Bearer "+e.Owner)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code >= 300 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}

func BenchmarkStackGetUser(b *testing.B) {
	benchStack(b, func(e *testenv.Env) (string, string, string) {
		return "GET", "/api/users/" + e.NewUser("bench").ID, ""
	})
}

func BenchmarkStackListUsers50(b *testing.B) {
	benchStack(b, func(e *testenv.Env) (string, string, string) {
		for i := range 60 {
			e.NewUser(fmt.Sprintf("user%02d", i))
		}
		return "GET", "/api/users?limit=50", ""
	})
}

func BenchmarkStackUserPermissionsInChannel(b *testing.B) {
	benchStack(b, func(e *testenv.Env) (string, string, string) {
		u := e.NewUser("bench")
		e.NewRole("mods", "VIEW_CHANNEL")
		e.Assign(u.ID, "mods")
		e.NewChannel("ops")
		e.SetOverwrite("ops", "role", "mods", []string{"SEND_MESSAGES"}, nil)
		return "GET", "/api/users/" + u.ID + "/permissions?channelID=ops", ""
	})
}

// BenchmarkStackCreateUser is a create committed alone (one client): its
// transaction and sync are not shared.
func BenchmarkStackCreateUser(b *testing.B) {
	benchStack(b, func(*testenv.Env) (string, string, string) {
		return "POST", "/api/users", `{"username":"bench%d","display_name":"Bench"}`
	})
}

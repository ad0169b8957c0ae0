package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// The whole HTTP stack in process (middlewares, validator, handler,
// service, store; no network): what a request costs the server beyond what
// any Echo server pays for the connection. make bench runs them.
//
//	go test -run '^$' -bench Stack -benchmem ./internal/httpapi

// benchStack measures one request, sent again and again; a body, when
// there is one, is a format whose %d takes a number unique to the request.
func benchStack(b *testing.B, setup func(e *testenv.Env) (method, path, body string)) {
	benchStackSeq(b, func(e *testenv.Env) func(int) (string, string, string) {
		method, path, body := setup(e)
		return func(n int) (string, string, string) {
			if body == "" {
				return method, path, ""
			}
			return method, path, fmt.Sprintf(body, n+1)
		}
	})
}

// benchStackSeq is benchStack for requests that differ from one iteration
// to the next: next gives the n-th request. Besides ns/op it reports
// cpu-ns/op, the process's CPU time (every thread, SQLite's included, not
// PostgreSQL's) per request, which a busy machine stretches less than the
// wall time, and questions/op, the requests that asked the change log
// (on SQLite every request, a look at the wal-index; on PostgreSQL under
// its lease none, but after a change the cache has not followed).
func benchStackSeq(b *testing.B, setup func(e *testenv.Env) (next func(n int) (method, path, body string))) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			e := testenv.StartUnchecked(b, kind)
			next := setup(e)
			h := e.App.HTTP.Echo
			n := 0
			b.ReportAllocs()
			cpu0 := processCPU(b)
			asked := e.App.Store.CacheStats().Questions
			for b.Loop() {
				method, path, body := next(n)
				n++
				if w := serveStack(h, e.Owner, method, path, body); w.Code >= 300 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(e.App.Store.CacheStats().Questions-asked)/float64(b.N), "questions/op")
		})
	}
}

// serveStack sends one request through h as the owner (token), a JSON
// body when there is one, and returns what h answered.
func serveStack(h http.Handler, token, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
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

// BenchmarkStackUserPermissionsHeavy is make bench-http's perms_heavy: a
// member of 248 roles in a channel of 499 overwrites, against
// BenchmarkStackUserPermissionsInChannel's one of each.
func BenchmarkStackUserPermissionsHeavy(b *testing.B) {
	benchStack(b, func(e *testenv.Env) (string, string, string) {
		return "GET", "/api/users/" + heavyMember(e).ID + "/permissions?channelID=heavy", ""
	})
}

// heavyMember sets up the heavy case of the permissions: a member holding
// 248 roles, and the channel "heavy" with 499 overwrites (one for each of
// the roles, 251 for other users).
func heavyMember(e *testenv.Env) testenv.User {
	heavy := e.NewUser("heavy")
	e.NewChannel("heavy")
	for i := range 248 {
		role := fmt.Sprintf("r%03d", i)
		e.NewRole(role, "VIEW_CHANNEL")
		e.Assign(heavy.ID, role)
		e.SetOverwrite("heavy", "role", role, []string{"SEND_MESSAGES"}, nil)
	}
	for i := range 251 {
		u := e.NewUser(fmt.Sprintf("o%03d", i))
		e.SetOverwrite("heavy", "user", u.ID, nil, []string{"EMBED_LINKS"})
	}
	return heavy
}

// BenchmarkStackCreateUser is a create committed alone (one client): its
// transaction and sync are not shared.
func BenchmarkStackCreateUser(b *testing.B) {
	benchStack(b, func(*testenv.Env) (string, string, string) {
		return "POST", "/api/users", `{"username":"bench%d","display_name":"Bench"}`
	})
}

// BenchmarkStackCreateUser32 is 32 clients creating at once, as
// make bench-http's create_user does: the creates share transactions
// (group commit), and cpu-ns/op is the process's CPU per create (on
// PostgreSQL the database's own is not counted).
func BenchmarkStackCreateUser32(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			e := testenv.StartUnchecked(b, kind)
			h := e.App.HTTP.Echo
			var n atomic.Int64
			work := make(chan struct{}, 64)
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for range work {
						body := fmt.Sprintf(`{"username":"bench%d","display_name":"Bench"}`, n.Add(1))
						if w := serveStack(h, e.Owner, "POST", "/api/users", body); w.Code >= 300 {
							b.Error(w.Code, w.Body.String())
						}
					}
				})
			}
			b.ReportAllocs()
			before := e.App.Store.WriterStats()
			cpu := processCPU(b)
			for b.Loop() {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
			after := e.App.Store.WriterStats()
			if tx := after.Transactions - before.Transactions; tx > 0 {
				b.ReportMetric(float64(after.Writes-before.Writes)/float64(tx), "writes/tx")
			}
		})
	}
}

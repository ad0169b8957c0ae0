package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkAuthorizedRequest is a whole request through the HTTP stack on a
// warm instance whose work is nothing but authorization: GET /permissions
// (authenticate, then the catalog from memory), and a channel-scoped check
// refused by an overwrite (authenticate, read the channel, compute the
// effective permissions from the in-memory snapshot). statements/op is the
// number of SQL statements per request.
func BenchmarkAuthorizedRequest(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(b)
			}
			e := testenv.StartUnchecked(b, kind)
			e.NewRole("mods", "MANAGE_CHANNELS")
			alice := e.NewUser("alice")
			e.Assign(alice.ID, "mods")
			e.NewChannel("ops")
			e.SetOverwrite("ops", "role", "mods", nil, []string{"VIEW_CHANNEL"})
			for _, bc := range []struct {
				name string
				req  testenv.Req
				want int
			}{
				{"catalog", testenv.Req{Method: "GET", Path: "/permissions", Token: alice.Token}, http.StatusOK},
				{"channel-refused", testenv.Req{Method: "GET", Path: "/channels/ops", Token: alice.Token}, http.StatusForbidden},
			} {
				b.Run(bc.name, func(b *testing.B) {
					e.Must(bc.want, bc.req) // warm
					start := e.App.Store.QueryCount()
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						if res := e.Do(bc.req); res.Status != bc.want {
							b.Fatalf("status %d, want %d: %s", res.Status, bc.want, res.Body)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(e.App.Store.QueryCount()-start)/float64(b.N), "statements/op")
				})
			}
		})
	}
}

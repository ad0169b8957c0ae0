package httpapi_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkStackGetUserBesideCreates is make bench-http's mixed_get_user in
// process: GET /users/{id} from four clients while another creates a user
// every 25 ms (40 a second). Beside cpu-ns/op (per read, the creates' CPU
// included) it reports questions/op, the reads that asked the change log,
// rounds/op, the questions sent for them (PostgreSQL: shared by the reads
// asking at once), and leased/op, the reads answered under the lease: what
// a create costs the reads beside it.
func BenchmarkStackGetUserBesideCreates(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			e := testenv.StartUnchecked(b, kind)
			h := e.App.HTTP.Echo
			path := "/api/users/" + e.NewUser("bench").ID
			serve := func(method, path, body string) {
				if w := serveStack(h, e.Owner, method, path, body); w.Code >= 300 {
					b.Error(method, path, w.Code, w.Body.String())
				}
			}
			stop := make(chan struct{})
			var creator sync.WaitGroup
			creator.Go(func() {
				tick := time.NewTicker(25 * time.Millisecond)
				defer tick.Stop()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					case <-tick.C:
						serve("POST", "/api/users", fmt.Sprintf(`{"username":"beside%d","display_name":"Beside"}`, n))
					}
				}
			})
			b.SetParallelism(2) // four clients on two cores
			b.ReportAllocs()
			before := e.App.Store.CacheStats()
			cpu := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serve("GET", path, "")
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
			after := e.App.Store.CacheStats()
			b.ReportMetric(float64(after.Questions-before.Questions)/float64(b.N), "questions/op")
			b.ReportMetric(float64(after.Leased-before.Leased)/float64(b.N), "leased/op")
			b.ReportMetric(float64(after.Rounds-before.Rounds)/float64(b.N), "rounds/op")
			close(stop)
			creator.Wait()
		})
	}
}

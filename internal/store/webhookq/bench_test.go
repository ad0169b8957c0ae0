package webhookq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/store/webhookq"
	"github.com/guildhall/guildhall/internal/testenv"
)

// BenchmarkDispatch: a dispatch of 200 events, each to one webhook that
// receives them (200 deliveries made in its write transaction, the first
// 64 leased to the instance and returned with their events), as a stream
// of creates has the deliverer do. The events are appended outside the
// timer. On a PostgreSQL without autovacuum the read of the leased
// deliveries' events keeps the plan it got while the table was small, a
// sequential scan (docs/performance.md).
//
//	go test -run '^$' -bench Dispatch -benchmem ./internal/store/webhookq
func BenchmarkDispatch(b *testing.B) {
	const events = 200
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			if kind == testenv.Postgres {
				testenv.RequirePostgres(b)
			}
			ctx := context.Background()
			s := openStore(b, kind)
			insertWebhook(b, s, "h", []string{"user.*"}, 0, true)
			types := slices.Repeat([]string{"user.created"}, events)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				appendEvents(b, s, types...)
				b.StartTimer()
				lease := webhookq.Lease{Owner: "bench", Until: time.Now().Add(time.Minute), Max: 64}
				d, err := s.WebhookQueue().DispatchLeased(ctx, 500, lease)
				if err != nil || d.Made != events || len(d.Claimed) != 64 {
					b.Fatalf("dispatched %d, %d leased (%v); want %d, 64", d.Made, len(d.Claimed), err, events)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/delivery")
		})
	}
}

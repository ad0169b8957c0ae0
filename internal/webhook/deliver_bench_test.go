package webhook_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
	"github.com/guildhall/guildhall/internal/webhook"
)

// The webhooks' costs as a user of the API sees them, over loopback HTTP on
// both stores, with the deliverer as it runs in production (its default
// poll). Goals (docs/performance.md): a delivery arrives within 1 s of its
// write's answer (p99); with a receiver that hangs, a write costs at most
// 1.5 times what it costs with no webhook.
//
//	go test -run '^$' -bench 'DeliveryLatency|WritesBesideAHangingReceiver' -benchtime 1x ./internal/webhook

// BenchmarkDeliveryLatency: 200 users created at about 40 a second, each
// event delivered to a prompt receiver; it reports the median and the 99th
// percentile of the time from a create's answer to its delivery's arrival.
func BenchmarkDeliveryLatency(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				p50, p99 := deliveryLatency(b, kind, 200, 25*time.Millisecond)
				b.ReportMetric(ms(p50), "p50-ms")
				b.ReportMetric(ms(p99), "p99-ms")
			}
		})
	}
}

func deliveryLatency(b *testing.B, kind string, n int, every time.Duration) (p50, p99 time.Duration) {
	b.StopTimer()
	h := start(b, kind, webhook.DelivererOptions{Poll: webhook.DefaultPoll})
	var mu sync.Mutex
	arrived := map[string]time.Time{} // by subject
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ Subject string }
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		arrived[ev.Subject] = time.Now()
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rc.Close)
	h.insert(hook{id: "latency", url: rc.URL, events: []string{"user.created"}})
	h.restart(webhook.DelivererOptions{Poll: webhook.DefaultPoll})
	b.StartTimer()
	answered := map[string]time.Time{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		res := h.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: h.Owner,
			Body: map[string]any{"username": fmt.Sprintf("late%04d", i)}})
		answered["user:"+res.Map(b)["id"].(string)] = time.Now()
	}
	waitFor(b, 30*time.Second, "every delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrived) >= n
	})
	var lat []time.Duration
	mu.Lock()
	for subject, at := range answered {
		lat = append(lat, arrived[subject].Sub(at))
	}
	mu.Unlock()
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
}

// BenchmarkWritesBesideAHangingReceiver: the median time of a create with
// no webhook, then with a webhook for every event whose receiver never
// answers (each attempt ends at its timeout, and the deliveries pile up);
// it reports both and their ratio.
func BenchmarkWritesBesideAHangingReceiver(b *testing.B) {
	for _, kind := range []string{testenv.SQLite, testenv.Postgres} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				h := start(b, kind, webhook.DelivererOptions{Poll: webhook.DefaultPoll})
				b.StartTimer()
				quiet := createTimes(b, h, "quiet", 300)
				hang := make(chan struct{})
				rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-hang:
					case <-r.Context().Done():
					}
				}))
				h.insert(hook{id: "hangs", url: rc.URL, events: []string{"user.*", "role.*", "channel.*"}})
				h.restart(webhook.DelivererOptions{Poll: webhook.DefaultPoll})
				beside := createTimes(b, h, "beside", 300)
				b.StopTimer()
				close(hang)
				rc.Close()
				b.ReportMetric(ms(quiet), "quiet-ms")
				b.ReportMetric(ms(beside), "hanging-ms")
				b.ReportMetric(float64(beside)/float64(quiet), "ratio")
				b.StartTimer()
			}
		})
	}
}

// createTimes creates n users one after the other and returns the median
// time of a create.
func createTimes(b *testing.B, h *harness, prefix string, n int) time.Duration {
	times := make([]time.Duration, n)
	for i := range n {
		began := time.Now()
		h.Must(http.StatusCreated, testenv.Req{Method: "POST", Path: "/users", Token: h.Owner,
			Body: map[string]any{"username": fmt.Sprintf("%s%04d", prefix, i)}})
		times[i] = time.Since(began)
	}
	slices.Sort(times)
	return times[n/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

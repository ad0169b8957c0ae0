package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/testenv"
)

// TestWebhookDeliveriesSurviveKill: with a receiver failing every attempt,
// 50 changes are acknowledged and the server is killed with SIGKILL at once
// (their deliveries pending: some not yet made, some attempted and waiting
// for their retry, some perhaps leased mid-attempt); restarted with the
// receiver answering again, every one of the 50 events is delivered.
func TestWebhookDeliveriesSurviveKill(t *testing.T) {
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		var up atomic.Bool
		var mu sync.Mutex
		delivered := map[int64]int{}
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if !up.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			var e struct{ Seq int64 }
			_ = json.Unmarshal(body, &e)
			mu.Lock()
			delivered[e.Seq]++
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(rc.Close)
		c := newClient(t)
		s := newStore(t, kind)
		env := "GUILDHALL_WEBHOOK_ALLOW_PRIVATE=true"
		in := start(t, "first", s, env).ready(t, c)
		must(t, c, in.URL, http.StatusCreated, "POST", "/webhooks", s.token,
			map[string]any{"url": rc.URL, "events": []string{"role.created"}})
		var seqs []int64
		for i := range 50 {
			must(t, c, in.URL, http.StatusCreated, "POST", fmt.Sprintf("/roles/k%d/create", i), s.token,
				map[string]any{"name": fmt.Sprintf("k%d", i), "permissions": []string{}})
		}
		in.kill()
		up.Store(true)
		in = start(t, "restarted", s, env).ready(t, c)
		type page struct {
			Items []struct {
				Seq  int64  `json:"seq"`
				Type string `json:"type"`
			} `json:"items"`
		}
		p := decode[page](t, must(t, c, in.URL, http.StatusOK, "GET", "/audit-log?type=role.created&limit=100", s.token, nil))
		for _, it := range p.Items {
			seqs = append(seqs, it.Seq)
		}
		if len(seqs) != 50 {
			t.Fatalf("the audit log holds %d role.created, want 50", len(seqs))
		}
		// A delivery leased by the killed instance waits for its lease
		// to end (a minute at most).
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			missing := 0
			for _, seq := range seqs {
				if delivered[seq] == 0 {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of the 50 events never delivered after the kill", missing)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

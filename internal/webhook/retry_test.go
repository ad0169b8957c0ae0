package webhook_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/webhook"
)

func TestNextAttempt(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	mid := func() float64 { return 0.5 }
	low := func() float64 { return 0 }
	high := func() float64 { return 0.999999 }
	cases := []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		rnd        func() float64
		want       time.Duration
		ok         bool
	}{
		{"before any attempt: at once", 0, 0, mid, 0, true},
		{"after the 1st: 5 s", 1, 0, mid, 5 * time.Second, true},
		{"after the 2nd: 5 min", 2, 0, mid, 5 * time.Minute, true},
		{"after the 3rd: 30 min", 3, 0, mid, 30 * time.Minute, true},
		{"after the 4th: 2 h", 4, 0, mid, 2 * time.Hour, true},
		{"after the 5th: 5 h", 5, 0, mid, 5 * time.Hour, true},
		{"after the 6th: 10 h", 6, 0, mid, 10 * time.Hour, true},
		{"after the 7th: 10 h", 7, 0, mid, 10 * time.Hour, true},
		{"after the 8th: the delivery fails", 8, 0, mid, 0, false},
		{"long after the last: fails", 100, 0, mid, 0, false},
		{"after the 8th, even with Retry-After", 8, time.Hour, mid, 0, false},
		{"jitter at its lowest: 90%", 1, 0, low, 4500 * time.Millisecond, true},
		{"jitter at its highest: 110%", 4, 0, high, time.Duration(float64(2*time.Hour) * (0.9 + 0.2*0.999999)), true},
		{"a random source out of range is held in it", 2, 0, func() float64 { return 7 }, 330 * time.Second, true},
		{"a longer Retry-After is honoured", 1, 90 * time.Second, mid, 90 * time.Second, true},
		{"a longer Retry-After, not jittered", 2, time.Hour, low, time.Hour, true},
		{"a shorter Retry-After is not", 3, time.Minute, mid, 30 * time.Minute, true},
		{"a Retry-After inside the jitter is not", 1, 5200 * time.Millisecond, high, time.Duration(float64(5*time.Second) * (0.9 + 0.2*0.999999)), true},
		{"Retry-After is bounded", 1, 30 * 24 * time.Hour, mid, webhook.MaxRetryAfter, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := webhook.NextAttempt(tc.attempt, now, tc.retryAfter, tc.rnd)
			if ok != tc.ok {
				t.Fatalf("NextAttempt ok = %v; want %v", ok, tc.ok)
			}
			if ok && got.Sub(now) != tc.want {
				t.Fatalf("NextAttempt = now + %v; want now + %v", got.Sub(now), tc.want)
			}
		})
	}
}

func TestNextAttemptJitterStaysWithinTenPercent(t *testing.T) {
	base := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}
	if webhook.MaxAttempts != len(base)+1 {
		t.Fatalf("MaxAttempts = %d; want %d", webhook.MaxAttempts, len(base)+1)
	}
	now := time.Unix(1_900_000_000, 0)
	src := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for i := 0; i < 2000; i++ {
		attempt := 1 + i%len(base)
		next, ok := webhook.NextAttempt(attempt, now, 0, src.Float64)
		d, b := next.Sub(now), base[attempt-1]
		if !ok || d < b*9/10 || d > b*11/10 {
			t.Fatalf("attempt %d: next in %v (ok %v); want within 10%% of %v", attempt, d, ok, b)
		}
		if attempt == 1 {
			seen[d] = true
		}
	}
	if len(seen) < 100 {
		t.Fatalf("the first retry took only %d distinct delays in about 300 draws: not jittered", len(seen))
	}
	// nil draws from math/rand/v2: still within bounds.
	if next, ok := webhook.NextAttempt(3, now, 0, nil); !ok || next.Sub(now) < 27*time.Minute || next.Sub(now) > 33*time.Minute {
		t.Fatalf("NextAttempt with a nil source = now + %v, %v; want about 30 min", next.Sub(now), ok)
	}
}

package webhook

import (
	"math/rand/v2"
	"time"
)

// schedule holds the delays before each retry: the first retry comes
// about 5 s after the first attempt fails, the last about 10 h after the
// seventh. Eight attempts span about a day and a half, long enough to
// outlast a receiver's night-long outage.
var schedule = [...]time.Duration{
	5 * time.Second,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	10 * time.Hour,
}

// MaxAttempts is how many attempts a delivery gets before it fails.
const MaxAttempts = len(schedule) + 1

// jitter spreads retries over ±10% of their delay, so the deliveries that
// failed together (a receiver's outage) do not all come back at once.
const jitter = 0.10

// MaxRetryAfter bounds the Retry-After a receiver may ask for: longer than
// any delay of the schedule, so it is honoured, but a receiver cannot hold
// a delivery back for ever.
const MaxRetryAfter = 24 * time.Hour

// NextAttempt returns when to make the next attempt of a delivery whose
// attempt number attempt (counting from 1) has just failed at now, and
// false when that was the last: the delivery fails. retryAfter is the
// receiver's Retry-After (0 when none): when longer than the jittered
// delay it is the delay, up to MaxRetryAfter. rnd returns a number in
// [0, 1); nil is math/rand/v2's Float64. Before any attempt (attempt < 1)
// the next one is due at once.
func NextAttempt(attempt int, now time.Time, retryAfter time.Duration, rnd func() float64) (time.Time, bool) {
	if attempt < 1 {
		return now, true
	}
	if attempt > len(schedule) {
		return time.Time{}, false
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	r := min(max(rnd(), 0), 1)
	base := schedule[attempt-1]
	d := time.Duration(float64(base) * (1 - jitter + 2*jitter*r))
	if retryAfter > d {
		d = min(retryAfter, MaxRetryAfter)
	}
	return now.Add(d), true
}

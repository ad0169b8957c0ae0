package httpapi

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// rateLimiter keeps a token bucket per client (token ID, or client address
// for unauthenticated requests) and sets the RateLimit-* headers.
type rateLimiter struct {
	perSecond float64
	burst     int
	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newRateLimiter(perSecond float64) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	burst := int(math.Ceil(perSecond * 2))
	return &rateLimiter{perSecond: perSecond, burst: burst, buckets: map[string]*bucket{}}
}

// allow takes a token for key, sets the headers, and reports whether the
// request may go on; when not, Retry-After is set.
func (r *rateLimiter) allow(c echo.Context, key string) bool {
	now := time.Now()
	r.mu.Lock()
	b := r.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(rate.Limit(r.perSecond), r.burst)}
		r.buckets[key] = b
	}
	b.seen = now
	if now.Sub(r.lastSweep) > time.Minute {
		for k, v := range r.buckets {
			if now.Sub(v.seen) > 10*time.Minute {
				delete(r.buckets, k)
			}
		}
		r.lastSweep = now
	}
	r.mu.Unlock()

	res := b.lim.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	ok := delay == 0
	if !ok {
		res.CancelAt(now)
	}
	remaining := int(math.Floor(b.lim.TokensAt(now)))
	if remaining < 0 {
		remaining = 0
	}
	// Seconds until the bucket is full again.
	reset := int(math.Ceil(float64(r.burst-remaining) / r.perSecond))
	h := c.Response().Header()
	h.Set("RateLimit-Limit", strconv.Itoa(r.burst))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(reset))
	if !ok {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(delay.Seconds()))))
	}
	return ok
}

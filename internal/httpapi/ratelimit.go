package httpapi

import (
	"container/list"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/guildhall/guildhall/internal/guild"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// rateLimiter keeps a token bucket per user and per client address, and
// sets the RateLimit-* headers. It is applied before the credential lookup:
// a request carrying a token the limiter has seen authenticate uses its
// user's bucket, which all of that user's tokens share (so minting tokens
// buys no throughput); any other request (no token, an unknown or mistyped
// one, a ticket) uses the bucket of its client address, so a flood of bad
// tokens costs no store query past the address's limit. The tables are
// bounded LRUs: the address table can be filled from outside (with a
// trusted proxy's X-Forwarded-For), but never grown past its capacity, and
// only tokens that authenticated enter the token table, and their users
// the user table.
type rateLimiter struct {
	perSecond float64
	burst     int
	addrs     *lru[*rate.Limiter]
	users     *lru[*rate.Limiter]
	tokens    *lru[string] // a token's key → its user's ID
}

func newRateLimiter(perSecond float64, capacity int) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	if capacity <= 0 {
		capacity = 10000
	}
	burst := int(math.Ceil(perSecond * 2))
	return &rateLimiter{perSecond: perSecond, burst: burst,
		addrs: newLRU[*rate.Limiter](capacity), users: newLRU[*rate.Limiter](capacity), tokens: newLRU[string](capacity)}
}

// tokenKey is how the limiter knows a bearer token: a hash, never the
// secret (the first half of the hash tokens are stored under). The gate
// computes it once per request, for admit and then authenticated or
// refused.
func tokenKey(c echo.Context) string {
	authz := c.Request().Header.Get(echo.HeaderAuthorization)
	scheme, token, ok := strings.Cut(authz, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return ""
	}
	return guild.HashToken(strings.TrimSpace(token))[:32]
}

// admit takes a token from the bucket of the request whose bearer token's
// key is key ("": none), before any credential lookup, sets the headers,
// and reports whether the request may go on; when not, Retry-After is set.
func (r *rateLimiter) admit(c echo.Context, key string) bool {
	now := time.Now()
	var lim *rate.Limiter
	if userID, ok := r.tokens.get(key, nil); ok {
		lim, _ = r.users.get(userID, r.newLimiter)
	} else {
		lim, _ = r.addrs.get(c.RealIP(), r.newLimiter)
	}
	res := lim.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	ok := delay == 0
	if !ok {
		res.CancelAt(now)
	}
	remaining := max(int(math.Floor(lim.TokensAt(now))), 0)
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

// authenticated charges the bearer token whose key is key, from its next
// request on, to the bucket of the user it authenticated as.
func (r *rateLimiter) authenticated(key, userID string) {
	r.tokens.put(key, userID)
}

// refused forgets a bearer token that no longer authenticates (revoked,
// expired, its user suspended): its further requests go to their address's
// bucket, so whoever still holds it cannot spend its user's.
func (r *rateLimiter) refused(key string) {
	r.tokens.remove(key)
}

func (r *rateLimiter) newLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(r.perSecond), r.burst)
}

// lru is a fixed-capacity map from client keys to values (buckets, user
// IDs); the least recently used goes when a new one comes.
type lru[V any] struct {
	mu    sync.Mutex
	cap   int
	order *list.List // front: most recent; values *lruEntry[V]
	index map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](capacity int) *lru[V] {
	return &lru[V]{cap: capacity, order: list.New(), index: make(map[string]*list.Element, capacity)}
}

// get returns key's value, creating it with create when absent (nil create:
// absent stays absent, and ok is false).
func (l *lru[V]) get(key string, create func() V) (v V, ok bool) {
	if key == "" {
		return v, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, found := l.index[key]; found {
		l.order.MoveToFront(el)
		return el.Value.(*lruEntry[V]).val, true
	}
	if create == nil {
		return v, false
	}
	return l.insert(key, create()), true
}

// put sets key's value.
func (l *lru[V]) put(key string, v V) {
	if key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, found := l.index[key]; found {
		l.order.MoveToFront(el)
		el.Value.(*lruEntry[V]).val = v
		return
	}
	l.insert(key, v)
}

// insert adds an absent key, evicting the least recently used at capacity.
func (l *lru[V]) insert(key string, v V) V {
	if l.order.Len() >= l.cap {
		last := l.order.Back()
		l.order.Remove(last)
		delete(l.index, last.Value.(*lruEntry[V]).key)
	}
	l.index[key] = l.order.PushFront(&lruEntry[V]{key: key, val: v})
	return v
}

// remove forgets key.
func (l *lru[V]) remove(key string) {
	if key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, found := l.index[key]; found {
		l.order.Remove(el)
		delete(l.index, key)
	}
}

func (l *lru[V]) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// ipExtractor says where a request comes from: the connection's address,
// unless the connection is from one of the trusted proxies, whose
// X-Forwarded-For is then believed (from the right, up to the first address
// that is not a trusted proxy). Echo's default would believe any client's
// X-Forwarded-For.
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

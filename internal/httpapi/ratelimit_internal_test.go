package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

// 100k spoofed client addresses (through a trusted proxy, the worst case)
// leave the address table at its capacity, and its memory with it: an
// unbounded table grows with every address a client can make up.
func TestRateLimiterTableIsBounded(t *testing.T) {
	const capacity = 1000
	r := newRateLimiter(5, capacity)
	e := echo.New()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		req := httptest.NewRequest(http.MethodGet, "/api/roles", nil)
		req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255)
		req.Header.Set("Authorization", fmt.Sprintf("Bearer bad-%d", i)) // unknown tokens: the address's bucket
		c := e.NewContext(req, httptest.NewRecorder())
		if !r.admit(c, tokenKey(c)) {
			t.Fatalf("request %d from a fresh address refused", i)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := r.addrs.len(); n != capacity {
		t.Fatalf("address table holds %d, want its capacity %d", n, capacity)
	}
	if n := r.tokens.len(); n != 0 {
		t.Fatalf("token table holds %d unknown tokens, want 0", n)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d KiB for 100k addresses at capacity %d", grown>>10, capacity)
	if grown > 8<<20 {
		t.Fatalf("heap grew by %d MiB", grown>>20)
	}
}

// TestTokenKey: the limiter knows a bearer token by the hex of the first
// half of its SHA-256, at any length, and a request without one by "".
func TestTokenKey(t *testing.T) {
	e := echo.New()
	key := func(authz string) string {
		req := httptest.NewRequest(http.MethodGet, "/api/roles", nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		return tokenKey(e.NewContext(req, httptest.NewRecorder()))
	}
	for _, n := range []int{1, 32, 33, 511, 512, 513, 4096} {
		token := strings.Repeat("k", n)
		sum := sha256.Sum256([]byte(token))
		if got, want := key("bearer  "+token), hex.EncodeToString(sum[:16]); got != want {
			t.Errorf("length %d: %s, want %s", n, got, want)
		}
	}
	for _, authz := range []string{"", "Bearer", "Bearer ", "Basic abc"} {
		if got := key(authz); got != "" {
			t.Errorf("%q: key %q, want none", authz, got)
		}
	}
}

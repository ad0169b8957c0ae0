package httpapi_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/testenv"
)

// The admin console is served from the binary at /console/: index.html and
// the hashed assets it names, each with a strict CSP, nosniff, an ETag and
// the cache policy that suits it; /console redirects; anything else is a
// 404 problem.
func TestConsoleIsServed(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(t *testing.T, method, path string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, e.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, string(body)
	}

	t.Run("redirect", func(t *testing.T) {
		res, _ := get(t, "GET", "/console", nil)
		if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/console/" {
			t.Errorf("GET /console: %d Location %q", res.StatusCode, res.Header.Get("Location"))
		}
	})

	res, index := get(t, "GET", "/console/", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console/: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	assets := regexp.MustCompile(`(?:src|href)="(/console/console-[A-Z0-9]{8}\.(?:js|css))"`).FindAllStringSubmatch(index, -1)
	if len(assets) != 2 {
		t.Fatalf("index.html names %d hashed assets, want a script and a style sheet:\n%s", len(assets), index)
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`).MatchString(index) || strings.Contains(index, "style=") ||
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`).MatchString(index) {
		t.Errorf("index.html has inline code or a remote reference:\n%s", index)
	}

	cases := []struct {
		name, path, ctype, cache string
	}{
		{name: "index", path: "/console/", ctype: "text/html", cache: "no-cache"},
		{name: "style sheet", path: assets[0][1], ctype: "text/css", cache: "public, max-age=31536000, immutable"},
		{name: "script", path: assets[1][1], ctype: "text/javascript", cache: "public, max-age=31536000, immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, body := get(t, "GET", tc.path, nil)
			h := res.Header
			if res.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), tc.ctype) || len(body) == 0 {
				t.Fatalf("GET %s: %d %s, %d bytes", tc.path, res.StatusCode, h.Get("Content-Type"), len(body))
			}
			csp := h.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("CSP %q lacks %q", csp, want)
				}
			}
			if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
				t.Errorf("CSP %q allows inline code or another origin", csp)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != tc.cache {
				t.Errorf("nosniff %q, Cache-Control %q (want %q)", h.Get("X-Content-Type-Options"), h.Get("Cache-Control"), tc.cache)
			}
			tag := h.Get("ETag")
			if !regexp.MustCompile(`^"[0-9a-f]{32}"$`).MatchString(tag) {
				t.Fatalf("ETag %q", tag)
			}
			if res, body := get(t, "GET", tc.path, map[string]string{"If-None-Match": tag}); res.StatusCode != http.StatusNotModified || body != "" {
				t.Errorf("GET with If-None-Match: %d, %d bytes", res.StatusCode, len(body))
			}
			if res, body := get(t, "HEAD", tc.path, nil); res.StatusCode != http.StatusOK || body != "" || res.Header.Get("ETag") != tag {
				t.Errorf("HEAD: %d, %d bytes, ETag %q", res.StatusCode, len(body), res.Header.Get("ETag"))
			}
		})
	}

	for _, path := range []string{"/console/nope.js", "/console/../api/me", "/console/console-AAAAAAAA.js"} {
		t.Run("missing "+path, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.URL+path, nil)
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
			}
		})
	}
}

package webhook_test

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"testing"

	"github.com/guildhall/guildhall/internal/webhook"
)

// anyPublic resolves every name to one public address: the fuzzer explores
// URLs, not DNS, and nothing here connects.
type anyPublic struct{}

func (anyPublic) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{public}, nil
}

// FuzzCheckURL holds that CheckURL never panics, refuses only with a
// *URLError, and accepts only absolute http or https URLs with a host and
// no user; without allowPrivate, never an address literal in a refused
// block.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://hooks.example.com/in", "http://127.0.0.1:8080/", "http://[::ffff:10.0.0.1]/",
		"http://[fe80::1%25eth0]:80/", "https://u:p@hooks.example.com/", "http:///x", "http:x",
		"ftp://a/", "//hooks.example.com/", "http://[::1", "http://%41/", "http://a:99999/",
		"http://[64:ff9b::7f00:1]/", "HTTP://X/", "http://0x7f.1/", "http://2130706433/",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, allowPrivate bool) {
		err := webhook.CheckURL(context.Background(), raw, allowPrivate, anyPublic{})
		if err != nil {
			var ue *webhook.URLError
			if !errors.As(err, &ue) || ue.Detail == "" || !errors.Is(err, webhook.ErrRefused) {
				t.Fatalf("CheckURL(%q) = %v; want a *URLError with a detail", raw, err)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			t.Fatalf("CheckURL accepted %q, which url.Parse refuses: %v", raw, perr)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("CheckURL accepted %q: scheme %q, host %q, user %v", raw, u.Scheme, u.Hostname(), u.User)
		}
		if allowPrivate {
			return
		}
		if a, err := netip.ParseAddr(u.Hostname()); err == nil {
			a = a.WithZone("").Unmap()
			if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
				a.IsMulticast() || netip.MustParsePrefix("100.64.0.0/10").Contains(a) {
				t.Fatalf("CheckURL accepted %q, whose host is %v", raw, a)
			}
		}
	})
}

package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/webhook"
)

// public is a public address (example.com's). The resolvers below answer
// it only where no connection follows: tests never reach the Internet.
var public = netip.MustParseAddr("93.184.215.14")

// fixedResolver answers each name from its map and fails for the others.
type fixedResolver map[string][]netip.Addr

func (r fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// rebindingResolver answers first once, then next: a name checked as
// public that leads somewhere else when a connection is made.
type rebindingResolver struct {
	mu          sync.Mutex
	first, next netip.Addr
	calls       int
}

func (r *rebindingResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.next}, nil
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestCheckURL(t *testing.T) {
	r := fixedResolver{
		"hooks.example.com": {public},
		"dual.example.com":  addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"),
		"mixed.example.com": addrs("93.184.215.14", "10.0.0.7"),
		"inside.example":    addrs("192.168.10.2"),
		"empty.example":     {},
		"localhost":         addrs("127.0.0.1", "::1"),
	}
	cases := []struct {
		name    string
		url     string
		private bool
		want    webhook.Reason // "": accepted
	}{
		{"https with a public name", "https://hooks.example.com/in?x=1", false, ""},
		{"http with a port", "http://hooks.example.com:8080/in", false, ""},
		{"a name with IPv4 and IPv6 addresses", "https://dual.example.com/", false, ""},
		{"a public IPv4 literal", "http://8.8.8.8/", false, ""},
		{"a public IPv6 literal", "http://[2606:4700::1111]/", false, ""},
		{"just below shared", "http://100.63.255.255/", false, ""},
		{"just above shared", "http://100.128.0.0/", false, ""},
		{"just above 172.16/12", "http://172.32.0.1/", false, ""},
		{"a scheme in capitals", "HTTPS://hooks.example.com/", false, ""},

		{"ftp", "ftp://hooks.example.com/", false, webhook.ReasonURL},
		{"javascript", "javascript:alert(1)", false, webhook.ReasonURL},
		{"no scheme", "hooks.example.com/in", false, webhook.ReasonURL},
		{"relative", "/in", false, webhook.ReasonURL},
		{"no host", "http:///in", false, webhook.ReasonURL},
		{"opaque", "http:hooks.example.com", false, webhook.ReasonURL},
		{"a port alone", "http://:8080/", false, webhook.ReasonURL},
		{"port 0", "http://hooks.example.com:0/", false, webhook.ReasonURL},
		{"port 65536", "http://hooks.example.com:65536/", false, webhook.ReasonURL},
		{"unparsable", "http://hooks example.com/", false, webhook.ReasonURL},
		{"user and password", "https://user:pw@hooks.example.com/", false, webhook.ReasonUserinfo},
		{"user alone", "https://user@hooks.example.com/", false, webhook.ReasonUserinfo},
		{"an unknown name", "https://nowhere.example/", false, webhook.ReasonUnresolvable},
		{"a name with no address", "https://empty.example/", false, webhook.ReasonUnresolvable},

		{"loopback IPv4", "http://127.0.0.1:8080/", false, webhook.ReasonAddress},
		{"loopback elsewhere in 127/8", "http://127.45.6.7/", false, webhook.ReasonAddress},
		{"loopback IPv6", "http://[::1]/", false, webhook.ReasonAddress},
		{"localhost", "http://localhost/", false, webhook.ReasonAddress},
		{"10/8", "http://10.1.2.3/", false, webhook.ReasonAddress},
		{"172.16/12", "http://172.31.255.254/", false, webhook.ReasonAddress},
		{"192.168/16", "http://192.168.1.1/", false, webhook.ReasonAddress},
		{"fc00::/7", "http://[fd12:3456::1]/", false, webhook.ReasonAddress},
		{"cloud metadata, link-local", "http://169.254.169.254/latest/meta-data/", false, webhook.ReasonAddress},
		{"fe80::/10 with a zone", "http://[fe80::1%25eth0]/", false, webhook.ReasonAddress},
		{"shared 100.64/10", "http://100.64.0.1/", false, webhook.ReasonAddress},
		{"shared, last address", "http://100.127.255.255/", false, webhook.ReasonAddress},
		{"unspecified IPv4", "http://0.0.0.0/", false, webhook.ReasonAddress},
		{"this network 0/8", "http://0.1.2.3/", false, webhook.ReasonAddress},
		{"unspecified IPv6", "http://[::]/", false, webhook.ReasonAddress},
		{"multicast IPv4", "http://224.0.0.1/", false, webhook.ReasonAddress},
		{"multicast IPv6", "http://[ff02::1]/", false, webhook.ReasonAddress},
		{"broadcast", "http://255.255.255.255/", false, webhook.ReasonAddress},
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]/", false, webhook.ReasonAddress},
		{"NAT64 of 10.0.0.1", "http://[64:ff9b::a00:1]/", false, webhook.ReasonAddress},
		{"6to4 of 192.168.1.1", "http://[2002:c0a8:101::1]/", false, webhook.ReasonAddress},
		{"a name resolving to a private address", "https://inside.example/", false, webhook.ReasonAddress},
		{"one private address among public ones", "https://mixed.example.com/", false, webhook.ReasonAddress},

		{"allowed: loopback", "http://127.0.0.1:8080/", true, ""},
		{"allowed: a private name", "https://inside.example/", true, ""},
		{"allowed: a name not looked up", "https://nowhere.example/", true, ""},
		{"allowed, still: ftp", "ftp://127.0.0.1/", true, webhook.ReasonURL},
		{"allowed, still: user", "http://u@127.0.0.1/", true, webhook.ReasonUserinfo},
		{"allowed, still: no host", "http:///x", true, webhook.ReasonURL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.CheckURL(context.Background(), tc.url, tc.private, r)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckURL(%q) = %v; want accepted", tc.url, err)
				}
				return
			}
			var ue *webhook.URLError
			if !errors.As(err, &ue) || ue.Reason != tc.want || !errors.Is(err, webhook.ErrRefused) {
				t.Fatalf("CheckURL(%q) = %v; want a *URLError for %q", tc.url, err, tc.want)
			}
			if ue.Detail == "" {
				t.Fatal("the refusal has no detail for the webhook's creator")
			}
			if ue.Addr.IsValid() && containsAddr(ue.Detail, ue.Addr) {
				t.Fatalf("the detail %q names the address", ue.Detail)
			}
		})
	}
}

func containsAddr(s string, a netip.Addr) bool {
	return strings.Contains(s, a.String()) || strings.Contains(s, a.Unmap().String())
}

// receiver is an httptest server on loopback counting the connections it
// accepts and the requests it answers.
type receiver struct {
	*httptest.Server
	conns, requests atomic.Int32
}

func newReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		h(w, req)
	}))
	r.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.Start()
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) port(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestDialerRefusesRebinding(t *testing.T) {
	rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	target := "http://hooks.example.com:" + rcv.port(t) + "/in"
	loopback := netip.MustParseAddr("127.0.0.1")
	ctx := context.Background()

	r := &rebindingResolver{first: public, next: loopback}
	if err := webhook.CheckURL(ctx, target, false, r); err != nil {
		t.Fatalf("CheckURL with a public answer = %v; want accepted", err)
	}
	client := webhook.NewClient(webhook.Options{Resolver: r, Timeout: 2 * time.Second})
	o := webhook.Attempt(ctx, client, target, webhook.Delivery{ID: "msg_rebind", Body: []byte(`{}`)},
		[]string{webhook.NewSecret()}, time.Now())
	var ue *webhook.URLError
	if o.Result != webhook.Retry || o.Status != 0 || !errors.As(o.Err, &ue) || ue.Addr != loopback {
		t.Fatalf("Attempt = %+v; want Retry refused at 127.0.0.1", o)
	}
	if r.calls != 2 {
		t.Fatalf("the resolver was asked %d times; want 2 (the check, the connection)", r.calls)
	}
	if n := rcv.conns.Load(); n != 0 {
		t.Fatalf("the receiver accepted %d connections; want none", n)
	}

	// The same resolver with private addresses allowed reaches the
	// receiver: the refusal above is the check's, not a failed dial.
	r = &rebindingResolver{first: public, next: loopback}
	if err := webhook.CheckURL(ctx, target, false, r); err != nil {
		t.Fatalf("CheckURL with a public answer = %v; want accepted", err)
	}
	client = webhook.NewClient(webhook.Options{AllowPrivate: true, Resolver: r, Timeout: 2 * time.Second})
	o = webhook.Attempt(ctx, client, target, webhook.Delivery{ID: "msg_rebind", Body: []byte(`{}`)},
		[]string{webhook.NewSecret()}, time.Now())
	if o.Result != webhook.Delivered || o.Status != http.StatusNoContent {
		t.Fatalf("Attempt with private addresses allowed = %+v; want Delivered 204", o)
	}
}

func TestDialerTriesEachAddress(t *testing.T) {
	rcv := newReceiver(t, func(http.ResponseWriter, *http.Request) {})
	port := rcv.port(t)
	ctx := context.Background()

	// Every address of a name is checked: the private one is refused, and
	// with no other address the dial fails without a connection.
	d := webhook.NewDialer(false, fixedResolver{"hooks.example.com": addrs("127.0.0.1", "10.0.0.1")})
	conn, err := d.DialContext(ctx, "tcp", "hooks.example.com:"+port)
	if err == nil {
		conn.Close()
		t.Fatal("DialContext reached a loopback address")
	}
	if !errors.Is(err, webhook.ErrRefused) {
		t.Fatalf("DialContext = %v; want a refusal", err)
	}
	// An address literal is checked too, without a lookup.
	if conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port)); err == nil || !errors.Is(err, webhook.ErrRefused) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("DialContext to 127.0.0.1 = %v; want a refusal", err)
	}
	if n := rcv.conns.Load(); n != 0 {
		t.Fatalf("the receiver accepted %d connections; want none", n)
	}

	// Allowed, an unreachable first address gives way to the next.
	d = webhook.NewDialer(true, fixedResolver{"hooks.example.com": addrs("::1", "127.0.0.1")})
	conn, err = d.DialContext(ctx, "tcp", "hooks.example.com:"+port)
	if err != nil {
		t.Fatalf("DialContext with private addresses allowed = %v", err)
	}
	conn.Close()
}

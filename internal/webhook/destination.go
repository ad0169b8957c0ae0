package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
)

// ErrRefused matches (errors.Is) every *URLError: a URL or a destination
// that webhooks may not reach.
var ErrRefused = errors.New("webhook destination refused")

// Reason says why a URL or a destination is refused.
type Reason string

// Reasons of a *URLError.
const (
	ReasonURL          Reason = "url"          // not an absolute http or https URL with a host and a valid port
	ReasonUserinfo     Reason = "userinfo"     // holds a user name or a password
	ReasonUnresolvable Reason = "unresolvable" // its host resolves to no address
	ReasonAddress      Reason = "address"      // an address it resolves to, or a connection goes to, is refused
)

// URLError is a refused URL or destination. Detail is written for the
// webhook's creator (the service shows it as a 400 at body.url); it never
// names the address a host resolved to, which would tell the creator what
// names mean inside the service's network. Addr and Err, which Error
// includes, are for logs.
type URLError struct {
	Reason Reason
	Detail string
	Addr   netip.Addr // the refused address (ReasonAddress)
	Err    error      // the cause: a parse or lookup error
}

func (e *URLError) Error() string {
	s := e.Detail
	if e.Addr.IsValid() {
		s += " (" + e.Addr.String() + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *URLError) Is(target error) bool { return target == ErrRefused }

// Unwrap exposes the cause.
func (e *URLError) Unwrap() error { return e.Err }

// Resolver looks up a host's addresses; *net.Resolver is one. Tests give
// their own, to say what a name resolves to and when.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL refuses a webhook's URL unless it is an absolute http or https
// URL with a host, without a user name or password, and, unless
// allowPrivate, whose host resolves only to addresses webhooks may reach
// (not loopback, private, link-local, shared, unspecified or multicast).
// The error is a *URLError. A nil resolver is net.DefaultResolver.
//
// A check when the URL is given cannot hold for later: a name may resolve
// elsewhere at delivery time. The Dialer checks every connection again.
func CheckURL(ctx context.Context, raw string, allowPrivate bool, r Resolver) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &URLError{Reason: ReasonURL, Detail: "The URL cannot be parsed.", Err: err}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return &URLError{Reason: ReasonURL, Detail: "The URL's scheme must be http or https."}
	}
	if u.User != nil {
		return &URLError{Reason: ReasonUserinfo, Detail: "The URL must not hold a user name or password."}
	}
	host := u.Hostname()
	if host == "" {
		return &URLError{Reason: ReasonURL, Detail: "The URL must name a host."}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return &URLError{Reason: ReasonURL, Detail: "The URL's port must be a number from 1 to 65535."}
		}
	}
	if allowPrivate {
		return nil
	}
	addrs, err := lookup(ctx, r, "ip", host)
	if err != nil {
		return &URLError{Reason: ReasonUnresolvable, Detail: "The URL's host does not resolve to an address.", Err: err}
	}
	for _, a := range addrs {
		if err := checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// lookup resolves host, or returns it when it is an address already.
func lookup(ctx context.Context, r Resolver, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no address for %q", host)
	}
	return addrs, nil
}

// Blocks that netip's predicates do not name.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")     // "this network": 0.0.0.0 reaches the local host
	shared      = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT, often the provider's own
	broadcast   = netip.MustParseAddr("255.255.255.255")
	siteLocal   = netip.MustParsePrefix("fec0::/10") // deprecated, still routed as private by some networks
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// refusedClass names the class of an address webhooks may not reach, or
// returns "" when they may. An IPv6 address that carries an IPv4 one (mapped,
// NAT64's well-known prefix, 6to4) is judged by the IPv4 address it leads to.
func refusedClass(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate() || siteLocal.Contains(a):
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case shared.Contains(a):
		return "shared"
	case a.IsMulticast() || a == broadcast:
		return "multicast"
	}
	if b := a.As16(); nat64.Contains(a) {
		return refusedClass(netip.AddrFrom4([4]byte(b[12:16])))
	} else if sixToFour.Contains(a) {
		return refusedClass(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return ""
}

// checkAddr returns a *URLError when webhooks may not reach a.
func checkAddr(a netip.Addr) error {
	class := refusedClass(a)
	if class == "" {
		return nil
	}
	return &URLError{Reason: ReasonAddress, Addr: a,
		Detail: fmt.Sprintf("The URL's host resolves to a %s address, which webhooks may not reach.", class)}
}

// Dialer connects to webhook destinations. It resolves names itself, with
// its Resolver, and checks the address of each connection just before it
// is made (net.Dialer's Control): whatever a name resolved to when its URL
// was checked, a connection to a refused address is never opened.
type Dialer struct {
	dialer   net.Dialer
	resolver Resolver
}

// NewDialer returns a Dialer; allowPrivate lets it reach every address. A
// nil resolver is net.DefaultResolver.
func NewDialer(allowPrivate bool, r Resolver) *Dialer {
	d := &Dialer{resolver: r}
	if !allowPrivate {
		d.dialer.Control = controlAddr
	}
	return d
}

// controlAddr refuses a connection to an address webhooks may not reach;
// address is the one about to be connected to, never a name.
func controlAddr(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &URLError{Reason: ReasonAddress, Detail: "The destination's address cannot be read.", Err: err}
	}
	return checkAddr(ap.Addr())
}

// DialContext connects to address ("host:port"), trying the host's
// addresses in turn; it is meant for http.Transport.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	lookupNet := "ip"
	switch network {
	case "tcp4":
		lookupNet = "ip4"
	case "tcp6":
		lookupNet = "ip6"
	}
	addrs, err := lookup(ctx, d.resolver, lookupNet, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var first error
	for _, a := range addrs {
		conn, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

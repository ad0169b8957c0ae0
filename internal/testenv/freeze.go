package testenv

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Freezer is a TCP proxy in front of PostgreSQL that a test can freeze: then
// it forwards nothing in either direction, on the connections it holds and
// on new ones (which it accepts and leaves unanswered), the way a database
// whose processes are stopped behaves; thawed, it forwards again what was
// held. It needs no root and leaves the shared server alone.
type Freezer struct {
	// URL is the database URL given to NewFreezer, through the proxy.
	URL string

	ln     net.Listener
	target string
	closed chan struct{}

	mu     sync.Mutex
	thawed chan struct{} // closed while the proxy forwards
	conns  map[net.Conn]struct{}
}

// NewFreezer starts a proxy to the server of the PostgreSQL URL dbURL; it
// stops when the test ends.
func NewFreezer(t testing.TB, dbURL string) *Freezer {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("freezer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("freezer: %v", err)
	}
	f := &Freezer{ln: ln, target: u.Host, closed: make(chan struct{}), thawed: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	close(f.thawed)
	u.Host = ln.Addr().String()
	f.URL = u.String()
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// Freeze stops forwarding.
func (f *Freezer) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		f.thawed = make(chan struct{})
	default:
	}
}

// Thaw forwards again.
func (f *Freezer) Thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

// wait returns once the proxy forwards; false when it is closing.
func (f *Freezer) wait() bool {
	f.mu.Lock()
	thawed := f.thawed
	f.mu.Unlock()
	select {
	case <-thawed:
		return true
	case <-f.closed:
		return false
	}
}

func (f *Freezer) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.closed:
		_ = c.Close()
		return false
	default:
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			return
		}
		go func() {
			if !f.wait() {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				_ = c.Close()
				return
			}
			if !f.track(up) {
				_ = c.Close()
				return
			}
			go f.pipe(up, c)
			f.pipe(c, up)
		}()
	}
}

// pipe copies src to dst, holding what it read while the proxy is frozen.
func (f *Freezer) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		f.mu.Lock()
		delete(f.conns, dst)
		delete(f.conns, src)
		f.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !f.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *Freezer) close() {
	f.mu.Lock()
	select {
	case <-f.closed:
		f.mu.Unlock()
		return
	default:
	}
	close(f.closed)
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	_ = f.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
}

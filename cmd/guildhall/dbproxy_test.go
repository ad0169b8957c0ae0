package main

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dbProxy is a TCP proxy of the test's own between an instance and
// PostgreSQL: the faults of the database connection without root. It can
// hold every chunk it forwards for a while (a slow network), and cut every
// connection it carries (a network cut, or what an instance sees of a
// database that restarts); the instance reconnects through it.
type dbProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds each chunk waits, each way

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// viaProxy starts a proxy to the server of dbURL and returns the URL that
// connects through it. The proxy stops when the test ends.
func viaProxy(t *testing.T, dbURL string) (string, *dbProxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse %q: %v", dbURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{ln: ln, upstream: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return u.String(), p
}

func (p *dbProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *dbProxy) handle(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go p.pipe(up, c, done)
	go p.pipe(c, up, done)
	<-done // one side ended: end both
	_ = c.Close()
	_ = up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *dbProxy) pipe(dst, src net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d)) // the fault itself: a slow link
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// slow makes every chunk wait d in each direction (0 ends it).
func (p *dbProxy) slow(d time.Duration) { p.delay.Store(int64(d)) }

// cut closes every connection the proxy carries (both ends of each).
func (p *dbProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *dbProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cut()
}

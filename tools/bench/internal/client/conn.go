package client

import (
	"errors"
	"io"
	"net"
	"time"
)

// Conn is one keep-alive HTTP/1.1 connection: a request goes out as the
// bytes given, and the response's status line, Content-Length (or chunks)
// and Connection header are read; the body is handed back undecoded.
type Conn struct {
	addr string
	c    net.Conn
	buf  []byte // bytes read and not yet consumed are buf[r:w]
	r, w int
	// closing: the last response said Connection: close.
	closing bool
	dl      time.Time // the deadline of every read and write, kept across redials
}

// Response is one response read by RoundTrip. Body is the raw body (the
// chunks' framing included when Chunked) in the connection's buffer: it
// is valid until the connection's next RoundTrip.
type Response struct {
	Status  int
	Body    []byte
	Chunked bool
	Close   bool // the server closes the connection after it
}

// Decoded returns a copy of the body, its chunks joined when it was sent
// chunked.
func (r Response) Decoded() ([]byte, error) {
	if r.Chunked {
		return dechunk(r.Body)
	}
	return append([]byte(nil), r.Body...), nil
}

// Dial opens a connection to addr (host:port).
func Dial(addr string) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &Conn{addr: addr, c: c, buf: make([]byte, 64<<10)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline bounds every read and write from now on, across redials.
func (c *Conn) SetDeadline(t time.Time) {
	c.dl = t
	_ = c.c.SetDeadline(t)
}

// Redial replaces the connection with a new one to the same address.
func (c *Conn) Redial() error {
	_ = c.c.Close()
	nc, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.c, c.r, c.w, c.closing = nc, 0, 0, false
	if !c.dl.IsZero() {
		_ = nc.SetDeadline(c.dl)
	}
	return nil
}

// RoundTrip sends req and reads one response; after a response that said
// Connection: close, it first connects again.
func (c *Conn) RoundTrip(req []byte) (Response, error) {
	if c.closing {
		if err := c.Redial(); err != nil {
			return Response{}, err
		}
	}
	if _, err := c.c.Write(req); err != nil {
		return Response{}, err
	}
	for {
		if c.w > c.r {
			resp, n, err := parseResponse(c.buf[c.r:c.w])
			if err == nil {
				start := c.r
				c.r += n
				c.closing = resp.close
				if c.r == c.w {
					c.r, c.w = 0, 0
				}
				return Response{Status: resp.status, Body: c.buf[start+resp.bodyOff : start+n],
					Chunked: resp.chunked, Close: resp.close}, nil
			}
			if !errors.Is(err, errNeedMore) {
				return Response{}, err
			}
		}
		if c.w == len(c.buf) {
			if c.r > 0 { // move the partial response to the front
				c.w = copy(c.buf, c.buf[c.r:c.w])
				c.r = 0
			} else { // a response larger than the buffer
				nb := make([]byte, 2*len(c.buf))
				copy(nb, c.buf[:c.w])
				c.buf = nb
			}
		}
		n, rerr := c.c.Read(c.buf[c.w:])
		c.w += n
		if rerr != nil && n == 0 {
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return Response{}, rerr
		}
	}
}

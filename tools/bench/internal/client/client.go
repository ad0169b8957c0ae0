// Package client is the one HTTP client of Guildhall's measuring tools.
//
// The load generator of guildhall-bench sends requests built from a
// Template by a Source over a Conn (keep-alive HTTP/1.1 over raw TCP, the
// body skipped, no allocation per request), and Client makes JSON calls to
// /api over a pool of the same connections: the set-up calls of both tools
// (seeding, fixtures, cursor walks) and the timed requests of
// guildhall-load.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Client calls one server's /api as a bearer token, JSON in and out.
type Client struct {
	addr, token string
	// Timeout bounds a call that the context does not bound sooner.
	Timeout time.Duration

	mu   sync.Mutex
	idle []idleConn // most recently used last
}

type idleConn struct {
	c     *Conn
	since time.Time
}

const (
	// maxIdle is how many connections the pool keeps.
	maxIdle = 256
	// maxIdleTime is how long a connection may wait in the pool: a server
	// may close an idle keep-alive connection at any time after a while,
	// and a request sent on it would then fail (or, for a POST, be
	// ambiguous), so older ones are closed instead of reused.
	maxIdleTime = 2 * time.Second
)

// New returns a client of the server at addr (host:port) that calls as
// token.
func New(addr, token string) *Client {
	return &Client{addr: addr, token: token, Timeout: 60 * time.Second}
}

// Addr is the server's address.
func (c *Client) Addr() string { return c.addr }

func (c *Client) get() (*Conn, error) {
	c.mu.Lock()
	for len(c.idle) > 0 {
		ic := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if time.Since(ic.since) < maxIdleTime {
			c.mu.Unlock()
			return ic.c, nil
		}
		_ = ic.c.Close()
	}
	c.mu.Unlock()
	return Dial(c.addr)
}

func (c *Client) put(cn *Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) >= maxIdle {
		_ = cn.Close()
		return
	}
	c.idle = append(c.idle, idleConn{c: cn, since: time.Now()})
}

// Close closes the idle connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ic := range c.idle {
		_ = ic.c.Close()
	}
	c.idle = nil
}

// Do sends method /api<path> as token (the client's when empty) with in as
// its JSON body (nil: none), and returns the status and the decoded body.
func (c *Client) Do(ctx context.Context, method, path, token string, in any) (int, []byte, error) {
	if token == "" {
		token = c.token
	}
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, nil, err
		}
	}
	// A POST without a body still says Content-Length: 0, as net/http does.
	hasBody := in != nil || (method != "GET" && method != "HEAD" && method != "DELETE")
	req := append(make([]byte, 0, 256+len(body)), method+" /api"+path+" HTTP/1.1\r\n"...)
	req = headLines(req, c.addr, token, in != nil)
	req = endHead(req, body, hasBody)

	cn, err := c.get()
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	cn.SetDeadline(time.Now().Add(c.Timeout))
	// ctx ending (cancelled, or at its deadline) ends the call at once: the
	// connection's deadline passes (net.Conn's deadlines may be set from
	// any goroutine), and the call returns ctx's error.
	stop := context.AfterFunc(ctx, func() { _ = cn.c.SetDeadline(time.Unix(1, 0)) })
	resp, err := cn.RoundTrip(req)
	if !stop() || err != nil {
		_ = cn.Close()
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	out, derr := resp.Decoded()
	switch {
	case derr != nil:
		_ = cn.Close()
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, derr)
	case resp.Close:
		_ = cn.Close()
	default:
		c.put(cn)
	}
	return resp.Status, out, nil
}

// Call sends method /api<path> as the client's token with in as its JSON
// body (nil: none), expects the status want, and decodes the answer into
// out (nil: discarded).
func (c *Client) Call(ctx context.Context, method, path string, in any, want int, out any) error {
	status, body, err := c.Do(ctx, method, path, "", in)
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("%s %s: HTTP %d, want %d: %s", method, path, status, want, trunc(string(body), 400))
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// Parallel runs f(i) for i in [0, n) on conns goroutines and returns the
// first error (after which no new calls start).
func Parallel(ctx context.Context, n, conns int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(conns, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// UserCreate is the body of POST /api/users that the tools send.
type UserCreate struct {
	Username    string `json:"username"`
	DisplayName string `json:"display_name,omitempty"`
}

// Created is what the tools read of a created resource.
type Created struct {
	ID string `json:"id"`
}

// SeedUsers creates n users named prefix<from..from+n-1> through POST
// /api/users, conns at a time, and returns their IDs.
func (c *Client) SeedUsers(ctx context.Context, prefix string, from, n, conns int) ([]string, error) {
	ids := make([]string, n)
	err := Parallel(ctx, n, conns, func(ctx context.Context, i int) error {
		k := strconv.Itoa(from + i)
		var u Created
		if err := c.Call(ctx, "POST", "/users", UserCreate{Username: prefix + k, DisplayName: "Seed user " + k}, 201, &u); err != nil {
			return err
		}
		ids[i] = u.ID
		return nil
	})
	return ids, err
}

type page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// CursorOfPage walks GET /api/users?limit=50 from page 1 and returns the
// cursor that fetches page n (n >= 2).
func (c *Client) CursorOfPage(ctx context.Context, n int) (string, error) {
	cursor := ""
	for p := 1; p < n; p++ {
		path := "/users?limit=50"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var pg page
		if err := c.Call(ctx, "GET", path, nil, 200, &pg); err != nil {
			return "", err
		}
		if pg.NextCursor == nil {
			return "", fmt.Errorf("the list ends at page %d, before page %d", p, n)
		}
		cursor = *pg.NextCursor
	}
	if cursor == "" {
		return "", errors.New("page 1 has no cursor")
	}
	return cursor, nil
}

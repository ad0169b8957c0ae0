package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/testenv"
)

// rawUpload opens a connection, sends the headers of an attachment upload
// declaring size bytes, then feeds the body as feed says, and returns the
// answer's status line and problem code, and how long it took.
func rawUpload(t *testing.T, e *testenv.Env, size int, feed func(c net.Conn) error) (status int, body string, took time.Duration) {
	t.Helper()
	u, _ := url.Parse(e.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "PUT /api/channels/files/attachment?attachmentID=slow HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", u.Host, e.Owner, size)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = feed(c)
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	took = time.Since(start)
	defer res.Body.Close()
	buf := make([]byte, 4096)
	n, _ := res.Body.Read(buf)
	_ = c.Close()
	<-done
	return res.StatusCode, string(buf[:n]), took
}

// An upload body that stalls, or trickles slower than the minimum rate, is
// a 408 request_timeout within the configured bounds, and leaves no
// temporary file behind (issue 10, point 1: such uploads stayed open for
// ever, each holding a file).
func TestStalledUploadIs408(t *testing.T) {
	t.Parallel()
	testenv.Stores(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := testenv.Start(t, kind, testenv.WithConfig(func(c *config.Config) {
			c.BodyIdleTimeout = time.Second
			c.BodyMinRate = 1000
		}))
		e.NewChannel("files")
		cases := []struct {
			name string
			feed func(c net.Conn) error
			max  time.Duration
		}{
			{"stalls after a few bytes", func(c net.Conn) error {
				_, err := c.Write([]byte("0123456789"))
				time.Sleep(4 * time.Second) // then nothing: the server must not wait this long
				return err
			}, 3 * time.Second},
			{"trickles a byte every 100 ms", func(c net.Conn) error {
				for range 60 {
					if _, err := c.Write([]byte("x")); err != nil {
						return err
					}
					time.Sleep(100 * time.Millisecond)
				}
				return nil
			}, 3 * time.Second},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				status, body, took := rawUpload(t, e, 100000, tc.feed)
				if status != http.StatusRequestTimeout || !strings.Contains(body, `"code":"request_timeout"`) {
					t.Fatalf("status %d, body %s; want 408 request_timeout", status, body)
				}
				if took > tc.max {
					t.Fatalf("the 408 took %v, want under %v", took, tc.max)
				}
				if kind == testenv.SQLite {
					left, _ := os.ReadDir(filepath.Join(e.Config.DataDir, "blobs", "tmp"))
					if len(left) != 0 {
						t.Fatalf("temporary files left: %v", left)
					}
				}
				e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/channels/files/attachment?attachmentID=slow", Token: e.Owner})
			})
		}
		// A body that keeps coming at a decent pace is not cut.
		e.Must(http.StatusCreated, testenv.Req{Method: "PUT", Path: "/channels/files/attachment?attachmentID=fine", Token: e.Owner,
			Type: "application/octet-stream", Body: strings.Repeat("z", 1<<20)})
	})
}

// A JSON body that stalls is a 408 request_timeout within the same bounds
// as an upload, and changes nothing (issue 10: every request bounded).
func TestStalledJSONBodyIs408(t *testing.T) {
	t.Parallel()
	e := testenv.Start(t, testenv.SQLite, testenv.WithConfig(func(c *config.Config) {
		c.BodyIdleTimeout = time.Second
		c.BodyMinRate = 1000
	}))
	seq := e2eSeq(t, e)
	host := strings.TrimPrefix(e.URL, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("POST /api/channels/slow/create HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + e.Owner +
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled JSON body: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if took := time.Since(start); res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request_timeout"`) || took > 3*time.Second {
		t.Fatalf("status %d after %v, body %s; want 408 request_timeout within 3 s", res.StatusCode, took, body)
	}
	e.Must(http.StatusNotFound, testenv.Req{Method: "GET", Path: "/channels/slow", Token: e.Owner})
	e2eNoEvent(t, e, seq)
}

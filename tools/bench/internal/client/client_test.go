package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSplitParts(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []part
		wantErr bool
	}{
		{"plain path", "/api/users?limit=50", []part{{lit: "/api/users?limit=50"}}, false},
		{"id in a path", "/api/users/{id}/permissions", []part{{lit: "/api/users/"}, {ph: 'i'}, {lit: "/permissions"}}, false},
		{"uniq inside JSON braces", `{"username":"u{uniq}","n":{"a":1}}`,
			[]part{{lit: `{"username":"u`}, {ph: 'u'}, {lit: `","n":{"a":1}}`}}, false},
		{"two placeholders back to back", "{id}{uniq}", []part{{ph: 'i'}, {ph: 'u'}}, false},
		{"an unclosed brace is text", "a{b", []part{{lit: "a{b"}}, false},
		{"a prefix is a key too", "/api/users?q={prefix}", []part{{lit: "/api/users?q="}, {ph: 'i'}}, false},
		{"a typo is an error, not text", "/api/users/{ids}", nil, true},
		{"empty", "", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := splitParts(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRequestRendering(t *testing.T) {
	var counter atomic.Uint64
	tests := []struct {
		name, method, path, body string
		ids                      []string
		check                    func(t *testing.T, req *http.Request, body string)
	}{
		{name: "GET with a random id", method: "GET", path: "/api/users/{id}", ids: []string{"a1", "b2"},
			check: func(t *testing.T, req *http.Request, body string) {
				if req.URL.Path != "/api/users/a1" && req.URL.Path != "/api/users/b2" {
					t.Errorf("path %q is not one of the ids", req.URL.Path)
				}
				if body != "" || req.ContentLength > 0 {
					t.Errorf("GET has a body %q", body)
				}
			}},
		{name: "POST with a unique value and its Content-Length", method: "POST", path: "/api/users", body: `{"username":"u{uniq}","display_name":"Bench {uniq}"}`,
			check: func(t *testing.T, req *http.Request, body string) {
				var u struct{ Username, Display_name string }
				if err := json.Unmarshal([]byte(body), &u); err != nil {
					t.Fatalf("body %q: %v", body, err)
				}
				if !strings.HasPrefix(u.Username, "utag") || u.Display_name != "Bench "+strings.TrimPrefix(u.Username, "u") {
					t.Errorf("body %q does not carry the unique value twice", body)
				}
				if req.Header.Get("Content-Type") != "application/json" {
					t.Errorf("Content-Type %q", req.Header.Get("Content-Type"))
				}
			}},
	}
	for _, tc := range tests {
		for _, prebuild := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, prebuilt %v", tc.name, prebuild), func(t *testing.T) {
				tpl, err := NewTemplate(tc.method, tc.path, tc.body, "127.0.0.1:1", "secret")
				if err != nil {
					t.Fatal(err)
				}
				src, err := NewSource(tpl, tc.ids, "tag", &counter, prebuild)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				var bufs RenderBufs
				seen := map[string]bool{}
				for range 20 {
					raw := append([]byte(nil), src.Next(rng, &bufs)...)
					// The request must be what a real server parses, with nothing left over.
					req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
					if err != nil {
						t.Fatalf("%q: %v", raw, err)
					}
					body, _ := io.ReadAll(req.Body)
					if int64(len(body)) != max(req.ContentLength, 0) {
						t.Fatalf("Content-Length %d, body %d bytes", req.ContentLength, len(body))
					}
					if req.Method != tc.method || req.Host != "127.0.0.1:1" || req.Header.Get("Authorization") != "Bearer secret" {
						t.Fatalf("request line or headers wrong: %q", raw)
					}
					tc.check(t, req, string(body))
					if tc.body != "" {
						if seen[string(body)] {
							t.Fatalf("body %q sent twice", body)
						}
						seen[string(body)] = true
					}
				}
			})
		}
	}
	t.Run("a template with {id} needs keys", func(t *testing.T) {
		tpl, _ := NewTemplate("GET", "/api/users/{id}", "", "h", "")
		if _, err := NewSource(tpl, nil, "t", &counter, true); err == nil {
			t.Fatal("no error without ids")
		}
	})
}

func TestParseResponse(t *testing.T) {
	full := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	chunked := "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n4;ext=1\r\nabcd\r\nA\r\n0123456789\r\n0\r\n\r\n"
	noContent := "HTTP/1.1 204 No Content\r\nX-Request-Id: 1\r\n\r\n"
	noReason := "HTTP/1.1 201\r\nContent-Length: 0\r\n\r\n"
	closing := "HTTP/1.1 400 Bad Request\r\nCONNECTION: close\r\ncontent-length: 1\r\n\r\nx"
	tests := []struct {
		name       string
		in         string
		wantStatus int
		wantLen    int // bytes of the whole response
		wantBody   string
		wantClose  bool
		wantErr    error // errNeedMore, or nil; other errors: wantBad
		wantBad    bool
	}{
		{name: "content-length", in: full, wantStatus: 200, wantLen: len(full), wantBody: "{}"},
		{name: "content-length, then the next response", in: full + "HTTP/1.1 404", wantStatus: 200, wantLen: len(full), wantBody: "{}"},
		{name: "head cut short", in: full[:20], wantErr: errNeedMore},
		{name: "body cut short", in: full[:len(full)-1], wantErr: errNeedMore},
		{name: "chunked with an extension", in: chunked, wantStatus: 200, wantLen: len(chunked),
			wantBody: "4;ext=1\r\nabcd\r\nA\r\n0123456789\r\n0\r\n\r\n"},
		{name: "chunked, cut in a chunk", in: chunked[:len(chunked)-12], wantErr: errNeedMore},
		{name: "chunked, last chunk without its blank line", in: chunked[:len(chunked)-2], wantErr: errNeedMore},
		{name: "chunked with a trailer", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\n\r\n", wantStatus: 200,
			wantLen: len("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\n\r\n"), wantBody: "1\r\nx\r\n0\r\nX-T: 1\r\n\r\n"},
		{name: "204 has no body", in: noContent, wantStatus: 204, wantLen: len(noContent)},
		{name: "status line without a reason", in: noReason, wantStatus: 201, wantLen: len(noReason)},
		{name: "connection close", in: closing, wantStatus: 400, wantLen: len(closing), wantBody: "x", wantClose: true},
		{name: "not HTTP", in: "SSH-2.0-OpenSSH\r\n\r\n", wantBad: true},
		{name: "letters for a status", in: "HTTP/1.1 2x0 OK\r\n\r\n", wantBad: true},
		{name: "bad content-length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wantBad: true},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", wantBad: true},
		{name: "chunk longer than it says", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n", wantBad: true},
		{name: "no length at all", in: "HTTP/1.1 200 OK\r\n\r\nhello", wantBad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, n, err := parseResponse([]byte(tc.in))
			switch {
			case tc.wantBad:
				if err == nil || errors.Is(err, errNeedMore) {
					t.Fatalf("err = %v, want a parse error", err)
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("err = %v", err)
			}
			if r.status != tc.wantStatus || n != tc.wantLen || r.close != tc.wantClose {
				t.Fatalf("status %d len %d close %v, want %d %d %v", r.status, n, r.close, tc.wantStatus, tc.wantLen, tc.wantClose)
			}
			if body := tc.in[r.bodyOff:n]; body != tc.wantBody {
				t.Fatalf("body %q, want %q", body, tc.wantBody)
			}
		})
	}
}

// TestConnAgainstNetHTTP runs a connection against a real net/http
// server: small answers (Content-Length), large ones (chunked), bodies that
// arrive in pieces, errors, and a server that closes the connection.
func TestConnAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("0123456789", 20_000) // > the 64 KiB read buffer, so chunked and read in parts
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/big":
			_, _ = io.WriteString(w, big)
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		default:
			http.Error(w, "no such thing", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var counter atomic.Uint64
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantBody                 string
	}{
		{"small", "GET", "/small", "", 200, `{"ok":true}`},
		{"big, chunked", "GET", "/big", "", 200, big},
		{"small again on the same connection", "GET", "/small", "", 200, `{"ok":true}`},
		{"a body", "POST", "/echo", `{"username":"u{uniq}"}`, 201, ""},
		{"not found", "GET", "/nope", "", 404, "no such thing\n"},
		{"the server closes", "GET", "/close", "", 200, "bye"},
		{"and the client reconnects", "GET", "/small", "", 200, `{"ok":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := NewTemplate(tc.method, tc.path, tc.body, addr, "")
			if err != nil {
				t.Fatal(err)
			}
			src, err := NewSource(tpl, nil, "x", &counter, true)
			if err != nil {
				t.Fatal(err)
			}
			var bufs RenderBufs
			resp, err := c.RoundTrip(src.Next(rng, &bufs))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.wantStatus {
				t.Fatalf("status %d, want %d", resp.Status, tc.wantStatus)
			}
			body, err := resp.Decoded()
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantBody != "" && string(body) != tc.wantBody {
				t.Fatalf("body %d bytes %.40q, want %d bytes", len(body), body, len(tc.wantBody))
			}
		})
	}
}

// TestClient calls a net/http server the way the tools call Guildhall:
// JSON both ways, the token, statuses, chunked answers, reused
// connections, and a cancelled call.
func TestClient(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{} // remote addresses seen
	big := strings.Repeat("x", 100_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		auth := r.Header.Get("Authorization")
		switch {
		case r.URL.Path == "/api/slow":
			time.Sleep(500 * time.Millisecond)
		case r.URL.Path == "/api/users" && r.Method == "POST":
			var in UserCreate
			if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&in) != nil {
				http.Error(w, "bad body", 400)
				return
			}
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(map[string]string{"id": "id-" + in.Username, "auth": auth})
		case r.URL.Path == "/api/roles/x/create":
			// A POST without a body still says how long it is.
			if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
				http.Error(w, fmt.Sprintf("length %d type %q", r.ContentLength, r.Header.Get("Content-Type")), 400)
				return
			}
			w.WriteHeader(204)
		case r.URL.Path == "/api/big":
			_ = json.NewEncoder(w).Encode(map[string]string{"big": big, "auth": auth})
		default:
			http.Error(w, "no such thing", 404)
		}
	}))
	defer srv.Close()
	c := New(strings.TrimPrefix(srv.URL, "http://"), "owner-token")
	defer c.Close()
	ctx := context.Background()

	t.Run("a create, JSON both ways, as the client's token", func(t *testing.T) {
		var out struct{ ID, Auth string }
		if err := c.Call(ctx, "POST", "/users", UserCreate{Username: "alice"}, 201, &out); err != nil {
			t.Fatal(err)
		}
		if out.ID != "id-alice" || out.Auth != "Bearer owner-token" {
			t.Fatalf("got %+v", out)
		}
	})
	t.Run("another token, a chunked answer", func(t *testing.T) {
		status, body, err := c.Do(ctx, "GET", "/big", "user-token", nil)
		var out struct{ Big, Auth string }
		if err == nil {
			err = json.Unmarshal(body, &out)
		}
		if err != nil || status != 200 || out.Big != big || out.Auth != "Bearer user-token" {
			t.Fatalf("status %d, %d bytes, auth %q, err %v", status, len(out.Big), out.Auth, err)
		}
	})
	t.Run("a POST without a body", func(t *testing.T) {
		if err := c.Call(ctx, "POST", "/roles/x/create", nil, 204, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an unexpected status is an error that quotes the body", func(t *testing.T) {
		err := c.Call(ctx, "GET", "/nope", nil, 200, nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "no such thing") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("calls in parallel reuse connections", func(t *testing.T) {
		mu.Lock()
		clear(conns)
		mu.Unlock()
		err := Parallel(ctx, 200, 4, func(ctx context.Context, i int) error {
			return c.Call(ctx, "POST", "/users", UserCreate{Username: fmt.Sprint("u", i)}, 201, nil)
		})
		mu.Lock()
		defer mu.Unlock()
		if err != nil || len(conns) > 8 {
			t.Fatalf("err %v; %d connections for 200 calls 4 at a time", err, len(conns))
		}
	})
	t.Run("a cancelled call ends at once", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := c.Do(ctx, "GET", "/slow", "", nil)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
	t.Run("the first error stops Parallel", func(t *testing.T) {
		var calls atomic.Int64
		err := Parallel(ctx, 1000, 2, func(ctx context.Context, i int) error {
			calls.Add(1)
			if i == 3 {
				return errors.New("boom")
			}
			return nil
		})
		if err == nil || err.Error() != "boom" || calls.Load() > 10 {
			t.Fatalf("err %v after %d calls", err, calls.Load())
		}
	})
}

func TestDechunk(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "two chunks and a trailer", in: "4;ext=1\r\nabcd\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n", want: "abcd0123456789"},
		{name: "empty", in: "0\r\n\r\n", want: ""},
		{name: "cut short", in: "4\r\nab", wantErr: true},
		{name: "bad size", in: "zz\r\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dechunk([]byte(tc.in))
			if (err != nil) != tc.wantErr || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestSkewedKeys: a skewed source reads a few keys often and most rarely,
// the often-read ones spread over the keys' order, every key a valid one.
func TestSkewedKeys(t *testing.T) {
	const n = 10_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("k%05d", i)
	}
	tpl, err := NewTemplate("GET", "/api/users/{id}", "", "127.0.0.1:1", "secret")
	if err != nil {
		t.Fatal(err)
	}
	var counter atomic.Uint64
	src, err := NewSource(tpl, ids, "tag", &counter, true)
	if err != nil {
		t.Fatal(err)
	}
	src.Skewed(1.1)
	rng := rand.New(rand.NewPCG(3, 4))
	var bufs RenderBufs
	count := map[string]int{}
	const draws = 200_000
	for range draws {
		raw := src.Next(rng, &bufs)
		path := strings.Fields(string(raw))[1]
		id := strings.TrimPrefix(path, "/api/users/")
		if len(id) != 6 || id[0] != 'k' {
			t.Fatalf("request for %q, not one of the keys", path)
		}
		count[id]++
	}
	freq := make([]int, 0, len(count))
	for _, c := range count {
		freq = append(freq, c)
	}
	slices.Sort(freq)
	slices.Reverse(freq)
	top := 0
	for _, c := range freq[:n/100] {
		top += c
	}
	// A Zipf exponent of 1.1 over 10,000 ranks gives the 100 first 65% of
	// the draws; uniform draws would give them about 1%.
	if share := float64(top) / draws; share < 0.55 || share > 0.75 {
		t.Fatalf("the 1%% most drawn keys took %.2f of the draws, want about 0.65", share)
	}
	// The most drawn key is not the first one created, nor its neighbours:
	// the ranks are shuffled over the keys.
	best, bestN := "", 0
	for id, c := range count {
		if c > bestN {
			best, bestN = id, c
		}
	}
	if best < "k00100" {
		t.Fatalf("the most drawn key is %s, among the first created", best)
	}
	// The caller's keys are left in their order.
	if ids[0] != "k00000" || ids[n-1] != fmt.Sprintf("k%05d", n-1) {
		t.Fatal("Skewed reordered the caller's keys")
	}
}

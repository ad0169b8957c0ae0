package contractcheck

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// keepLimit bounds the body kept for checking; a longer answer is checked
// for its status and headers only.
const keepLimit = 8 << 20

// Wrap returns a handler that serves with next and checks every answer under
// the base path, calling report once per answer that does not conform, with
// a message naming the request, the operation, the status and what is
// undeclared. report is called from the server's goroutine when the handler
// has returned.
func (c *Checker) Wrap(next http.Handler, report func(string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Covered(r) {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{ResponseWriter: w, head: r.Method == http.MethodHead}
		next.ServeHTTP(rec, r)
		if !rec.wrote {
			rec.snapshot(http.StatusOK) // nothing written: net/http answers 200
		}
		problems := c.Check(r, Answer{Status: rec.status, Header: rec.header, Body: rec.body, Truncated: rec.truncated})
		if len(problems) > 0 {
			report(fmt.Sprintf("contract: %s %s answered %d, which the contract does not declare:\n\t%s",
				r.Method, r.URL.RequestURI(), rec.status, strings.Join(problems, "\n\t")))
		}
	})
}

// recorder passes the answer through and keeps its status, the headers as
// sent, and the body when it is text the contract describes.
type recorder struct {
	http.ResponseWriter
	head      bool
	wrote     bool
	status    int
	header    http.Header
	keep      bool
	body      []byte
	truncated bool
}

func (r *recorder) snapshot(status int) {
	r.wrote, r.status, r.header = true, status, r.ResponseWriter.Header().Clone()
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	r.keep = !r.head && (strings.HasSuffix(mt, "json") || strings.HasPrefix(mt, "text/") || mt == "application/yaml")
}

func (r *recorder) WriteHeader(status int) {
	if !r.wrote && status >= 200 {
		r.snapshot(status)
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.snapshot(http.StatusOK)
	}
	if r.keep && !r.truncated {
		if len(r.body)+len(b) > keepLimit {
			r.truncated = true
		} else {
			r.body = append(r.body, b...)
		}
	}
	return r.ResponseWriter.Write(b)
}

// Flush passes a flush through (event streams).
func (r *recorder) Flush() {
	if !r.wrote {
		r.snapshot(http.StatusOK)
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Transport returns a client transport that checks every answer under the
// base path as it arrives, for servers a test cannot wrap (another process).
// Bodies are read whole before the answer is returned, except event streams,
// whose status and headers alone are checked.
func (c *Checker) Transport(base http.RoundTripper, report func(string)) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(req)
		if err != nil || !Covered(req) {
			return resp, err
		}
		a := Answer{Status: resp.StatusCode, Header: resp.Header, Truncated: true}
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if req.Method != http.MethodHead && mt != "text/event-stream" {
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return nil, err // as the caller's own read would have failed
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			a.Body, a.Truncated = body, false
		}
		if problems := c.Check(req, a); len(problems) > 0 {
			report(fmt.Sprintf("contract: %s %s answered %d, which the contract does not declare:\n\t%s",
				req.Method, req.URL.RequestURI(), a.Status, strings.Join(problems, "\n\t")))
		}
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

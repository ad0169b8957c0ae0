package httpapi

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
)

// Some requests are refused by net/http itself, before any handler runs: a
// header block over the server's limit (431), a malformed request line or
// header, such as a control character in a header value (400), a transfer
// coding it does not know (501). It answers those in plain text, written
// straight to the connection in one write and followed by closing it.
// ProblemListener's connections recognise that answer and write the
// contract's problem+json in its place, so that every error a client can
// get is one.

// ProblemListener wraps the listener the server accepts on.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

type problemConn struct{ net.Conn }

func (c problemConn) Write(b []byte) (int, error) {
	if p, ok := cannedProblem(b); ok {
		if _, err := c.Conn.Write(p); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// cannedHeaders are the header lines of net/http's own answers. Answers
// that go through a handler never look like this: net/http writes their
// header lines in sorted order (Connection before Content-Type), with a
// Date.
const cannedHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// cannedProblem turns one of net/http's own answers into a problem, or
// reports false for anything else.
func cannedProblem(b []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(b, []byte(proto)) {
		return nil, false
	}
	// The status line must come right before them: they begin at its end,
	// the first line break, and every answer is looked at only that far.
	end := bytes.IndexByte(b, '\n') - 1
	if end < 0 || !bytes.HasPrefix(b[end:], []byte(cannedHeaders)) {
		return nil, false
	}
	line := string(b[len(proto):end])
	code, err := strconv.Atoi(line[:min(3, len(line))])
	if err != nil || code < 400 {
		return nil, false
	}
	// "400 Bad Request: invalid header ..." names the problem after the
	// colon; the plain forms name none.
	_, why, _ := strings.Cut(line, ": ")
	var p api.Problem
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		p = newProblem(api.ProblemCodeHeaderTooLarge, "The request's header fields are larger than the server accepts.")
	case http.StatusNotImplemented:
		p = newProblem(api.ProblemCodeNotImplemented, "The request's Transfer-Encoding is not one the server supports.")
	case http.StatusHTTPVersionNotSupported:
		p = newProblem(api.ProblemCodeNotImplemented, "The request's HTTP version is not one the server supports.")
		p.Status = code
	default:
		msg := "the request could not be parsed as HTTP"
		if why != "" {
			msg = why
		}
		p = newProblem(api.ProblemCodeValidation, "The request could not be read: "+msg+".")
		p.Errors = fieldList([]apperr.FieldError{{Location: "request", Message: msg}})
		p.Status = code
	}
	p.RequestId = newRequestID()
	body := problemJSON(p)
	var out bytes.Buffer
	out.WriteString(proto + strconv.Itoa(p.Status) + " " + http.StatusText(p.Status) + "\r\n")
	out.WriteString("Content-Type: application/problem+json\r\n")
	out.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	out.WriteString("Connection: close\r\n")
	out.WriteString("X-Request-Id: " + p.RequestId + "\r\n\r\n")
	out.Write(body)
	return out.Bytes(), true
}

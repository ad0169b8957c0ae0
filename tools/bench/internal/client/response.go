package client

import (
	"bytes"
	"errors"
	"fmt"
)

// response is what parseResponse learns from an HTTP/1.1 response: the
// status, where the body is, and whether the server closes the connection
// after it.
type response struct {
	status  int
	bodyOff int // where the body starts in the buffer
	bodyLen int // Content-Length, or the raw length of a chunked body
	chunked bool
	close   bool
}

var (
	errNeedMore   = errors.New("need more bytes")
	crlf          = []byte("\r\n")
	crlfcrlf      = []byte("\r\n\r\n")
	maxHeaderSize = 64 << 10
)

// parseResponse parses the response at the start of b. It returns the
// response and its total length in bytes (head and body) when b holds all
// of it, errNeedMore when it holds only a beginning, or another error for
// bytes that are not a response this client can follow. It reads only the
// status line, Content-Length, Transfer-Encoding and Connection; the body
// is skipped, not decoded.
func parseResponse(b []byte) (response, int, error) {
	var r response
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > maxHeaderSize {
			return r, 0, fmt.Errorf("response head longer than %d bytes", maxHeaderSize)
		}
		return r, 0, errNeedMore
	}
	head := b[:end]
	line, rest, _ := bytes.Cut(head, crlf)
	// "HTTP/1.1 200 OK": the status is the three digits after the first space.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return r, 0, fmt.Errorf("bad status line %q", trunc(string(line), 60))
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return r, 0, fmt.Errorf("bad status code in %q", trunc(string(line), 60))
		}
		r.status = r.status*10 + int(c-'0')
	}
	contentLength := -1
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, crlf)
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return r, 0, fmt.Errorf("bad header line %q", trunc(string(h), 60))
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			n, err := parseDecimal(value)
			if err != nil {
				return r, 0, fmt.Errorf("bad Content-Length %q", value)
			}
			contentLength = n
		case asciiEqualFold(name, "transfer-encoding"):
			r.chunked = containsFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			r.close = containsFold(value, "close")
		}
	}
	r.bodyOff = end + 4
	switch {
	case r.status/100 == 1:
		return r, 0, fmt.Errorf("unexpected interim response %d", r.status)
	case r.status == 204 || r.status == 304:
		return r, r.bodyOff, nil
	case r.chunked:
		n, err := chunkedLength(b[r.bodyOff:])
		if err != nil {
			return r, 0, err
		}
		r.bodyLen = n
		return r, r.bodyOff + n, nil
	case contentLength >= 0:
		r.bodyLen = contentLength
		if len(b) < r.bodyOff+contentLength {
			return r, 0, errNeedMore
		}
		return r, r.bodyOff + contentLength, nil
	default:
		return r, 0, errors.New("response has neither Content-Length nor chunked encoding")
	}
}

// chunkedLength returns the length of the chunked body at the start of b,
// up to and including the blank line after the last chunk (and trailers).
func chunkedLength(b []byte) (int, error) {
	pos := 0
	for {
		i := bytes.Index(b[pos:], crlf)
		if i < 0 {
			if len(b)-pos > 1024 {
				return 0, errors.New("chunk size line too long")
			}
			return 0, errNeedMore
		}
		sizeField, _, _ := bytes.Cut(b[pos:pos+i], []byte(";"))
		size, err := parseHex(bytes.TrimSpace(sizeField))
		if err != nil {
			return 0, fmt.Errorf("bad chunk size %q", trunc(string(b[pos:pos+i]), 40))
		}
		pos += i + 2
		if size == 0 {
			// Trailers, if any, then an empty line.
			for {
				j := bytes.Index(b[pos:], crlf)
				if j < 0 {
					return 0, errNeedMore
				}
				pos += j + 2
				if j == 0 {
					return pos, nil
				}
			}
		}
		if len(b) < pos+size+2 {
			return 0, errNeedMore
		}
		if b[pos+size] != '\r' || b[pos+size+1] != '\n' {
			return 0, errors.New("chunk not followed by CRLF")
		}
		pos += size + 2
	}
}

func parseDecimal(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 15 {
		return 0, errors.New("bad number")
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errors.New("bad number")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func parseHex(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 12 {
		return 0, errors.New("bad hex number")
	}
	n := 0
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, errors.New("bad hex number")
		}
		n = n<<4 | int(d)
	}
	return n, nil
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func containsFold(b []byte, lower string) bool {
	for i := 0; i+len(lower) <= len(b); i++ {
		if asciiEqualFold(b[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// dechunk returns the data of a chunked body (as chunkedLength measured
// it: chunks, the last chunk and trailers), in a new slice.
func dechunk(b []byte) ([]byte, error) {
	var out []byte
	for {
		line, rest, ok := bytes.Cut(b, crlf)
		if !ok {
			return nil, errors.New("chunked body cut short")
		}
		sizeField, _, _ := bytes.Cut(line, []byte(";"))
		n, err := parseHex(bytes.TrimSpace(sizeField))
		if err != nil {
			return nil, fmt.Errorf("bad chunk size %q", trunc(string(line), 40))
		}
		if n == 0 {
			return out, nil
		}
		if len(rest) < n+2 {
			return nil, errors.New("chunked body cut short")
		}
		out = append(out, rest[:n]...)
		b = rest[n+2:]
	}
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

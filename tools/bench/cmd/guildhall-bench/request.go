package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
)

// A requestTemplate is one scenario's request for one target, with two
// placeholders filled per request: {id} (a seeded id picked at random) and
// {uniq} (a value no other request of the run has). Everything else is
// fixed when the template is compiled, so a request costs the load
// generator a few copies and no allocation.
type requestTemplate struct {
	method string
	path   []part
	body   []part // nil: no body
	head   []byte // the header lines after the request line, without Content-Length
	hasID  bool
	hasUnq bool
}

// part is literal text, or a placeholder when ph is set.
type part struct {
	lit string
	ph  byte // 0 literal, 'i' {id}, 'u' {uniq}
}

// splitParts cuts s into literals and placeholders. A brace that does not
// open a {name} (JSON bodies are full of them) is literal text.
func splitParts(s string) ([]part, error) {
	var parts []part
	lit := 0 // start of the literal text not yet emitted
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		j := strings.IndexByte(s[i+1:], '}')
		if j < 0 {
			break
		}
		name := s[i+1 : i+1+j]
		var ph byte
		switch {
		case name == "id":
			ph = 'i'
		case name == "uniq":
			ph = 'u'
		case isPlaceholderName(name):
			return nil, fmt.Errorf("unknown placeholder {%s} in %q", name, s)
		default:
			continue
		}
		if i > lit {
			parts = append(parts, part{lit: s[lit:i]})
		}
		parts = append(parts, part{ph: ph})
		i += j + 1
		lit = i + 1
	}
	if lit < len(s) {
		parts = append(parts, part{lit: s[lit:]})
	}
	return parts, nil
}

// isPlaceholderName tells {name} (a typo of a placeholder) from JSON such
// as {"a":1}.
func isPlaceholderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// compileTemplate builds the template of method path [body] sent to host
// with the bearer token.
func compileTemplate(method, path, body, host, token string) (*requestTemplate, error) {
	t := &requestTemplate{method: method}
	var err error
	if t.path, err = splitParts(path); err != nil {
		return nil, err
	}
	if body != "" {
		if t.body, err = splitParts(body); err != nil {
			return nil, err
		}
	}
	for _, p := range append(append([]part(nil), t.path...), t.body...) {
		t.hasID = t.hasID || p.ph == 'i'
		t.hasUnq = t.hasUnq || p.ph == 'u'
	}
	var h strings.Builder
	h.WriteString("Host: " + host + "\r\n")
	if token != "" {
		h.WriteString("Authorization: Bearer " + token + "\r\n")
	}
	h.WriteString("User-Agent: guildhall-bench\r\n")
	if t.body != nil {
		h.WriteString("Content-Type: application/json\r\n")
	}
	t.head = []byte(h.String())
	return t, nil
}

func appendParts(dst []byte, parts []part, id string, uniq []byte) []byte {
	for _, p := range parts {
		switch p.ph {
		case 'i':
			dst = append(dst, id...)
		case 'u':
			dst = append(dst, uniq...)
		default:
			dst = append(dst, p.lit...)
		}
	}
	return dst
}

// render appends the whole request to dst. scratch holds the body while its
// length is measured; both are reused between requests.
func (t *requestTemplate) render(dst, scratch []byte, id string, uniq []byte) (req, body []byte) {
	dst = append(dst, t.method...)
	dst = append(dst, ' ')
	dst = appendParts(dst, t.path, id, uniq)
	dst = append(dst, " HTTP/1.1\r\n"...)
	dst = append(dst, t.head...)
	if t.body == nil {
		return append(dst, "\r\n"...), scratch
	}
	scratch = appendParts(scratch[:0], t.body, id, uniq)
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(scratch)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, scratch...), scratch
}

// requestSource hands out the requests of one load run. Without {uniq}
// every possible request is built once beforehand (one per id).
type requestSource struct {
	tpl      *requestTemplate
	ids      []string
	prebuilt [][]byte
	tag      string         // makes {uniq} unique across runs of the bench
	counter  *atomic.Uint64 // shared by every connection of every run
}

func newRequestSource(t *requestTemplate, ids []string, tag string, counter *atomic.Uint64) (*requestSource, error) {
	if t.hasID && len(ids) == 0 {
		return nil, fmt.Errorf("the request needs {id} but there are no ids")
	}
	s := &requestSource{tpl: t, ids: ids, tag: tag, counter: counter}
	if !t.hasUnq {
		n := 1
		if t.hasID {
			n = len(ids)
		}
		s.prebuilt = make([][]byte, n)
		for i := range s.prebuilt {
			id := ""
			if t.hasID {
				id = ids[i]
			}
			s.prebuilt[i], _ = t.render(nil, nil, id, nil)
		}
	}
	return s, nil
}

// uniq returns the next unique value: the run's tag and a counter in base 36.
func (s *requestSource) uniq(buf []byte) []byte {
	buf = append(buf[:0], s.tag...)
	return strconv.AppendUint(buf, s.counter.Add(1), 36)
}

// next returns the next request, built in r (the connection's reusable
// buffers) when it cannot be prebuilt. The result is valid until the next call.
func (s *requestSource) next(rng *rand.Rand, r *renderBufs) []byte {
	if s.prebuilt != nil {
		if len(s.prebuilt) == 1 {
			return s.prebuilt[0]
		}
		return s.prebuilt[rng.IntN(len(s.prebuilt))]
	}
	id := ""
	if s.tpl.hasID {
		id = s.ids[rng.IntN(len(s.ids))]
	}
	r.uniq = s.uniq(r.uniq)
	r.req, r.body = s.tpl.render(r.req[:0], r.body, id, r.uniq)
	return r.req
}

// renderBufs are one connection's buffers for requests built per request.
type renderBufs struct{ req, body, uniq []byte }

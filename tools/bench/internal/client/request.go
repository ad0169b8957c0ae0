package client

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// A Template is one request shape for one server, with two kinds of
// placeholders filled per request: {id} (or {prefix}: the same, named for
// what it holds) is a key of the Source picked at random, and {uniq} is a
// value no other request of the run has. Everything else is fixed when the
// template is compiled, so a request costs the load generator a few copies
// and no allocation.
type Template struct {
	method string
	path   []part
	body   []part // nil: no body
	head   []byte // the header lines after the request line, without Content-Length
	hasKey bool
	hasUnq bool
}

// part is literal text, or a placeholder when ph is set.
type part struct {
	lit string
	ph  byte // 0 literal, 'i' a key ({id}, {prefix}), 'u' {uniq}
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
		case name == "id" || name == "prefix":
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

// NewTemplate compiles the template of method path [body] sent to host
// with the bearer token ("" sends none).
func NewTemplate(method, path, body, host, token string) (*Template, error) {
	t := &Template{method: method}
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
		t.hasKey = t.hasKey || p.ph == 'i'
		t.hasUnq = t.hasUnq || p.ph == 'u'
	}
	t.head = headLines(nil, host, token, t.body != nil)
	return t, nil
}

// headLines appends the header lines every request of the tools carries.
func headLines(dst []byte, host, token string, jsonBody bool) []byte {
	dst = append(dst, "Host: "+host+"\r\n"...)
	if token != "" {
		dst = append(dst, "Authorization: Bearer "+token+"\r\n"...)
	}
	dst = append(dst, "User-Agent: guildhall-bench\r\n"...)
	if jsonBody {
		dst = append(dst, "Content-Type: application/json\r\n"...)
	}
	return dst
}

// endHead appends Content-Length when there is a body, the blank line and
// the body.
func endHead(dst, body []byte, hasBody bool) []byte {
	if !hasBody {
		return append(dst, "\r\n"...)
	}
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

func appendParts(dst []byte, parts []part, key string, uniq []byte) []byte {
	for _, p := range parts {
		switch p.ph {
		case 'i':
			dst = append(dst, key...)
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
func (t *Template) render(dst, scratch []byte, key string, uniq []byte) (req, body []byte) {
	dst = append(dst, t.method...)
	dst = append(dst, ' ')
	dst = appendParts(dst, t.path, key, uniq)
	dst = append(dst, " HTTP/1.1\r\n"...)
	dst = append(dst, t.head...)
	if t.body != nil {
		scratch = appendParts(scratch[:0], t.body, key, uniq)
	}
	return endHead(dst, scratch, t.body != nil), scratch
}

// A Source hands out the requests of one load run.
type Source struct {
	tpl      *Template
	keys     []string
	prebuilt [][]byte
	tag      string         // makes {uniq} unique across runs of the bench
	counter  *atomic.Uint64 // shared by every connection of every run
	skew     float64        // Skewed: the Zipf exponent of the keys' ranks
}

// Skewed makes s pick its keys by rank from a Zipf distribution of exponent
// skew (> 1) rather than uniformly: the key of rank r (from 0) is picked
// with a probability in proportion to 1/(r+1)^skew, so a few are read
// often and most rarely, as the members of a community are. The ranks are
// given to the keys in an order shuffled with a fixed seed, so that the
// often-read keys are spread over the key space (not the first IDs
// created, which sit side by side in every index). It returns s.
func (s *Source) Skewed(skew float64) *Source {
	if skew <= 1 {
		panic(fmt.Sprintf("client: Zipf exponent %g, want > 1", skew))
	}
	s.skew = skew
	if len(s.prebuilt) > 1 {
		s.prebuilt = nil // picked uniformly: build each as it is sent
	}
	s.keys = slices.Clone(s.keys)
	rand.New(rand.NewPCG(7, 11)).Shuffle(len(s.keys), func(i, j int) { s.keys[i], s.keys[j] = s.keys[j], s.keys[i] })
	return s
}

// NewSource returns the requests of t, with {id} picked at random from keys
// and {uniq} made of tag and counter. With prebuild, and no {uniq}, every
// possible request is built once beforehand (one per key: memory in
// proportion to the keys); otherwise each is built as it is sent.
func NewSource(t *Template, keys []string, tag string, counter *atomic.Uint64, prebuild bool) (*Source, error) {
	if t.hasKey && len(keys) == 0 {
		return nil, fmt.Errorf("the request needs {id} but there are no keys")
	}
	s := &Source{tpl: t, keys: keys, tag: tag, counter: counter}
	if !t.hasKey {
		prebuild = true // one request
	}
	if prebuild && !t.hasUnq {
		n := 1
		if t.hasKey {
			n = len(keys)
		}
		s.prebuilt = make([][]byte, n)
		for i := range s.prebuilt {
			key := ""
			if t.hasKey {
				key = keys[i]
			}
			s.prebuilt[i], _ = t.render(nil, nil, key, nil)
		}
	}
	return s, nil
}

// uniq returns the next unique value: the run's tag and a counter in base 36.
func (s *Source) uniq(buf []byte) []byte {
	buf = append(buf[:0], s.tag...)
	return strconv.AppendUint(buf, s.counter.Add(1), 36)
}

// Next returns the next request, built in b (the connection's reusable
// buffers) when it was not built beforehand. The result is valid until the
// next call with the same b.
func (s *Source) Next(rng *rand.Rand, b *RenderBufs) []byte {
	if s.prebuilt != nil {
		if len(s.prebuilt) == 1 {
			return s.prebuilt[0]
		}
		return s.prebuilt[rng.IntN(len(s.prebuilt))]
	}
	key := ""
	switch {
	case s.tpl.hasKey && s.skew > 0:
		if b.zipf == nil || b.zipfOf != s {
			b.zipf, b.zipfOf = rand.NewZipf(rng, s.skew, 1, uint64(len(s.keys)-1)), s
		}
		key = s.keys[b.zipf.Uint64()]
	case s.tpl.hasKey:
		key = s.keys[rng.IntN(len(s.keys))]
	}
	if s.tpl.hasUnq {
		b.uniq = s.uniq(b.uniq)
	}
	b.req, b.body = s.tpl.render(b.req[:0], b.body, key, b.uniq)
	return b.req
}

// RenderBufs are one connection's buffers for requests built as they are
// sent.
type RenderBufs struct {
	req, body, uniq []byte
	zipf            *rand.Zipf // the connection's draw of skewed keys, for zipfOf
	zipfOf          *Source
}

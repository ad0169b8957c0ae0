package httpapi

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// checkJSON reads a request body in one pass, without decoding it, and
// refuses what encoding/json would let through silently or what no field of
// the contract may hold (docs/design.md §12 "Strict JSON"):
//
//   - anything but exactly one JSON value (RFC 8259), trailing data included;
//   - invalid UTF-8, which encoding/json turns into U+FFFD;
//   - a member name given twice in one object (encoding/json keeps the last),
//     compared after unescaping, so "a" and "\u0061" are the same name;
//   - a lone UTF-16 surrogate escape such as "\ud800", which encoding/json
//     turns into U+FFFD;
//   - U+0000, escaped, in any string (PostgreSQL text cannot hold it).
//
// It allocates nothing unless it finds a problem (or an object has more
// members than it compares pairwise). The error is a *jsonError: its location
// is "body" for a syntax error and the member or element otherwise, as in
// body.links.github or body.permissions[1].
func checkJSON(data []byte) error {
	s := jsonScanner{data: data}
	if err := s.value(0); err != nil {
		return err
	}
	s.skipSpace()
	if s.pos < len(s.data) {
		return s.syntax("the body holds data after its JSON value")
	}
	return nil
}

// maxJSONDepth bounds nesting (the contract's bodies nest three deep).
const maxJSONDepth = 512

// pairwiseKeys is how many member names of an object are compared pairwise
// before a map takes over.
const pairwiseKeys = 16

// jsonError is a body refused by checkJSON.
type jsonError struct {
	path   []string // location steps, innermost first: ".name", "[3]"
	syntax bool     // the location is the whole body
	msg    string
}

func (e *jsonError) Error() string { return e.Location() + ": " + e.msg }

// Location is where the problem is, e.g. body.links.github.
func (e *jsonError) Location() string {
	if e.syntax {
		return "body"
	}
	var b strings.Builder
	b.WriteString("body")
	for i := len(e.path) - 1; i >= 0; i-- {
		b.WriteString(e.path[i])
	}
	return b.String()
}

type jsonScanner struct {
	data []byte
	pos  int
}

func (s *jsonScanner) syntax(msg string) *jsonError {
	return &jsonError{syntax: true, msg: "the body is not valid JSON: " + msg + " (at byte " + strconv.Itoa(s.pos) + ")"}
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) value(depth int) *jsonError {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return s.syntax("it ends too early")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		if depth >= maxJSONDepth {
			return s.syntax("it is nested too deeply")
		}
		return s.object(depth + 1)
	case c == '[':
		if depth >= maxJSONDepth {
			return s.syntax("it is nested too deeply")
		}
		return s.array(depth + 1)
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.syntax("unexpected " + quoteByte(s.data[s.pos]))
}

func (s *jsonScanner) literal(word string) *jsonError {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.syntax("unexpected " + quoteByte(s.data[s.pos]))
	}
	s.pos += len(word)
	return nil
}

func (s *jsonScanner) number() *jsonError {
	d := s.data
	if d[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(d) && d[s.pos] == '0':
		s.pos++
	case s.pos < len(d) && d[s.pos] >= '1' && d[s.pos] <= '9':
		s.digits()
	default:
		return s.syntax("a number needs digits")
	}
	if s.pos < len(d) && d[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.syntax("a fraction needs digits")
		}
	}
	if s.pos < len(d) && (d[s.pos] == 'e' || d[s.pos] == 'E') {
		s.pos++
		if s.pos < len(d) && (d[s.pos] == '+' || d[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.syntax("an exponent needs digits")
		}
	}
	return nil
}

func (s *jsonScanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

func (s *jsonScanner) array(depth int) *jsonError {
	s.pos++ // [
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := s.value(depth); err != nil {
			if !err.syntax {
				err.path = append(err.path, "["+strconv.Itoa(i)+"]")
			}
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.syntax("it ends too early")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.syntax("expected , or ] after an array element, found " + quoteByte(s.data[s.pos]))
		}
	}
}

func (s *jsonScanner) object(depth int) *jsonError {
	s.pos++ // {
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return nil
	}
	var first [pairwiseKeys][2]int // the raw names seen, as [start, end) of their contents
	var escaped [pairwiseKeys]bool
	var more map[string]bool // decoded names past the first pairwiseKeys
	for n := 0; ; n++ {
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			if s.pos >= len(s.data) {
				return s.syntax("it ends too early")
			}
			return s.syntax("expected a member name in quotes, found " + quoteByte(s.data[s.pos]))
		}
		start := s.pos + 1
		esc, end, err := s.str()
		if err != nil {
			if !err.syntax {
				err.path = nil // a bad name: the object is the place
				err.msg = "a member name " + err.msg
			}
			return err
		}
		name := s.data[start:end]
		dup := false
		if n < pairwiseKeys {
			for i := range n {
				other := s.data[first[i][0]:first[i][1]]
				if !esc && !escaped[i] {
					dup = string(other) == string(name)
				} else {
					dup = unescape(other) == unescape(name)
				}
				if dup {
					break
				}
			}
			first[n], escaped[n] = [2]int{start, end}, esc
		} else {
			if more == nil {
				more = make(map[string]bool, 2*pairwiseKeys)
				for i := range pairwiseKeys {
					more[unescape(s.data[first[i][0]:first[i][1]])] = true
				}
			}
			key := unescape(name)
			dup = more[key]
			more[key] = true
		}
		if dup {
			return &jsonError{path: []string{"." + unescape(name)}, msg: "is given twice in one object"}
		}
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			if s.pos >= len(s.data) {
				return s.syntax("it ends too early")
			}
			return s.syntax("expected : after a member name, found " + quoteByte(s.data[s.pos]))
		}
		s.pos++
		if err := s.value(depth); err != nil {
			if !err.syntax {
				err.path = append(err.path, "."+unescape(name))
			}
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.syntax("it ends too early")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.syntax("expected , or } after a member, found " + quoteByte(s.data[s.pos]))
		}
	}
}

// str reads a string at s.pos (the opening quote) and reports whether it
// holds escapes and where its contents end (before the closing quote).
func (s *jsonScanner) str() (escaped bool, end int, err *jsonError) {
	d := s.data
	s.pos++ // "
	for s.pos < len(d) {
		c := d[s.pos]
		switch {
		case c == '"':
			end = s.pos
			s.pos++
			return escaped, end, nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return escaped, 0, err
			}
		case c < 0x20:
			return escaped, 0, s.syntax("a string holds the control character " + quoteByte(c) + " (escape it)")
		case c < utf8.RuneSelf:
			s.pos++
		default:
			r, size := utf8.DecodeRune(d[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return escaped, 0, &jsonError{msg: "is not valid UTF-8 (at byte " + strconv.Itoa(s.pos) + ")"}
			}
			s.pos += size
		}
	}
	return escaped, 0, s.syntax("a string is not closed")
}

// escape reads one escape sequence at s.pos (the backslash).
func (s *jsonScanner) escape() *jsonError {
	d := s.data
	if s.pos+1 >= len(d) {
		return s.syntax("a string is not closed")
	}
	switch d[s.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos += 2
		return nil
	case 'u':
	default:
		return s.syntax("unknown escape \\" + string(rune(d[s.pos+1])))
	}
	r, ok := hex4(d, s.pos+2)
	if !ok {
		return s.syntax("\\u needs four hexadecimal digits")
	}
	s.pos += 6
	switch {
	case r == 0:
		return &jsonError{msg: "must not contain the NUL character (U+0000)"}
	case utf16.IsSurrogate(r) && r < 0xdc00: // a high surrogate: a low one must follow
		if s.pos+1 < len(d) && d[s.pos] == '\\' && d[s.pos+1] == 'u' {
			if lo, ok := hex4(d, s.pos+2); ok && lo >= 0xdc00 && lo <= 0xdfff {
				s.pos += 6
				return nil
			}
		}
		return &jsonError{msg: "holds a lone UTF-16 surrogate escape (\\u" + strconv.FormatInt(int64(r), 16) + ")"}
	case utf16.IsSurrogate(r):
		return &jsonError{msg: "holds a lone UTF-16 surrogate escape (\\u" + strconv.FormatInt(int64(r), 16) + ")"}
	}
	return nil
}

func hex4(d []byte, at int) (rune, bool) {
	if at+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// unescape decodes the contents of a string checkJSON has already read
// (valid escapes, valid UTF-8).
func unescape(raw []byte) string {
	if !strings.ContainsRune(string(raw), '\\') {
		return string(raw)
	}
	var b strings.Builder
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			b.WriteByte(raw[i])
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, _ := hex4(raw, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				lo, _ := hex4(raw, i+2)
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			b.WriteRune(r)
			continue
		default: // " \ /
			b.WriteByte(raw[i+1])
		}
		i += 2
	}
	return b.String()
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return "byte 0x" + strconv.FormatUint(uint64(c), 16)
}

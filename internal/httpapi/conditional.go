package httpapi

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Conditional and range reads of an attachment, after RFC 9110 §13 (preconditions)
// and §14 (ranges). Pure functions of the request's headers and the
// representation's validators, so each rule is tested on its own.

// readRequest holds the headers of a GET or HEAD that condition the answer.
// Range and IfRange are empty for HEAD: RFC 9110 §14.2 defines ranges for
// GET only, and a server must ignore them on other methods.
type readRequest struct {
	IfMatch, IfNoneMatch, IfModifiedSince, IfUnmodifiedSince string
	Range, IfRange                                           string
}

// readOutcome is what to answer.
type readOutcome int

const (
	serveWhole          readOutcome = iota // 200, every byte
	servePart                              // 206, the range
	notModified                            // 304
	preconditionFailed                     // 412
	rangeNotSatisfiable                    // 416
)

// byteRange is an inclusive range of byte positions.
type byteRange struct{ first, last int64 }

func (r byteRange) length() int64 { return r.last - r.first + 1 }

// decideRead applies RFC 9110 §13.2.2's order: If-Match, else
// If-Unmodified-Since (412); If-None-Match, else If-Modified-Since (304);
// then If-Range and Range. etag is the current strong entity tag and
// modified the Last-Modified time.
func decideRead(r readRequest, etag string, modified time.Time, size int64) (readOutcome, byteRange) {
	modified = modified.Truncate(time.Second) // HTTP-dates have seconds only
	if strings.TrimSpace(r.IfMatch) != "" {
		if !etagListMatches(r.IfMatch, etag, true) {
			return preconditionFailed, byteRange{}
		}
	} else if t, ok := httpDate(r.IfUnmodifiedSince); ok && modified.After(t) {
		return preconditionFailed, byteRange{}
	}
	if strings.TrimSpace(r.IfNoneMatch) != "" {
		if etagListMatches(r.IfNoneMatch, etag, false) {
			return notModified, byteRange{}
		}
	} else if t, ok := httpDate(r.IfModifiedSince); ok && !modified.After(t) {
		return notModified, byteRange{}
	}
	if strings.TrimSpace(r.Range) == "" || !ifRangeHolds(r.IfRange, etag, modified) {
		return serveWhole, byteRange{}
	}
	return parseRange(r.Range, size)
}

// parseRange reads a Range header for a representation of size bytes (an
// empty representation ignores Range). One
// satisfiable range is servePart; one that is not (it starts at or past the
// end, or is the empty suffix "-0") is rangeNotSatisfiable. Anything else is
// ignored (serveWhole): another unit, a syntax error, a range whose end
// precedes its start, and several ranges (no multipart/byteranges answers).
func parseRange(h string, size int64) (readOutcome, byteRange) {
	if size == 0 {
		return serveWhole, byteRange{} // no range of nothing can be served (RFC 9110 lets a server ignore Range)
	}
	unit, set, ok := strings.Cut(strings.TrimSpace(h), "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") || strings.Contains(set, ",") {
		return serveWhole, byteRange{}
	}
	set = strings.TrimSpace(set)
	firstText, lastText, ok := strings.Cut(set, "-")
	if !ok {
		return serveWhole, byteRange{}
	}
	firstText, lastText = strings.TrimSpace(firstText), strings.TrimSpace(lastText)
	if firstText == "" { // suffix range: the last n bytes
		n, ok := digits(lastText)
		switch {
		case !ok:
			return serveWhole, byteRange{}
		case n == 0:
			return rangeNotSatisfiable, byteRange{}
		}
		n = min(n, size)
		return servePart, byteRange{size - n, size - 1}
	}
	first, ok := digits(firstText)
	if !ok {
		return serveWhole, byteRange{}
	}
	last := int64(math.MaxInt64)
	if lastText != "" {
		if last, ok = digits(lastText); !ok || last < first {
			return serveWhole, byteRange{}
		}
	}
	if first >= size {
		return rangeNotSatisfiable, byteRange{}
	}
	return servePart, byteRange{first, min(last, size-1)}
}

// digits parses a non-empty run of ASCII digits; values too large for an
// int64 saturate (they are past any end either way).
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-9)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// ifRangeHolds: without If-Range the range applies; with it, only if it
// names the current strong tag, or is the Last-Modified date exactly.
func ifRangeHolds(h string, etag string, modified time.Time) bool {
	h = strings.TrimSpace(h)
	switch {
	case h == "":
		return true
	case strings.HasPrefix(h, `"`):
		return h == etag
	case strings.HasPrefix(h, "W/"):
		return false // weak tags never match (RFC 9110 §13.1.5)
	}
	t, ok := httpDate(h)
	return ok && t.Equal(modified)
}

// etagListMatches reports whether a list of entity tags (or "*") names the
// current tag: by strong comparison for If-Match, weak for If-None-Match. A
// list that cannot be parsed matches nothing.
func etagListMatches(list, etag string, strong bool) bool {
	list = strings.TrimSpace(list)
	if list == "*" {
		return true
	}
	for list != "" {
		weak := false
		if strings.HasPrefix(list, "W/") {
			weak, list = true, list[2:]
		}
		if !strings.HasPrefix(list, `"`) {
			return false
		}
		end := strings.IndexByte(list[1:], '"')
		if end < 0 {
			return false
		}
		tag := list[:end+2]
		if tag == etag && (!weak || !strong) {
			return true
		}
		list = strings.TrimSpace(list[end+2:])
		if list != "" {
			if list[0] != ',' {
				return false
			}
			list = strings.TrimSpace(list[1:])
		}
	}
	return false
}

// httpDate parses an HTTP-date (RFC 9110 §5.6.7, the three formats
// http.ParseTime takes); ok is false when there is none or it is invalid, in
// which case the condition is ignored.
func httpDate(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, false
	}
	t, err := http.ParseTime(s)
	return t, err == nil
}

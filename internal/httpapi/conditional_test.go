package httpapi

import (
	"math"
	"testing"
	"time"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		h    string
		size int64
		want readOutcome
		r    byteRange
	}{
		{"bytes=0-9", 100, servePart, byteRange{0, 9}},
		{"bytes=90-", 100, servePart, byteRange{90, 99}},
		{"bytes=-10", 100, servePart, byteRange{90, 99}},
		{"bytes=-1000", 100, servePart, byteRange{0, 99}},
		{"bytes=95-1000", 100, servePart, byteRange{95, 99}},
		{"bytes=0-" + "9999999999999999999999", 100, servePart, byteRange{0, 99}},
		{" Bytes = 1-2 ", 100, servePart, byteRange{1, 2}},
		{"bytes=100-", 100, rangeNotSatisfiable, byteRange{}},
		{"bytes=9999999999999999999999-", 100, rangeNotSatisfiable, byteRange{}},
		{"bytes=-0", 100, rangeNotSatisfiable, byteRange{}},
		{"bytes=5-4", 100, serveWhole, byteRange{}},
		{"bytes=0-1,3-4", 100, serveWhole, byteRange{}},
		{"bytes=0-1,", 100, serveWhole, byteRange{}},
		{"bytes=", 100, serveWhole, byteRange{}},
		{"bytes=-", 100, serveWhole, byteRange{}},
		{"bytes=a-b", 100, serveWhole, byteRange{}},
		{"bytes=+1-2", 100, serveWhole, byteRange{}},
		{"bytes=1", 100, serveWhole, byteRange{}},
		{"items=0-1", 100, serveWhole, byteRange{}},
		{"0-1", 100, serveWhole, byteRange{}},
		{"bytes=0-0", 0, serveWhole, byteRange{}},
		{"bytes=-0", 0, serveWhole, byteRange{}},
	} {
		got, r := parseRange(tc.h, tc.size)
		if got != tc.want || r != tc.r {
			t.Errorf("parseRange(%q, %d) = %v %v, want %v %v", tc.h, tc.size, got, r, tc.want, tc.r)
		}
	}
	if n, ok := digits("99999999999999999999"); !ok || n != math.MaxInt64 {
		t.Errorf("digits saturate: %d %v", n, ok)
	}
}

func TestETagLists(t *testing.T) {
	const tag = `"abc.123"`
	for _, tc := range []struct {
		list         string
		strong, weak bool
	}{
		{tag, true, true},
		{"*", true, true},
		{` "x" , ` + tag, true, true},
		{"W/" + tag, false, true},
		{`"abc"`, false, false},
		{`"a,b", ` + tag, true, true}, // a comma inside a tag
		{"abc.123", false, false},     // unquoted: unparseable
		{tag + ` junk`, true, true},   // matched before the junk
		{`junk ` + tag, false, false},
		{`"x" "y"`, false, false},
		{``, false, false},
	} {
		if got := etagListMatches(tc.list, tag, true); got != tc.strong {
			t.Errorf("strong %q: %v, want %v", tc.list, got, tc.strong)
		}
		if got := etagListMatches(tc.list, tag, false); got != tc.weak {
			t.Errorf("weak %q: %v, want %v", tc.list, got, tc.weak)
		}
	}
}

// RFC 9110 §13.2.2's order of evaluation.
func TestDecideRead(t *testing.T) {
	const tag = `"t"`
	mod := time.Date(2026, 11, 22, 8, 15, 30, 500_000_000, time.UTC) // sub-second: compared at seconds
	at := mod.Format(timeFormat)
	before := mod.Add(-time.Second).Format(timeFormat)
	for _, tc := range []struct {
		name string
		r    readRequest
		want readOutcome
	}{
		{"nothing", readRequest{}, serveWhole},
		{"If-Match fails first", readRequest{IfMatch: `"x"`, IfNoneMatch: tag}, preconditionFailed},
		{"If-Match hides If-Unmodified-Since", readRequest{IfMatch: tag, IfUnmodifiedSince: before}, serveWhole},
		{"If-Unmodified-Since at Last-Modified", readRequest{IfUnmodifiedSince: at}, serveWhole},
		{"If-Unmodified-Since before", readRequest{IfUnmodifiedSince: before}, preconditionFailed},
		{"If-None-Match hides If-Modified-Since", readRequest{IfNoneMatch: `"x"`, IfModifiedSince: at}, serveWhole},
		{"If-Modified-Since at Last-Modified", readRequest{IfModifiedSince: at}, notModified},
		{"If-Modified-Since before", readRequest{IfModifiedSince: before}, serveWhole},
		{"304 before a range", readRequest{IfNoneMatch: tag, Range: "bytes=0-1"}, notModified},
		{"range", readRequest{Range: "bytes=0-1"}, servePart},
		{"If-Range current", readRequest{Range: "bytes=0-1", IfRange: tag}, servePart},
		{"If-Range stale", readRequest{Range: "bytes=0-1", IfRange: `"x"`}, serveWhole},
		{"If-Range date", readRequest{Range: "bytes=0-1", IfRange: at}, servePart},
		{"If-Range other date", readRequest{Range: "bytes=0-1", IfRange: before}, serveWhole},
	} {
		if got, _ := decideRead(tc.r, tag, mod, 10); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

const timeFormat = "Mon, 02 Jan 2006 15:04:05 GMT"

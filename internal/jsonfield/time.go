package jsonfield

import (
	"time"
)

// Time is a timestamp of the wire (the contract's Timestamp): RFC 3339,
// as time.Time writes and reads it.
//
// time.Time implements json.Marshaler, and encoding/json re-scans and
// compacts whatever a MarshalJSON returns, byte by byte, for every
// timestamp of every item of a page. Time implements only
// encoding.TextMarshaler, which encoding/json writes as a string with no
// second pass (BenchmarkEncodeUserPage in internal/httpapi). The text is
// time.Time's, so the JSON is the same.
type Time time.Time

// MarshalText writes the time in RFC 3339 with the fraction it has.
func (t Time) MarshalText() ([]byte, error) { return time.Time(t).MarshalText() }

// UnmarshalText reads an RFC 3339 time.
func (t *Time) UnmarshalText(b []byte) error { return (*time.Time)(t).UnmarshalText(b) }

// Time returns the time.Time.
func (t Time) Time() time.Time { return time.Time(t) }

// String is the time as time.Time prints it.
func (t Time) String() string { return time.Time(t).String() }

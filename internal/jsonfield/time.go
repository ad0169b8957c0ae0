package jsonfield

import (
	"errors"
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

// UnmarshalText reads an RFC 3339 time, as ParseTime does.
func (t *Time) UnmarshalText(b []byte) error {
	if err := (*time.Time)(t).UnmarshalText(b); err != nil {
		return err
	}
	return checkOffset(string(b))
}

// ParseTime reads a timestamp of the wire: RFC 3339, with any fraction of
// a second. time.Parse refuses an hour of 24 but takes an offset of
// ±24:00 and offset minutes of 60, which RFC 3339 does not allow (its
// time-numoffset is a time-hour, 00 to 23, and a time-minute, 00 to 59):
// those are refused too, so every timestamp the API reads is one that
// every client's RFC 3339 parser reads back.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	if err := checkOffset(s); err != nil {
		return time.Time{}, err
	}
	return t, nil
}

var errOffset = errors.New("the offset is beyond ±23:59")

// checkOffset refuses the offset of a time time.Parse has read (so that its
// last six bytes, unless it ends in Z, are a sign, two digits, a colon and
// two digits) when its hour is past 23 or its minute past 59.
func checkOffset(s string) error {
	n := len(s)
	if n < 6 || (s[n-6] != '+' && s[n-6] != '-') || s[n-3] != ':' {
		return nil
	}
	hour := int(s[n-5]-'0')*10 + int(s[n-4]-'0')
	minute := int(s[n-2]-'0')*10 + int(s[n-1]-'0')
	if hour > 23 || minute > 59 {
		return errOffset
	}
	return nil
}

// Time returns the time.Time.
func (t Time) Time() time.Time { return time.Time(t) }

// String is the time as time.Time prints it.
func (t Time) String() string { return time.Time(t).String() }

package jsonfield_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/jsonfield"
)

// TestTimeOnTheWire: a jsonfield.Time is written exactly as time.Time is,
// reads back as the same instant, and a value json.Marshal refuses (a year
// past 9999) is refused the same way, never written as a malformed string.
func TestTimeOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    time.Time
	}{
		{"microseconds", time.Date(2026, 11, 26, 12, 9, 21, 613910000, time.UTC)},
		{"whole second", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"nanoseconds", time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC)},
		{"offset", time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("", -5*3600))},
		{"zero", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(struct {
				At time.Time `json:"at"`
			}{tc.t})
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(struct {
				At jsonfield.Time `json:"at"`
			}{jsonfield.Time(tc.t)})
			if err != nil || string(got) != string(want) {
				t.Fatalf("Marshal = %s, %v; want %s", got, err, want)
			}
			var back struct {
				At jsonfield.Time `json:"at"`
			}
			if err := json.Unmarshal(got, &back); err != nil || !back.At.Time().Equal(tc.t) {
				t.Fatalf("Unmarshal(%s) = %v, %v; want %v", got, back.At, err, tc.t)
			}
		})
	}
	if b, err := json.Marshal(jsonfield.Time(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))); err == nil {
		t.Fatalf("Marshal of year 10000 = %s; want an error as time.Time gives", b)
	}
	var bad jsonfield.Time
	if err := json.Unmarshal([]byte(`"yesterday"`), &bad); err == nil {
		t.Fatal(`Unmarshal("yesterday") succeeded; want an error`)
	}
}

// TestParseTimeRanges: ParseTime and Time's decoding read RFC 3339 to the
// letter: offsets up to ±23:59 and hours up to 23, nothing beyond.
func TestParseTimeRanges(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"2026-12-01T10:00:00Z", true},
		{"2026-12-01T10:00:00.123456+23:59", true},
		{"2026-12-01T10:00:00-23:59", true},
		{"2026-12-01T23:59:59-00:00", true},
		{"2026-12-01T10:00:00+24:00", false},
		{"2026-12-01T10:00:00-24:00", false},
		{"2026-12-01T10:00:00+23:60", false},
		{"2026-12-01T10:00:00+00:60", false},
		{"2026-12-01T24:00:00Z", false},
		{"2026-12-01T24:00:00+01:00", false},
		{"2026-12-01", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := jsonfield.ParseTime(tc.in)
			var v jsonfield.Time
			err2 := json.Unmarshal([]byte(`"`+tc.in+`"`), &v)
			if (err == nil) != tc.ok || (err2 == nil) != tc.ok {
				t.Errorf("ParseTime: %v; Unmarshal: %v; want ok %v", err, err2, tc.ok)
			}
		})
	}
}

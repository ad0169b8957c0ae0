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

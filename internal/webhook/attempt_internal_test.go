package webhook

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	cases := []struct {
		name  string
		value string
		want  time.Duration
	}{
		{"absent", "", 0},
		{"seconds", "30", 30 * time.Second},
		{"seconds with spaces", " 30 ", 30 * time.Second},
		{"zero", "0", 0},
		{"a day, the most", "86400", MaxRetryAfter},
		{"more than a day", "86401", MaxRetryAfter},
		{"more than int64 holds", "99999999999999999999999", MaxRetryAfter},
		{"more seconds than a Duration holds", "9300000000000", MaxRetryAfter},
		{"negative", "-5", 0},
		{"a fraction", "1.5", 0},
		{"words", "later", 0},
		{"a date ahead", now.Add(90 * time.Minute).Format(http.TimeFormat), 90 * time.Minute},
		{"a date past", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"a date years ahead", now.AddDate(5, 0, 0).Format(http.TimeFormat), MaxRetryAfter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseRetryAfter(tc.value, now); got != tc.want {
				t.Fatalf("parseRetryAfter(%q) = %v; want %v", tc.value, got, tc.want)
			}
		})
	}
}

func TestAttemptTimeoutBound(t *testing.T) {
	cases := []struct {
		in, want time.Duration
	}{
		{0, AttemptTimeout},
		{-time.Second, AttemptTimeout},
		{time.Hour, AttemptTimeout},
		{AttemptTimeout, AttemptTimeout},
		{time.Second, time.Second},
	}
	for _, tc := range cases {
		if got := attemptTimeout(tc.in); got != tc.want {
			t.Fatalf("attemptTimeout(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
	if c := NewClient(Options{}); c.Timeout != AttemptTimeout || c.CheckRedirect == nil {
		t.Fatalf("NewClient(Options{}): timeout %v, redirects checked %v; want %v and not followed",
			c.Timeout, c.CheckRedirect != nil, AttemptTimeout)
	}
}

package httpapi

import "testing"

// TestParseIfMatch: If-Match as RFC 9110 reads it, checked against the
// domain's version "3" (whose ETag is "3" quoted).
func TestParseIfMatch(t *testing.T) {
	tests := []struct {
		header string
		ok     bool
	}{
		{"", true},
		{"  ", true},
		{"*", true},
		{`"3"`, true},
		{`"1", "3"`, true},
		{` "1" ,"3" `, true},
		{`"2"`, false},
		{`W/"3"`, false}, // If-Match compares strongly
		{`3`, false},     // not a quoted tag
		{`"3`, false},
	}
	for _, tc := range tests {
		t.Run(tc.header, func(t *testing.T) {
			h := tc.header
			p := parseIfMatch(&h)
			matched := p == nil || p.Any
			if p != nil {
				for _, tag := range p.Tags {
					matched = matched || tag == "3"
				}
			}
			if matched != tc.ok {
				t.Fatalf("If-Match %q against version 3: matched=%v, want %v (parsed %+v)", tc.header, matched, tc.ok, p)
			}
		})
	}
	if parseIfMatch(nil) != nil {
		t.Fatal("no header must be no precondition")
	}
}

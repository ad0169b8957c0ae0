package guild

import (
	"errors"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
)

func TestCursorRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		filters []string
	}{
		{"plain", "ops", []string{"channels"}},
		{"with filters", "42", []string{"events", "actor", "role.*", "", "", ""}},
		{"unicode key", "ünï", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := encodeCursor(tc.key, tc.filters...)
			got, err := decodeCursor(*c, tc.filters...)
			if err != nil || got != tc.key {
				t.Fatalf("decode(encode(%q)) = %q, %v", tc.key, got, err)
			}
		})
	}
}

func TestCursorRefusals(t *testing.T) {
	good := *encodeCursor("ops", "channels")
	tests := []struct {
		name    string
		raw     string
		filters []string
	}{
		{"other filters", good, []string{"users"}},
		{"garbage", "!!!", []string{"channels"}},
		{"not json", "bm90IGpzb24", []string{"channels"}},
		{"empty key", *encodeCursor("", "channels"), []string{"channels"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCursor(tc.raw, tc.filters...)
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalid) || e.Fields[0].Field != "cursor" {
				t.Fatalf("decodeCursor(%q) = %v, want a 400 about the cursor", tc.raw, err)
			}
		})
	}
}

func TestPreconditionCheck(t *testing.T) {
	tests := []struct {
		name    string
		p       *Precondition
		current string
		ok      bool
	}{
		{"none", nil, "3", true},
		{"any", &Precondition{Any: true}, "3", true},
		{"the current version", &Precondition{Tags: []string{"3"}}, "3", true},
		{"one of several", &Precondition{Tags: []string{"1", "3"}}, "3", true},
		{"another version", &Precondition{Tags: []string{"2"}}, "3", false},
		{"no version at all", &Precondition{}, "3", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.check(tc.current)
			if (err == nil) != tc.ok {
				t.Fatalf("%+v.check(%q) = %v, want ok=%v", tc.p, tc.current, err, tc.ok)
			}
			if err != nil && !errors.Is(err, apperr.ErrPrecondition) {
				t.Fatalf("want a 412, got %v", err)
			}
		})
	}
}

// FuzzDecodeCursor: any input is either a valid cursor or a 400, never a panic.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(*encodeCursor("ops", "channels"))
	f.Add("")
	f.Add("eyJrIjoiIn0")
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := decodeCursor(raw, "channels")
		if err != nil && !errors.Is(err, apperr.ErrInvalid) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if err == nil && raw != "" && key == "" {
			t.Fatalf("accepted %q with an empty key", raw)
		}
	})
}

// FuzzValidateLinks: labels and URLs are accepted only when well-formed.
func FuzzValidateLinks(f *testing.F) {
	f.Add("github", "https://github.com/alice")
	f.Add("Bad Label", "javascript:alert(1)")
	f.Add("x", "http://")
	f.Fuzz(func(t *testing.T, label, url string) {
		err := validateLinks(map[string]string{label: url}, "links")
		if err != nil && !errors.Is(err, apperr.ErrInvalid) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if err == nil {
			if !labelPattern.MatchString(label) {
				t.Fatalf("accepted label %q", label)
			}
			l := strings.ToLower(url)
			if !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") || len(url) > MaxLinkURL {
				t.Fatalf("accepted URL %q", url)
			}
		}
	})
}

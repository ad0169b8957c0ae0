package guild

import (
	"errors"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
)

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

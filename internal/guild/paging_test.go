package guild

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
)

// cs seals the cursors of these tests.
var cs = newCursors([]byte("0123456789abcdef0123456789abcdef"))

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
			c := cs.encode(tc.key, tc.filters...)
			got, err := cs.decode(*c, tc.filters...)
			if err != nil || got != tc.key {
				t.Fatalf("decode(encode(%q)) = %q, %v", tc.key, got, err)
			}
		})
	}
}

func TestCursorRefusals(t *testing.T) {
	good := *cs.encode("ops", "channels")
	tests := []struct {
		name    string
		raw     string
		filters []string
	}{
		{"other filters", good, []string{"users"}},
		{"garbage", "!!!", []string{"channels"}},
		{"not sealed", "bm90IGpzb24", []string{"channels"}},
		{"sealed with another key", *newCursors([]byte("fedcba9876543210fedcba9876543210")).encode("ops", "channels"), []string{"channels"}},
		{"tampered", tamper(good), []string{"channels"}},
		{"empty key", *cs.encode("", "channels"), []string{"channels"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cs.decode(tc.raw, tc.filters...)
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalid) || e.Fields[0].Field != "cursor" {
				t.Fatalf("cs.decode(%q) = %v, want a 400 about the cursor", tc.raw, err)
			}
		})
	}
}

// tamper flips a bit of a cursor's last byte.
func tamper(raw string) string {
	b, _ := base64.RawURLEncoding.DecodeString(raw)
	b[len(b)-1] ^= 1
	return base64.RawURLEncoding.EncodeToString(b)
}

// A cursor tells nothing of its key, however it is decoded.
func TestCursorIsOpaque(t *testing.T) {
	for _, key := range []string{"zb-hidden-channel", "01936f4e-8d2a-7c3b-9a4e-5f6a7b8c9d0e"} {
		raw := *cs.encode(key, "channels")
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), key) || strings.Contains(raw, key) {
			t.Errorf("the cursor of %q shows it: %q", key, b)
		}
		// The same place is the same cursor (answers are a function of the
		// data); another filter or key is another cursor, through and through.
		if again := *cs.encode(key, "channels"); again != raw {
			t.Errorf("two cursors of %q differ", key)
		}
		other := *cs.encode(key+"x", "channels")
		o, _ := base64.RawURLEncoding.DecodeString(other)
		if len(o) < 12 || len(b) < 12 || string(o[:12]) == string(b[:12]) {
			t.Errorf("two cursors share a nonce: %q and %q", raw, other)
		}
		if *cs.encode(key, "users") == raw {
			t.Errorf("cursors of two filters are equal")
		}
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
	f.Add(*cs.encode("ops", "channels"))
	f.Add("")
	f.Add("eyJrIjoiIn0")
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := cs.decode(raw, "channels")
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

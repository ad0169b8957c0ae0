package cursor

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/apperr"
)

// cs seals the cursors of these tests.
var cs = New([]byte("0123456789abcdef0123456789abcdef"))

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
			c := cs.Encode(tc.key, tc.filters...)
			got, err := cs.Decode(*c, tc.filters...)
			if err != nil || got != tc.key {
				t.Fatalf("decode(encode(%q)) = %q, %v", tc.key, got, err)
			}
		})
	}
}

func TestCursorRefusals(t *testing.T) {
	good := *cs.Encode("ops", "channels")
	tests := []struct {
		name    string
		raw     string
		filters []string
	}{
		{"other filters", good, []string{"users"}},
		{"garbage", "!!!", []string{"channels"}},
		{"not sealed", "bm90IGpzb24", []string{"channels"}},
		{"sealed with another key", *New([]byte("fedcba9876543210fedcba9876543210")).Encode("ops", "channels"), []string{"channels"}},
		{"tampered", tamper(good), []string{"channels"}},
		{"empty key", *cs.Encode("", "channels"), []string{"channels"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cs.Decode(tc.raw, tc.filters...)
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalid) || e.Fields[0].Field != "cursor" {
				t.Fatalf("cs.Decode(%q) = %v, want a 400 about the cursor", tc.raw, err)
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
		raw := *cs.Encode(key, "channels")
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), key) || strings.Contains(raw, key) {
			t.Errorf("the cursor of %q shows it: %q", key, b)
		}
		// The same place is the same cursor (answers are a function of the
		// data); another filter or key is another cursor, through and through.
		if again := *cs.Encode(key, "channels"); again != raw {
			t.Errorf("two cursors of %q differ", key)
		}
		other := *cs.Encode(key+"x", "channels")
		o, _ := base64.RawURLEncoding.DecodeString(other)
		if len(o) < 12 || len(b) < 12 || string(o[:12]) == string(b[:12]) {
			t.Errorf("two cursors share a nonce: %q and %q", raw, other)
		}
		if *cs.Encode(key, "users") == raw {
			t.Errorf("cursors of two filters are equal")
		}
	}
}

// FuzzDecodeCursor: any input is either a valid cursor or a 400, never a panic.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(*cs.Encode("ops", "channels"))
	f.Add("")
	f.Add("eyJrIjoiIn0")
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := cs.Decode(raw, "channels")
		if err != nil && !errors.Is(err, apperr.ErrInvalid) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if err == nil && raw != "" && key == "" {
			t.Fatalf("accepted %q with an empty key", raw)
		}
	})
}

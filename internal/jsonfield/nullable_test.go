package jsonfield_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/guildhall/guildhall/internal/jsonfield"
)

type email string

type user struct {
	Name  string                    `json:"name"`
	Email jsonfield.Nullable[email] `json:"email,omitzero"`
}

// TestNullableOnTheWire: absent is left out, null and a value are written
// as encoding/json writes them, and each reads back as itself.
func TestNullableOnTheWire(t *testing.T) {
	tests := []struct {
		name  string
		field jsonfield.Nullable[email]
		json  string
	}{
		{"absent", jsonfield.Nullable[email]{}, `{"name":"a"}`},
		{"null", jsonfield.NewNullNullable[email](), `{"name":"a","email":null}`},
		{"value", jsonfield.NewNullableWithValue[email]("alice@example.com"), `{"name":"a","email":"alice@example.com"}`},
		{"escaped", jsonfield.NewNullableWithValue[email]("<\"é\">\x01"), `{"name":"a","email":"\u003c\"é\"\u003e\u0001"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(user{Name: "a", Email: tc.field})
			if err != nil || string(b) != tc.json {
				t.Fatalf("Marshal = %s, %v; want %s", b, err, tc.json)
			}
			var back user
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Email != tc.field {
				t.Errorf("read back %+v, want %+v", back.Email, tc.field)
			}
		})
	}
}

// TestNullableAccessors: the methods behave as oapi-codegen/nullable's.
func TestNullableAccessors(t *testing.T) {
	var n jsonfield.Nullable[email]
	if n.IsSpecified() || n.IsNull() || !n.IsZero() {
		t.Errorf("zero value: specified %v, null %v", n.IsSpecified(), n.IsNull())
	}
	if _, err := n.Get(); err == nil || err.Error() != "value is not specified" {
		t.Errorf("Get of absent: %v", err)
	}
	n.SetNull()
	if !n.IsSpecified() || !n.IsNull() || n.IsZero() {
		t.Errorf("null: specified %v, null %v", n.IsSpecified(), n.IsNull())
	}
	if _, err := n.Get(); err == nil || err.Error() != "value is null" {
		t.Errorf("Get of null: %v", err)
	}
	n.Set("bob@example.com")
	if v := n.MustGet(); v != "bob@example.com" || n.IsNull() || !n.IsSpecified() {
		t.Errorf("set: %q, null %v", v, n.IsNull())
	}
	n.SetUnspecified()
	if n.IsSpecified() {
		t.Error("SetUnspecified left it specified")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustGet of absent did not panic")
		}
	}()
	n.MustGet()
}

// FuzzNullableMarshalsLikeEncodingJSON: a value is written byte for byte as
// json.Marshal writes the string (the fast path and the escaping agree), and
// reads back as itself when it is valid UTF-8.
func FuzzNullableMarshalsLikeEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "alice@example.com", "a\"b\\c", "<&>", "\x00\x1f\x7f", "é\u2028", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := jsonfield.NewNullableWithValue(s).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(s)
		if !bytes.Equal(got, want) {
			t.Fatalf("MarshalJSON(%q) = %s, json.Marshal = %s", s, got, want)
		}
		var back jsonfield.Nullable[string]
		if err := back.UnmarshalJSON(got); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) && back.MustGet() != s {
			t.Fatalf("read back %q, want %q", back.MustGet(), s)
		}
	})
}

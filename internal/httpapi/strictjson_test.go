package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		location   string // "" when valid
		message    string // a substring of the message
	}{
		{"object", `{"name":"Mods","permissions":["MANAGE_MESSAGES"],"color":"#3498db"}`, "", ""},
		{"nested", `{"links":{"gh":"https://github.com/a","x":null},"n":[1,-2.5e10,0,true,false,null,{}]}`, "", ""},
		{"whitespace around", " \t\r\n{} \n", "", ""},
		{"scalars", `"x"`, "", ""},
		{"escapes", `{"a":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`, "", ""},
		{"non-ASCII", `{"name":"日本語 é 😀"}`, "", ""},
		{"U+FFFD itself", `{"name":"\ufffd �"}`, "", ""},
		{"same name in two objects", `{"a":{"x":1},"b":{"x":2}}`, "", ""},
		{"names that differ only by escapes' case", `{"\u00e9":1,"\u00E9x":2}`, "", ""},

		{"empty", ``, "body", "ends too early"},
		{"truncated", `{"name":`, "body", "ends too early"},
		{"trailing data", `{} {}`, "body", "after its JSON value"},
		{"trailing comma", `{"a":1,}`, "body", "member name"},
		{"single quotes", `{'a':1}`, "body", "member name"},
		{"leading zero", `{"a":01}`, "body", "expected , or }"},
		{"bare fraction", `{"a":1.}`, "body", "fraction"},
		{"bad exponent", `[1e]`, "body", "exponent"},
		{"raw control character", "{\"a\":\"x\ty\"}", "body", "control character"},
		{"unknown escape", `{"a":"\x"}`, "body", "unknown escape"},
		{"short \\u", `{"a":"\u12"}`, "body", "four hexadecimal"},
		{"unclosed string", `{"a":"x`, "body", "not closed"},
		{"nested too deeply", strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1), "body", "nested too deeply"},
		{"deep but not too deep", strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), "", ""},

		{"duplicate name", `{"name":"x","name":"y"}`, "body.name", "twice"},
		{"duplicate name, escaped", `{"name":"x","n\u0061me":"y"}`, "body.name", "twice"},
		{"duplicate name, both escaped", `{"\u006eame":"x","n\u0061me":"y"}`, "body.name", "twice"},
		{"duplicate nested name", `{"links":{"gh":"a","gh":"b"}}`, "body.links.gh", "twice"},
		{"duplicate name in an array element", `{"items":[{},{"a":1,"a":2}]}`, "body.items[1].a", "twice"},
		{"duplicate name past the pairwise ones", `{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k3":3}`, "body.k3", "twice"},
		{"duplicate name among the pairwise ones", `{"k0":0,"k1":1,"k2":2,"k1":3}`, "body.k1", "twice"},
		{"invalid UTF-8", "{\"name\":\"a\xffb\"}", "body.name", "UTF-8"},
		{"overlong UTF-8", "{\"name\":\"\xc0\xaf\"}", "body.name", "UTF-8"},
		{"UTF-8 of a surrogate", "[\"\xed\xa0\x80\"]", "body[0]", "UTF-8"},
		{"invalid UTF-8 in a name", "{\"\xff\":1}", "body", "member name"},
		{"invalid UTF-8 outside strings", "{\"a\":1}\xff", "body", "after its JSON value"},
		{"lone high surrogate", `{"name":"a\ud800b"}`, "body.name", "lone UTF-16 surrogate"},
		{"lone high surrogate at the end", `{"name":"\ud800"}`, "body.name", "lone UTF-16 surrogate"},
		{"lone low surrogate", `{"name":"\udc00"}`, "body.name", "lone UTF-16 surrogate"},
		{"two high surrogates", `{"name":"\ud800\ud800"}`, "body.name", "lone UTF-16 surrogate"},
		{"high surrogate and a letter", `{"name":"\ud83d\u0041"}`, "body.name", "lone UTF-16 surrogate"},
		{"surrogate in a name", `{"links":{"\udfff":"x"}}`, "body.links", "member name holds a lone"},
		{"escaped NUL", `{"topic":"a\u0000b"}`, "body.topic", "NUL"},
		{"escaped NUL in a name", `{"a\u0000":1}`, "body", "NUL"},
		{"escaped NUL deep", `{"a":[[{"b":["\u0000"]}]]}`, "body.a[0][0].b[0]", "NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkJSON([]byte(tc.body))
			if tc.location == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var je *jsonError
			if !errors.As(err, &je) {
				t.Fatalf("accepted, want %s: %s", tc.location, tc.message)
			}
			if je.Location() != tc.location || !strings.Contains(je.msg, tc.message) {
				t.Errorf("%s: %q, want %s: ...%s...", je.Location(), je.msg, tc.location, tc.message)
			}
		})
	}
}

// The common case allocates nothing.
func TestCheckJSONAllocations(t *testing.T) {
	body := []byte(`{"target_type":"role","target_id":"mods","allow":["VIEW_CHANNEL","SEND_MESSAGES"],"deny":[],` +
		`"links":{"github":"https://github.com/alice","blog":"https://alice.example.com"},"n":-12.5e3,"ok":true,"x":null}`)
	if n := testing.AllocsPerRun(100, func() {
		if err := checkJSON(body); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per check, want 0", n)
	}
}

// FuzzCheckJSON compares checkJSON with encoding/json used as a careful,
// slower reference: syntax (json.Valid), UTF-8, duplicate names per object
// (Decoder.Token) and U+0000. encoding/json cannot see a lone surrogate
// escape (it decodes it to U+FFFD), so there the property is one-sided: an
// accepted body decodes to U+FFFD only where the bytes say U+FFFD.
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Mods","permissions":["MANAGE_MESSAGES"],"color":"#3498db"}`,
		`{"links":{"gh":"https://github.com/a","x":null}}`, `{"a":1,"a":2}`, `{"a":{"b":1},"c":{"b":2}}`,
		`{"n\u0061me":1,"name":2}`, `["\ud800"]`, `["\ud83d\ude00"]`, `"\u0000"`, `"\ufffd"`, "\"\xff\"",
		`{"a":1} x`, `[1,2,[3,{"e":-1.5E+3}]]`, ``, ` `, `nul`, `{"a":"\/\b"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkJSON(data)
		ref := referenceCheck(data)
		if err == nil {
			if ref != nil {
				t.Fatalf("checkJSON accepted %q; the reference refuses it: %v", data, ref)
			}
			if fffd := strings.Count(decodedStrings(data), "\ufffd"); fffd > bytes.Count(data, []byte("\ufffd"))+
				bytes.Count(bytes.ToLower(data), []byte(`\ufffd`)) {
				t.Fatalf("checkJSON accepted %q, which decodes to U+FFFD: a lone surrogate got through", data)
			}
			return
		}
		var je *jsonError
		if !errors.As(err, &je) {
			t.Fatalf("error %T", err)
		}
		if ref == nil && !strings.Contains(je.msg, "surrogate") && !strings.Contains(je.msg, "nested too deeply") {
			t.Fatalf("checkJSON refused %q (%v), which the reference accepts", data, err)
		}
	})
}

// referenceCheck is the slow, obviously right check checkJSON replaces.
func referenceCheck(data []byte) error {
	if !json.Valid(data) {
		return errors.New("not JSON")
	}
	if !utf8.Valid(data) {
		return errors.New("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.key
		if top != nil && top.object {
			top.key = !top.key
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					// the closed value was a member's value: a name comes next
					stack[len(stack)-1].key = true
				}
				continue
			}
		case string:
			if strings.ContainsRune(v, 0) {
				return errors.New("NUL")
			}
			if isKey {
				if top.keys[v] {
					return errors.New("duplicate " + v)
				}
				top.keys[v] = true
			}
		}
	}
}

// decodedStrings is every string of a JSON text, decoded, concatenated.
func decodedStrings(data []byte) string {
	var b strings.Builder
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return b.String()
		}
		if s, ok := tok.(string); ok {
			b.WriteString(s)
		}
	}
}

func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"target_type":"role","target_id":"mods","allow":["VIEW_CHANNEL","SEND_MESSAGES","ATTACH_FILES"],"deny":["MENTION_EVERYONE"]}`)
	b.Run("checkJSON", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			_ = checkJSON(body)
		}
	})
	b.Run("decode into any (before)", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var v any
			_ = utf8.Valid(body)
			_ = json.NewDecoder(bytes.NewReader(body)).Decode(&v)
		}
	})
}

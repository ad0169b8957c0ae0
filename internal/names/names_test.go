package names_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/openapi"
)

// Default_Ignorable_Code_Point as DerivedCoreProperties.txt of Unicode
// 15.0.0 (the version of Go's tables) lists it.
var ucdDefaultIgnorable = [][2]rune{
	{0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x061C, 0x061C}, {0x115F, 0x1160}, {0x17B4, 0x17B5},
	{0x180B, 0x180F}, {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x206F}, {0x3164, 0x3164},
	{0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF}, {0xFFA0, 0xFFA0}, {0xFFF0, 0xFFF8}, {0x1BCA0, 0x1BCA3},
	{0x1D173, 0x1D17A}, {0xE0000, 0xE0FFF},
}

func TestDefaultIgnorableIsUnicodes(t *testing.T) {
	if unicode.Version != "15.0.0" {
		t.Skipf("the expected list is Unicode 15.0.0's; Go's tables are %s", unicode.Version)
	}
	want := map[rune]bool{}
	for _, r := range ucdDefaultIgnorable {
		for c := r[0]; c <= r[1]; c++ {
			want[c] = true
		}
	}
	for c := rune(0); c <= unicode.MaxRune; c++ {
		if got := unicode.Is(names.DefaultIgnorable, c); got != want[c] {
			t.Errorf("U+%04X: default-ignorable %v, want %v", c, got, want[c])
		}
	}
}

func TestRule(t *testing.T) {
	cases := []struct {
		name string
		in   string
		ok   bool // as a name
	}{
		{"plain", "Moderators", true},
		{"accents and spaces", "Équipe de modération", true},
		{"CJK", "管理者", true},
		{"digits only", "42", true},
		{"punctuation only", "#", true},
		{"emoji", "😀", true},
		{"emoji with VS16", "❤️", true},
		{"text style VS15", "☺︎", true},
		{"keycap", "1️⃣", true},
		{"ZWJ sequence", "👩‍💻", true},
		{"ZWJ sequence with VS16", "🏳️‍🌈", true},
		{"ZWJ sequence with skin tone", "🧑🏽‍🚀", true},
		{"family", "👨‍👩‍👧‍👦", true},
		{"flag", "🇫🇷", true},
		{"combining accent", "e\u0301", true},
		{"empty", "", false},
		{"blank", "   ", false},
		{"combining mark alone", "\u0301", false},
		{"Hangul filler U+3164", "\u3164", false},
		{"Hangul filler U+3164 beside a letter", "a\u3164b", false},
		{"Hangul choseong filler U+115F", "a\u115Fb", false},
		{"Hangul jungseong filler U+1160", "a\u1160b", false},
		{"halfwidth Hangul filler U+FFA0", "a\uFFA0b", false},
		{"Braille blank U+2800", "a\u2800b", false},
		{"tag space U+E0020", "a\U000E0020b", false},
		{"tag sequence of a subdivision flag", "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", false},
		{"Mongolian vowel separator U+180E", "a\u180Eb", false},
		{"soft hyphen U+00AD", "a\u00ADb", false},
		{"combining grapheme joiner U+034F", "a\u034Fb", false},
		{"unassigned default-ignorable U+2065", "a\u2065b", false},
		{"U+206A", "a\u206Ab", false},
		{"U+206B", "a\u206Bb", false},
		{"U+206C", "a\u206Cb", false},
		{"U+206D", "a\u206Db", false},
		{"U+206E", "a\u206Eb", false},
		{"U+206F", "a\u206Fb", false},
		{"interlinear annotation anchor U+FFF9", "a\uFFF9b", false},
		{"musical symbol begin beam U+1D173", "a\U0001D173b", false},
		{"Khmer vowel inherent U+17B4", "a\u17B4b", false},
		{"line separator U+2028", "a\u2028b", false},
		{"paragraph separator U+2029", "a\u2029b", false},
		{"right-to-left override U+202E", "a\u202Eb", false},
		{"zero width space U+200B", "ad\u200Bmin", false},
		{"word joiner U+2060", "a\u2060b", false},
		{"byte order mark U+FEFF", "\uFEFFa", false},
		{"private use U+E000", "a\uE000", false},
		{"private use plane 15", "a\U000F0000", false},
		{"C0 control", "a\tb", false},
		{"C1 control", "a\u0085b", false},
		{"VS16 at the start", "\uFE0Fa", false},
		{"VS16 after a space", "a \uFE0F", false},
		{"two VS16", "❤\uFE0F\uFE0F", false},
		{"VS17 (ideographic)", "葛\U000E0100", false},
		{"Mongolian free variation selector", "ᠠ\u180B", false},
		{"ZWJ between letters", "a\u200Db", false},
		{"ZWJ at the end", "👩\u200D", false},
		{"ZWJ at the start", "\u200D💻", false},
		{"two ZWJ", "👩\u200D\u200D💻", false},
		{"ZWJ before a skin tone", "👩\u200D🏽", false},
		{"ZWJ only", "\u200D", false},
		{"not UTF-8", "a\xffb", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := names.Check(tc.in)
			if (msg == "") != tc.ok {
				t.Errorf("Check(%+q) = %q, want ok %v", tc.in, msg, tc.ok)
			}
			if tc.ok && names.Clean(tc.in) != tc.in {
				t.Errorf("Clean(%+q) = %+q, want it unchanged", tc.in, names.Clean(tc.in))
			}
			if !tc.ok && !strings.ContainsFunc(tc.in, names.Visible) {
				return // blank: refused for what it lacks, not for what it holds
			}
			if got := names.CheckText(tc.in) == ""; got != tc.ok {
				t.Errorf("CheckText(%+q) ok %v, want %v", tc.in, got, tc.ok)
			}
		})
	}
}

// A name holds at most 100 characters, counted as code points (as the
// contract's validator counts them), not bytes; Usable cuts a longer one,
// and drops a joiner the cut leaves with nothing after it.
func TestLength(t *testing.T) {
	for _, tc := range []struct {
		name, in, usable string
		ok               bool
	}{
		{"100 ASCII", strings.Repeat("n", 100), strings.Repeat("n", 100), true},
		{"100 two-byte", strings.Repeat("é", 100), strings.Repeat("é", 100), true},
		{"100 emoji past U+FFFF", strings.Repeat("😀", 100), strings.Repeat("😀", 100), true},
		{"101 ASCII", strings.Repeat("n", 101), strings.Repeat("n", 100), false},
		{"300 two-byte", strings.Repeat("é", 300), strings.Repeat("é", 100), false},
		{"cut after a joiner", strings.Repeat("😀", 99) + "\u200D💻", strings.Repeat("😀", 99), false},
		{"cut after refused characters are removed", strings.Repeat("a\u200B", 100), strings.Repeat("a", 100), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg := names.Check(tc.in); (msg == "") != tc.ok {
				t.Errorf("Check = %q, want ok %v", msg, tc.ok)
			}
			if got := names.Usable(tc.in, "fallback"); got != tc.usable {
				t.Errorf("Usable = %+q, want %+q", got, tc.usable)
			}
		})
	}
}

func TestClean(t *testing.T) {
	cases := []struct{ in, want, usable string }{
		{"ad\u200Bmin", "admin", "admin"},
		{"Mod\u200Berator", "Moderator", "Moderator"},
		{"Ali\u200Bce", "Alice", "Alice"},
		{"\u200B", "", "fallback"},
		{"\u3164", "", "fallback"},
		{" \u3164 ", "  ", "fallback"},
		{"a\u202Eb\u2028c", "abc", "abc"},
		{"\uFE0Fa\uFE0F", "a\uFE0F", "a\uFE0F"},
		{"a\u200B\uFE0F", "a\uFE0F", "a\uFE0F"}, // the selector now follows a
		{"👩\u200D\u200D💻", "👩\u200D💻", "👩\u200D💻"},
		{"a\xffb", "ab", "ab"},
		{"🏳️‍🌈", "🏳️‍🌈", "🏳️‍🌈"},
	}
	for _, tc := range cases {
		if got := names.Clean(tc.in); got != tc.want {
			t.Errorf("Clean(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
		if got := names.Usable(tc.in, "fallback"); got != tc.usable {
			t.Errorf("Usable(%+q) = %+q, want %+q", tc.in, got, tc.usable)
		}
	}
}

// contractPatterns are the patterns of Name, DisplayName and X-Audit-Reason
// as the contract states them.
func contractPatterns(t testing.TB) (name, display, reason string) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.YAML)
	if err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas["Name"].Value.Pattern, doc.Components.Schemas["DisplayName"].Value.Pattern,
		doc.Components.Parameters["AuditReason"].Value.Schema.Value.Pattern
}

func TestContractStatesThePattern(t *testing.T) {
	name, display, reason := contractPatterns(t)
	if want := names.Pattern(true); name != want || display != want {
		t.Errorf("the contract's Name and DisplayName patterns are not names.Pattern(true); write\n%s", want)
	}
	if want := names.Pattern(false); reason != want {
		t.Errorf("the contract's X-Audit-Reason pattern is not names.Pattern(false); write\n%s", want)
	}
}

// goPattern compiles a contract pattern the way kin-openapi does.
func goPattern(t testing.TB, p string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(regexp.MustCompile(`\\u([0-9A-F]{4})`).ReplaceAllString(p, `\x{$1}`))
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// TestPatternIsTheRuleInTheBMP checks every code point of the Basic
// Multilingual Plane alone and after a letter: the pattern refuses a code
// point exactly when the rule refuses it everywhere.
func TestPatternIsTheRuleInTheBMP(t *testing.T) {
	re := goPattern(t, names.Pattern(false))
	for r := rune(0); r <= 0xFFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue // no UTF-8 text holds one
		}
		s := "a" + string(r)
		if r == 0x200D || (r >= 0xFE00 && r <= 0xFE0F) { // allowed where they stand: the pattern cannot tell
			if !re.MatchString(s) {
				t.Errorf("U+%04X: the pattern refuses it", r)
			}
			continue
		}
		if re.MatchString(s) != (names.CheckText(s) == "") {
			t.Errorf("U+%04X: pattern %v, rule %q", r, re.MatchString(s), names.CheckText(s))
		}
	}
}

// ruleEmoji is what the rule takes for an emoji on either side of a
// joiner: a symbol (So) or a skin tone, that is not refused.
func ruleEmoji(r rune) bool { return (unicode.Is(unicode.So, r) || skinTone(r)) && !names.Refused(r) }

// skinTone: the emoji modifiers U+1F3FB–U+1F3FF, which may end an emoji
// before a joiner but not start the one after it.
func skinTone(r rune) bool { return r >= 0x1F3FB && r <= 0x1F3FF }

// FuzzRule holds the rule's invariants on any text: what it accepts as a
// name holds a visible character, and a refused code point only where one
// is allowed; the contract's pattern accepts whatever the rule accepts;
// cleaning gives text the rule accepts, changes nothing it accepts, and is
// idempotent.
func FuzzRule(f *testing.F) {
	for _, s := range []string{"Moderators", "ad\u200Bmin", "👩‍💻", "🏳️‍🌈", "❤️", "a\U000E0020", "\u3164", "a\u202E", "1️⃣", "\uFE0F", "a\u200Db",
		"a\u200D💻", "💻\u200Da", "❤️\u200D🔥", "👍🏽\u200D💻", "💻\u200D🏽", "a\uFE0F\u200D💻"} {
		f.Add(s)
	}
	name, _, reason := contractPatterns(f)
	nameRE, reasonRE := goPattern(f, name), goPattern(f, reason)
	f.Fuzz(func(t *testing.T, s string) {
		if names.CheckText(s) == "" {
			if !reasonRE.MatchString(s) {
				t.Errorf("the rule accepts %+q as text, the contract's pattern refuses it", s)
			}
			runes := []rune(s)
			for i, r := range runes {
				if !names.Refused(r) {
					continue
				}
				switch {
				case r >= 0xFE00 && r <= 0xFE0F:
					if i == 0 || !names.Visible(runes[i-1]) {
						t.Errorf("%+q: a variation selector not after a visible character", s)
					}
				case r == 0x200D:
					before := i - 1 // the emoji before, past its variation selector
					if before >= 0 && runes[before] >= 0xFE00 && runes[before] <= 0xFE0F {
						before--
					}
					if before < 0 || i == len(runes)-1 || !ruleEmoji(runes[before]) || !ruleEmoji(runes[i+1]) || skinTone(runes[i+1]) {
						t.Errorf("%+q: a joiner not between two emoji", s)
					}
				default:
					t.Errorf("%+q: U+%04X accepted", s, r)
				}
			}
		}
		if names.Check(s) == "" {
			if !strings.ContainsFunc(s, names.Visible) {
				t.Errorf("%+q accepted as a name with nothing visible", s)
			}
			if !nameRE.MatchString(s) {
				t.Errorf("the rule accepts %+q as a name, the contract's pattern refuses it", s)
			}
		}
		c := names.Clean(s)
		if msg := names.CheckText(c); msg != "" {
			t.Errorf("Clean(%+q) = %+q, which the rule refuses: %s", s, c, msg)
		}
		if names.Clean(c) != c {
			t.Errorf("Clean is not idempotent on %+q", s)
		}
		if names.CheckText(s) == "" && c != s {
			t.Errorf("Clean changed %+q, which the rule accepts", s)
		}
		if !utf8.ValidString(c) {
			t.Errorf("Clean(%+q) is not UTF-8", s)
		}
		if u := names.Usable(s, "x"); names.Check(u) != "" {
			t.Errorf("Usable(%+q) = %+q, which the rule refuses", s, u)
		}
	})
}

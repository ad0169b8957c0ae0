// Package names holds the one rule of the text people name things with:
// channel and role names, display names, token names (Check) and the
// reason of a change, X-Audit-Reason (CheckText). It refuses the code
// points that are invisible or that change how the text around them
// looks, so one name cannot pass for another, and it cleans text stored
// under an earlier, looser rule (Clean).
//
// The rule is made of Unicode properties, read from Go's unicode tables,
// not of a list of code points: a character the tables put in one of the
// refused classes is refused, however new.
package names

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rule names the rule as the code states it, Go's Unicode tables
// included: change it whenever the rule changes (a class added, an
// exception narrowed), so that every store's names are checked again in
// full at the next start (guild.CleanStoredNames).
var Rule = "r2/unicode-" + unicode.Version

// Blank holds the letters and symbols that draw nothing: fillers of Hangul
// and the blank Braille pattern. Most are default-ignorable too; U+2800 is
// not.
var Blank = &unicode.RangeTable{R16: []unicode.Range16{
	{Lo: 0x115F, Hi: 0x1160, Stride: 1},
	{Lo: 0x2800, Hi: 0x2800, Stride: 1},
	{Lo: 0x3164, Hi: 0x3164, Stride: 1},
	{Lo: 0xFFA0, Hi: 0xFFA0, Stride: 1},
}}

// DefaultIgnorable is the derived property Default_Ignorable_Code_Point,
// which Go's unicode package does not carry, built as
// DerivedCoreProperties.txt defines it: Other_Default_Ignorable_Code_Point
// + Cf + Variation_Selector - White_Space - U+FFF9..U+FFFB - U+13430..U+13440
// - Prepended_Concatenation_Mark.
var DefaultIgnorable = derive()

func derive() *unicode.RangeTable {
	var runes []rune
	for _, t := range []*unicode.RangeTable{unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector} {
		for _, r := range t.R16 {
			for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
				runes = append(runes, c)
			}
		}
		for _, r := range t.R32 {
			for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
				runes = append(runes, c)
			}
		}
	}
	runes = slices.DeleteFunc(runes, func(r rune) bool {
		return unicode.In(r, unicode.White_Space, unicode.Prepended_Concatenation_Mark) ||
			(r >= 0xFFF9 && r <= 0xFFFB) || (r >= 0x13430 && r <= 0x13440)
	})
	slices.Sort(runes)
	return tableOf(slices.Compact(runes))
}

// refused are the classes no name holds (but for the two contexts of
// allowedInContext): controls, format characters, line and paragraph
// separators, private use, surrogates, default-ignorable code points and
// the blank ones.
var refused = []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs,
	DefaultIgnorable, Blank}

// Refused reports whether r is refused wherever it stands (see
// allowedInContext for the two exceptions).
func Refused(r rune) bool {
	if r >= 0x20 && r < 0x7F {
		return false
	}
	return unicode.In(r, refused...)
}

// zwj is ZERO WIDTH JOINER, allowed between two emoji.
const zwj = '\u200D'

// isEmojiVariation reports whether r is one of the variation selectors
// VS1–VS16 (U+FE00–U+FE0F), allowed right after a visible character.
func isEmojiVariation(r rune) bool { return r >= 0xFE00 && r <= 0xFE0F }

// Visible reports whether r draws something by itself: a letter, digit,
// punctuation or symbol that is not refused.
func Visible(r rune) bool {
	return unicode.In(r, unicode.L, unicode.N, unicode.P, unicode.S) && !Refused(r)
}

// isSkinTone reports whether r is one of the emoji modifiers, the skin
// tones U+1F3FB–U+1F3FF.
func isSkinTone(r rune) bool { return r >= 0x1F3FB && r <= 0x1F3FF }

// emoji approximates Unicode's Extended_Pictographic, which Go's tables do
// not carry: a symbol (So), or a skin-tone modifier (Sk, U+1F3FB–U+1F3FF).
func emoji(r rune) bool {
	return (unicode.Is(unicode.So, r) || isSkinTone(r)) && !Refused(r)
}

// allowedInContext reports whether r, refused by itself, is allowed where
// it stands, prev being the rune before it (-1 at the start; before that,
// prev2) and next the rune after it (-1 at the end): a variation selector
// right after a visible character ("❤️"), and a zero width joiner between
// two emoji ("👩‍💻", "🏳️‍🌈": a variation selector or skin tone after the
// first one is passed over).
func allowedInContext(prev2, prev, r, next rune) bool {
	switch {
	case isEmojiVariation(r):
		return prev >= 0 && Visible(prev)
	case r == zwj:
		if isEmojiVariation(prev) {
			prev = prev2
		}
		return prev >= 0 && emoji(prev) && next >= 0 && emoji(next) && !isSkinTone(next)
	}
	return false
}

// scan calls keep for each rune of s with whether the rule lets it stand
// there, the context being the runes kept before it.
func scan(s string, keep func(r rune, ok bool) bool) {
	prev2, prev := rune(-1), rune(-1)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		next := rune(-1)
		if i < len(s) {
			if nr, nn := utf8.DecodeRuneInString(s[i:]); nr != utf8.RuneError || nn > 1 {
				next = nr // else not UTF-8: cleaning removes it
			}
		}
		invalid := r == utf8.RuneError && n == 1 // not UTF-8
		ok := !invalid && (!Refused(r) || allowedInContext(prev2, prev, r, next))
		if keep(r, ok) {
			prev2, prev = prev, r
		}
	}
}

// MaxLength is the most characters (code points, as the contract's
// validator counts them) a name holds: the contract's maxLength of Name
// and DisplayName. A name is checked against it on every path, those the
// contract does not guard (import's own checks, the CLI) included.
const MaxLength = 100

// Check says what is wrong with a name ("" when nothing is): more than
// MaxLength characters, a refused code point out of its allowed context,
// or no visible character at all.
func Check(s string) string {
	if n := utf8.RuneCountInString(s); n > MaxLength {
		return "must be at most " + strconv.Itoa(MaxLength) + " characters long, not " + strconv.Itoa(n)
	}
	if msg := CheckText(s); msg != "" {
		return msg
	}
	if !strings.ContainsFunc(s, Visible) {
		return "must hold at least one letter, digit, punctuation or symbol"
	}
	return ""
}

// CheckText says what is wrong with free text such as the reason of a
// change ("" when nothing is): a refused code point out of its allowed
// context. Text may be empty or blank.
func CheckText(s string) string {
	if !utf8.ValidString(s) {
		return "must be UTF-8 text"
	}
	bad := rune(-1)
	scan(s, func(r rune, ok bool) bool {
		if !ok && bad < 0 {
			bad = r
		}
		return true
	})
	if bad >= 0 {
		return Message + " (found " + codePoint(bad) + ")"
	}
	return ""
}

// Message says the rule in words, as the contract's x-pattern-message does.
const Message = "must not contain control, format, separator, private-use, default-ignorable or blank characters"

func codePoint(r rune) string {
	const hex = "0123456789ABCDEF"
	b := []byte("U+")
	digits := 4
	for v := r >> 16; v > 0; v >>= 4 {
		digits++
	}
	for i := digits - 1; i >= 0; i-- {
		b = append(b, hex[(r>>(4*i))&0xF])
	}
	return string(b)
}

// Clean removes from s every code point the rule refuses where it stands
// (invalid UTF-8 included), so that CheckText accepts the result; text
// that passes the rule is returned as it is. A name that cleaning leaves
// without a visible character is the caller's to replace (Usable).
func Clean(s string) string {
	if CheckText(s) == "" {
		return s
	}
	var b strings.Builder
	scan(s, func(r rune, ok bool) bool {
		if ok {
			b.WriteRune(r)
		}
		return ok
	})
	return b.String()
}

// Usable returns the name s cleaned and cut to MaxLength characters, or
// fallback when nothing visible is left of it: what a name stored under
// an earlier rule is now, whether read from the store or from history.
func Usable(s, fallback string) string {
	c := Clean(s)
	if r := []rune(c); len(r) > MaxLength {
		c = Clean(string(r[:MaxLength])) // the cut may leave a joiner with nothing after it
	}
	if Check(c) != "" {
		return fallback
	}
	return c
}

// tableOf builds the range table of a sorted list of distinct runes.
func tableOf(runes []rune) *unicode.RangeTable {
	t := &unicode.RangeTable{}
	for i := 0; i < len(runes); {
		j := i
		for j+1 < len(runes) && runes[j+1] == runes[j]+1 {
			j++
		}
		lo, hi := runes[i], runes[j]
		switch {
		case hi <= 0xFFFF:
			t.R16 = append(t.R16, unicode.Range16{Lo: uint16(lo), Hi: uint16(hi), Stride: 1})
			if hi <= unicode.MaxLatin1 {
				t.LatinOffset++
			}
		case lo > 0xFFFF:
			t.R32 = append(t.R32, unicode.Range32{Lo: uint32(lo), Hi: uint32(hi), Stride: 1})
		default:
			t.R16 = append(t.R16, unicode.Range16{Lo: uint16(lo), Hi: 0xFFFF, Stride: 1})
			t.R32 = append(t.R32, unicode.Range32{Lo: 0x10000, Hi: uint32(hi), Stride: 1})
		}
		i = j + 1
	}
	return t
}

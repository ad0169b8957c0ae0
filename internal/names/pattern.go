package names

import (
	"fmt"
	"strings"
	"unicode/utf16"
)

// Pattern is the contract's pattern of a name (and, with min 0, of a
// reason): the regular expression closest to the rule that every dialect
// a client may use reads alike, Go's (kin-openapi, ogen) and ECMAScript's
// with or without the u flag (zod, ajv). A pattern cannot say "right after
// a visible character" nor "at least one letter", so it accepts more than
// the rule, never less (the server may be stricter than its contract,
// never looser).
//
// In the Basic Multilingual Plane it refuses exactly the code points the
// rule refuses everywhere. Beyond it, ECMAScript without the u flag sees
// surrogate pairs, which the pattern lists pair by pair, so there too it
// refuses what the rule refuses; Go and ECMAScript with the u flag see
// code points, which `\uXXXX` cannot name past U+FFFF, so for them the
// pattern accepts every code point beyond the plane and the server alone
// refuses the ones that are (tag characters, private use, ...).
func Pattern(atLeastOne bool) string {
	var bmp []rune
	for r := rune(0); r <= 0xFFFF; r++ {
		if Refused(r) && !isEmojiVariation(r) && r != zwj {
			bmp = append(bmp, r)
		}
	}
	alts := []string{"[^" + class(bmp) + "]"}
	// Pairs, for ECMAScript without the u flag: whole high surrogates whose
	// every code point is allowed, then the others one by one.
	var whole []rune
	var partial []string
	for hi := rune(0xD800); hi <= 0xDBFF; hi++ {
		var lows []rune
		for lo := rune(0xDC00); lo <= 0xDFFF; lo++ {
			if !Refused(utf16.DecodeRune(hi, lo)) {
				lows = append(lows, lo)
			}
		}
		switch len(lows) {
		case 0x400:
			whole = append(whole, hi)
		case 0:
		default:
			partial = append(partial, escape(hi)+"["+class(lows)+"]")
		}
	}
	alts = append(alts, "["+class(whole)+`][\uDC00-\uDFFF]`)
	alts = append(alts, partial...)
	// Code points past the plane, for Go and ECMAScript with the u flag (no
	// ECMAScript string without it holds a code unit past \uFFFF).
	alts = append(alts, `[^\x00-\uFFFF]`)
	q := "+"
	if !atLeastOne {
		q = "*"
	}
	return "^(?:" + strings.Join(alts, "|") + ")" + q + "$"
}

// class lists sorted runes as the ranges of a character class.
func class(runes []rune) string {
	var b strings.Builder
	for i := 0; i < len(runes); {
		j := i
		for j+1 < len(runes) && runes[j+1] == runes[j]+1 {
			j++
		}
		b.WriteString(escape(runes[i]))
		if j > i {
			if j > i+1 {
				b.WriteByte('-')
			}
			b.WriteString(escape(runes[j]))
		}
		i = j + 1
	}
	return b.String()
}

// escape writes a code unit the way every dialect reads it (kin-openapi
// turns `\uXXXX`, upper-case hex only, into Go's `\x{XXXX}`).
func escape(r rune) string {
	if r <= 0xFF {
		return fmt.Sprintf(`\x%02X`, r)
	}
	return fmt.Sprintf(`\u%04X`, r)
}

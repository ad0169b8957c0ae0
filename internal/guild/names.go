package guild

import (
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/names"
)

// checkName refuses a name (of a channel, role or token, or a display name)
// that internal/names refuses: a 400 at field. The contract's pattern
// refuses most such names before they get here; the rest (a variation
// selector out of place, nothing visible, code points past U+FFFF that a
// pattern cannot name) stop here, on every path: HTTP, import, CLI.
func checkName(field string, name *string) error {
	if name == nil {
		return nil
	}
	if msg := names.Check(*name); msg != "" {
		return apperr.Invalid(field, "%s", msg)
	}
	return nil
}

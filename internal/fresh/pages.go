package fresh

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/guildhall/guildhall/internal/model"
)

// userPage is a page of users as the cache keeps it: each user's ID,
// encoded as the packed users encode it (16 bytes for a UUID), and
// version, the users themselves being kept packed (lookupPage). A page
// holds a few bytes per user instead of its users' values, so the pages
// of a big community's searches fit in the entries' share.
type userPage struct {
	refs []byte // per user: appendID, then the version as a uvarint
	n    int    // users
	next string
}

func newUserPage(users []model.User, next string) userPage {
	refs := make([]byte, 0, 20*len(users)) // a UUID and a short version each
	for _, u := range users {
		refs = appendID(refs, u.ID)
		refs = binary.AppendUvarint(refs, uint64(u.Version))
	}
	// The position may be a part of what the read allocated (a kept
	// user's ID, decoded into one buffer with the page's others).
	return userPage{refs: slices.Clone(refs), n: len(users), next: strings.Clone(next)}
}

// bytes estimates what keeping a page's value costs: its box, its users'
// references and its position.
func (p userPage) bytes() int {
	return 48 + AllocBytes(len(p.refs)) + AllocBytes(len(p.next))
}

// each calls fn with each user's encoded ID and version, in order, while
// fn returns true; it reports whether every call did.
func (p userPage) each(fn func(id []byte, version int64) bool) bool {
	rest := p.refs
	for range p.n {
		var id []byte
		id, rest = readID(rest)
		v, k := binary.Uvarint(rest)
		rest = rest[k:]
		if !fn(id, int64(v)) {
			return false
		}
	}
	return true
}

// AllocBytes is what an allocation of n bytes takes on the heap, roughly:
// Go's size classes round up, by 16 bytes up to 128 and by an eighth or
// more past it.
func AllocBytes(n int) int {
	switch {
	case n == 0:
		return 0
	case n <= 128:
		return (n + 15) &^ 15
	default:
		return n + n/8
	}
}

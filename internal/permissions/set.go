package permissions

import (
	"math/bits"
	"strconv"
	"strings"
)

// Set is a set of permissions: bit p is set when Permission p is in it.
// The zero value is the empty set.
type Set uint64

// Well-known sets.
const (
	// All holds every catalog permission.
	All Set = 1<<NumPermissions - 1

	// ChannelScoped holds every permission whose scopes include channel:
	// all but ADMINISTRATOR, MANAGE_USERS, VIEW_AUDIT_LOG, MODERATE_MEMBERS
	// and MANAGE_WEBHOOKS.
	ChannelScoped Set = All &^ (1<<Administrator | 1<<ManageUsers | 1<<ViewAuditLog | 1<<ModerateMembers | 1<<ManageWebhooks)

	// DefaultGlobal holds the global permissions of a fresh store, so a new
	// community works before anyone configures it.
	DefaultGlobal Set = 1<<ViewChannel | 1<<SendMessages | 1<<ReadMessageHistory |
		1<<EmbedLinks | 1<<AttachFiles | 1<<AddReactions

	// needsSend holds what step 6 drops without SEND_MESSAGES.
	needsSend Set = 1<<AttachFiles | 1<<EmbedLinks | 1<<MentionEveryone

	// TimeoutKeeps holds what a member who is timed out keeps, at most:
	// everything else is cut, from their base permissions and in every
	// channel.
	TimeoutKeeps Set = 1<<ViewChannel | 1<<ReadMessageHistory
)

// Of returns the set of ps. Permissions outside the catalog are ignored.
func Of(ps ...Permission) Set {
	var s Set
	for _, p := range ps {
		if p.Valid() {
			s |= 1 << p
		}
	}
	return s
}

// Has reports whether p is in s.
func (s Set) Has(p Permission) bool { return p.Valid() && s&(1<<p) != 0 }

// HasAll reports whether every catalog permission of o is in s.
func (s Set) HasAll(o Set) bool { return o&All&^s == 0 }

// Union returns s ∪ o.
func (s Set) Union(o Set) Set { return s | o }

// Minus returns s − o.
func (s Set) Minus(o Set) Set { return s &^ o }

// Intersect returns s ∩ o.
func (s Set) Intersect(o Set) Set { return s & o }

// IsEmpty reports whether s holds no catalog permission.
func (s Set) IsEmpty() bool { return s&All == 0 }

// Len returns the number of catalog permissions in s.
func (s Set) Len() int { return bits.OnesCount64(uint64(s & All)) }

// Permissions returns the catalog permissions of s in catalog order; never
// nil.
func (s Set) Permissions() []Permission {
	out := make([]Permission, 0, s.Len())
	for p := range Permission(NumPermissions) {
		if s.Has(p) {
			out = append(out, p)
		}
	}
	return out
}

// Names returns the names of the catalog permissions of s in catalog order;
// never nil, so an empty set encodes as [] in JSON.
func (s Set) Names() []string {
	out := make([]string, 0, s.Len())
	for p := range Permission(NumPermissions) {
		if s.Has(p) {
			out = append(out, catalog[p].name)
		}
	}
	return out
}

// String returns the names of s in brackets, e.g. "[VIEW_CHANNEL SEND_MESSAGES]".
func (s Set) String() string {
	return "[" + strings.Join(s.Names(), " ") + "]"
}

// Reasons of a [NameError].
const (
	ReasonUnknown   = "unknown"
	ReasonDuplicate = "duplicate"
)

// NameError is an offending element of a list of permission names.
type NameError struct {
	Index  int    // position in the list
	Name   string // the element as given
	Reason string // ReasonUnknown or ReasonDuplicate
}

// Error reads e.g. `unknown permission "FLY"`.
func (e *NameError) Error() string {
	return e.Reason + " permission " + strconv.Quote(e.Name)
}

// Parse turns a list of names into a Set. An error is a *NameError for the
// first offending element: a name not in the catalog (ReasonUnknown) or a
// name that appears earlier in the list (ReasonDuplicate). An unknown name
// is reported as unknown even when it repeats.
func Parse(names []string) (Set, error) {
	var s Set
	for i, name := range names {
		p, err := parseOne(s, i, name)
		if err != nil {
			return 0, err
		}
		s |= 1 << p
	}
	return s, nil
}

// ParseAll is Parse reporting every offending element in list order instead
// of the first; the errors are nil when all is fine. The set holds the valid
// names either way.
func ParseAll(names []string) (Set, []*NameError) {
	var s Set
	var errs []*NameError
	for i, name := range names {
		p, err := parseOne(s, i, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s |= 1 << p
	}
	return s, errs
}

func parseOne(seen Set, i int, name string) (Permission, *NameError) {
	p, ok := ByName(name)
	switch {
	case !ok:
		return 0, &NameError{Index: i, Name: name, Reason: ReasonUnknown}
	case seen.Has(p):
		return 0, &NameError{Index: i, Name: name, Reason: ReasonDuplicate}
	}
	return p, nil
}

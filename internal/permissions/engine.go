package permissions

import "time"

// Overwrite allows and denies permissions in one channel. Only
// channel-scoped permissions take effect.
type Overwrite struct {
	Allow Set
	Deny  Set
}

// IsEmpty reports whether o neither allows nor denies anything; posting such
// an overwrite removes it.
func (o Overwrite) IsEmpty() bool { return o.Allow.IsEmpty() && o.Deny.IsEmpty() }

// apply is p = (p − deny) ∪ allow, for docs/design.md §5 steps 3 and 5.
func (o Overwrite) apply(p Set) Set {
	return (p &^ o.Deny) | (o.Allow & ChannelScoped)
}

// RoleOverwrite is the overwrite of one role in a channel.
type RoleOverwrite struct {
	RoleID string
	Overwrite
}

// Role is a role with its permissions.
type Role struct {
	ID          string
	Permissions Set
}

// Subject is who is asking: the owner flag, the global permissions and the
// subject's own roles with their permissions, and whether they are timed
// out now (the engine has no clock: the caller compares the end of the
// timeout with the time of the request). TimeoutUntil is that end, for
// Explain to name. The engine only reads Roles: subjects may share them.
type Subject struct {
	IsOwner      bool
	Global       Set
	Roles        []Role
	TimedOut     bool
	TimeoutUntil time.Time
}

// Channel holds the overwrites of one channel. Roles may hold overwrites of
// roles the subject does not hold; only those whose RoleID is among the
// subject's roles apply. User is the subject's own overwrite and Everyone
// the everyone overwrite; the zero value means none. SyncedFrom names the
// category whose overwrites the channel's are a copy of (synced), for
// Explain; "" when it is not synced.
type Channel struct {
	Everyone   Overwrite
	Roles      []RoleOverwrite
	User       Overwrite
	SyncedFrom string
}

// Base returns the base permissions of s (docs/design.md §5): global ∪ the
// permissions of each role; All for the owner and for anyone whose union
// holds ADMINISTRATOR. A subject timed out keeps at most TimeoutKeeps
// (docs/design.md §13); the owner and ADMINISTRATOR are not timed out.
func Base(s Subject) Set {
	if s.IsOwner {
		return All
	}
	p := s.Global
	for _, r := range s.Roles {
		p |= r.Permissions
	}
	p &= All
	if p.Has(Administrator) {
		return All
	}
	if s.TimedOut {
		p &= TimeoutKeeps
	}
	return p
}

// InChannel returns the effective permissions of s in c, following docs/design.md §5
// steps 1–6. The result is a subset of ChannelScoped. It does not allocate.
func InChannel(s Subject, c Channel) Set {
	base := Base(s)
	if s.IsOwner || base.Has(Administrator) { // 1
		return ChannelScoped
	}
	p := base & ChannelScoped // 2
	p = c.Everyone.apply(p)   // 3

	var deny, allow Set // 4
	var roles roleIndex
	roles.init(s.Roles)
	for i := range c.Roles {
		o := &c.Roles[i]
		d, a := o.Deny&ChannelScoped, o.Allow&ChannelScoped
		if d&^deny == 0 && a&^allow == 0 {
			continue // adds nothing to the merge: skip the lookup
		}
		if roles.contains(o.RoleID) {
			deny |= d
			allow |= a
		}
	}
	p = (p &^ deny) | allow

	p = c.User.apply(p) // 5
	if s.TimedOut {     // the timeout cuts what overwrites allow too
		p &= TimeoutKeeps
	}
	return implicit(p) // 6
}

// implicit is docs/design.md §5 step 6.
func implicit(p Set) Set {
	switch {
	case !p.Has(ViewChannel):
		return 0
	case !p.Has(SendMessages):
		return p &^ needsSend
	}
	return p
}

// implicitCause returns the missing prerequisite for which step 6 removes q
// from p, or false when it keeps q (or q is not in p).
func implicitCause(p Set, q Permission) (Permission, bool) {
	switch {
	case !p.Has(q):
		return 0, false
	case !p.Has(ViewChannel):
		return ViewChannel, true
	case !p.Has(SendMessages) && needsSend.Has(q):
		return SendMessages, true
	}
	return 0, false
}

// roleIndex answers "does the subject hold this role?" without allocating.
// Few roles are scanned; with more, a Bloom filter on the stack rules most
// non-members out before the scan confirms a match, so the answer is exact.
type roleIndex struct {
	roles    []Role
	filtered bool // bloom is in use; else scan only
	bloom    [bloomWords]uint64
}

const (
	scanLimit  = 8  // up to this many roles, a plain scan is cheapest
	bloomWords = 64 // 4096 bits: ~1% false positives for 250 roles, k = 2
	bloomMask  = bloomWords*64 - 1
)

func (x *roleIndex) init(roles []Role) {
	x.roles = roles
	if len(roles) <= scanLimit {
		return
	}
	x.filtered = true
	for i := range roles {
		h := fnv1a(roles[i].ID)
		x.set(uint(h) & bloomMask)
		x.set(uint(h>>32) & bloomMask)
	}
}

func (x *roleIndex) set(bit uint) { x.bloom[bit/64] |= 1 << (bit % 64) }

func (x *roleIndex) isSet(bit uint) bool { return x.bloom[bit/64]&(1<<(bit%64)) != 0 }

func (x *roleIndex) contains(id string) bool {
	if x.filtered {
		h := fnv1a(id)
		if !x.isSet(uint(h)&bloomMask) || !x.isSet(uint(h>>32)&bloomMask) {
			return false
		}
	}
	for i := range x.roles {
		if x.roles[i].ID == id {
			return true
		}
	}
	return false
}

// fnv1a is the 64-bit FNV-1a hash of s.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

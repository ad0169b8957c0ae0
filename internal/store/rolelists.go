package store

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"

	"github.com/guildhall/guildhall/internal/permissions"
)

// roleLists keeps what lists of role IDs resolve to (AuthState.EngineRoles)
// for one version of the roles: the states built from an AuthState while
// the roles stay the same share it, and a change of the roles starts a new
// one. A member who holds many roles (an admin may hold all 250) is asked
// about in request after request, as the caller or as the subject; kept,
// their list costs a hash and a comparison instead of a lookup per role
// and a slice the collector must then scan.
type roleLists struct {
	mu    sync.Mutex
	lists map[uint64]roleList // by hashIDs
	refs  int                 // role IDs held over every list
	// seen: the hashes of lists asked about lately, by the address of
	// their first ID. The read cache shares one slice among the users who
	// hold the same many roles, so a member asked about as the subject
	// comes back as the same array request after request and is found
	// without hashing it (the comparison still decides; a caller's list is
	// a copy per request, hashed each time). Fixed in size: an array seen once (a
	// caller's own copy) only takes a slot until another needs it.
	seen [seenSlots]seenList
}

type seenList struct {
	first *string
	n     int
	hash  uint64
}

const seenSlots = 64

type roleList struct {
	ids   []string
	roles []permissions.Role
}

const (
	// minKeptRoles: shorter lists are resolved each time, which costs
	// less than hashing them.
	minKeptRoles = 16
	// maxKeptRefs bounds the role IDs kept over every list (about 40 bytes
	// each, with what they resolve to); past it the lists start over.
	maxKeptRefs = 1 << 16
)

var roleListSeed = maphash.MakeSeed()

func newRoleLists() *roleLists { return &roleLists{lists: map[uint64]roleList{}} }

// hashIDs is a hash of a list of IDs, in order.
func hashIDs(ids []string) uint64 {
	h := uint64(len(ids))
	for _, id := range ids {
		h = bits.RotateLeft64(h, 17) ^ maphash.String(roleListSeed, id)
	}
	return h
}

// get returns what ids resolve to, kept or resolved now and kept. The
// slice is shared: its holders only read it.
func (m *roleLists) get(ids []string, resolve func([]string) []permissions.Role) []permissions.Role {
	first := &ids[0] // callers keep only lists of minKeptRoles or more
	slot := &m.seen[maphash.Comparable(roleListSeed, first)%seenSlots]
	var l roleList
	var ok bool
	m.mu.Lock()
	h, known := slot.hash, slot.first == first && slot.n == len(ids)
	if known {
		l, ok = m.lists[h]
	}
	m.mu.Unlock()
	if known && ok && slices.Equal(l.ids, ids) { // equal strings, usually the same ones: a pointer compared
		return l.roles
	}
	// Not seen, or the array changed in place (its hash did too), or its
	// list is no longer kept: by the hash.
	h = hashIDs(ids)
	m.mu.Lock()
	l, ok = m.lists[h]
	*slot = seenList{first: first, n: len(ids), hash: h}
	m.mu.Unlock()
	if ok && slices.Equal(l.ids, ids) {
		return l.roles
	}
	roles := slices.Clip(resolve(ids)) // an append by a holder copies it
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.lists[h]; ok {
		m.refs -= len(old.ids)
	}
	if m.refs+len(ids) > maxKeptRefs {
		clear(m.lists)
		m.refs = 0
	}
	m.lists[h] = roleList{ids: slices.Clone(ids), roles: roles}
	m.refs += len(ids)
	return roles
}

package fresh

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"strings"
	"time"
	"unsafe"

	"github.com/guildhall/guildhall/internal/model"
)

// packedUsers is the read cache's tier for users: each user encoded in one
// byte arena, found through a table of slots that holds, per user, part of
// the hash of their ID and their record's offset. Neither holds a pointer,
// so the collector never marks what is in them: a tier that holds a
// million users costs a collection what an empty one does, where as many
// values on the heap would be as many objects to mark in every cycle.
// That is what lets it be large enough to hold a big community's members.
//
// The arena is a ring of chunks, allocated as the ring first reaches them
// (so it never copies itself to grow, which would hold it twice for a
// moment), and only while at least half of what is allocated is kept:
// users kept again after a change leave their old records behind, and a
// small community's arena must not grow with them. Once round, a record
// is written where the oldest ones were, which leave the table first
// (first in, first out); a user kept unchanged is not written again. A user dropped (a
// change followed) leaves only the table; their bytes wait for the ring
// to come round.
//
// The cache's lock guards it; the cache's rule (cache.go) decides when a
// user may be kept and served. Values handed out are decoded afresh, the
// caller's own, but for a list of many role IDs, which is shared and
// read-only (roles).
type packedUsers struct {
	// chunks: the arena, chunk bytes each, at most maxChunks of them. An
	// offset in the arena is chunk*index + position.
	chunks    [][]byte
	chunk     int
	maxChunks int
	head      int // where the next record goes
	written   int // the end of what was ever written: the ring's length
	laps      int // times the ring came round
	max       int // bound of the arena
	// slots: open addressing with linear probing, 0 for empty; else the
	// low 32 bits of the ID's hash (which also give the slot it belongs
	// in) and the record's offset / recAlign + 1. A power of two long,
	// at most three quarters full.
	slots []uint64
	n     int // users in slots
	live  int // bytes of the records in slots
	buf   []byte
	// roleIDs: the role IDs kept as 16 bytes, each written out once and
	// shared by every user decoded after. A community has few roles (250
	// by default, docs/design.md §9) held again and again, so a member of
	// many roles costs a lookup per role rather than a string formatted
	// and allocated per role. Strings are immutable, so sharing them is
	// safe; the map is bounded (maxRoleIDs) and guarded by the cache's
	// lock like the rest.
	roleIDs map[[16]byte]string
	// roleLists: lists of many role IDs, decoded once and shared by every
	// user decoded after who holds the same roles, by their encoded bytes.
	// A member of many roles (an admin may hold all 250) is read request
	// after request; shared, their list costs a lookup rather than a
	// lookup per role and a slice the collector must then scan. The lists
	// are read-only (capped, so that an append by a holder copies); the map
	// is bounded (maxRoleListBytes) and guarded like roleIDs.
	roleLists     map[string][]string
	roleListBytes int
}

// maxRoleIDs bounds packedUsers.roleIDs: far more than the roles a
// community has by default, deleted ones included; past it the map starts
// over.
const maxRoleIDs = 4096

const (
	// minSharedRoles: shorter lists are decoded each time, which costs
	// less than looking them up.
	minSharedRoles = 16
	// maxRoleListBytes bounds packedUsers.roleLists (their keys and
	// slices); past it the map starts over.
	maxRoleListBytes = 4 << 20
)

// Record layout, every record starting at a multiple of recAlign:
//
//	[0:4] the record's length in the arena (a multiple of recAlign)
//	[4:8] the payload's length; 0 for a filler (bytes left by the ring,
//	or at the end of a chunk, which no record crosses)
//	payload: the ID, the count of role IDs and each of them (appendID),
//	the username, display name and status (each a uvarint length then the
//	bytes), one byte of flags, the email and the timeout when flagged, the
//	version, the creation time and the update time's distance from it
//	(varints, microseconds).
const (
	recAlign  = 8
	recHeader = 8
	// minRecord: shorter records are padded to it, so that the table,
	// which grows with the count of records, stays within its share.
	minRecord = 64
)

const (
	flagEmail = 1 << iota
	flagEmailHidden
	flagOwner
	flagTimeout
)

// slotBytes bounds what the table costs per user: 8 bytes a slot, and at
// most 8/3 slots a user (it doubles when three quarters full). The arena
// gets the share of the tier's bound that leaves the table room for as
// many users as it can hold records of minRecord bytes.
const slotBytes = 8 * 8 / 3

var packedSeed = maphash.MakeSeed()

// maxChunk is the arena's chunk, unless the arena is smaller.
const maxChunk = 1 << 20

// newPackedUsers makes a tier of at most bound bytes, arena and table.
func newPackedUsers(bound int) *packedUsers {
	arena := bound / (minRecord + slotBytes + 1) * minRecord
	chunk := maxChunk
	for chunk > 1<<10 && chunk > arena {
		chunk /= 2
	}
	return newPackedUsersChunked(arena, chunk)
}

func newPackedUsersChunked(arena, chunk int) *packedUsers {
	n := max(arena/chunk, 1)
	return &packedUsers{chunk: chunk, maxChunks: n, max: n * chunk}
}

// bytes is what the tier holds: the arena and the table.
func (p *packedUsers) bytes() int {
	return len(p.chunks)*p.chunk + 8*cap(p.slots) + p.roleListBytes
}

func (p *packedUsers) len() int { return p.n }

func slotOffset(s uint64) int { return (int(uint32(s)) - 1) * recAlign }

// find returns the slot of the user whose encoded ID is key, or the empty
// slot where they would go.
func (p *packedUsers) find(key []byte, h uint64) (int, bool) {
	mask := uint64(len(p.slots) - 1)
	tag := uint32(h)
	for i := uint64(tag) & mask; ; i = (i + 1) & mask {
		s := p.slots[i]
		if s == 0 {
			return int(i), false
		}
		if uint32(s>>32) == tag && bytes.HasPrefix(p.payload(slotOffset(s)), key) {
			return int(i), true
		}
	}
}

// remove empties slot i, moving back the slots after it that would no
// longer be found past the hole (linear probing's deletion, no tombstones).
func (p *packedUsers) remove(i int) {
	mask := len(p.slots) - 1
	p.n--
	p.live -= p.size(slotOffset(p.slots[i]))
	for {
		p.slots[i] = 0
		j := i
		for {
			j = (j + 1) & mask
			s := p.slots[j]
			if s == 0 {
				return
			}
			home := int(uint32(s>>32)) & mask
			// s stays if its home is cyclically in (i, j].
			if (i <= j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
				continue
			}
			p.slots[i] = s
			i = j
			break
		}
	}
}

// grow doubles the table (or makes the first).
func (p *packedUsers) grow() {
	old := p.slots
	p.slots = make([]uint64, max(2*len(old), 1024))
	mask := uint64(len(p.slots) - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := uint64(uint32(s>>32)) & mask
		for p.slots[i] != 0 {
			i = (i + 1) & mask
		}
		p.slots[i] = s
	}
}

// idKey is the encoded form of id, in buf, and its hash (the hash of the
// encoded form, which eviction reads back from the arena).
func idKey(buf []byte, id string) ([]byte, uint64) {
	key := appendID(buf[:0], id)
	return key, maphash.Bytes(packedSeed, key)
}

// get returns the record of the user with id, when kept: the arena's
// bytes, for decode under the cache's lock.
func (p *packedUsers) get(id string) ([]byte, bool) {
	var buf [40]byte
	return p.getEncoded(appendID(buf[:0], id))
}

// getEncoded returns the record of the user whose ID is key, encoded
// (appendID), when kept.
func (p *packedUsers) getEncoded(key []byte) ([]byte, bool) {
	if p.n == 0 {
		return nil, false
	}
	i, ok := p.find(key, maphash.Bytes(packedSeed, key))
	if !ok {
		return nil, false
	}
	return p.payload(slotOffset(p.slots[i])), true
}

// user returns the user with id, decoded, when kept.
func (p *packedUsers) user(id string) (model.User, bool) {
	rec, ok := p.get(id)
	if !ok {
		return model.User{}, false
	}
	u, _ := p.decode(make([]byte, 0, userRoom(rec)), rec)
	return u, true
}

// drop forgets the user with id.
func (p *packedUsers) drop(id string) {
	if p.n == 0 {
		return
	}
	var buf [40]byte
	key, h := idKey(buf[:], id)
	if i, ok := p.find(key, h); ok {
		p.remove(i)
	}
}

// clear forgets every user. The arena stays allocated: it fills again.
func (p *packedUsers) clear() { p.slots, p.n, p.live = nil, 0, 0 }

// put keeps u, over what the tier held for their ID.
func (p *packedUsers) put(u model.User) {
	p.buf = encodeUser(p.buf[:0], u)
	n := max(recHeader+len(p.buf), minRecord)
	n = (n + recAlign - 1) &^ (recAlign - 1)
	key, _ := readID(p.buf)
	h := maphash.Bytes(packedSeed, key)
	if p.n > 0 {
		if i, ok := p.find(key, h); ok {
			if bytes.Equal(p.payload(slotOffset(p.slots[i])), p.buf) {
				return // kept as it is: a second copy would only push others out
			}
			if n > min(p.max/16, p.chunk) {
				p.remove(i) // not the user as they are now
			}
		}
	}
	if n > min(p.max/16, p.chunk) {
		return // one user that large (thousands of roles) would crowd out many
	}
	if rest := p.chunk - p.head%p.chunk; rest < n {
		// No record crosses a chunk's end: what is left of this one
		// becomes a filler.
		end := p.evict(p.head, p.head+rest)
		p.filler(p.head, end)
		p.head += rest
		p.written = max(p.written, p.head)
	}
	if end := len(p.chunks) * p.chunk; p.head == end && (end == p.max || 2*p.live < end) {
		// Round again: at the bound, or while less than half of what is
		// allocated is kept (the rest: users dropped, or kept again since),
		// so that the arena stays within twice what the tier holds.
		p.head = 0
		p.laps++
	}
	if c := p.head / p.chunk; c == len(p.chunks) {
		p.chunks = append(p.chunks, make([]byte, p.chunk))
	}
	off := p.head
	p.filler(off+n, p.evict(off, off+n)) // what is left of the last record overwritten
	p.head = off + n
	p.written = max(p.written, p.head)
	rec := p.at(off)
	binary.LittleEndian.PutUint32(rec, uint32(n))
	binary.LittleEndian.PutUint32(rec[4:], uint32(len(p.buf)))
	copy(rec[recHeader:], p.buf)

	if 4*(p.n+1) > 3*len(p.slots) {
		p.grow()
	}
	i, ok := p.find(key, h)
	if ok {
		p.live -= p.size(slotOffset(p.slots[i]))
	} else {
		p.n++
	}
	p.live += n
	p.slots[i] = uint64(uint32(h))<<32 | uint64(off/recAlign+1)
}

// evict takes the records that start in [from, to) out of the table, and
// returns where the last of them ends (to when none reaches past it).
// Every record and filler was written one after the other, so the bytes
// up to written are records and fillers from any record's start.
func (p *packedUsers) evict(from, to int) int {
	at := from
	for at < to && at < p.written {
		size := int(binary.LittleEndian.Uint32(p.at(at)))
		if payload := p.payload(at); len(payload) > 0 && p.n > 0 {
			id, _ := readID(payload)
			p.removeAt(maphash.Bytes(packedSeed, id), at)
		}
		at += size
	}
	return max(at, to)
}

// filler makes [from, to) a filler, when not empty.
func (p *packedUsers) filler(from, to int) {
	if to > from {
		b := p.at(from)
		binary.LittleEndian.PutUint32(b, uint32(to-from))
		binary.LittleEndian.PutUint32(b[4:], 0)
	}
}

// at is the arena from off to the end of its chunk.
func (p *packedUsers) at(off int) []byte {
	return p.chunks[off/p.chunk][off%p.chunk:]
}

// removeAt empties the slot of the ID of hash h if it holds the record at
// off (and not a later one of the same user).
func (p *packedUsers) removeAt(h uint64, off int) {
	mask := uint64(len(p.slots) - 1)
	for i := uint64(uint32(h)) & mask; p.slots[i] != 0; i = (i + 1) & mask {
		if slotOffset(p.slots[i]) == off {
			p.remove(int(i))
			return
		}
	}
}

// size is the length of the record at off.
func (p *packedUsers) size(off int) int { return int(binary.LittleEndian.Uint32(p.at(off))) }

func (p *packedUsers) payload(off int) []byte {
	b := p.at(off)
	n := int(binary.LittleEndian.Uint32(b[4:]))
	return b[recHeader : recHeader+n]
}

// appendID encodes an ID: the IDs the service makes (UUIDs, lower-case, in
// their 36 characters) as a zero byte and their 16 bytes, others as their
// length plus one (a uvarint) and their bytes.
func appendID(b []byte, id string) []byte {
	if u, ok := parseUUID(id); ok {
		b = append(b, 0)
		return append(b, u[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(id))+1)
	return append(b, id...)
}

// readID splits an encoded ID from what follows it. Its form is
// appendID's: idText makes it a string.
func readID(b []byte) (id, rest []byte) {
	n, k := binary.Uvarint(b)
	if n == 0 {
		return b[:1+16], b[1+16:]
	}
	return b[:k+int(n)-1], b[k+int(n)-1:]
}

// parseUUID parses a UUID written as idText writes it (lower-case hex,
// dashes at 8, 13, 18 and 23, 36 characters in all), so that only those
// IDs are kept as 16 bytes that come back the same.
func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 {
		return u, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return u, false
			}
			i++
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
	}
	return u, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// readString reads a string encoded by appendString, and what follows it.
// The string aliases b, which must not change while it is used: a decoded
// user's own copy (decode).
func readString(b []byte) (string, []byte) {
	n, k := binary.Uvarint(b)
	b = b[k:]
	return unsafe.String(unsafe.SliceData(b), n), b[n:]
}

func encodeUser(b []byte, u model.User) []byte {
	b = appendID(b, u.ID)
	b = binary.AppendUvarint(b, uint64(len(u.Roles)))
	for _, r := range u.Roles {
		b = appendID(b, r)
	}
	b = appendString(b, u.Username)
	b = appendString(b, u.DisplayName)
	b = appendString(b, u.Status)
	var flags byte
	if u.Email != nil {
		flags |= flagEmail
	}
	if u.EmailHidden {
		flags |= flagEmailHidden
	}
	if u.IsOwner {
		flags |= flagOwner
	}
	if u.TimeoutUntil != nil {
		flags |= flagTimeout
	}
	b = append(b, flags)
	if u.Email != nil {
		b = appendString(b, *u.Email)
	}
	if u.TimeoutUntil != nil {
		b = binary.AppendVarint(b, u.TimeoutUntil.UnixMicro())
	}
	b = binary.AppendVarint(b, u.Version)
	created := u.CreatedAt.UnixMicro()
	b = binary.AppendVarint(b, created)
	return binary.AppendVarint(b, u.UpdatedAt.UnixMicro()-created)
}

// userRoom is what decode appends to its buffer for a record, at most: a
// copy of the record, and the user's ID written out (role IDs are shared:
// packedUsers.roleID).
func userRoom(rec []byte) int { return len(rec) + 36 }

// decode decodes a record of encodeUser (the arena's bytes, read under the
// cache's lock) into a user whose strings are in buf, which it returns
// grown by at most userRoom: a copy of the record, and after it the user's
// UUID written out. Made with room for them, buf holds every string of the
// user, or of a page of users, in one allocation. The strings alias buf's
// array, which nothing writes again where they are, or are the tier's
// shared role IDs.
func (p *packedUsers) decode(buf, rec []byte) (model.User, []byte) {
	start := len(buf)
	buf = append(buf, rec...)
	b := buf[start:len(buf):len(buf)] // the copy, read from here on
	var u model.User
	var id []byte
	id, b = readID(b)
	u.ID, buf = idText(buf, id)
	n, k := binary.Uvarint(b)
	u.Roles, b = p.roles(b[k:], int(n))
	u.Username, b = readString(b)
	u.DisplayName, b = readString(b)
	u.Status, b = readString(b)
	flags := b[0]
	b = b[1:]
	if flags&flagEmail != 0 {
		var e string
		e, b = readString(b)
		u.Email = &e
	}
	u.EmailHidden = flags&flagEmailHidden != 0
	u.IsOwner = flags&flagOwner != 0
	if flags&flagTimeout != 0 {
		v, k := binary.Varint(b)
		b = b[k:]
		t := time.UnixMicro(v).UTC()
		u.TimeoutUntil = &t
	}
	var v [3]int64
	for i := range v {
		var k int
		v[i], k = binary.Varint(b)
		b = b[k:]
	}
	u.Version, u.CreatedAt, u.UpdatedAt = v[0], time.UnixMicro(v[1]).UTC(), time.UnixMicro(v[1]+v[2]).UTC()
	return u, buf
}

// roles decodes the n role IDs at the start of b (in a decoded copy) and
// returns what follows them. A list of minSharedRoles or more is shared
// (roleLists): its strings never alias b, which belongs to one user.
func (p *packedUsers) roles(b []byte, n int) ([]string, []byte) {
	if n < minSharedRoles {
		out := make([]string, n)
		for i := range out {
			var id []byte
			id, b = readID(b)
			out[i] = p.roleID(id)
		}
		return out, b
	}
	rest := b
	for range n {
		_, rest = readID(rest)
	}
	enc := b[:len(b)-len(rest)]
	if l, ok := p.roleLists[string(enc)]; ok {
		return l, rest
	}
	out := make([]string, n)
	size := len(enc) + n*int(unsafe.Sizeof(""))
	for i := range out {
		var id []byte
		id, b = readID(b)
		out[i] = p.roleID(id)
		if id[0] != 0 { // not a UUID, so in b: a copy of its own
			out[i] = strings.Clone(out[i])
			size += len(out[i])
		}
	}
	if p.roleLists == nil || p.roleListBytes+size > maxRoleListBytes {
		p.roleLists, p.roleListBytes = make(map[string][]string), 0
	}
	p.roleLists[string(enc)] = out
	p.roleListBytes += size
	return out, rest
}

// roleID is an encoded role ID (in a decoded copy) as a string: a UUID
// from roleIDs, written out the first time it is met; other IDs in place.
func (p *packedUsers) roleID(enc []byte) string {
	if enc[0] != 0 {
		s, _ := idText(nil, enc)
		return s
	}
	key := [16]byte(enc[1:17])
	if s, ok := p.roleIDs[key]; ok {
		return s
	}
	if p.roleIDs == nil || len(p.roleIDs) >= maxRoleIDs {
		p.roleIDs = make(map[[16]byte]string)
	}
	s, _ := idText(make([]byte, 0, 36), enc)
	p.roleIDs[key] = s
	return s
}

// idText is an encoded ID (in a decoded copy) as a string: a UUID written
// out at the end of buf, other IDs in place.
func idText(buf, enc []byte) (string, []byte) {
	n, k := binary.Uvarint(enc)
	if n != 0 {
		s := enc[k:]
		return unsafe.String(unsafe.SliceData(s), len(s)), buf
	}
	start := len(buf)
	buf = append(buf, "00000000-0000-0000-0000-000000000000"...)
	s := buf[start:]
	u := enc[1:17]
	hex.Encode(s[0:8], u[0:4])
	hex.Encode(s[9:13], u[4:6])
	hex.Encode(s[14:18], u[6:8])
	hex.Encode(s[19:23], u[8:10])
	hex.Encode(s[24:36], u[10:16])
	return unsafe.String(unsafe.SliceData(s), len(s)), buf
}

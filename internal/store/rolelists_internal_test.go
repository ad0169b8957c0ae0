package store

import (
	"fmt"
	"hash/maphash"
	"slices"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// TestRoleListsKeepByContent: a list of role IDs is resolved once and then
// found by its content (another slice of the same IDs finds it, a list
// differing in one ID or in order does not), never taken for another list
// that lands on its hash, and what is kept stays within maxKeptRefs.
func TestRoleListsKeepByContent(t *testing.T) {
	want := func(ids []string) []permissions.Role {
		out := make([]permissions.Role, 0, len(ids)+8) // room an append could write into
		for i, id := range ids {
			if i%5 != 4 { // some IDs name no role
				out = append(out, permissions.Role{ID: id, Permissions: permissions.Set(len(id) + i)})
			}
		}
		return out
	}
	calls := 0
	resolve := func(ids []string) []permissions.Role { calls++; return want(ids) }
	list := func(prefix string, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%03d", prefix, i)
		}
		return ids
	}
	m := newRoleLists()
	a := list("a", 20)
	if got := m.get(a, resolve); !slices.Equal(got, want(a)) || calls != 1 {
		t.Fatalf("first get: %v (%d resolutions)", got, calls)
	}
	if got := m.get(slices.Clone(a), resolve); !slices.Equal(got, want(a)) || calls != 1 {
		t.Fatalf("same IDs, another slice: resolved again (%d) or %v", calls, got)
	}
	b := slices.Clone(a)
	b[7] = "other"
	if got := m.get(b, resolve); !slices.Equal(got, want(b)) || calls != 2 {
		t.Fatalf("one ID differs: %v (%d resolutions)", got, calls)
	}
	swapped := slices.Clone(a)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	if got := m.get(swapped, resolve); !slices.Equal(got, want(swapped)) || calls != 3 {
		t.Fatalf("order differs: %v (%d resolutions)", got, calls)
	}

	// A list kept under the hash of another is not that other's answer.
	c := list("c", 20)
	m.lists[hashIDs(c)] = roleList{ids: a, roles: want(a)}
	m.refs += len(a)
	if got := m.get(c, resolve); !slices.Equal(got, want(c)) {
		t.Fatalf("a list under c's hash answered for c: %v", got)
	}

	// Holders may append: two holders' appends do not write into one
	// array (the kept slice has no room past its end).
	first := append(m.get(a, resolve), permissions.Role{ID: "first"})
	second := append(m.get(a, resolve), permissions.Role{ID: "second"})
	if first[len(first)-1].ID != "first" || second[len(second)-1].ID != "second" {
		t.Fatalf("two holders' appends share an array: %v, %v", first[len(first)-1], second[len(second)-1])
	}

	for i := range 2 * maxKeptRefs / 20 {
		ids := list(fmt.Sprintf("l%d-", i), 20)
		if got := m.get(ids, resolve); !slices.Equal(got, want(ids)) {
			t.Fatalf("list %d: %v", i, got)
		}
		held := 0
		for _, l := range m.lists {
			held += len(l.ids)
		}
		if held != m.refs || m.refs > maxKeptRefs {
			t.Fatalf("list %d: %d role IDs held, %d counted, bound %d", i, held, m.refs, maxKeptRefs)
		}
	}
}

// TestRoleListsSeenArray: a list asked about again as the same array is
// found without hashing it, and the comparison still decides: the array
// changed in place, or another list in its slot, gets its own answer.
func TestRoleListsSeenArray(t *testing.T) {
	resolve := func(ids []string) []permissions.Role {
		out := make([]permissions.Role, len(ids))
		for i, id := range ids {
			out[i] = permissions.Role{ID: id}
		}
		return out
	}
	m := newRoleLists()
	ids := make([]string, minKeptRoles)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%02d", i)
	}
	m.get(ids, resolve)
	slot := m.seen[maphash.Comparable(roleListSeed, &ids[0])%seenSlots]
	if slot.first != &ids[0] || slot.hash != hashIDs(ids) {
		t.Fatalf("the array is not remembered: %+v", slot)
	}
	m.lists[slot.hash] = roleList{ids: slices.Clone(ids), roles: []permissions.Role{{ID: "from the kept list"}}}
	if got := m.get(ids, resolve); len(got) != 1 || got[0].ID != "from the kept list" {
		t.Fatalf("the same array again: not the kept list (%v)", got)
	}
	ids[3] = "changed"
	if got := m.get(ids, resolve); !slices.Equal(got, resolve(ids)) {
		t.Fatalf("the array changed in place: %v", got)
	}
	if slot := m.seen[maphash.Comparable(roleListSeed, &ids[0])%seenSlots]; slot.hash != hashIDs(ids) {
		t.Fatal("the array changed in place: its slot keeps the old hash")
	}
	if _, ok := m.lists[hashIDs(ids)]; !ok {
		t.Fatal("the array changed in place: its list is not kept under its own hash")
	}
}

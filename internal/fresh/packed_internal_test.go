package fresh

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"github.com/guildhall/guildhall/internal/model"
)

func packedUser(i int, rng *rand.Rand) model.User {
	t := time.UnixMicro(1_700_000_000_000_000 + int64(i)).UTC()
	u := model.User{ID: uuid.Must(uuid.NewV7()).String(), Username: fmt.Sprintf("u%d", i), DisplayName: fmt.Sprintf("Member %d", i),
		Status: model.StatusActive, Version: int64(i), CreatedAt: t, UpdatedAt: t.Add(time.Second), Roles: []string{}}
	if rng.IntN(2) == 0 {
		e := fmt.Sprintf("u%d@example.com", i)
		u.Email = &e
	}
	for range rng.IntN(4) {
		u.Roles = append(u.Roles, uuid.Must(uuid.NewV7()).String())
	}
	return u
}

// TestPackedUserRoundTrip: a user comes out of the tier as it went in,
// every field and flag, no role IDs as an empty list (as read from the
// database).
func TestPackedUserRoundTrip(t *testing.T) {
	email := "a@example.com"
	until := time.UnixMicro(1_800_000_000_123_456).UTC()
	for _, u := range []model.User{
		{ID: "1", Username: "a", DisplayName: "A", Status: model.StatusActive, Roles: []string{}},
		{ID: "2", Username: "ünï", DisplayName: "Zoë 🎉", Email: &email, EmailHidden: true, Status: "suspended",
			IsOwner: true, Roles: []string{"r1", "r2"}, TimeoutUntil: &until, Version: 1 << 40,
			CreatedAt: time.UnixMicro(-5).UTC(), UpdatedAt: time.UnixMicro(1_700_000_000_000_001).UTC()},
		{ID: uuid.Must(uuid.NewV7()).String(), Email: new(string), Roles: []string{"", uuid.Must(uuid.NewV7()).String()}},
		// Not as the service writes UUIDs: kept as written. Role IDs are
		// the client's choice, dashes anywhere.
		{ID: "0189F0C2-7A4B-7C3D-8E5F-0123456789AB", Roles: []string{"0189f0c2-7a4b-7c3d-8e5f-0123456789a", "0189f0c2x7a4b-7c3d-8e5f-0123456789ab"}},
		{ID: "00000000-0000-0000-0000--00000000000", Roles: []string{"ab-cd-ef-0000-0000-0000-000000000000", "00000000-0000-0000-0000--00000000000"}},
	} {
		p := newPackedUsers(1 << 20)
		p.put(u)
		got, ok := p.user(u.ID)
		if !ok {
			t.Fatalf("%s: not kept", u.ID)
		}
		if !reflect.DeepEqual(got, u) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, u)
		}
	}
}

// TestPackedUsersShareRoleIDs: the role IDs of decoded users are written
// out once per role and shared, the same text as went in, other IDs
// included; and past maxRoleIDs roles, each user still comes back as put.
func TestPackedUsersShareRoleIDs(t *testing.T) {
	p := newPackedUsers(8 << 20)
	shared := uuid.Must(uuid.NewV7()).String()
	var users []model.User
	for i := range 2*maxRoleIDs + 10 {
		u := packedUser(i, rand.New(rand.NewPCG(uint64(i), 1)))
		u.Roles = []string{shared, uuid.Must(uuid.NewV7()).String(), "role-" + fmt.Sprint(i%3)}
		p.put(u)
		users = append(users, u)
	}
	var first string
	for i, u := range users {
		got, ok := p.user(u.ID)
		if !ok {
			t.Fatalf("user %d not kept", i)
		}
		if !reflect.DeepEqual(got, u) {
			t.Fatalf("user %d:\n got %+v\nwant %+v", i, got, u)
		}
		if i == 0 {
			first = got.Roles[0]
		} else if i < maxRoleIDs/2 && unsafe.StringData(got.Roles[0]) != unsafe.StringData(first) {
			t.Fatalf("user %d: role %s written out again, not shared", i, shared)
		}
		if len(p.roleIDs) > maxRoleIDs {
			t.Fatalf("%d role IDs kept, bound %d", len(p.roleIDs), maxRoleIDs)
		}
	}
}

// TestPackedUsersShareRoleLists: users who hold the same many roles get
// one slice of role IDs, capped so that an append copies, the same text
// as went in (other IDs as copies of their own, not in a user's buffer);
// fewer roles get a slice each; and what is shared stays within its bound.
func TestPackedUsersShareRoleLists(t *testing.T) {
	p := newPackedUsers(64 << 20)
	many := make([]string, minSharedRoles+4)
	for i := range many {
		if i%2 == 0 {
			many[i] = uuid.Must(uuid.NewV7()).String()
		} else {
			many[i] = fmt.Sprintf("role-%d", i)
		}
	}
	few := many[:minSharedRoles-1]
	var a, b, c, d model.User
	for i, u := range []*model.User{&a, &b, &c, &d} {
		*u = packedUser(i, rand.New(rand.NewPCG(uint64(i), 2)))
		u.Roles = slices.Clone(many)
		if i >= 2 {
			u.Roles = slices.Clone(few)
		}
		p.put(*u)
	}
	get := func(u model.User) model.User {
		got, ok := p.user(u.ID)
		if !ok || !reflect.DeepEqual(got, u) {
			t.Fatalf("user %s: %+v, want %+v", u.ID, got, u)
		}
		return got
	}
	ga, gb := get(a), get(b)
	if &ga.Roles[0] != &gb.Roles[0] || cap(ga.Roles) != len(ga.Roles) {
		t.Fatalf("the same %d roles: two slices, or room past the end (cap %d)", len(many), cap(ga.Roles))
	}
	if again := get(a); &again.Roles[0] != &ga.Roles[0] {
		t.Fatal("the same user read again: another slice")
	}
	if gc, gd := get(c), get(d); &gc.Roles[0] == &gd.Roles[0] {
		t.Fatalf("%d roles shared, fewer than %d", len(few), minSharedRoles)
	}
	grown := append(ga.Roles, "mine")
	if again := get(b); !slices.Equal(again.Roles, many) || &grown[0] == &ga.Roles[0] {
		t.Fatal("an append to a shared list wrote into it")
	}

	for i := range 2 * maxRoleListBytes / (minSharedRoles * 40) {
		u := packedUser(1000+i, rand.New(rand.NewPCG(uint64(i), 3)))
		u.Roles = make([]string, minSharedRoles)
		for j := range u.Roles {
			u.Roles[j] = fmt.Sprintf("list-%d-role-%d", i, j)
		}
		p.put(u)
		get(u)
		if p.roleListBytes > maxRoleListBytes {
			t.Fatalf("list %d: %d bytes of shared lists, bound %d", i, p.roleListBytes, maxRoleListBytes)
		}
	}
}

// FuzzPackedUser: any user's fields survive the tier.
func FuzzPackedUser(f *testing.F) {
	f.Add("id", "name", "Display", "active", "e@x", true, false, int64(3), int64(-1), int64(7), "r1,r2", int64(0))
	f.Add("0189f0c2-7a4b-7c3d-8e5f-0123456789ab", "n", "", "active", "", false, true, int64(1), int64(1<<52), int64(-1<<52),
		"0189f0c2-7a4b-7c3d-8e5f-0123456789ab,0189F0C2-7A4B-7C3D-8E5F-0123456789AB", int64(5))
	f.Add("ab-cd-ef-0000-0000-0000-000000000000", "n", "", "active", "", false, false, int64(1), int64(0), int64(0),
		"00000000-0000-0000-0000--00000000000", int64(0))
	f.Fuzz(func(t *testing.T, id, username, display, status, email string, hasEmail, owner bool, version, created, updated int64, roles string, timeout int64) {
		u := model.User{ID: id, Username: username, DisplayName: display, Status: status, IsOwner: owner, Version: version,
			CreatedAt: time.UnixMicro(created).UTC(), UpdatedAt: time.UnixMicro(updated).UTC(), Roles: splitTestIDs(roles)}
		if hasEmail {
			u.Email = &email
		}
		if timeout != 0 {
			tt := time.UnixMicro(timeout).UTC()
			u.TimeoutUntil = &tt
		}
		p := newPackedUsers(1 << 20)
		p.put(u)
		got, ok := p.user(id)
		if !ok {
			if recHeader+len(encodeUser(nil, u)) > p.max/16 {
				return // too large to keep, by design
			}
			t.Fatalf("not kept: %+v", u)
		}
		if !reflect.DeepEqual(got, u) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, u)
		}
	})
}

// TestPackedUsersRing: past its bound the tier goes on keeping the user
// last put, serves every user it still has as last put (never a user
// overwritten in the arena, never another's), forgets dropped users, and
// stays within its bound.
func TestPackedUsersRing(t *testing.T) {
	const bound = 96 << 10
	t.Run("one chunk", func(t *testing.T) { testPackedUsersRing(t, newPackedUsers(bound), bound) })
	// Chunks of 1 KiB: records of 100-200 bytes often leave a filler at a
	// chunk's end.
	t.Run("many chunks", func(t *testing.T) { testPackedUsersRing(t, newPackedUsersChunked(64<<10, 1<<10), bound) })
}

func testPackedUsersRing(t *testing.T, p *packedUsers, bound int) {
	rng := rand.New(rand.NewPCG(3, 4))
	last := map[string]model.User{}
	var ids []string
	for i := range 20000 {
		var u model.User
		var prev model.User
		var again bool
		if len(ids) > 0 && rng.IntN(4) == 0 {
			prev, again = last[ids[rng.IntN(len(ids))]]
		}
		if again {
			// A user kept again, changed.
			u = prev
			u.Version++
			u.DisplayName += "!"
		} else {
			u = packedUser(i, rng)
			ids = append(ids, u.ID)
		}
		p.put(u)
		last[u.ID] = u
		if got, ok := p.user(u.ID); !ok || !reflect.DeepEqual(got, u) {
			t.Fatalf("put %d: the user just put is not served as put", i)
		}
		if rng.IntN(10) == 0 {
			id := ids[rng.IntN(len(ids))]
			p.drop(id)
			delete(last, id)
			if _, ok := p.get(id); ok {
				t.Fatalf("put %d: a dropped user is served", i)
			}
		}
		if b := p.bytes(); b > bound {
			t.Fatalf("put %d: %d bytes, over the bound of %d", i, b, bound)
		}
	}
	kept := 0
	for _, id := range ids {
		got, ok := p.user(id)
		if !ok {
			continue
		}
		kept++
		if want, ok := last[id]; !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("user %s served as %+v, want %+v (dropped: %v)", id, got, want, !ok)
		}
	}
	if p.laps < 2 {
		t.Fatalf("the ring came round %d times", p.laps)
	}
	checkSlots(t, p)
	// Records are ~100-200 bytes: most of the arena holds live users.
	if kept < p.max/400 {
		t.Errorf("only %d users kept in an arena of %d bytes", kept, p.max)
	}
	if kept != p.len() {
		t.Errorf("%d users served, %d in the index", kept, p.len())
	}
	p.clear()
	for _, id := range ids {
		if _, ok := p.get(id); ok {
			t.Fatalf("user %s served after clear", id)
		}
	}
}

// TestPackedUsersRealSize: a tier filled many times over, users coming and
// going, holds no more heap than its bound (the heap in use after a
// collection, the tier full against no tier). Not parallel: the heap is
// the process's.
func TestPackedUsersRealSize(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a tier many times over")
	}
	const bound = 8 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	users := make([]model.User, 150_000)
	for i := range users {
		users[i] = packedUser(i, rng)
	}
	empty := liveHeap()
	p := newPackedUsers(bound)
	for range 4 * len(users) {
		p.put(users[rng.IntN(len(users))])
		if rng.IntN(8) == 0 {
			p.drop(users[rng.IntN(len(users))].ID)
		}
	}
	full := liveHeap()
	runtime.KeepAlive(users)
	real := int64(full) - int64(empty)
	t.Logf("%d users: heap %d bytes (%.0f a user), estimate %d, bound %d", p.len(), real, float64(real)/float64(p.len()), p.bytes(), bound)
	if real > bound {
		t.Errorf("the tier holds %d bytes of heap, over its bound of %d (its estimate: %d)", real, bound, p.bytes())
	}
	if p.bytes() > bound {
		t.Errorf("the estimate, %d bytes, is over the bound of %d", p.bytes(), bound)
	}
	if p.len() < 20_000 {
		t.Errorf("only %d users kept", p.len())
	}
	runtime.KeepAlive(p)
}

// checkSlots: every user in the table is found where find looks for them,
// and the count is right.
func checkSlots(t *testing.T, p *packedUsers) {
	t.Helper()
	n := 0
	for i, s := range p.slots {
		if s == 0 {
			continue
		}
		n++
		key, _ := readID(p.payload(slotOffset(s)))
		if j, ok := p.find(key, uint64(uint32(s>>32))); !ok || j != i {
			t.Fatalf("slot %d: its user is found at %d (%v)", i, j, ok)
		}
	}
	if n != p.n {
		t.Fatalf("%d slots in use, count %d", n, p.n)
	}
}

// TestSplitBound: a cache's entries get a quarter of its bound, at most
// maxEntryBytes and the cap when one is set; its users the rest.
func TestSplitBound(t *testing.T) {
	for _, tc := range []struct{ bound, cap, entries, users int }{
		{128 << 20, 0, 16 << 20, 112 << 20},
		{16 << 20, 0, 4 << 20, 12 << 20},
		{1 << 30, 0, 16 << 20, 1<<30 - 16<<20},
		{128 << 20, 8 << 20, 8 << 20, 120 << 20},
		{4 << 20, 8 << 20, 1 << 20, 3 << 20},
	} {
		e, u := splitBound(tc.bound, tc.cap)
		if e != tc.entries || u != tc.users {
			t.Errorf("splitBound(%d, %d) = %d, %d; want %d, %d", tc.bound, tc.cap, e, u, tc.entries, tc.users)
		}
	}
}

// TestPageServedOnlyWithItsUsers: a page of users is kept as their IDs and
// served from memory only while every one of its users is kept too; once
// one has given way, the page is read again, and the same either way.
func TestPageServedOnlyWithItsUsers(t *testing.T) {
	ctx := context.Background()
	c := New(Options{Users: UserDeps{Table: "users", Whole: []string{"roles"}}})
	c.follow = func(context.Context) error { c.apply(delta{to: c.pos}); return nil } // nothing ever changes
	rng := rand.New(rand.NewPCG(3, 4))
	first := []model.User{packedUser(1, rng), packedUser(2, rng), packedUser(3, rng)}
	reads := 0
	key := Key{Kind: UserPage, A: "p", N: 10}
	page := func(wantHit bool) []model.User {
		t.Helper()
		before := reads
		users, _, err := c.Page(Scope(ctx), key, func() ([]model.User, string, error) {
			reads++
			return slices.Clone(first), "", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if hit := reads == before; hit != wantHit {
			t.Fatalf("page answered from memory: %v, want %v", hit, wantHit)
		}
		return users
	}
	page(false)
	if again := page(true); !reflect.DeepEqual(again, first) {
		t.Fatalf("from memory:\n%+v\nread:\n%+v", again, first)
	}
	c.mu.Lock()
	c.users.drop(first[1].ID) // as if it had given way in the ring
	c.mu.Unlock()
	if again := page(false); !reflect.DeepEqual(again, first) {
		t.Fatalf("read again:\n%+v\nfirst:\n%+v", again, first)
	}
	page(true)
	// A user kept again as read after a change not followed yet: the page,
	// read before it, is not served with it.
	newer := first[2]
	newer.Version++
	newer.DisplayName = "Q"
	c.mu.Lock()
	c.users.put(newer)
	c.mu.Unlock()
	if again := page(false); !reflect.DeepEqual(again, first) {
		t.Fatalf("read again:\n%+v\nfirst:\n%+v", again, first)
	}
}

// TestPackedUsersArenaFollowsWhatItHolds: a few users kept again and
// again, changed, and kept again unchanged, do not grow the arena towards
// its bound: it stays within twice what the tier holds, and a user kept
// unchanged takes no new record.
func TestPackedUsersArenaFollowsWhatItHolds(t *testing.T) {
	p := newPackedUsersChunked(8<<20, 4<<10)
	rng := rand.New(rand.NewPCG(7, 8))
	users := make([]model.User, 100)
	for i := range users {
		users[i] = packedUser(i, rng)
	}
	for i := range 50_000 {
		u := &users[rng.IntN(len(users))]
		if i%2 == 0 {
			u.Version++
		}
		head := p.head
		unchanged := false
		if got, ok := p.user(u.ID); ok && reflect.DeepEqual(got, *u) {
			unchanged = true
		}
		p.put(*u)
		if unchanged && p.head != head {
			t.Fatalf("put %d: a user kept unchanged took a new record", i)
		}
		if i%1000 == 0 {
			p.clear() // a role changed: every user dropped
		}
	}
	if arena, limit := len(p.chunks)*p.chunk, 2*p.live+2*p.chunk; arena > limit && arena > 4*p.chunk {
		t.Errorf("arena of %d bytes for %d bytes kept (%d users)", arena, p.live, p.n)
	}
	checkSlots(t, p)
}

// TestUserPageRefs: a kept page gives back its users' IDs, in their
// encoded form (what the packed users are looked up by), and versions, in
// order: UUIDs, other IDs and versions of any size.
func TestUserPageRefs(t *testing.T) {
	users := []model.User{
		{ID: uuid.Must(uuid.NewV7()).String(), Version: 1},
		{ID: "owner", Version: 1 << 40},
		{ID: "0198A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B", Version: 300}, // upper-case: not kept as 16 bytes
		{ID: uuid.Must(uuid.NewV7()).String(), Version: 127},
	}
	p := newUserPage(users, "next\x00position")
	var got []model.User
	p.each(func(id []byte, v int64) bool {
		s, _ := idText(nil, id)
		got = append(got, model.User{ID: s, Version: v})
		return true
	})
	if !reflect.DeepEqual(got, users) || p.next != "next\x00position" {
		t.Fatalf("got %+v, next %q; want %+v", got, p.next, users)
	}
	stops := 0
	if p.each(func([]byte, int64) bool { stops++; return stops < 2 }) || stops != 2 {
		t.Errorf("each went on after a false (%d calls)", stops)
	}
	// UUID and version 1; length, "owner" and 6 bytes of version; length,
	// 36 characters and 2 bytes of version; UUID and version 127.
	if want := 48 + AllocBytes(17+1+(1+5+6)+(1+36+2)+17+1) + AllocBytes(len(p.next)); p.bytes() != want {
		t.Errorf("bytes %d, want %d", p.bytes(), want)
	}
}

func splitTestIDs(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

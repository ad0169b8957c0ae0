package permissions_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// checkAccess holds AccessIn to its promise for a community (rc's global
// permissions, roles and channel overwrites; its subject's flags are
// ignored) and every channel-scoped permission: a member with no role holds
// p exactly when Everyone says so, and otherwise every member holding p,
// timed out or not, who is not the owner and has no overwrite of their own,
// holds one of Through. Members are each subset of the roles given by
// masks (bit i: the i-th role).
func checkAccess(t *testing.T, rc rawCase, masks []uint64) {
	t.Helper()
	community := rc.subject()
	roles := community.Roles
	c := rc.channel()
	c.User = permissions.Overwrite{}
	for _, p := range permissions.ChannelScoped.Permissions() {
		acc := permissions.AccessIn(community.Global, roles, c, p)
		if acc.Permission != p {
			t.Fatalf("AccessIn(%v).Permission = %v", p, acc.Permission)
		}
		if !slices.IsSorted(acc.Through) {
			t.Fatalf("AccessIn(%v).Through = %v, not sorted", p, acc.Through)
		}
		none := permissions.InChannel(permissions.Subject{Global: community.Global}, c).Has(p)
		if acc.Everyone != none {
			t.Fatalf("AccessIn(%v).Everyone = %v, but a member with no role holds it: %v (case %+v)", p, acc.Everyone, none, rc)
		}
		if acc.Everyone {
			continue
		}
		for _, mask := range masks {
			for _, timedOut := range []bool{false, true} {
				sub := permissions.Subject{Global: community.Global, TimedOut: timedOut}
				held := false
				for i, r := range roles {
					if i < 64 && mask&(1<<i) != 0 {
						sub.Roles = append(sub.Roles, r)
						_, found := slices.BinarySearch(acc.Through, r.ID)
						held = held || found
					}
				}
				if permissions.InChannel(sub, c).Has(p) && !held {
					t.Fatalf("a member with roles %v holds %v, but none of Through %v (case %+v)", sub.Roles, p, acc.Through, rc)
				}
			}
		}
	}
}

func FuzzAccessIn(f *testing.F) {
	// Everyone can view; everyone is denied and one role allowed; a role
	// holds VIEW_CHANNEL but everyone is denied it; an administrator role;
	// SEND_MESSAGES from one role and ATTACH_FILES from another's overwrite.
	f.Add(uint64(0x1ce0), uint64(0), []byte{1, 0, 0, 2, 0, 0}, []byte{}, uint64(0b111))
	f.Add(uint64(0x1ce0), uint64(0x20<<16), []byte{1, 0, 0, 2, 0, 0}, []byte{1, 0x20, 0, 0, 0}, uint64(0b01))
	f.Add(uint64(0), uint64(0x20<<16), []byte{1, 0x20, 0}, []byte{}, uint64(1))
	f.Add(uint64(0), uint64(0xffff<<16), []byte{0xf5, 1, 0, 3, 0, 0}, []byte{5, 0, 0, 0xff, 0xff}, uint64(0b11))
	f.Add(uint64(0x20), uint64(0), []byte{1, 0x40, 0, 2, 0, 0}, []byte{2, 0, 0x01, 0, 0}, uint64(0b11))
	f.Fuzz(func(t *testing.T, global, everyone uint64, roles, overwrites []byte, seed uint64) {
		if len(roles) > 3*16 {
			roles = roles[:3*16]
		}
		rc := decodeCase(false, false, global, everyone, 0, roles, overwrites)
		rng := rand.New(rand.NewPCG(seed, 1))
		masks := []uint64{0, ^uint64(0)}
		for range 32 {
			masks = append(masks, rng.Uint64()&rng.Uint64())
		}
		for i := range rc.roles {
			masks = append(masks, 1<<i)
		}
		checkAccess(t, rc, masks)
	})
}

// TestAccessInRandomCommunities is FuzzAccessIn at the sizes of real
// communities: up to 60 roles, sparse overwrites, members holding a few
// roles each.
func TestAccessInRandomCommunities(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		sparse := func(n int) uint64 {
			m := rng.Uint64()
			for range n {
				m &= rng.Uint64()
			}
			return m
		}
		rc := rawCase{
			global:   sparse(1) &^ 1,
			everyone: rawOverwrite{allow: sparse(3), deny: sparse(2)},
		}
		for j := range rng.IntN(61) {
			perms := sparse(2)
			if rng.IntN(30) != 0 {
				perms &^= 1
			}
			rc.roles = append(rc.roles, rawRole{id: "role-" + strconv.Itoa(j), perms: perms})
		}
		for range rng.IntN(40) {
			rc.overwrites = append(rc.overwrites, rawOverwrite{
				roleID: "role-" + strconv.Itoa(rng.IntN(70)), allow: sparse(3), deny: sparse(3)})
		}
		var masks []uint64
		for range 64 {
			masks = append(masks, sparse(2+rng.IntN(3)))
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) { checkAccess(t, rc, masks) })
	}
}

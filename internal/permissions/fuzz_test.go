package permissions_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// decodeCase turns fuzz input into a case. Roles take 3 bytes each (ID out
// of 12, 16 bits of permissions, ADMINISTRATOR only when the ID byte is
// high, so the bypass does not drown the rest); role overwrites take 5
// bytes each (ID out of 16, so some name roles the subject lacks, and 16
// bits each of allow and deny). The 16 bits reach past the catalog on
// purpose.
func decodeCase(owner, timedOut bool, global, everyone, user uint64, roles, overwrites []byte) rawCase {
	const admin = 1
	rc := rawCase{
		owner:    owner,
		timedOut: timedOut,
		global:   global,
		everyone: rawOverwrite{allow: everyone & 0xffff, deny: everyone >> 16 & 0xffff},
		user:     rawOverwrite{allow: user & 0xffff, deny: user >> 16 & 0xffff},
	}
	if global>>60 != 0xf {
		rc.global &^= admin
	}
	for b := roles; len(b) >= 3; b = b[3:] {
		perms := uint64(b[1]) | uint64(b[2])<<8
		if b[0] < 0xf0 {
			perms &^= admin
		}
		rc.roles = append(rc.roles, rawRole{id: "r" + strconv.Itoa(int(b[0]%12)), perms: perms})
	}
	for b := overwrites; len(b) >= 5; b = b[5:] {
		rc.overwrites = append(rc.overwrites, rawOverwrite{
			roleID: "r" + strconv.Itoa(int(b[0]%16)),
			allow:  uint64(b[1]) | uint64(b[2])<<8,
			deny:   uint64(b[3]) | uint64(b[4])<<8,
		})
	}
	return rc
}

func FuzzInChannel(f *testing.F) {
	// A plain member; a member denied VIEW_CHANNEL by everyone but allowed
	// by a role; an owner; an administrator by role; conflicting role
	// overwrites; a user overwrite over role overwrites.
	f.Add(false, false, uint64(0x1ce0), uint64(0), uint64(0), []byte{1, 0, 0}, []byte{})
	f.Add(false, false, uint64(0x1ce0), uint64(0x20<<16), uint64(0), []byte{1, 0, 0, 2, 0, 0}, []byte{1, 0x20, 0, 0, 0, 3, 0, 0, 0x20, 0})
	f.Add(true, false, uint64(0), uint64(0xffff<<16), uint64(0xffff<<16), []byte{}, []byte{})
	f.Add(false, false, uint64(0), uint64(0xffff<<16), uint64(0), []byte{0xf5, 1, 0}, []byte{5, 0, 0, 0xff, 0xff})
	f.Add(false, false, uint64(0x20), uint64(0), uint64(0), []byte{1, 0, 0, 2, 0, 0}, []byte{1, 0x40, 0, 0, 0, 2, 0, 0, 0x40, 0})
	f.Add(false, false, uint64(0x60), uint64(0), uint64(0x40<<16|0x100), []byte{1, 0x40, 0}, []byte{1, 0, 0x01, 0, 0})
	// A member timed out, with roles and overwrites that allow more; an
	// administrator timed out (the timeout does not reach them).
	f.Add(false, true, uint64(0x1ce0), uint64(0x40), uint64(0x100), []byte{1, 0x7f, 0x1f}, []byte{1, 0xff, 0x3f, 0, 0})
	f.Add(false, true, uint64(0), uint64(0), uint64(0), []byte{0xf5, 1, 0}, []byte{})
	f.Fuzz(func(t *testing.T, owner, timedOut bool, global, everyone, user uint64, roles, overwrites []byte) {
		checkAgainstReference(t, decodeCase(owner, timedOut, global, everyone, user, roles, overwrites))
	})
}

// TestMatchesReferenceAtScale compares with the reference at the limits of
// docs/design.md §9 (250 roles, 500 overwrites), where the engine looks roles up
// through its Bloom filter rather than a scan.
func TestMatchesReferenceAtScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		nRoles, nOverwrites := rng.IntN(251), rng.IntN(501)
		rc := rawCase{
			owner:    rng.IntN(50) == 0,
			timedOut: rng.IntN(4) == 0,
			global:   rng.Uint64() &^ 1,
			everyone: rawOverwrite{allow: rng.Uint64() & rng.Uint64(), deny: rng.Uint64() & rng.Uint64()},
			user:     rawOverwrite{allow: rng.Uint64() & rng.Uint64() & rng.Uint64(), deny: rng.Uint64() & rng.Uint64() & rng.Uint64()},
		}
		for range nRoles {
			perms := rng.Uint64() & rng.Uint64() & rng.Uint64()
			if rng.IntN(200) != 0 {
				perms &^= 1
			}
			rc.roles = append(rc.roles, rawRole{id: "role-" + strconv.Itoa(rng.IntN(1000)), perms: perms})
		}
		density := 2 + rng.IntN(8) // more ANDs, fewer bits per overwrite
		sparse := func() uint64 {
			m := rng.Uint64()
			for range density {
				m &= rng.Uint64()
			}
			return m
		}
		for range nOverwrites {
			rc.overwrites = append(rc.overwrites, rawOverwrite{
				roleID: "role-" + strconv.Itoa(rng.IntN(1000)), allow: sparse(), deny: sparse(),
			})
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) { checkAgainstReference(t, rc) })
	}
}

func FuzzParse(f *testing.F) {
	f.Add("VIEW_CHANNEL,SEND_MESSAGES", uint64(0))
	f.Add("FLY,VIEW_CHANNEL,VIEW_CHANNEL,FLY", uint64(0x1ce0))
	f.Add("", ^uint64(0))
	f.Add("view_channel, ADMINISTRATOR,ADMINISTRATOR", uint64(1))
	f.Fuzz(func(t *testing.T, list string, mask uint64) {
		var in []string
		if list != "" {
			in = strings.Split(list, ",")
		}
		s, err := permissions.Parse(in)
		all, errs := permissions.ParseAll(in)
		if (err == nil) != (len(errs) == 0) {
			t.Fatalf("Parse error %v but ParseAll errors %v", err, errs)
		}
		for _, e := range errs {
			if e.Index < 0 || e.Index >= len(in) || in[e.Index] != e.Name {
				t.Fatalf("error %+v does not point at its element of %q", e, in)
			}
			if e.Reason != permissions.ReasonUnknown && e.Reason != permissions.ReasonDuplicate {
				t.Fatalf("error %+v has reason %q", e, e.Reason)
			}
		}
		if err != nil {
			if *err.(*permissions.NameError) != *errs[0] {
				t.Fatalf("Parse error %+v, first of ParseAll %+v", err, errs[0])
			}
		} else {
			if s != all || s.Len() != len(in) {
				t.Fatalf("Parse(%q) = %v, ParseAll %v", in, s, all)
			}
			back, err := permissions.Parse(s.Names())
			if err != nil || back != s {
				t.Fatalf("Parse(%v.Names()) = %v, %v", s, back, err)
			}
		}

		// Any set round-trips through its names, without its stray bits.
		m := permissions.Set(mask)
		back, err := permissions.Parse(m.Names())
		if err != nil || back != m.Intersect(permissions.All) {
			t.Fatalf("Parse(%#x.Names()) = %#x, %v", mask, uint64(back), err)
		}
	})
}

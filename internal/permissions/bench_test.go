package permissions_test

import (
	"strconv"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

var (
	sink            permissions.Set
	explanationSink []permissions.Explanation
)

// benchCase is a member holding nRoles roles (each with a permission or
// two) in a channel with nOverwrites role overwrites. Overwrite i targets
// role-(3i), so about a third of the overwrites up to nRoles apply and the
// rest name roles the member lacks; each allows one channel permission and
// denies another, so the merge keeps changing.
func benchCase(nRoles, nOverwrites int) (permissions.Subject, permissions.Channel) {
	channelPerms := permissions.ChannelScoped.Permissions()
	pick := func(i int) permissions.Set { return permissions.Of(channelPerms[i%len(channelPerms)]) }

	s := permissions.Subject{Global: permissions.DefaultGlobal}
	for i := range nRoles {
		s.Roles = append(s.Roles, permissions.Role{ID: "role-" + strconv.Itoa(i), Permissions: pick(i).Union(pick(i * 7))})
	}
	c := permissions.Channel{
		Everyone: permissions.Overwrite{Deny: permissions.Of(permissions.MentionEveryone)},
		User:     permissions.Overwrite{Allow: permissions.Of(permissions.AddReactions)},
	}
	for i := range nOverwrites {
		c.Roles = append(c.Roles, permissions.RoleOverwrite{
			RoleID:    "role-" + strconv.Itoa(3*i),
			Overwrite: permissions.Overwrite{Allow: pick(i), Deny: pick(i + 5)},
		})
	}
	return s, c
}

func BenchmarkBase(b *testing.B) {
	s, _ := benchCase(10, 0)
	b.ReportAllocs()
	for b.Loop() {
		sink = permissions.Base(s)
	}
}

func BenchmarkInChannel(b *testing.B) {
	s, c := benchCase(10, 50)
	b.ReportAllocs()
	for b.Loop() {
		sink = permissions.InChannel(s, c)
	}
}

func BenchmarkInChannelManyRoles(b *testing.B) {
	s, c := benchCase(250, 500)
	b.ReportAllocs()
	for b.Loop() {
		sink = permissions.InChannel(s, c)
	}
}

func BenchmarkExplain(b *testing.B) {
	s, c := benchCase(10, 50)
	b.ReportAllocs()
	for b.Loop() {
		explanationSink = permissions.Explain(s, &c)
	}
}

package permissions_test

import (
	"strconv"
	"testing"

	"github.com/guildhall/guildhall/internal/permissions"
)

// Short names for the tables.
var of = permissions.Of

const (
	admin       = permissions.Administrator
	manageUsers = permissions.ManageUsers
	manageRoles = permissions.ManageRoles
	auditLog    = permissions.ViewAuditLog
	view        = permissions.ViewChannel
	send        = permissions.SendMessages
	history     = permissions.ReadMessageHistory
	attach      = permissions.AttachFiles
	manageMsgs  = permissions.ManageMessages
	embed       = permissions.EmbedLinks
	mention     = permissions.MentionEveryone
	react       = permissions.AddReactions
)

func ow(allow, deny permissions.Set) permissions.Overwrite {
	return permissions.Overwrite{Allow: allow, Deny: deny}
}

func roleOW(id string, allow, deny permissions.Set) permissions.RoleOverwrite {
	return permissions.RoleOverwrite{RoleID: id, Overwrite: ow(allow, deny)}
}

func role(id string, ps ...permissions.Permission) permissions.Role {
	return permissions.Role{ID: id, Permissions: of(ps...)}
}

func TestBase(t *testing.T) {
	tests := []struct {
		name    string
		subject permissions.Subject
		want    permissions.Set
	}{
		{
			name: "nothing",
			want: 0,
		},
		{
			name:    "global only",
			subject: permissions.Subject{Global: permissions.DefaultGlobal},
			want:    permissions.DefaultGlobal,
		},
		{
			name: "global and roles are united",
			subject: permissions.Subject{
				Global: of(view),
				Roles:  []permissions.Role{role("mods", manageMsgs, view), role("auditors", auditLog)},
			},
			want: of(view, manageMsgs, auditLog),
		},
		{
			name:    "ADMINISTRATOR via global gives everything",
			subject: permissions.Subject{Global: of(admin)},
			want:    permissions.All,
		},
		{
			name:    "ADMINISTRATOR via a role gives everything",
			subject: permissions.Subject{Roles: []permissions.Role{role("members", view), role("admins", admin)}},
			want:    permissions.All,
		},
		{
			name:    "owner gives everything",
			subject: permissions.Subject{IsOwner: true},
			want:    permissions.All,
		},
		{
			name: "bits outside the catalog are dropped",
			subject: permissions.Subject{
				Global: of(view) | 1<<permissions.NumPermissions | 1<<63,
				Roles:  []permissions.Role{{ID: "odd", Permissions: 1 << 40}},
			},
			want: of(view),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := permissions.Base(tc.subject)
			if got != tc.want {
				t.Errorf("Base = %v (%#x), want %v", got, uint64(got), tc.want)
			}
			if got&^permissions.All != 0 {
				t.Errorf("Base = %#x holds bits outside the catalog", uint64(got))
			}
		})
	}
}

func TestInChannel(t *testing.T) {
	everything := permissions.Set(^uint64(0))
	member := permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{role("members")}}
	tests := []struct {
		name    string
		subject permissions.Subject
		channel permissions.Channel
		want    permissions.Set
	}{
		{
			name:    "no overwrites: base restricted to channel scope",
			subject: permissions.Subject{Global: permissions.DefaultGlobal | of(manageUsers, auditLog, manageRoles)},
			want:    permissions.DefaultGlobal | of(manageRoles),
		},
		{
			name:    "nothing at all",
			subject: permissions.Subject{},
			want:    0,
		},
		{
			name:    "everyone overwrite for a user with no roles",
			subject: permissions.Subject{Global: permissions.DefaultGlobal},
			channel: permissions.Channel{Everyone: ow(of(manageMsgs), of(react))},
			want:    permissions.DefaultGlobal.Minus(of(react)).Union(of(manageMsgs)),
		},
		{
			name:    "everyone deny then role allow",
			subject: permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{role("ops")}},
			channel: permissions.Channel{
				Everyone: ow(0, of(view)),
				Roles:    []permissions.RoleOverwrite{roleOW("ops", of(view), 0)},
			},
			want: permissions.DefaultGlobal,
		},
		{
			name:    "role deny removes a global grant",
			subject: member,
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{roleOW("members", 0, of(react))}},
			want:    permissions.DefaultGlobal.Minus(of(react)),
		},
		{
			name:    "allow beats deny across role overwrites (deny listed first)",
			subject: permissions.Subject{Global: of(view), Roles: []permissions.Role{role("muted"), role("speakers")}},
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("muted", 0, of(send)),
				roleOW("speakers", of(send), 0),
			}},
			want: of(view, send),
		},
		{
			name:    "allow beats deny across role overwrites (allow listed first)",
			subject: permissions.Subject{Global: of(view, send), Roles: []permissions.Role{role("speakers"), role("muted")}},
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("speakers", of(send), 0),
				roleOW("muted", 0, of(send, react)),
			}},
			want: of(view, send),
		},
		{
			name:    "user overwrite deny beats a role overwrite allow",
			subject: member,
			channel: permissions.Channel{
				Roles: []permissions.RoleOverwrite{roleOW("members", of(manageMsgs), 0)},
				User:  ow(0, of(manageMsgs)),
			},
			want: permissions.DefaultGlobal,
		},
		{
			name:    "user overwrite allow beats a role overwrite deny",
			subject: member,
			channel: permissions.Channel{
				Everyone: ow(0, of(react)),
				Roles:    []permissions.RoleOverwrite{roleOW("members", 0, of(send, history))},
				User:     ow(of(send, react), 0),
			},
			want: permissions.DefaultGlobal.Minus(of(history)),
		},
		{
			name:    "overwrites of roles the subject does not hold are ignored",
			subject: member,
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("admins", permissions.ChannelScoped, 0),
				roleOW("muted", 0, permissions.ChannelScoped),
			}},
			want: permissions.DefaultGlobal,
		},
		{
			name:    "duplicate overwrites of one role are merged",
			subject: member,
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("members", of(manageMsgs), 0),
				roleOW("members", 0, of(react)),
			}},
			want: permissions.DefaultGlobal.Minus(of(react)).Union(of(manageMsgs)),
		},
		{
			name:    "no VIEW_CHANNEL in base: empty",
			subject: permissions.Subject{Global: permissions.ChannelScoped.Minus(of(view))},
			want:    0,
		},
		{
			name:    "everyone denies VIEW_CHANNEL: empty",
			subject: member,
			channel: permissions.Channel{Everyone: ow(0, of(view))},
			want:    0,
		},
		{
			name:    "user overwrite denies VIEW_CHANNEL: empty despite role allows",
			subject: member,
			channel: permissions.Channel{
				Roles: []permissions.RoleOverwrite{roleOW("members", permissions.ChannelScoped, 0)},
				User:  ow(0, of(view)),
			},
			want: 0,
		},
		{
			name:    "everyone allow VIEW_CHANNEL completes a base without it",
			subject: permissions.Subject{Global: of(send, history)},
			channel: permissions.Channel{Everyone: ow(of(view), 0)},
			want:    of(view, send, history),
		},
		{
			name:    "no SEND_MESSAGES drops ATTACH_FILES, EMBED_LINKS, MENTION_EVERYONE and keeps others",
			subject: permissions.Subject{Global: permissions.ChannelScoped.Minus(of(send))},
			want:    of(manageRoles, permissions.ManageChannels, view, history, manageMsgs, react),
		},
		{
			name:    "SEND_MESSAGES denied by a role overwrite drops its dependants",
			subject: member,
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{roleOW("members", of(mention), of(send))}},
			want:    of(view, history, react),
		},
		{
			name:    "ADMINISTRATOR via global bypasses overwrites",
			subject: permissions.Subject{Global: of(admin)},
			channel: permissions.Channel{Everyone: ow(0, everything), User: ow(0, everything)},
			want:    permissions.ChannelScoped,
		},
		{
			name:    "ADMINISTRATOR via a role bypasses overwrites",
			subject: permissions.Subject{Roles: []permissions.Role{role("admins", admin)}},
			channel: permissions.Channel{
				Everyone: ow(0, everything),
				Roles:    []permissions.RoleOverwrite{roleOW("admins", 0, everything)},
				User:     ow(0, everything),
			},
			want: permissions.ChannelScoped,
		},
		{
			name:    "owner bypasses overwrites",
			subject: permissions.Subject{IsOwner: true},
			channel: permissions.Channel{Everyone: ow(0, everything), User: ow(0, everything)},
			want:    permissions.ChannelScoped,
		},
		{
			name:    "ADMINISTRATOR in an overwrite neither bypasses nor shows",
			subject: member,
			channel: permissions.Channel{
				Everyone: ow(of(admin, manageUsers, auditLog), 0),
				User:     ow(of(admin), 0),
			},
			want: permissions.DefaultGlobal,
		},
		{
			name:    "bits outside the catalog are ignored everywhere",
			subject: permissions.Subject{Global: permissions.DefaultGlobal | 1<<40, Roles: []permissions.Role{{ID: "odd", Permissions: 1 << 20}}},
			channel: permissions.Channel{
				Everyone: ow(1<<50, 0),
				Roles:    []permissions.RoleOverwrite{roleOW("odd", 1<<30, 0)},
				User:     ow(1<<63, 0),
			},
			want: permissions.DefaultGlobal,
		},
		{
			name:    "same permission allowed and denied in one overwrite: allow wins",
			subject: member,
			channel: permissions.Channel{Everyone: ow(of(manageMsgs), of(manageMsgs, react))},
			want:    permissions.DefaultGlobal.Minus(of(react)).Union(of(manageMsgs)),
		},
		{
			name:    "many roles: a held role's overwrite applies, others' do not",
			subject: manyRoles(40),
			channel: permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("role-99", of(manageRoles), 0),
				roleOW("role-39", of(manageMsgs), 0),
				roleOW("role-40", 0, of(view)),
				roleOW("role-0", 0, of(react)),
			}},
			want: permissions.DefaultGlobal.Minus(of(react)).Union(of(manageMsgs)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := permissions.InChannel(tc.subject, tc.channel)
			if got != tc.want {
				t.Errorf("InChannel = %v, want %v", got, tc.want)
			}
			if !permissions.ChannelScoped.HasAll(got) || got&^permissions.All != 0 {
				t.Errorf("InChannel = %#x is not within ChannelScoped", uint64(got))
			}
		})
	}
}

// manyRoles is a member holding role-0 … role-(n-1), none with permissions.
func manyRoles(n int) permissions.Subject {
	s := permissions.Subject{Global: permissions.DefaultGlobal}
	for i := range n {
		s.Roles = append(s.Roles, permissions.Role{ID: "role-" + strconv.Itoa(i)})
	}
	return s
}

func TestNoAllocations(t *testing.T) {
	small, smallChannel := benchCase(10, 50)
	large, largeChannel := benchCase(250, 500)
	tests := []struct {
		name string
		run  func()
	}{
		{"Base", func() { sink = permissions.Base(large) }},
		{"InChannel with 10 roles and 50 overwrites", func() { sink = permissions.InChannel(small, smallChannel) }},
		{"InChannel with 250 roles and 500 overwrites", func() { sink = permissions.InChannel(large, largeChannel) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if allocs := testing.AllocsPerRun(100, tc.run); allocs != 0 {
				t.Errorf("%v allocations per run, want 0", allocs)
			}
		})
	}
}

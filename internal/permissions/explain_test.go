package permissions_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/permissions"
)

// Steps as Explain words them.
var (
	stepGlobal        = permissions.Step{Kind: permissions.StepGlobal, Effect: permissions.Allow, Detail: "granted by the global permissions"}
	stepEveryoneDeny  = permissions.Step{Kind: permissions.StepOverwriteEveryone, Effect: permissions.Deny, Detail: "denied by the everyone overwrite"}
	stepEveryoneAllow = permissions.Step{Kind: permissions.StepOverwriteEveryone, Effect: permissions.Allow, Detail: "allowed by the everyone overwrite"}
	stepUserDeny      = permissions.Step{Kind: permissions.StepOverwriteUser, Effect: permissions.Deny, Detail: "denied by the user's own overwrite"}
	stepUserAllow     = permissions.Step{Kind: permissions.StepOverwriteUser, Effect: permissions.Allow, Detail: "allowed by the user's own overwrite"}
	stepNoView        = permissions.Step{Kind: permissions.StepImplicit, Effect: permissions.Deny, Detail: "removed: VIEW_CHANNEL is missing"}
	stepNoSend        = permissions.Step{Kind: permissions.StepImplicit, Effect: permissions.Deny, Detail: "removed: SEND_MESSAGES is missing"}
	stepOwner         = permissions.Step{Kind: permissions.StepOwner, Effect: permissions.Allow, Detail: "the owner has every permission"}
	stepAdmin         = permissions.Step{Kind: permissions.StepAdministrator, Effect: permissions.Allow, Detail: "granted by ADMINISTRATOR"}
	stepAdminChannel  = permissions.Step{Kind: permissions.StepAdministrator, Effect: permissions.Allow, Detail: "granted by ADMINISTRATOR, which bypasses channel overwrites"}
)

func stepRole(id string) permissions.Step {
	return permissions.Step{Kind: permissions.StepRole, Effect: permissions.Allow, RoleID: id, Detail: "granted by role " + id}
}

func stepRoleOWAllow(id string) permissions.Step {
	return permissions.Step{Kind: permissions.StepOverwriteRole, Effect: permissions.Allow, RoleID: id, Detail: "allowed by the overwrite of role " + id}
}

func stepRoleOWDeny(id string) permissions.Step {
	return permissions.Step{Kind: permissions.StepOverwriteRole, Effect: permissions.Deny, RoleID: id, Detail: "denied by the overwrite of role " + id}
}

func steps(ss ...permissions.Step) []permissions.Step { return ss }

// until is the end of the timeouts below, and stepTimeout the step that
// names it.
var (
	until       = time.Date(2026, time.December, 1, 12, 0, 0, 0, time.UTC)
	stepTimeout = permissions.Step{Kind: permissions.StepTimeout, Effect: permissions.Deny, Until: until,
		Detail: "removed: timed out until 2026-12-01T12:00:00Z"}
)

func TestExplain(t *testing.T) {
	alice := permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{role("members")}}
	ops := &permissions.Channel{
		Everyone: ow(0, of(view)),
		Roles:    []permissions.RoleOverwrite{roleOW("ops", of(view, manageMsgs), 0)},
	}
	tests := []struct {
		name    string
		subject permissions.Subject
		channel *permissions.Channel
		// want lists the permissions that have steps; every other one in
		// scope must have none and be refused.
		want map[permissions.Permission][]permissions.Step
	}{
		{
			name:    "why can't Alice see #ops? everyone denies VIEW_CHANNEL and she lacks the ops role",
			subject: alice,
			channel: ops,
			want: map[permissions.Permission][]permissions.Step{
				view:    steps(stepGlobal, stepEveryoneDeny),
				send:    steps(stepGlobal, stepNoView),
				history: steps(stepGlobal, stepNoView),
				attach:  steps(stepGlobal, stepNoView),
				embed:   steps(stepGlobal, stepNoView),
				react:   steps(stepGlobal, stepNoView),
			},
		},
		{
			name: "Alice with the ops role sees #ops",
			subject: permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{
				role("members"), role("ops"),
			}},
			channel: ops,
			want: map[permissions.Permission][]permissions.Step{
				view:       steps(stepGlobal, stepEveryoneDeny, stepRoleOWAllow("ops")),
				send:       steps(stepGlobal),
				history:    steps(stepGlobal),
				attach:     steps(stepGlobal),
				manageMsgs: steps(stepRoleOWAllow("ops")),
				embed:      steps(stepGlobal),
				react:      steps(stepGlobal),
			},
		},
		{
			name: "role overwrites: every deny first, then every allow, so allow wins",
			subject: permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{
				role("speakers"), role("muted"), role("fans"),
			}},
			channel: &permissions.Channel{Roles: []permissions.RoleOverwrite{
				roleOW("speakers", of(send, mention), 0),
				roleOW("strangers", 0, of(send, react)),
				roleOW("muted", 0, of(send, react)),
				roleOW("fans", of(react), 0),
			}},
			want: map[permissions.Permission][]permissions.Step{
				view:    steps(stepGlobal),
				send:    steps(stepGlobal, stepRoleOWDeny("muted"), stepRoleOWAllow("speakers")),
				history: steps(stepGlobal),
				attach:  steps(stepGlobal),
				embed:   steps(stepGlobal),
				mention: steps(stepRoleOWAllow("speakers")),
				react:   steps(stepGlobal, stepRoleOWDeny("muted"), stepRoleOWAllow("fans")),
			},
		},
		{
			name: "the user's own overwrite comes last",
			subject: permissions.Subject{Global: permissions.DefaultGlobal, Roles: []permissions.Role{
				role("mods", manageMsgs),
			}},
			channel: &permissions.Channel{
				Everyone: ow(0, of(react)),
				Roles:    []permissions.RoleOverwrite{roleOW("mods", of(mention), 0)},
				User:     ow(of(react), of(manageMsgs, mention)),
			},
			want: map[permissions.Permission][]permissions.Step{
				view:       steps(stepGlobal),
				send:       steps(stepGlobal),
				history:    steps(stepGlobal),
				attach:     steps(stepGlobal),
				manageMsgs: steps(stepRole("mods"), stepUserDeny),
				embed:      steps(stepGlobal),
				mention:    steps(stepRoleOWAllow("mods"), stepUserDeny),
				react:      steps(stepGlobal, stepEveryoneDeny, stepUserAllow),
			},
		},
		{
			name:    "without SEND_MESSAGES the files, links and mentions go, the rest stays",
			subject: permissions.Subject{Global: permissions.DefaultGlobal | of(mention)},
			channel: &permissions.Channel{Everyone: ow(0, of(send))},
			want: map[permissions.Permission][]permissions.Step{
				view:    steps(stepGlobal),
				send:    steps(stepGlobal, stepEveryoneDeny),
				history: steps(stepGlobal),
				attach:  steps(stepGlobal, stepNoSend),
				embed:   steps(stepGlobal, stepNoSend),
				mention: steps(stepGlobal, stepNoSend),
				react:   steps(stepGlobal),
			},
		},
		{
			name:    "without both, the missing VIEW_CHANNEL is the reason",
			subject: permissions.Subject{Global: of(send, attach, history)},
			channel: &permissions.Channel{Everyone: ow(0, of(send))},
			want: map[permissions.Permission][]permissions.Step{
				send:    steps(stepGlobal, stepEveryoneDeny),
				history: steps(stepGlobal, stepNoView),
				attach:  steps(stepGlobal, stepNoView),
			},
		},
		{
			name:    "an everyone overwrite that allows and denies: deny, then allow",
			subject: permissions.Subject{Global: of(view)},
			channel: &permissions.Channel{Everyone: ow(of(view), of(view))},
			want: map[permissions.Permission][]permissions.Step{
				view: steps(stepGlobal, stepEveryoneDeny, stepEveryoneAllow),
			},
		},
		{
			name:    "owner in a channel",
			subject: permissions.Subject{IsOwner: true},
			channel: &permissions.Channel{Everyone: ow(0, permissions.All)},
			want:    everyStep(permissions.ChannelScoped, stepOwner),
		},
		{
			name:    "owner without a channel",
			subject: permissions.Subject{IsOwner: true, Global: of(view)},
			want:    everyStep(permissions.All, stepOwner),
		},
		{
			name: "ADMINISTRATOR via a role, without a channel",
			subject: permissions.Subject{Global: of(view), Roles: []permissions.Role{
				role("members", view), role("admins", admin), role("root", admin),
			}},
			want: merge(everyStep(permissions.All, stepAdmin), map[permissions.Permission][]permissions.Step{
				admin: steps(stepRole("admins"), stepRole("root"), stepAdmin),
			}),
		},
		{
			name:    "ADMINISTRATOR via global, without a channel",
			subject: permissions.Subject{Global: of(admin)},
			want: merge(everyStep(permissions.All, stepAdmin), map[permissions.Permission][]permissions.Step{
				admin: steps(stepGlobal, stepAdmin),
			}),
		},
		{
			name:    "ADMINISTRATOR in a channel bypasses its overwrites",
			subject: permissions.Subject{Roles: []permissions.Role{role("admins", admin)}},
			channel: &permissions.Channel{
				Everyone: ow(0, permissions.All),
				Roles:    []permissions.RoleOverwrite{roleOW("admins", 0, permissions.All)},
			},
			want: everyStep(permissions.ChannelScoped, stepAdminChannel),
		},
		{
			name: "base: global, then roles in the subject's order",
			subject: permissions.Subject{Global: of(view), Roles: []permissions.Role{
				role("b", view, auditLog), role("a", view),
			}},
			want: map[permissions.Permission][]permissions.Step{
				auditLog: steps(stepRole("b")),
				view:     steps(stepGlobal, stepRole("b"), stepRole("a")),
			},
		},
		{
			name:    "nothing at all",
			subject: permissions.Subject{},
			channel: &permissions.Channel{},
			want:    map[permissions.Permission][]permissions.Step{},
		},
		{
			name:    "a member timed out keeps viewing and reading history; the timeout names its end",
			subject: permissions.Subject{Global: of(view, send, history), Roles: []permissions.Role{role("mods", manageMsgs)}, TimedOut: true, TimeoutUntil: until},
			want: map[permissions.Permission][]permissions.Step{
				view:       steps(stepGlobal),
				send:       steps(stepGlobal, stepTimeout),
				history:    steps(stepGlobal),
				manageMsgs: steps(stepRole("mods"), stepTimeout),
			},
		},
		{
			name:    "in a channel the timeout cuts what an overwrite allows too",
			subject: permissions.Subject{Global: of(view, send), TimedOut: true, TimeoutUntil: until},
			channel: &permissions.Channel{Everyone: ow(of(mention, history), 0)},
			want: map[permissions.Permission][]permissions.Step{
				view:    steps(stepGlobal),
				send:    steps(stepGlobal, stepTimeout),
				history: steps(stepEveryoneAllow),
				mention: steps(stepEveryoneAllow, stepTimeout),
			},
		},
		{
			name:    "an administrator is not timed out",
			subject: permissions.Subject{Roles: []permissions.Role{role("boss", admin)}, TimedOut: true, TimeoutUntil: until},
			channel: &permissions.Channel{},
			want: func() map[permissions.Permission][]permissions.Step {
				m := map[permissions.Permission][]permissions.Step{}
				for _, p := range permissions.ChannelScoped.Permissions() {
					m[p] = steps(stepAdminChannel)
				}
				return m
			}(),
		},
		{
			name:    "the overwrite steps of a synced channel name the category they were copied from",
			subject: permissions.Subject{Global: of(view), Roles: []permissions.Role{role("mods")}},
			channel: &permissions.Channel{Everyone: ow(0, of(view)), Roles: []permissions.RoleOverwrite{roleOW("mods", of(view), 0)}, SyncedFrom: "staff"},
			want: map[permissions.Permission][]permissions.Step{
				view: steps(stepGlobal,
					permissions.Step{Kind: permissions.StepOverwriteEveryone, Effect: permissions.Deny, FromCategory: "staff",
						Detail: "denied by the everyone overwrite (copied from category staff)"},
					permissions.Step{Kind: permissions.StepOverwriteRole, Effect: permissions.Allow, RoleID: "mods", FromCategory: "staff",
						Detail: "allowed by the overwrite of role mods (copied from category staff)"}),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scope := permissions.All
			if tc.channel != nil {
				scope = permissions.ChannelScoped
			}
			var want []permissions.Explanation
			for _, p := range scope.Permissions() {
				st := tc.want[p]
				if st == nil {
					st = []permissions.Step{}
				}
				granted := len(st) > 0 && st[len(st)-1].Effect == permissions.Allow
				want = append(want, permissions.Explanation{Permission: p, Granted: granted, Steps: st})
			}
			got := permissions.Explain(tc.subject, tc.channel)
			if !reflect.DeepEqual(got, want) {
				for i := range max(len(got), len(want)) {
					if i >= len(got) || i >= len(want) || !reflect.DeepEqual(got[i], want[i]) {
						t.Errorf("explanation %d:\n got %+v\nwant %+v", i, at(got, i), at(want, i))
					}
				}
			}

			// Granted agrees with the engine.
			engine := permissions.Base(tc.subject)
			if tc.channel != nil {
				engine = permissions.InChannel(tc.subject, *tc.channel)
			}
			checkExplain(t, got, engine, scope)
		})
	}
}

func everyStep(scope permissions.Set, st permissions.Step) map[permissions.Permission][]permissions.Step {
	out := map[permissions.Permission][]permissions.Step{}
	for _, p := range scope.Permissions() {
		out[p] = steps(st)
	}
	return out
}

func merge(a, b map[permissions.Permission][]permissions.Step) map[permissions.Permission][]permissions.Step {
	for k, v := range b {
		a[k] = v
	}
	return a
}

func at(ex []permissions.Explanation, i int) any {
	if i < len(ex) {
		return ex[i]
	}
	return "(none)"
}

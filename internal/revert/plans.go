package revert

import (
	"context"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// plan is how one event is reverted: the change that sets its subject
// back, made by hand's operation, and what tells that a later change
// stands in the way.
type plan struct {
	ev   model.Event
	what string // the state set back, in words
	// same reports whether an event (later than ev, on its subject, or
	// written by the revert) changes the state the revert sets back.
	same func(e model.Event) bool
	// gone are other subjects whose later events take away what the
	// revert needs (the role or user of an overwrite, a category), with
	// those events' types.
	gone []watch
	// left reports whether the revert's own event found the state as ev
	// left it (its before is ev's after); nil: writing the event says so.
	left func(e model.Event) bool
	// noop reports whether a revert that changes nothing still finds the
	// state as ev left it (a timeout that has ended since); nil: never.
	noop func() bool
	// shifted, when set, finds the latest later event that may have
	// changed the state without naming the subject (other roles' moves).
	shifted func(ctx context.Context, q reader) (int64, error)
	apply   func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error
}

// watch is a subject and the types of its events that stand in the way.
type watch struct {
	subject string
	types   []string
}

// planFor reads how to revert ev: a 400 not_revertible for a type no
// revert sets back.
func planFor(ev model.Event) (*plan, error) {
	build, ok := plans[ev.Type]
	if !ok {
		return nil, apperr.NotRevertible("Event %d is a %s: no revert sets it back.", ev.Seq, ev.Type)
	}
	p := build(ev)
	p.ev = ev
	return p, nil
}

var plans = map[string]func(model.Event) *plan{
	"channel.overwrite.set":     overwritePlan,
	"channel.overwrite.removed": overwritePlan,
	"role.permissions.set":      rolePermissionsPlan,
	"global.permissions.set":    globalPlan,
	"user.role.assigned":        membershipPlan,
	"user.role.removed":         membershipPlan,
	"role.updated":              roleUpdatedPlan,
	"role.renamed":              roleRenamedPlan,
	"role.moved":                roleMovedPlan,
	"channel.updated":           channelUpdatedPlan,
	"channel.renamed":           channelRenamedPlan,
	"channel.moved":             channelMovedPlan,
	"user.timeout":              timeoutPlan,
}

func overwritePlan(ev model.Event) *plan {
	d := ev.Data
	channel := strings.TrimPrefix(ev.Subject, "channel:")
	tt, tid := str(d["target_type"]), str(d["target_id"])
	ow := model.Overwrite{ChannelID: channel, TargetType: tt, TargetID: tid}
	if before, ok := d["before"].(map[string]any); ok {
		ow.Allow, ow.Deny = set(before["allow"]), set(before["deny"])
	}
	p := &plan{
		what: "overwrite of " + overwriteTarget(tt, tid) + " in channel " + channel,
		same: func(e model.Event) bool {
			return (e.Type == "channel.overwrite.set" || e.Type == "channel.overwrite.removed") &&
				str(e.Data["target_type"]) == tt && str(e.Data["target_id"]) == tid
		},
		left: func(e model.Event) bool { return equal(e.Data["before"], d["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, _, err := svc.SetOverwrite(ctx, a, ow, o)
			return err
		},
	}
	switch tt {
	case model.TargetRole:
		p.gone = []watch{{"role:" + tid, []string{"role.deleted", "role.created"}}}
	case model.TargetUser:
		p.gone = []watch{{"user:" + tid, []string{"user.deleted"}}}
	}
	return p
}

func rolePermissionsPlan(ev model.Event) *plan {
	id := strings.TrimPrefix(ev.Subject, "role:")
	perms := set(ev.Data["before"])
	return &plan{
		what: "permissions of role " + id,
		same: func(e model.Event) bool { return e.Type == "role.permissions.set" },
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.SetRolePermissions(ctx, a, id, perms, o)
			return err
		},
	}
}

func globalPlan(ev model.Event) *plan {
	perms := set(ev.Data["before"])
	return &plan{
		what: "global permissions",
		same: func(e model.Event) bool { return e.Type == "global.permissions.set" },
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, _, err := svc.SetGlobalPermissions(ctx, a, perms, o)
			return err
		},
	}
}

func membershipPlan(ev model.Event) *plan {
	user, role := strings.TrimPrefix(ev.Subject, "user:"), str(ev.Data["role_id"])
	assigned := ev.Type == "user.role.assigned"
	return &plan{
		what: "membership of user " + user + " in role " + role,
		same: func(e model.Event) bool {
			return (e.Type == "user.role.assigned" || e.Type == "user.role.removed") && str(e.Data["role_id"]) == role
		},
		gone: []watch{{"role:" + role, []string{"role.deleted", "role.created"}}},
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			if assigned {
				return svc.RemoveRole(ctx, a, user, role, o)
			}
			return svc.AssignRole(ctx, a, user, role, o)
		},
	}
}

// changedFields are the members of an update event's before and after
// (name, color, topic) that differ: a revert sets back those alone.
func changedFields(ev model.Event, members ...string) map[string]bool {
	before, _ := ev.Data["before"].(map[string]any)
	after, _ := ev.Data["after"].(map[string]any)
	out := map[string]bool{}
	for _, m := range members {
		if !equal(before[m], after[m]) {
			out[m] = true
		}
	}
	return out
}

// updates reports whether an update event (role.updated, channel.updated)
// changes one of fields.
func updates(e model.Event, fields map[string]bool) bool {
	before, _ := e.Data["before"].(map[string]any)
	after, _ := e.Data["after"].(map[string]any)
	for f := range fields {
		if !equal(before[f], after[f]) {
			return true
		}
	}
	return false
}

// leftFields reports whether an update event's before holds ev's after in fields.
func leftFields(e, ev model.Event, fields map[string]bool) bool {
	before, _ := e.Data["before"].(map[string]any)
	after, _ := ev.Data["after"].(map[string]any)
	for f := range fields {
		if !equal(before[f], after[f]) {
			return false
		}
	}
	return true
}

func roleUpdatedPlan(ev model.Event) *plan {
	id := strings.TrimPrefix(ev.Subject, "role:")
	fields := changedFields(ev, "name", "color")
	before, _ := ev.Data["before"].(map[string]any)
	var patch guild.RolePatch
	if fields["name"] {
		name := str(before["name"])
		patch.Name = &name
	}
	if fields["color"] {
		patch.SetColor, patch.Color = true, strPtr(before["color"])
	}
	return &plan{
		what: "name or color of role " + id,
		same: func(e model.Event) bool {
			return (e.Type == "role.updated" && updates(e, fields)) || (e.Type == "role.renamed" && fields["name"])
		},
		left: func(e model.Event) bool { return leftFields(e, ev, fields) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.UpdateRole(ctx, a, id, patch, o)
			return err
		},
	}
}

func roleRenamedPlan(ev model.Event) *plan {
	id, name := strings.TrimPrefix(ev.Subject, "role:"), str(ev.Data["before"])
	name1 := map[string]bool{"name": true}
	return &plan{
		what: "name of role " + id,
		same: func(e model.Event) bool {
			return e.Type == "role.renamed" || (e.Type == "role.updated" && updates(e, name1))
		},
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.RenameRole(ctx, a, id, name, o)
			return err
		},
	}
}

func roleMovedPlan(ev model.Event) *plan {
	id, position := strings.TrimPrefix(ev.Subject, "role:"), num(ev.Data["before"])
	return &plan{
		what: "position of role " + id,
		same: func(e model.Event) bool { return e.Type == "role.moved" },
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		// Creating, deleting or moving another role shifts this one.
		shifted: func(ctx context.Context, q reader) (int64, error) {
			return latestOfTypes(ctx, q, ev.Seq, "role.created", "role.deleted", "role.moved")
		},
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.MoveRole(ctx, a, id, position, o)
			return err
		},
	}
}

func channelUpdatedPlan(ev model.Event) *plan {
	id := strings.TrimPrefix(ev.Subject, "channel:")
	fields := changedFields(ev, "name", "topic")
	before, _ := ev.Data["before"].(map[string]any)
	var patch guild.ChannelPatch
	if fields["name"] {
		name := str(before["name"])
		patch.Name = &name
	}
	if fields["topic"] {
		patch.SetTopic, patch.Topic = true, strPtr(before["topic"])
	}
	return &plan{
		what: "name or topic of channel " + id,
		same: func(e model.Event) bool {
			return (e.Type == "channel.updated" && updates(e, fields)) || (e.Type == "channel.renamed" && fields["name"])
		},
		left: func(e model.Event) bool { return leftFields(e, ev, fields) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.UpdateChannel(ctx, a, id, patch, o)
			return err
		},
	}
}

func channelRenamedPlan(ev model.Event) *plan {
	id, name := strings.TrimPrefix(ev.Subject, "channel:"), str(ev.Data["before"])
	name1 := map[string]bool{"name": true}
	return &plan{
		what: "name of channel " + id,
		same: func(e model.Event) bool {
			return e.Type == "channel.renamed" || (e.Type == "channel.updated" && updates(e, name1))
		},
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.RenameChannel(ctx, a, id, name, o)
			return err
		},
	}
}

func channelMovedPlan(ev model.Event) *plan {
	id := strings.TrimPrefix(ev.Subject, "channel:")
	before, _ := ev.Data["before"].(map[string]any)
	after, _ := ev.Data["after"].(map[string]any)
	parent, position := strPtr(before["parent_id"]), num(before["position"])
	p := &plan{
		what: "place of channel " + id,
		same: func(e model.Event) bool { return e.Type == "channel.moved" },
		left: func(e model.Event) bool { return equal(e.Data["before"], ev.Data["after"]) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.UpdateChannel(ctx, a, id, guild.ChannelPatch{SetParent: true, ParentID: parent, Position: &position}, o)
			return err
		},
	}
	// Deleting a category takes its channels out of it with no event of
	// theirs; a category deleted (or made anew) cannot take one back.
	for _, c := range []*string{parent, strPtr(after["parent_id"])} {
		if c != nil {
			p.gone = append(p.gone, watch{"channel:" + *c, []string{"channel.deleted", "channel.created"}})
		}
	}
	return p
}

func timeoutPlan(ev model.Event) *plan {
	id := strings.TrimPrefix(ev.Subject, "user:")
	until := timePtr(ev.Data["before"])
	// A timeout is as ev left it while its end is as ev set it; once the
	// end is past, there is none, as the service reads it.
	active := func(v any) *time.Time {
		t := timePtr(v)
		if t == nil || !t.After(time.Now()) {
			return nil
		}
		return t
	}
	return &plan{
		what: "timeout of user " + id,
		same: func(e model.Event) bool { return e.Type == "user.timeout" },
		left: func(e model.Event) bool { return eqTime(active(e.Data["before"]), active(ev.Data["after"])) },
		noop: func() bool { return eqTime(active(ev.Data["before"]), active(ev.Data["after"])) },
		apply: func(ctx context.Context, svc *guild.Service, a *guild.Actor, o guild.WriteOpts) error {
			_, err := svc.PatchUser(ctx, a, id, guild.UserPatch{SetTimeout: true, TimeoutUntil: until}, o)
			return err
		},
	}
}

func overwriteTarget(tt, tid string) string {
	if tt == model.TargetEveryone {
		return "@everyone"
	}
	return tt + " " + tid
}

// set reads a list of permission names of an event (written by the
// service, so every name is known).
func set(v any) permissions.Set {
	s, _ := permissions.Parse(strs(v))
	return s
}

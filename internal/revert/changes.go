package revert

import (
	"context"
	"maps"
	"strings"

	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/template"
)

// made is one change of a revert and the event that records it.
type made struct {
	event  model.Event
	change template.Change
}

// madeOf lists the changes that events, a revert's, record, in the
// import's shape: a role or a channel whole (as the transaction left it,
// and as it was, the event's before in place of what changed), the other
// kinds as their events hold them.
func madeOf(ctx context.Context, tx *store.Tx, events []model.Event) ([]made, error) {
	out := make([]made, 0, len(events))
	for _, e := range events {
		kind, id, _ := strings.Cut(e.Subject, ":")
		var c template.Change
		var err error
		switch {
		case strings.HasPrefix(e.Type, "channel.overwrite."):
			c = overwriteChange(id, e)
		case e.Type == "global.permissions.set":
			c = template.Change{Op: "update", Kind: "global", ID: "permissions",
				Before: map[string]any{"permissions": e.Data["before"]}, After: map[string]any{"permissions": e.Data["after"]}}
		case e.Type == "user.role.assigned" || e.Type == "user.role.removed":
			c = membershipChange(id, e)
		case e.Type == "user.timeout":
			c = template.Change{Op: "update", Kind: "timeout", ID: id,
				Before: map[string]any{"timeout_until": e.Data["before"]}, After: map[string]any{"timeout_until": e.Data["after"]}}
		case kind == "role":
			c, err = roleChange(ctx, tx, id, e)
		case kind == "channel":
			c, err = channelChange(ctx, tx, id, e)
		default:
			continue // none of a revert's
		}
		if err != nil {
			return nil, err
		}
		out = append(out, made{event: e, change: c})
	}
	return out, nil
}

func overwriteChange(channel string, e model.Event) template.Change {
	tt, tid := str(e.Data["target_type"]), str(e.Data["target_id"])
	c := template.Change{Op: "update", Kind: "overwrite", ID: channel + "/everyone"}
	if tt != model.TargetEveryone {
		c.ID = channel + "/" + tt + ":" + tid
	}
	if tt == model.TargetUser {
		c.Kind = "user_overwrite"
	}
	side := func(v any) map[string]any {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		out := map[string]any{"target_type": tt, "allow": m["allow"], "deny": m["deny"]}
		if tid != "" {
			out["target_id"] = tid
		}
		return out
	}
	c.Before, c.After = side(e.Data["before"]), side(e.Data["after"])
	switch {
	case c.Before == nil:
		c.Op = "create"
	case c.After == nil:
		c.Op = "delete"
	}
	return c
}

func membershipChange(user string, e model.Event) template.Change {
	m := map[string]any{"user_id": user, "role_id": str(e.Data["role_id"])}
	c := template.Change{Op: "create", Kind: "membership", ID: user + "/" + str(e.Data["role_id"]), After: m}
	if e.Type == "user.role.removed" {
		c.Op, c.Before, c.After = "delete", m, nil
	}
	return c
}

// roleChange is a role's change: the role as the transaction left it, and
// as it was.
func roleChange(ctx context.Context, tx *store.Tx, id string, e model.Event) (template.Change, error) {
	r, err := tx.GetRole(ctx, id)
	if err != nil {
		return template.Change{}, err
	}
	after := map[string]any{"id": r.ID, "name": r.Name, "position": r.Position, "color": r.Color, "permissions": r.Permissions.Names()}
	return template.Change{Op: "update", Kind: "role", ID: id, Before: was(after, e), After: after}, nil
}

// channelChange is a channel's change, as roleChange.
func channelChange(ctx context.Context, tx *store.Tx, id string, e model.Event) (template.Change, error) {
	c, err := tx.GetChannel(ctx, id)
	if err != nil {
		return template.Change{}, err
	}
	after := map[string]any{"id": c.ID, "kind": c.Kind, "name": c.Name, "parent_id": c.ParentID, "position": c.Position, "topic": c.Topic}
	return template.Change{Op: "update", Kind: "channel", ID: id, Before: was(after, e), After: after}, nil
}

// was is an element before e's change: after, with e's before in place of
// what e changed.
func was(after map[string]any, e model.Event) map[string]any {
	out := maps.Clone(after)
	switch e.Type {
	case "role.permissions.set":
		out["permissions"] = e.Data["before"]
	case "role.renamed", "channel.renamed":
		out["name"] = e.Data["before"]
	case "role.moved":
		out["position"] = e.Data["before"]
	default: // role.updated, channel.updated, channel.moved: the members before holds
		if m, ok := e.Data["before"].(map[string]any); ok {
			maps.Copy(out, m)
		}
	}
	return out
}

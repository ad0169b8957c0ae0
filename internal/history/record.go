package history

import (
	"maps"
	"time"

	"github.com/guildhall/guildhall/internal/model"
)

// What deletions record beyond what they always did, so that Undo can give
// back the whole of what went: a role's holders and overwrites, a user's
// overwrites and timeout, a channel's overwrites and children.

// Stamp is a time as event data holds it.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// overwritesData is a list of overwrites as event data holds it: with
// their channel (a role's or a user's), or their target (a channel's).
func overwritesData(list []model.Overwrite, withTarget bool) []map[string]any {
	out := make([]map[string]any, 0, len(list))
	for _, o := range list {
		m := map[string]any{"allow": o.Allow.Names(), "deny": o.Deny.Names()}
		if withTarget {
			m["target_type"], m["target_id"] = o.TargetType, nil
			if o.TargetID != "" {
				m["target_id"] = o.TargetID
			}
		} else {
			m["channel_id"] = o.ChannelID
		}
		out = append(out, m)
	}
	return out
}

// RoleDeleted is the data of role.deleted: holders and overwrites as they
// were; shifts says whether the roles above moved down (a single deletion)
// or stay for the import that deletes it to place them.
func RoleDeleted(r model.Role, holders []string, overwrites []model.Overwrite, shifts bool) map[string]any {
	return map[string]any{"name": r.Name, "position": r.Position, "permissions": r.Permissions.Names(),
		"users": len(holders), "overwrites": len(overwrites), "color": r.Color, "created_at": Stamp(r.CreatedAt),
		"holder_ids": nonNil(holders), "role_overwrites": overwritesData(overwrites, false), "shifts": shifts}
}

// UserDeleted adds to user.deleted's data what Undo needs.
func UserDeleted(data map[string]any, u model.User, overwrites []model.Overwrite) map[string]any {
	out := maps.Clone(data)
	out["display_name"], out["status"], out["created_at"] = u.DisplayName, u.Status, Stamp(u.CreatedAt)
	out["timeout_until"] = nil
	if u.TimeoutUntil != nil {
		out["timeout_until"] = Stamp(*u.TimeoutUntil)
	}
	out["user_overwrites"] = overwritesData(overwrites, false)
	return out
}

// ChannelDeleted is the data of channel.deleted.
func ChannelDeleted(c model.Channel, overwrites []model.Overwrite, children []string) map[string]any {
	data := map[string]any{"name": c.Name, "overwrites": len(overwrites), "topic": c.Topic, "kind": c.Kind,
		"parent_id": c.ParentID, "position": c.Position, "created_at": Stamp(c.CreatedAt),
		"overwrite_list": overwritesData(overwrites, true), "children": nonNil(children)}
	if c.Kind == model.KindCategory {
		data["channels"] = len(children) // left outside any category
	}
	return data
}

// KeptChannelRefs is a list of event data naming channels (IDs, or objects
// with a channel_id) without those hidden; ok is false when none is.
func KeptChannelRefs(v any, hidden func(any) bool) (kept []any, ok bool) {
	var list []any
	switch l := v.(type) {
	case []any:
		list = l
	case []string:
		for _, x := range l {
			list = append(list, x)
		}
	case []map[string]any:
		for _, x := range l {
			list = append(list, x)
		}
	default:
		return nil, false
	}
	kept = make([]any, 0, len(list))
	for _, x := range list {
		ref := x
		if m, isObj := x.(map[string]any); isObj {
			ref = m["channel_id"]
		}
		if !hidden(ref) {
			kept = append(kept, x)
		}
	}
	return kept, len(kept) < len(list)
}

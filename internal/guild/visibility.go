package guild

import (
	"maps"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// docs/design.md §12 "Non-disclosure": a channel the caller cannot view is answered
// exactly like a missing one, in every operation, so that a refusal never
// tells that a hidden channel exists.

// seesOf are the base permissions with which one may know of every channel:
// those who manage channels or their overwrites (and the owner, and
// ADMINISTRATOR, who hold everything).
var seesOf = permissions.Of(permissions.ManageChannels, permissions.ManageRoles)

// knows reports whether the caller may learn that the channel exists:
// VIEW_CHANNEL in it, or a base permission that manages channels.
func (a *Actor) knows(channelID string) bool {
	return a.knowsEveryChannel() || a.In(channelID).Has(permissions.ViewChannel)
}

// knowsEveryChannel reports whether the caller may know of every channel:
// the owner, ADMINISTRATOR, and who manages channels or their overwrites.
func (a *Actor) knowsEveryChannel() bool {
	if a.IsOwner {
		return true
	}
	base := a.Base()
	return base.Has(permissions.Administrator) || !base.Intersect(seesOf).IsEmpty()
}

// hideChannel is the answer for a channel that exists: nothing, or, when the
// caller may not know of it, the store's answer for a missing channel.
func (a *Actor) hideChannel(channelID string) error {
	if a.knows(channelID) {
		return nil
	}
	return channelNotFound(channelID)
}

// channelNotFound is word for word what the store says of a missing channel.
func channelNotFound(id string) error { return apperr.NotFound("Channel %q does not exist.", id) }

// shown is a channel as the caller may see it: a category they may not know
// of is not named (parent_id null, not synced), so that no answer holds the
// ID of a channel hidden from them.
func (a *Actor) shown(c model.Channel) model.Channel {
	if c.ParentID != nil && !a.knowsExisting(*c.ParentID) {
		c.ParentID, c.Synced = nil, false
	}
	return c
}

// knowsExisting is knows for a channel that must exist now: a deleted one
// is known to no one who cannot know every channel.
func (a *Actor) knowsExisting(channelID string) bool {
	if a.knowsEveryChannel() {
		return true
	}
	_, ok := a.auth.Channel(channelID)
	return ok && a.knows(channelID)
}

// redactChannelRefs returns an event's data without the channels the
// caller may not know of: the category of a move (parent_id, before and
// after) and the category a synced change came from (synced_from) become
// null. The data is copied where it changes; events are shared.
func (a *Actor) redactChannelRefs(data map[string]any) map[string]any {
	hidden := func(v any) bool {
		id, ok := v.(string)
		return ok && !a.knowsExisting(id)
	}
	var out map[string]any
	set := func(k string, v any) {
		if out == nil {
			out = maps.Clone(data)
		}
		out[k] = v
	}
	for _, k := range []string{"synced_from", "parent_id"} {
		if hidden(data[k]) {
			set(k, nil)
		}
	}
	for _, k := range []string{"before", "after"} {
		if m, ok := data[k].(map[string]any); ok && hidden(m["parent_id"]) {
			m = maps.Clone(m)
			m["parent_id"] = nil
			set(k, m)
		}
	}
	if out == nil {
		return data
	}
	return out
}

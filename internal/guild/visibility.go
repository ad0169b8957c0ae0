package guild

import (
	"github.com/guildhall/guildhall/internal/apperr"
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
	if a.IsOwner {
		return true
	}
	if base := a.Base(); base.Has(permissions.Administrator) || !base.Intersect(seesOf).IsEmpty() {
		return true
	}
	return a.In(channelID).Has(permissions.ViewChannel)
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

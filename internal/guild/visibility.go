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

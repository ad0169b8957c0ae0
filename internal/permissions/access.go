package permissions

import "slices"

// Access answers "who holds p in this channel?" as a question about roles
// rather than members, so that a store can find the holders among a few
// roles' members instead of computing every member's permissions.
//
// A member's effective permission in a channel (InChannel) depends on
// nothing but whether they are the owner, whether they are timed out,
// their own overwrite in the channel and which roles they hold. Each bit
// goes through the overwrites on its own, so a member holds p exactly when
// they hold, after the overwrites, each bit p needs: p itself,
// VIEW_CHANNEL, and SEND_MESSAGES for what step 6 ties to it. Holding a
// bit b is a matter of roles:
//
//	b = (some role's overwrite allows b) or (no role's overwrite denies b
//	    and (everyone's overwrite allows b
//	         or (b is global or in some role's permissions) and everyone's does not deny it))
//
// When a member with no role holds p (Everyone), most members do: the
// store walks members in order and checks each. When not, some needed bit
// b is missing without roles, and a member holds it only through a role
// whose overwrite allows b, a role that holds b (when the everyone
// overwrite does not deny it) or a role with ADMINISTRATOR. Through lists
// the roles of the needed bit with the fewest such roles: every holder of
// p who is not the owner and has no overwrite of their own in the channel
// holds one of them. Holding one is necessary, not sufficient (another
// role may deny, a timeout may cut): the store reads those roles' members
// and the owner and the members with their own overwrite, and InChannel
// decides for each.
type Access struct {
	Permission Permission
	// Everyone: a member with no role, no overwrite of their own and no
	// timeout holds Permission.
	Everyone bool
	// Through: when not Everyone, the roles one of which every other
	// holder holds (sorted; none when no role can grant it).
	Through []string
}

// AccessIn derives Access for p, a channel-scoped permission, in channel
// c (its User overwrite is ignored: it is each member's own) of a
// community whose global permissions are global and whose roles are
// roles.
func AccessIn(global Set, roles []Role, c Channel, p Permission) Access {
	out := Access{Permission: p}
	c.User = Overwrite{}
	if InChannel(Subject{Global: global}, c).Has(p) {
		out.Everyone = true
		return out
	}
	if Base(Subject{Global: global}).Has(Administrator) {
		out.Everyone = true // unreachable: global permissions never hold it
		return out
	}
	var admins []string
	for _, r := range roles {
		if (r.Permissions & All).Has(Administrator) {
			admins = append(admins, r.ID)
		}
	}
	needed := Of(p, ViewChannel)
	if needsSend.Has(p) {
		needed |= Of(SendMessages)
	}
	var best []string
	found := false
	for _, b := range needed.Permissions() {
		if holdsWithoutRoles(global, c.Everyone, b) {
			continue
		}
		through := slices.Clone(admins)
		for _, r := range roles {
			if !c.Everyone.Deny.Has(b) && r.Permissions.Has(b) {
				through = append(through, r.ID)
			}
		}
		for _, o := range c.Roles {
			if (o.Allow & ChannelScoped).Has(b) {
				through = append(through, o.RoleID)
			}
		}
		if !found || len(through) < len(best) {
			best, found = through, true
		}
	}
	slices.Sort(best)
	out.Through = slices.Compact(best)
	return out
}

// holdsWithoutRoles reports whether a member with no role holds bit b
// after the everyone overwrite (before step 6).
func holdsWithoutRoles(global Set, everyone Overwrite, b Permission) bool {
	return everyone.apply(global & ChannelScoped).Has(b)
}

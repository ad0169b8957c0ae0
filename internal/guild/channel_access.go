package guild

import (
	"context"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// Who holds a permission in a channel: the users whose effective
// permissions there (UserPermissions, one by one) hold it, paged in the
// order of their lower-cased usernames. The permission engine says
// through which roles the permission can come (permissions.AccessIn); the
// store reads, in name order, either every user (when a member with no
// role holds it, so most do) or those roles' holders, the users with an
// overwrite of their own in the channel and the owner; and each user read
// is judged by InChannel, exactly as when asked alone.

const (
	// maxAccessRead bounds the users a page reads: where few in a row
	// hold the permission, the page ends short, even empty, with a
	// cursor to go on from.
	maxAccessRead = 2000
	// maxAccessRoles is the most roles a page reads the holders of, n of
	// each; a permission that comes through more (most roles grant it)
	// is read from every user instead.
	maxAccessRoles = 64
)

// ChannelAccess pages through the users who hold permission ("" for
// VIEW_CHANNEL), a channel-scoped permission, in a channel the caller may
// know of.
func (s *Service) ChannelAccess(ctx context.Context, a *Actor, channelID, permission, rawCursor string, limit int) (Page[model.User], error) {
	p, err := AccessPermission(permission)
	if err != nil {
		return Page[model.User]{}, err
	}
	filters := []string{"channel access", channelID, p.String()}
	after, err := s.cursors.Decode(rawCursor, filters...)
	if err != nil {
		return Page[model.User]{}, err
	}
	if _, ok := a.known(channelID); !ok {
		return Page[model.User]{}, channelNotFound(channelID)
	}
	if err := a.authorize(OpListChannelAccess); err != nil {
		return Page[model.User]{}, err
	}
	users, next, err := s.holders(ctx, a, channelID, p, after, pageLimit(limit))
	if err != nil {
		return Page[model.User]{}, err
	}
	return s.userPage(a, users, next, filters), nil
}

// AccessPermission is the permission an access question names ("" for
// VIEW_CHANNEL): a channel-scoped one, else a 400.
func AccessPermission(permission string) (permissions.Permission, error) {
	p := permissions.ViewChannel
	if permission != "" {
		var ok bool
		if p, ok = permissions.ByName(permission); !ok {
			return 0, apperr.Invalid("permission", "unknown permission %q", permission)
		}
	}
	if !permissions.ChannelScoped.Has(p) {
		return 0, apperr.Invalid("permission",
			"%s is not channel-scoped: no one holds it in a channel; ask about a permission an overwrite can hold", p)
	}
	return p, nil
}

// holders reads up to n users who hold p in a channel after the position
// after, and the position the next page goes on from ("" at the end).
func (s *Service) holders(ctx context.Context, a *Actor, channelID string, p permissions.Permission, after string, n int) ([]model.User, string, error) {
	h := holdersOf(a.auth, channelID, p)
	out := make([]model.User, 0, min(n+1, 64))
	var outKeys []string
	read, want := 0, n+1
	for {
		users, keys, err := s.store.HoldersPage(ctx, h, after, want)
		if err != nil {
			return nil, "", err
		}
		for i, u := range users {
			after = keys[i]
			sub := subjectOf(a.auth, u.IsOwner, u.Roles, u.TimeoutUntil, a.now)
			if !permissions.InChannel(sub, a.auth.ChannelFor(channelID, u.ID)).Has(p) {
				continue
			}
			out, outKeys = append(out, u), append(outKeys, keys[i])
			if len(out) > n {
				return out[:n], outKeys[n-1], nil
			}
		}
		read += len(users)
		switch {
		case len(users) < want:
			return out, "", nil // every candidate read
		case read >= maxAccessRead:
			return out, after, nil
		}
		want = min(2*want, maxAccessRead-read)
	}
}

// holdersOf says whose users may hold p in a channel (permissions.AccessIn):
// everyone, or the holders of the roles it can come through, the users
// with an overwrite of their own there, and the owner.
func holdersOf(auth *store.AuthState, channelID string, p permissions.Permission) store.Holders {
	global, _ := auth.Global()
	all := auth.Roles()
	roles := make([]permissions.Role, len(all))
	for i, r := range all {
		roles[i] = permissions.Role{ID: r.ID, Permissions: r.Permissions}
	}
	acc := permissions.AccessIn(global, roles, auth.ChannelFor(channelID, ""), p)
	if acc.Everyone || len(acc.Through) > maxAccessRoles {
		return store.Holders{Everyone: true}
	}
	h := store.Holders{Roles: acc.Through}
	overwrites, _, _ := auth.Overwrites(channelID)
	for _, o := range overwrites {
		if o.TargetType == model.TargetUser {
			h.Users = append(h.Users, o.TargetID)
		}
	}
	return h
}

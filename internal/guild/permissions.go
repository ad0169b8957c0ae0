package guild

import (
	"context"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// Catalog is the permission catalog.
func (s *Service) Catalog(_ context.Context, a *Actor) ([]permissions.Info, error) {
	if err := a.authorize(opListPermissions); err != nil {
		return nil, err
	}
	return permissions.Catalog(), nil
}

// GlobalPermissions returns the global permissions and their version.
func (s *Service) GlobalPermissions(_ context.Context, a *Actor) (permissions.Set, int64, error) {
	if err := a.authorize(opGetGlobalPermissions); err != nil {
		return 0, 0, err
	}
	global, version := a.auth.Global()
	return global, version, nil
}

// SetGlobalPermissions replaces the global permissions (ADMINISTRATOR only;
// ADMINISTRATOR itself can never be global).
func (s *Service) SetGlobalPermissions(ctx context.Context, a *Actor, perms permissions.Set, o WriteOpts) (permissions.Set, int64, error) {
	if perms.Has(permissions.Administrator) {
		return 0, 0, apperr.Invalid("permissions", "ADMINISTRATOR cannot be a global permission")
	}
	var out permissions.Set
	var version int64
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opReplaceGlobalPermissions); err != nil {
			return err
		}
		global, globalVersion, err := tx.Settings(ctx)
		if err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(globalVersion)); err != nil {
			return err
		}
		if global == perms {
			out, version = global, globalVersion
			return nil
		}
		if err := tx.SetGlobal(ctx, perms); err != nil {
			return err
		}
		out, version = perms, globalVersion+1
		return emit(ctx, tx, a, o, "global.permissions.set", "global:permissions", map[string]any{
			"before": global.Names(), "after": perms.Names()})
	})
	return out, version, err
}

// UserPermissions is the answer of GET /users/{id}/permissions.
type UserPermissions struct {
	UserID      string
	ChannelID   *string
	Permissions permissions.Set
	Explain     []permissions.Explanation // only when asked
}

// UserPermissions computes a user's base permissions, or their effective
// permissions in a channel, optionally with the provenance of each.
func (s *Service) UserPermissions(ctx context.Context, a *Actor, userID string, channelID *string, explain bool) (UserPermissions, error) {
	// An unknown channel is a 400 (the query is invalid), which docs/design.md §11
	// puts before the 404 of the path's user; a channel hidden from the
	// caller is unknown too (docs/design.md §12).
	if channelID != nil {
		if _, ok := a.known(*channelID); !ok {
			return UserPermissions{}, apperr.Invalid("channelID", "no channel with ID %q", *channelID)
		}
	}
	u, err := s.store.User(ctx, userID)
	if err != nil {
		return UserPermissions{}, err
	}
	if err := a.authorizeOn(OpGetUserPermissions, userID); err != nil {
		return UserPermissions{}, err
	}
	sub := subjectOf(a.auth, u.IsOwner, u.Roles, u.TimeoutUntil, a.now)
	out := UserPermissions{UserID: userID, ChannelID: channelID}
	if channelID == nil {
		out.Permissions = permissions.Base(sub)
		if explain {
			out.Explain = permissions.Explain(sub, nil)
		}
		return out, nil
	}
	ch := a.auth.ChannelFor(*channelID, userID)
	if ch.SyncedFrom != "" && !a.knowsExisting(ch.SyncedFrom) {
		ch.SyncedFrom = "" // explain does not name a category hidden from the caller
	}
	out.Permissions = permissions.InChannel(sub, ch)
	if explain {
		out.Explain = permissions.Explain(sub, &ch)
	}
	return out, nil
}

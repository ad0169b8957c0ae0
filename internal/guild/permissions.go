package guild

import (
	"context"
	"sync"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// Catalog is the permission catalog.
func (s *Service) Catalog() []permissions.Info { return permissions.Catalog() }

// GlobalPermissions returns the global permissions and their version.
func (s *Service) GlobalPermissions(ctx context.Context, _ *Actor) (permissions.Set, int64, error) {
	st, err := s.store.Settings(ctx)
	return st.Global, st.GlobalVersion, err
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
		if err := a.require(permissions.Of(permissions.Administrator)); err != nil {
			return err
		}
		st, err := tx.Settings(ctx)
		if err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(st.GlobalVersion)); err != nil {
			return err
		}
		if st.Global == perms {
			out, version = st.Global, st.GlobalVersion
			return nil
		}
		if err := tx.SetGlobal(ctx, perms); err != nil {
			return err
		}
		out, version = perms, st.GlobalVersion+1
		return emit(ctx, tx, a, o, "global.permissions.set", "global:permissions", map[string]any{
			"before": st.Global.Names(), "after": perms.Names()})
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
	// puts before the 404 of the path's user. One statement reads both.
	chID := ""
	if channelID != nil {
		chID = *channelID
	}
	// A user's roles are read once per credentials version (any change of
	// anyone's roles moves it): the cost of the answer does not grow with
	// the number of roles the user holds.
	cached, cachedAt, hit := s.subjects.get(userID)
	u, err := s.store.PermissionSubject(ctx, userID, chID, !hit)
	if err != nil {
		return UserPermissions{}, err
	}
	if err := confirm(a, u.Versions); err != nil {
		return UserPermissions{}, err
	}
	if hit && u.UserExists && !u.RolesRead {
		if u.Versions.Credentials == cachedAt {
			u.Roles = cached
		} else if u, err = s.store.PermissionSubject(ctx, userID, chID, true); err != nil { // the cache is of another version
			return UserPermissions{}, err
		} else {
			hit = false
		}
	}
	if u.UserExists && (!hit || u.RolesRead && u.Versions.Credentials != cachedAt) {
		s.subjects.put(u.Versions.Credentials, userID, u.Roles)
	}
	// A channel hidden from the caller is unknown too (docs/design.md §12).
	if channelID != nil && (!u.ChannelExists || a.hideChannel(*channelID) != nil) {
		return UserPermissions{}, apperr.Invalid("channelID", "no channel with ID %q", *channelID)
	}
	if !u.UserExists {
		return UserPermissions{}, apperr.NotFound("User %q does not exist.", userID)
	}
	if a.UserID != userID {
		if err := a.require(manageRoles); err != nil {
			return UserPermissions{}, err
		}
	}
	snap := a.snap
	sub := snap.subjectOf(u.IsOwner, u.Roles)
	out := UserPermissions{UserID: userID, ChannelID: channelID}
	if channelID == nil {
		out.Permissions = permissions.Base(sub)
		if explain {
			out.Explain = permissions.Explain(sub, nil)
		}
		return out, nil
	}
	ch := snap.channelOf(*channelID, userID)
	out.Permissions = permissions.InChannel(sub, ch)
	if explain {
		out.Explain = permissions.Explain(sub, &ch)
	}
	return out, nil
}

// subjectCache keeps users' role IDs as of one credentials version, for the
// permissions of users other than the caller (the caller's own are in the
// credentials cache).
type subjectCache struct {
	mu      sync.Mutex
	version int64
	m       map[string][]string
}

// maxCachedSubjects bounds the cache; past it, it starts again.
const maxCachedSubjects = 4096

func (c *subjectCache) get(userID string) ([]string, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	roles, ok := c.m[userID]
	return roles, c.version, ok
}

func (c *subjectCache) put(version int64, userID string, roles []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case version < c.version:
		return
	case version > c.version || c.m == nil || len(c.m) >= maxCachedSubjects:
		c.version, c.m = version, make(map[string][]string)
	}
	c.m[userID] = roles
}

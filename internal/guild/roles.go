package guild

import (
	"context"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// ListRoles returns every role, by position descending.
func (s *Service) ListRoles(_ context.Context, a *Actor) ([]model.Role, error) {
	if err := a.authorize(OpListRoles); err != nil {
		return nil, err
	}
	return a.auth.Roles(), nil
}

// GetRole returns one role.
func (s *Service) GetRole(_ context.Context, a *Actor, id string) (model.Role, error) {
	if err := a.authorize(opGetRole); err != nil {
		return model.Role{}, err
	}
	return a.role(id)
}

// role is a role of the caller's state, or the 404 of one that does not exist.
func (a *Actor) role(id string) (model.Role, error) {
	r, ok := a.auth.Role(id)
	if !ok {
		return model.Role{}, apperr.NotFound("Role %q does not exist.", id)
	}
	return r, nil
}

// CreateRole creates a role at position 1 (the bottom).
func (s *Service) CreateRole(ctx context.Context, a *Actor, id, name string, perms permissions.Set, color *string, o WriteOpts) (model.Role, error) {
	if err := checkName("name", &name); err != nil {
		return model.Role{}, err
	}
	var out model.Role
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opCreateRole); err != nil {
			return err
		}
		if err := a.canCreateRole(id); err != nil {
			return err
		}
		if err := a.canGrant(perms); err != nil {
			return err
		}
		n, err := tx.CountRoles(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.GetRole(ctx, id); err == nil {
			return apperr.Conflict("Role %q already exists.", id)
		}
		if n >= s.limits.MaxRoles {
			return apperr.LimitExceeded("roles", s.limits.MaxRoles, "roles")
		}
		now := s.now()
		if out, err = tx.InsertRole(ctx, model.Role{ID: id, Name: name, Color: color, Permissions: perms, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "role.created", "role:"+id, map[string]any{
			"name": name, "position": out.Position, "color": color, "permissions": perms.Names(), "created_at": history.Stamp(out.CreatedAt), "shifts": true})
	})
	return out, err
}

// RolePatch is a merge patch of a role: nil fields stay.
type RolePatch struct {
	Name     *string
	SetColor bool
	Color    *string
}

// UpdateRole applies a merge patch.
func (s *Service) UpdateRole(ctx context.Context, a *Actor, id string, p RolePatch, o WriteOpts) (model.Role, error) {
	if err := checkName("name", p.Name); err != nil {
		return model.Role{}, err
	}
	return s.changeRole(ctx, a, opUpdateRole, id, o, func(r *model.Role) {
		if p.Name != nil {
			r.Name = *p.Name
		}
		if p.SetColor {
			r.Color = p.Color
		}
	}, roleUpdated)
}

// RenameRole sets a role's name.
func (s *Service) RenameRole(ctx context.Context, a *Actor, id, name string, o WriteOpts) (model.Role, error) {
	if err := checkName("name", &name); err != nil {
		return model.Role{}, err
	}
	return s.changeRole(ctx, a, opRenameRole, id, o, func(r *model.Role) { r.Name = name }, roleRenamed)
}

// The audit events of a role's change: the type and its data.
func roleUpdated(before, after model.Role) (string, map[string]any) {
	return "role.updated", map[string]any{"before": map[string]any{"name": before.Name, "color": before.Color},
		"after": map[string]any{"name": after.Name, "color": after.Color}}
}

func roleRenamed(before, after model.Role) (string, map[string]any) {
	return "role.renamed", map[string]any{"before": before.Name, "after": after.Name}
}

// changeRole applies change to a role the caller may manage for op, and
// records the change as audit says; a change that changes nothing is a
// no-op.
func (s *Service) changeRole(ctx context.Context, a *Actor, op Op, id string, o WriteOpts, change func(*model.Role),
	audit func(before, after model.Role) (string, map[string]any)) (model.Role, error) {
	var out model.Role
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		r, err := s.manageableRole(ctx, tx, a, op, id)
		if err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(r.Version)); err != nil {
			return err
		}
		next := r
		change(&next)
		if next.Name == r.Name && eqPtr(next.Color, r.Color) {
			out = r
			return nil
		}
		next.UpdatedAt = s.now()
		if out, err = tx.UpdateRole(ctx, next); err != nil {
			return err
		}
		typ, data := audit(r, next)
		return emit(ctx, tx, a, o, typ, "role:"+id, data)
	})
	return out, err
}

// manageableRole loads a role (404) and checks op's row and that the role
// is below the caller (403).
func (s *Service) manageableRole(ctx context.Context, tx *store.Tx, a *Actor, op Op, id string) (model.Role, error) {
	r, err := tx.GetRole(ctx, id)
	if err != nil {
		return model.Role{}, err
	}
	if err := a.authorize(op); err != nil {
		return model.Role{}, err
	}
	if err := a.canManageRole(r); err != nil {
		return model.Role{}, err
	}
	return r, nil
}

// MoveRole places a role at a position 1..N.
func (s *Service) MoveRole(ctx context.Context, a *Actor, id string, position int, o WriteOpts) (model.Role, error) {
	var out model.Role
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		n, err := tx.CountRoles(ctx)
		if err != nil {
			return err
		}
		if position < 1 || position > n {
			return apperr.Invalid("position", "must be between 1 and %d, the number of roles", max(n, 1))
		}
		r, err := s.manageableRole(ctx, tx, a, opMoveRole, id)
		if err != nil {
			return err
		}
		if err := a.canMoveRoleTo(id, position); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(r.Version)); err != nil {
			return err
		}
		if position == r.Position {
			out = r
			return nil
		}
		if out, err = tx.MoveRole(ctx, id, r.Position, position, s.now()); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "role.moved", "role:"+id, map[string]any{"before": r.Position, "after": position, "shifts": true})
	})
	return out, err
}

// DeleteRole deletes a role, taking it from users and overwrites.
func (s *Service) DeleteRole(ctx context.Context, a *Actor, id string, o WriteOpts) error {
	return s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		r, err := tx.GetRole(ctx, id)
		if err != nil {
			return err
		}
		overwrites, err := tx.OverwritesOf(ctx, model.TargetRole, id)
		if err != nil {
			return err
		}
		highHolder := func() (model.User, bool, error) {
			return tx.RoleHolderAtOrAbove(ctx, r.ID, a.UserID, a.Top())
		}
		if err := a.canDeleteRole(opDeleteRole, r, overwrites, highHolder); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(r.Version)); err != nil {
			return err
		}
		holders, err := tx.DeleteRole(ctx, r, s.now())
		if err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "role.deleted", "role:"+id, history.RoleDeleted(r, holders, overwrites, true))
	})
}

// RolePermissions returns a role's permissions and version.
func (s *Service) RolePermissions(_ context.Context, a *Actor, id string) (permissions.Set, int64, error) {
	if err := a.authorize(opGetRolePermissions); err != nil {
		return 0, 0, err
	}
	r, err := a.role(id)
	return r.Permissions, r.Version, err
}

// SetRolePermissions replaces a role's permissions.
func (s *Service) SetRolePermissions(ctx context.Context, a *Actor, id string, perms permissions.Set, o WriteOpts) (model.Role, error) {
	return s.changeRolePermissions(ctx, a, opReplaceRolePermissions, id, o, func(permissions.Set) permissions.Set { return perms })
}

// AddRolePermissions adds to a role's permissions (legacy add_perm).
func (s *Service) AddRolePermissions(ctx context.Context, a *Actor, id string, perms permissions.Set, o WriteOpts) (model.Role, error) {
	return s.changeRolePermissions(ctx, a, opLegacyAddRolePermissions, id, o, func(old permissions.Set) permissions.Set { return old.Union(perms) })
}

// RemoveRolePermissions removes from a role's permissions (legacy remove_perm).
func (s *Service) RemoveRolePermissions(ctx context.Context, a *Actor, id string, perms permissions.Set, o WriteOpts) (model.Role, error) {
	return s.changeRolePermissions(ctx, a, opLegacyRemoveRolePermissions, id, o, func(old permissions.Set) permissions.Set { return old.Minus(perms) })
}

func (s *Service) changeRolePermissions(ctx context.Context, a *Actor, op Op, id string, o WriteOpts, next func(permissions.Set) permissions.Set) (model.Role, error) {
	var out model.Role
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		r, err := s.manageableRole(ctx, tx, a, op, id)
		if err != nil {
			return err
		}
		perms := next(r.Permissions)
		if err := a.canGrant(perms ^ r.Permissions); err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(r.Version)); err != nil {
			return err
		}
		if perms == r.Permissions {
			out = r
			return nil
		}
		updated := r
		updated.Permissions, updated.UpdatedAt = perms, s.now()
		if out, err = tx.UpdateRole(ctx, updated); err != nil {
			return err
		}
		return emit(ctx, tx, a, o, "role.permissions.set", "role:"+id, map[string]any{
			"before": r.Permissions.Names(), "after": perms.Names()})
	})
	return out, err
}

// ListUserRoles returns a user's roles, by position descending.
func (s *Service) ListUserRoles(ctx context.Context, a *Actor, userID string) ([]model.Role, error) {
	if err := a.authorize(opListUserRoles); err != nil {
		return nil, err
	}
	u, err := s.store.User(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]model.Role, 0, len(u.Roles))
	for _, id := range u.Roles { // by position descending
		if r, ok := a.auth.Role(id); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// AssignRole gives a user a role; assigning a role the user has is a quiet success.
func (s *Service) AssignRole(ctx context.Context, a *Actor, userID, roleID string, o WriteOpts) error {
	return s.changeUserRole(ctx, a, opAssignUserRole, userID, roleID, o, true)
}

// RemoveRole takes a role from a user; removing a role the user lacks is a quiet success.
func (s *Service) RemoveRole(ctx context.Context, a *Actor, userID, roleID string, o WriteOpts) error {
	return s.changeUserRole(ctx, a, opRemoveUserRole, userID, roleID, o, false)
}

func (s *Service) changeUserRole(ctx context.Context, a *Actor, op Op, userID, roleID string, o WriteOpts, assign bool) error {
	return s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		u, err := tx.GetUser(ctx, userID)
		if err != nil {
			return err
		}
		r, err := s.manageableRole(ctx, tx, a, op, roleID)
		if err != nil {
			return err
		}
		if err := a.canChangeRolesOf(u); err != nil {
			return err
		}
		// Assigning (or taking) a role grants (or revokes) its permissions.
		if err := a.canGrant(r.Permissions); err != nil {
			return err
		}
		now := s.now()
		var changed bool
		if assign {
			changed, err = tx.AddUserRole(ctx, userID, roleID, now)
		} else {
			changed, err = tx.RemoveUserRole(ctx, userID, roleID, now)
		}
		if err != nil || !changed {
			return err
		}
		after, err := tx.GetUser(ctx, userID)
		if err != nil {
			return err
		}
		typ := "user.role.removed"
		if assign {
			typ = "user.role.assigned"
		}
		return emit(ctx, tx, a, o, typ, "user:"+userID, map[string]any{
			"role_id": roleID, "before": u.Roles, "after": after.Roles})
	})
}

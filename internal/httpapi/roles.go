package httpapi

import (
	"context"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// ListRoles implements GET /roles.
func (h *Handler) ListRoles(ctx context.Context, req api.ListRolesRequestObject) (api.ListRolesResponseObject, error) {
	a := actorOf(ctx)
	var roles []model.Role
	var err error
	if at := req.Params.At; at != nil {
		roles, err = h.asof.Roles(ctx, a, *at)
	} else {
		roles, err = h.svc.ListRoles(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	return api.ListRoles200JSONResponse{Body: toRoles(roles)}, nil
}

// GetRole implements GET /roles/{roleID}.
func (h *Handler) GetRole(ctx context.Context, req api.GetRoleRequestObject) (api.GetRoleResponseObject, error) {
	a := actorOf(ctx)
	r, err := h.svc.GetRole(ctx, a, req.RoleID)
	if err != nil {
		return nil, err
	}
	return api.GetRole200JSONResponse{Body: toRole(r), Headers: api.GetRole200ResponseHeaders{ETag: ptr(etag(r.Version))}}, nil
}

// UpdateRole implements PATCH /roles/{roleID}.
func (h *Handler) UpdateRole(ctx context.Context, req api.UpdateRoleRequestObject) (api.UpdateRoleResponseObject, error) {
	a := actorOf(ctx)
	color, setColor := optional(req.Body.Color)
	r, err := h.svc.UpdateRole(ctx, a, req.RoleID, guild.RolePatch{Name: req.Body.Name, SetColor: setColor, Color: color},
		opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.UpdateRole200JSONResponse{Body: toRole(r), Headers: api.UpdateRole200ResponseHeaders{ETag: ptr(etag(r.Version))}}, nil
}

// CreateRole implements POST /roles/{roleID}/create.
func (h *Handler) CreateRole(ctx context.Context, req api.CreateRoleRequestObject) (api.CreateRoleResponseObject, error) {
	a := actorOf(ctx)
	var perms permissions.Set
	if req.Body.Permissions != nil {
		var err error
		if perms, err = parsePermissions(*req.Body.Permissions, "body.permissions"); err != nil {
			return nil, err
		}
	}
	color, _ := optional(req.Body.Color)
	r, err := h.svc.CreateRole(ctx, a, req.RoleID, req.Body.Name, perms, color, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.CreateRole201JSONResponse{Body: toRole(r), Headers: api.CreateRole201ResponseHeaders{
		ETag: ptr(etag(r.Version)), Location: ptr("/api/roles/" + r.ID)}}, nil
}

// RenameRole implements POST /roles/{roleID}/rename.
func (h *Handler) RenameRole(ctx context.Context, req api.RenameRoleRequestObject) (api.RenameRoleResponseObject, error) {
	a := actorOf(ctx)
	r, err := h.svc.RenameRole(ctx, a, req.RoleID, req.Body.Name, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.RenameRole200JSONResponse{Body: toRole(r), Headers: api.RenameRole200ResponseHeaders{ETag: ptr(etag(r.Version))}}, nil
}

// MoveRole implements POST /roles/{roleID}/move.
func (h *Handler) MoveRole(ctx context.Context, req api.MoveRoleRequestObject) (api.MoveRoleResponseObject, error) {
	a := actorOf(ctx)
	r, err := h.svc.MoveRole(ctx, a, req.RoleID, req.Body.Position, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.MoveRole200JSONResponse{Body: toRole(r), Headers: api.MoveRole200ResponseHeaders{ETag: ptr(etag(r.Version))}}, nil
}

// DeleteRole implements POST /roles/{roleID}/delete.
func (h *Handler) DeleteRole(ctx context.Context, req api.DeleteRoleRequestObject) (api.DeleteRoleResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteRole(ctx, a, req.RoleID, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteRole204Response{}, nil
}

// GetRolePermissions implements GET /roles/{roleID}/permissions.
func (h *Handler) GetRolePermissions(ctx context.Context, req api.GetRolePermissionsRequestObject) (api.GetRolePermissionsResponseObject, error) {
	a := actorOf(ctx)
	perms, v, err := h.svc.RolePermissions(ctx, a, req.RoleID)
	if err != nil {
		return nil, err
	}
	return api.GetRolePermissions200JSONResponse{Body: api.PermissionList{Permissions: names(perms)},
		Headers: api.GetRolePermissions200ResponseHeaders{ETag: ptr(etag(v))}}, nil
}

// ReplaceRolePermissions implements PUT /roles/{roleID}/permissions.
func (h *Handler) ReplaceRolePermissions(ctx context.Context, req api.ReplaceRolePermissionsRequestObject) (api.ReplaceRolePermissionsResponseObject, error) {
	list, tag, err := h.changeRolePermissions(ctx, req.RoleID, req.Body.Permissions, req.Params.IfMatch, req.Params.XAuditReason, h.svc.SetRolePermissions)
	if err != nil {
		return nil, err
	}
	return api.ReplaceRolePermissions200JSONResponse{Body: list, Headers: api.ReplaceRolePermissions200ResponseHeaders{ETag: &tag}}, nil
}

// The four deprecated operations behave exactly like their successors. Their
// Deprecation and Link headers are the legacy middlewares' (on every answer,
// errors included), so their typed responses leave them unset.

// LegacyAddRolePermissions implements the deprecated POST /roles/{roleID}/add_perm.
func (h *Handler) LegacyAddRolePermissions(ctx context.Context, req api.LegacyAddRolePermissionsRequestObject) (api.LegacyAddRolePermissionsResponseObject, error) {
	list, tag, err := h.changeRolePermissions(ctx, req.RoleID, req.Body.Permissions, req.Params.IfMatch, req.Params.XAuditReason, h.svc.AddRolePermissions)
	if err != nil {
		return nil, err
	}
	return api.LegacyAddRolePermissions200JSONResponse{Body: list, Headers: api.LegacyAddRolePermissions200ResponseHeaders{ETag: &tag}}, nil
}

// LegacyRemoveRolePermissions implements the deprecated POST /roles/{roleID}/remove_perm.
func (h *Handler) LegacyRemoveRolePermissions(ctx context.Context, req api.LegacyRemoveRolePermissionsRequestObject) (api.LegacyRemoveRolePermissionsResponseObject, error) {
	list, tag, err := h.changeRolePermissions(ctx, req.RoleID, req.Body.Permissions, req.Params.IfMatch, req.Params.XAuditReason, h.svc.RemoveRolePermissions)
	if err != nil {
		return nil, err
	}
	return api.LegacyRemoveRolePermissions200JSONResponse{Body: list, Headers: api.LegacyRemoveRolePermissions200ResponseHeaders{ETag: &tag}}, nil
}

// changeRolePermissions runs a change of a role's permissions (replace,
// add or remove) and returns the role's list and ETag after it.
func (h *Handler) changeRolePermissions(ctx context.Context, roleID string, list api.PermissionNames, ifMatch, reason *string,
	change func(context.Context, *guild.Actor, string, permissions.Set, guild.WriteOpts) (model.Role, error)) (api.PermissionList, string, error) {
	perms, err := parsePermissions(list, "body.permissions")
	if err != nil {
		return api.PermissionList{}, "", err
	}
	r, err := change(ctx, actorOf(ctx), roleID, perms, opts(ifMatch, reason))
	if err != nil {
		return api.PermissionList{}, "", err
	}
	return api.PermissionList{Permissions: names(r.Permissions)}, etag(r.Version), nil
}

// LegacyAddRoleUser implements the deprecated POST /roles/{roleID}/add_user.
func (h *Handler) LegacyAddRoleUser(ctx context.Context, req api.LegacyAddRoleUserRequestObject) (api.LegacyAddRoleUserResponseObject, error) {
	if err := h.svc.AssignRole(ctx, actorOf(ctx), req.Body.UserId, req.RoleID, opts(nil, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.LegacyAddRoleUser204Response{}, nil
}

// LegacyRemoveRoleUser implements the deprecated POST /roles/{roleID}/remove_user.
func (h *Handler) LegacyRemoveRoleUser(ctx context.Context, req api.LegacyRemoveRoleUserRequestObject) (api.LegacyRemoveRoleUserResponseObject, error) {
	if err := h.svc.RemoveRole(ctx, actorOf(ctx), req.Body.UserId, req.RoleID, opts(nil, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.LegacyRemoveRoleUser204Response{}, nil
}

// ListUserRoles implements GET /users/{userID}/roles.
func (h *Handler) ListUserRoles(ctx context.Context, req api.ListUserRolesRequestObject) (api.ListUserRolesResponseObject, error) {
	a := actorOf(ctx)
	roles, err := h.svc.ListUserRoles(ctx, a, req.UserID)
	if err != nil {
		return nil, err
	}
	return api.ListUserRoles200JSONResponse{Body: toRoles(roles)}, nil
}

// AssignUserRole implements POST /users/{userID}/roles/{roleID}.
func (h *Handler) AssignUserRole(ctx context.Context, req api.AssignUserRoleRequestObject) (api.AssignUserRoleResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.AssignRole(ctx, a, req.UserID, req.RoleID, opts(nil, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.AssignUserRole204Response{}, nil
}

// RemoveUserRole implements DELETE /users/{userID}/roles/{roleID}.
func (h *Handler) RemoveUserRole(ctx context.Context, req api.RemoveUserRoleRequestObject) (api.RemoveUserRoleResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.RemoveRole(ctx, a, req.UserID, req.RoleID, opts(nil, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.RemoveUserRole204Response{}, nil
}

// ListRoleMembers implements GET /roles/{roleID}/members.
func (h *Handler) ListRoleMembers(ctx context.Context, req api.ListRoleMembersRequestObject) (api.ListRoleMembersResponseObject, error) {
	a := actorOf(ctx)
	page, err := h.svc.ListRoleMembers(ctx, a, req.RoleID, deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.UserList{Items: make([]api.User, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, u := range page.Items {
		out.Items[i] = toUser(u)
	}
	return api.ListRoleMembers200JSONResponse{Body: out}, nil
}

// ChangeRoleMembers implements POST /roles/{roleID}/members.
func (h *Handler) ChangeRoleMembers(ctx context.Context, req api.ChangeRoleMembersRequestObject) (api.ChangeRoleMembersResponseObject, error) {
	a := actorOf(ctx)
	res, err := h.svc.ChangeRoleMembers(ctx, a, req.RoleID, guild.MembersChange{Add: deref(req.Body.Add), Remove: deref(req.Body.Remove)},
		opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.ChangeRoleMembers200JSONResponse{Body: api.RoleMembersResult{Added: res.Added, Removed: res.Removed}}, nil
}

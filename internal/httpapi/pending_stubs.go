package httpapi

import (
	"context"
	"errors"

	"github.com/guildhall/guildhall/gen/api"
)

// Placeholders until the second release's operations land on main.
var errPending = errors.New("not implemented yet")

func (h *Handler) ChangeRoleMembers(context.Context, api.ChangeRoleMembersRequestObject) (api.ChangeRoleMembersResponseObject, error) {
	return nil, errPending
}
func (h *Handler) ListRoleMembers(context.Context, api.ListRoleMembersRequestObject) (api.ListRoleMembersResponseObject, error) {
	return nil, errPending
}
func (h *Handler) PatchUser(context.Context, api.PatchUserRequestObject) (api.PatchUserResponseObject, error) {
	return nil, errPending
}
func (h *Handler) ReorderChannels(context.Context, api.ReorderChannelsRequestObject) (api.ReorderChannelsResponseObject, error) {
	return nil, errPending
}
func (h *Handler) PreviewPermissions(context.Context, api.PreviewPermissionsRequestObject) (api.PreviewPermissionsResponseObject, error) {
	return nil, errPending
}
func (h *Handler) ExportTemplate(context.Context, api.ExportTemplateRequestObject) (api.ExportTemplateResponseObject, error) {
	return nil, errPending
}
func (h *Handler) ImportTemplate(context.Context, api.ImportTemplateRequestObject) (api.ImportTemplateResponseObject, error) {
	return nil, errPending
}

package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/jsonfield"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/openapi"
)

// ListPermissions implements GET /permissions.
func (h *Handler) ListPermissions(ctx context.Context, _ api.ListPermissionsRequestObject) (api.ListPermissionsResponseObject, error) {
	cat, err := h.svc.Catalog(ctx, actorOf(ctx))
	if err != nil {
		return nil, err
	}
	out := api.PermissionCatalog{Items: make([]api.PermissionInfo, len(cat)), NextCursor: jsonfield.NewNullNullable[string]()}
	for i, p := range cat {
		scopes := make([]api.PermissionInfoScopes, len(p.Scopes))
		for j, s := range p.Scopes {
			scopes[j] = api.PermissionInfoScopes(s)
		}
		out.Items[i] = api.PermissionInfo{Name: api.PermissionName(p.Name), Description: p.Description, Scopes: scopes}
	}
	return api.ListPermissions200JSONResponse{Body: out}, nil
}

// GetGlobalPermissions implements GET /permissions/global.
func (h *Handler) GetGlobalPermissions(ctx context.Context, _ api.GetGlobalPermissionsRequestObject) (api.GetGlobalPermissionsResponseObject, error) {
	a := actorOf(ctx)
	perms, v, err := h.svc.GlobalPermissions(ctx, a)
	if err != nil {
		return nil, err
	}
	return api.GetGlobalPermissions200JSONResponse{Body: api.PermissionList{Permissions: names(perms)},
		Headers: api.GetGlobalPermissions200ResponseHeaders{ETag: ptr(etag(v))}}, nil
}

// ReplaceGlobalPermissions implements PUT /permissions/global.
func (h *Handler) ReplaceGlobalPermissions(ctx context.Context, req api.ReplaceGlobalPermissionsRequestObject) (api.ReplaceGlobalPermissionsResponseObject, error) {
	a := actorOf(ctx)
	perms, err := parsePermissions(req.Body.Permissions, "body.permissions")
	if err != nil {
		return nil, err
	}
	out, v, err := h.svc.SetGlobalPermissions(ctx, a, perms, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.ReplaceGlobalPermissions200JSONResponse{Body: api.PermissionList{Permissions: names(out)},
		Headers: api.ReplaceGlobalPermissions200ResponseHeaders{ETag: ptr(etag(v))}}, nil
}

// GetUserPermissions implements GET /users/{userID}/permissions.
func (h *Handler) GetUserPermissions(ctx context.Context, req api.GetUserPermissionsRequestObject) (api.GetUserPermissionsResponseObject, error) {
	a := actorOf(ctx)
	var p guild.UserPermissions
	var err error
	if at := req.Params.At; at != nil {
		p, err = h.asof.UserPermissions(ctx, a, req.UserID, req.Params.ChannelID, deref(req.Params.Explain), *at)
	} else {
		p, err = h.svc.UserPermissions(ctx, a, req.UserID, req.Params.ChannelID, deref(req.Params.Explain))
	}
	if err != nil {
		return nil, err
	}
	return api.GetUserPermissions200JSONResponse{Body: toUserPermissions(p)}, nil
}

// ListChannelAccess implements GET /channels/{channelID}/access.
func (h *Handler) ListChannelAccess(ctx context.Context, req api.ListChannelAccessRequestObject) (api.ListChannelAccessResponseObject, error) {
	a := actorOf(ctx)
	var page guild.Page[model.User]
	var err error
	if at := req.Params.At; at != nil {
		page, err = h.asof.ChannelAccess(ctx, a, req.ChannelID, string(deref(req.Params.Permission)),
			deref(req.Params.Cursor), deref(req.Params.Limit), *at)
	} else {
		page, err = h.svc.ChannelAccess(ctx, a, req.ChannelID, string(deref(req.Params.Permission)),
			deref(req.Params.Cursor), deref(req.Params.Limit))
	}
	if err != nil {
		return nil, err
	}
	out := api.UserList{Items: make([]api.User, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, u := range page.Items {
		out.Items[i] = toUser(u)
	}
	return api.ListChannelAccess200JSONResponse{Body: out}, nil
}

// GetProfileLinks implements GET /profile/link.
func (h *Handler) GetProfileLinks(ctx context.Context, _ api.GetProfileLinksRequestObject) (api.GetProfileLinksResponseObject, error) {
	a := actorOf(ctx)
	p, err := h.svc.ProfileLinks(ctx, a)
	if err != nil {
		return nil, err
	}
	return api.GetProfileLinks200JSONResponse{Body: api.ProfileLinks{Links: p.Links},
		Headers: api.GetProfileLinks200ResponseHeaders{ETag: ptr(etag(p.Version))}}, nil
}

// ReplaceProfileLinks implements PUT /profile/link.
func (h *Handler) ReplaceProfileLinks(ctx context.Context, req api.ReplaceProfileLinksRequestObject) (api.ReplaceProfileLinksResponseObject, error) {
	a := actorOf(ctx)
	p, err := h.svc.ReplaceProfileLinks(ctx, a, req.Body.Links, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.ReplaceProfileLinks200JSONResponse{Body: api.ProfileLinks{Links: p.Links},
		Headers: api.ReplaceProfileLinks200ResponseHeaders{ETag: ptr(etag(p.Version))}}, nil
}

// UpdateProfileLinks implements PATCH /profile/link.
func (h *Handler) UpdateProfileLinks(ctx context.Context, req api.UpdateProfileLinksRequestObject) (api.UpdateProfileLinksResponseObject, error) {
	a := actorOf(ctx)
	p, err := h.svc.PatchProfileLinks(ctx, a, req.Body.Links, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.UpdateProfileLinks200JSONResponse{Body: api.ProfileLinks{Links: p.Links},
		Headers: api.UpdateProfileLinks200ResponseHeaders{ETag: ptr(etag(p.Version))}}, nil
}

// DeleteProfileLinks implements DELETE /profile/link.
func (h *Handler) DeleteProfileLinks(ctx context.Context, req api.DeleteProfileLinksRequestObject) (api.DeleteProfileLinksResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteProfileLinks(ctx, a, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteProfileLinks204Response{}, nil
}

// GetOpenAPIYAML implements GET /openapi.yaml: the embedded bytes.
func (h *Handler) GetOpenAPIYAML(context.Context, api.GetOpenAPIYAMLRequestObject) (api.GetOpenAPIYAMLResponseObject, error) {
	return api.GetOpenAPIYAML200ApplicationyamlResponse{Body: bytes.NewReader(openapi.YAML), ContentLength: int64(len(openapi.YAML))}, nil
}

// GetOpenAPIJSON implements GET /openapi.json: the contract converted once at start.
func (h *Handler) GetOpenAPIJSON(context.Context, api.GetOpenAPIJSONRequestObject) (api.GetOpenAPIJSONResponseObject, error) {
	return rawJSON(h.specJSON), nil
}

// rawJSON answers pre-encoded JSON.
type rawJSON []byte

func (r rawJSON) VisitGetOpenAPIJSONResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(r)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(r)
	return err
}

// PreviewPermissions implements POST /permissions/preview.
func (h *Handler) PreviewPermissions(ctx context.Context, req api.PreviewPermissionsRequestObject) (api.PreviewPermissionsResponseObject, error) {
	a := actorOf(ctx)
	var channels []string
	if req.Body.ChannelIds != nil {
		channels = append([]string{}, *req.Body.ChannelIds...)
	}
	p, err := h.svc.PreviewPermissions(ctx, a, guild.PreviewRequest{Roles: req.Body.Roles, ChannelIDs: channels, Explain: deref(req.Body.Explain)})
	if err != nil {
		return nil, err
	}
	out := api.PermissionPreview{Base: names(p.Base), Channels: make([]api.ChannelPreview, len(p.Channels))}
	if p.BaseExplain != nil {
		out.BaseExplain = toExplanations(p.BaseExplain)
	}
	for i, c := range p.Channels {
		out.Channels[i] = api.ChannelPreview{ChannelId: c.ChannelID, Permissions: names(c.Permissions)}
		if c.Explain != nil {
			out.Channels[i].Explain = toExplanations(c.Explain)
		}
	}
	return api.PreviewPermissions200JSONResponse{Body: out}, nil
}

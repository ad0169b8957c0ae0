package httpapi

import (
	"context"
	"time"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/jsonfield"
)

// ListUsers implements GET /users.
func (h *Handler) ListUsers(ctx context.Context, req api.ListUsersRequestObject) (api.ListUsersResponseObject, error) {
	a := actorOf(ctx)
	p := req.Params
	f := guild.UserFilter{Query: deref(p.Q), RoleID: deref(p.Role), Status: string(deref(p.Status))}
	page, err := h.svc.ListUsers(ctx, a, f, deref(p.Cursor), deref(p.Limit))
	if err != nil {
		return nil, err
	}
	out := api.UserList{Items: make([]api.User, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, u := range page.Items {
		out.Items[i] = toUser(u)
	}
	return api.ListUsers200JSONResponse{Body: out}, nil
}

// CreateUser implements POST /users.
func (h *Handler) CreateUser(ctx context.Context, req api.CreateUserRequestObject) (api.CreateUserResponseObject, error) {
	a := actorOf(ctx)
	u, err := h.svc.CreateUser(ctx, a, guild.UserInput{Username: req.Body.Username, DisplayName: req.Body.DisplayName,
		Email: emailOf(req.Body.Email)}, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.CreateUser201JSONResponse{Body: toUser(u), Headers: api.CreateUser201ResponseHeaders{
		ETag: ptr(etag(u.Version)), Location: ptr("/api/users/" + u.ID)}}, nil
}

// GetMe implements GET /me.
func (h *Handler) GetMe(ctx context.Context, _ api.GetMeRequestObject) (api.GetMeResponseObject, error) {
	a := actorOf(ctx)
	u, err := h.svc.Me(ctx, a)
	if err != nil {
		return nil, err
	}
	return api.GetMe200JSONResponse{Body: toUser(u), Headers: api.GetMe200ResponseHeaders{ETag: ptr(etag(u.Version))}}, nil
}

// GetUser implements GET /users/{userID}.
func (h *Handler) GetUser(ctx context.Context, req api.GetUserRequestObject) (api.GetUserResponseObject, error) {
	a := actorOf(ctx)
	u, err := h.svc.GetUser(ctx, a, req.UserID)
	if err != nil {
		return nil, err
	}
	return api.GetUser200JSONResponse{Body: toUser(u), Headers: api.GetUser200ResponseHeaders{ETag: ptr(etag(u.Version))}}, nil
}

// UpdateUser implements PUT /users/{userID}.
func (h *Handler) UpdateUser(ctx context.Context, req api.UpdateUserRequestObject) (api.UpdateUserResponseObject, error) {
	a := actorOf(ctx)
	dn := req.Body.DisplayName
	u, err := h.svc.ReplaceUser(ctx, a, req.UserID, guild.UserInput{Username: req.Body.Username, DisplayName: &dn,
		Email: emailOf(req.Body.Email), Status: string(req.Body.Status)}, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.UpdateUser200JSONResponse{Body: toUser(u), Headers: api.UpdateUser200ResponseHeaders{ETag: ptr(etag(u.Version))}}, nil
}

// PatchUser implements PATCH /users/{userID}.
func (h *Handler) PatchUser(ctx context.Context, req api.PatchUserRequestObject) (api.PatchUserResponseObject, error) {
	a := actorOf(ctx)
	b := req.Body
	email, setEmail := optional(b.Email)
	until, setTimeout := optional(b.TimeoutUntil)
	p := guild.UserPatch{Username: b.Username, DisplayName: b.DisplayName, SetEmail: setEmail, SetTimeout: setTimeout, TimeoutUntil: until}
	if email != nil {
		e := string(*email)
		p.Email = &e
	}
	if b.Status != nil {
		st := string(*b.Status)
		p.Status = &st
	}
	u, err := h.svc.PatchUser(ctx, a, req.UserID, p, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.PatchUser200JSONResponse{Body: toUser(u), Headers: api.PatchUser200ResponseHeaders{ETag: ptr(etag(u.Version))}}, nil
}

// DeleteUser implements DELETE /users/{userID}.
func (h *Handler) DeleteUser(ctx context.Context, req api.DeleteUserRequestObject) (api.DeleteUserResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteUser(ctx, a, req.UserID, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteUser204Response{}, nil
}

// ListTokens implements GET /users/{userID}/tokens.
func (h *Handler) ListTokens(ctx context.Context, req api.ListTokensRequestObject) (api.ListTokensResponseObject, error) {
	a := actorOf(ctx)
	list, err := h.svc.ListTokens(ctx, a, req.UserID)
	if err != nil {
		return nil, err
	}
	out := api.TokenList{Items: make([]api.Token, len(list)), NextCursor: jsonfield.NewNullNullable[string]()}
	for i, t := range list {
		out.Items[i] = toToken(t)
	}
	return api.ListTokens200JSONResponse{Body: out}, nil
}

// CreateToken implements POST /users/{userID}/tokens.
func (h *Handler) CreateToken(ctx context.Context, req api.CreateTokenRequestObject) (api.CreateTokenResponseObject, error) {
	a := actorOf(ctx)
	expires, _ := optional(req.Body.ExpiresAt)
	var exp *time.Time
	if expires != nil {
		exp = expires
	}
	t, secret, err := h.svc.CreateToken(ctx, a, req.UserID, req.Body.Name, exp, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.CreateToken201JSONResponse{Body: api.TokenCreated{Id: t.ID, UserId: t.UserID, Name: t.Name, CreatedAt: api.Timestamp(t.CreatedAt),
		ExpiresAt: nullableTime(t.ExpiresAt), Token: secret},
		Headers: api.CreateToken201ResponseHeaders{Location: ptr("/api/users/" + t.UserID + "/tokens/" + t.ID)}}, nil
}

// GetToken implements GET /users/{userID}/tokens/{tokenID}.
func (h *Handler) GetToken(ctx context.Context, req api.GetTokenRequestObject) (api.GetTokenResponseObject, error) {
	a := actorOf(ctx)
	t, err := h.svc.GetToken(ctx, a, req.UserID, req.TokenID)
	if err != nil {
		return nil, err
	}
	return api.GetToken200JSONResponse{Body: toToken(t), Headers: api.GetToken200ResponseHeaders{ETag: ptr(tokenETag)}}, nil
}

// tokenETag is every token's ETag: a token's metadata never changes.
const tokenETag = `"1"`

// DeleteToken implements DELETE /users/{userID}/tokens/{tokenID}.
func (h *Handler) DeleteToken(ctx context.Context, req api.DeleteTokenRequestObject) (api.DeleteTokenResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteToken(ctx, a, req.UserID, req.TokenID, opts(nil, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteToken204Response{}, nil
}

package httpapi

import (
	"context"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/jsonfield"
	"github.com/guildhall/guildhall/internal/model"
)

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ListChannels implements GET /channels.
func (h *Handler) ListChannels(ctx context.Context, req api.ListChannelsRequestObject) (api.ListChannelsResponseObject, error) {
	a := actorOf(ctx)
	page, err := h.svc.ListChannels(ctx, a, req.Params.ParentId, deref(req.Params.Cursor), deref(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := api.ChannelList{Items: make([]api.Channel, len(page.Items)), NextCursor: cursorOf(page.NextCursor)}
	for i, c := range page.Items {
		out.Items[i] = toChannel(c)
	}
	return api.ListChannels200JSONResponse{Body: out}, nil
}

// GetChannel implements GET /channels/{channelID}.
func (h *Handler) GetChannel(ctx context.Context, req api.GetChannelRequestObject) (api.GetChannelResponseObject, error) {
	a := actorOf(ctx)
	c, err := h.svc.GetChannel(ctx, a, req.ChannelID)
	if err != nil {
		return nil, err
	}
	return api.GetChannel200JSONResponse{Body: toChannel(c), Headers: api.GetChannel200ResponseHeaders{ETag: ptr(etag(c.Version))}}, nil
}

// UpdateChannel implements PATCH /channels/{channelID}.
func (h *Handler) UpdateChannel(ctx context.Context, req api.UpdateChannelRequestObject) (api.UpdateChannelResponseObject, error) {
	a := actorOf(ctx)
	topic, setTopic := optional(req.Body.Topic)
	parent, setParent := optional(req.Body.ParentId)
	c, err := h.svc.UpdateChannel(ctx, a, req.ChannelID, guild.ChannelPatch{Name: req.Body.Name, SetTopic: setTopic, Topic: topic,
		SetParent: setParent, ParentID: parent, Position: req.Body.Position, Lock: deref(req.Body.LockPermissions)},
		opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.UpdateChannel200JSONResponse{Body: toChannel(c), Headers: api.UpdateChannel200ResponseHeaders{ETag: ptr(etag(c.Version))}}, nil
}

// CreateChannel implements POST /channels/{channelID}/create.
func (h *Handler) CreateChannel(ctx context.Context, req api.CreateChannelRequestObject) (api.CreateChannelResponseObject, error) {
	a := actorOf(ctx)
	topic, _ := optional(req.Body.Topic)
	parent, _ := optional(req.Body.ParentId)
	in := guild.ChannelInput{Name: req.Body.Name, Topic: topic, Kind: string(deref(req.Body.Kind)), ParentID: parent}
	c, err := h.svc.CreateChannel(ctx, a, req.ChannelID, in, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.CreateChannel201JSONResponse{Body: toChannel(c), Headers: api.CreateChannel201ResponseHeaders{
		ETag: ptr(etag(c.Version)), Location: ptr("/api/channels/" + c.ID)}}, nil
}

// ReorderChannels implements POST /channels/reorder.
func (h *Handler) ReorderChannels(ctx context.Context, req api.ReorderChannelsRequestObject) (api.ReorderChannelsResponseObject, error) {
	a := actorOf(ctx)
	moves := make([]guild.ChannelMove, len(req.Body.Positions))
	for i, m := range req.Body.Positions {
		parent, setParent := optional(m.ParentId)
		moves[i] = guild.ChannelMove{ID: m.Id, Position: m.Position, SetParent: setParent, ParentID: parent}
	}
	list, err := h.svc.ReorderChannels(ctx, a, moves, opts(nil, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	out := api.ChannelList{Items: make([]api.Channel, len(list)), NextCursor: jsonfield.NewNullNullable[string]()}
	for i, c := range list {
		out.Items[i] = toChannel(c)
	}
	return api.ReorderChannels200JSONResponse{Body: out}, nil
}

// RenameChannel implements POST /channels/{channelID}/rename.
func (h *Handler) RenameChannel(ctx context.Context, req api.RenameChannelRequestObject) (api.RenameChannelResponseObject, error) {
	a := actorOf(ctx)
	c, err := h.svc.RenameChannel(ctx, a, req.ChannelID, req.Body.Name, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.RenameChannel200JSONResponse{Body: toChannel(c), Headers: api.RenameChannel200ResponseHeaders{ETag: ptr(etag(c.Version))}}, nil
}

// DeleteChannel implements POST /channels/{channelID}/delete.
func (h *Handler) DeleteChannel(ctx context.Context, req api.DeleteChannelRequestObject) (api.DeleteChannelResponseObject, error) {
	a := actorOf(ctx)
	if err := h.svc.DeleteChannel(ctx, a, req.ChannelID, opts(req.Params.IfMatch, req.Params.XAuditReason)); err != nil {
		return nil, err
	}
	return api.DeleteChannel204Response{}, nil
}

// ListChannelOverwrites implements GET /channels/{channelID}/permissions.
func (h *Handler) ListChannelOverwrites(ctx context.Context, req api.ListChannelOverwritesRequestObject) (api.ListChannelOverwritesResponseObject, error) {
	a := actorOf(ctx)
	if at := req.Params.At; at != nil { // a history answer: no ETag, it is no write's precondition
		list, err := h.asof.Overwrites(ctx, a, req.ChannelID, *at)
		if err != nil {
			return nil, err
		}
		return api.ListChannelOverwrites200JSONResponse{Body: toOverwrites(list)}, nil
	}
	list, v, err := h.svc.ListOverwrites(ctx, a, req.ChannelID)
	if err != nil {
		return nil, err
	}
	return api.ListChannelOverwrites200JSONResponse{Body: toOverwrites(list),
		Headers: api.ListChannelOverwrites200ResponseHeaders{ETag: ptr(etag(v))}}, nil
}

// SetChannelOverwrite implements POST /channels/{channelID}/permissions.
func (h *Handler) SetChannelOverwrite(ctx context.Context, req api.SetChannelOverwriteRequestObject) (api.SetChannelOverwriteResponseObject, error) {
	a := actorOf(ctx)
	allow, err := parsePermissions(req.Body.Allow, "body.allow")
	if err != nil {
		return nil, err
	}
	deny, err := parsePermissions(req.Body.Deny, "body.deny")
	if err != nil {
		return nil, err
	}
	ow := model.Overwrite{ChannelID: req.ChannelID, TargetType: string(req.Body.TargetType), TargetID: deref(req.Body.TargetId),
		Allow: allow, Deny: deny}
	list, v, err := h.svc.SetOverwrite(ctx, a, ow, opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.SetChannelOverwrite200JSONResponse{Body: toOverwrites(list),
		Headers: api.SetChannelOverwrite200ResponseHeaders{ETag: ptr(etag(v))}}, nil
}

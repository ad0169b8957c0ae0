package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/template"
)

// ExportTemplate implements GET /export.
func (h *Handler) ExportTemplate(ctx context.Context, _ api.ExportTemplateRequestObject) (api.ExportTemplateResponseObject, error) {
	a := actorOf(ctx)
	t, err := h.svc.ExportTemplate(ctx, a)
	if err != nil {
		return nil, err
	}
	body := toTemplate(t)
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode template: %w", err)
	}
	tag := digestTag(b)
	// 500 channels with an overwrite of each of 250 roles weigh about 40 MB,
	// more than any answer may. The refusal still names the template's tag:
	// a pruning import, which could shrink such a community, needs it.
	if len(b) > apperr.MaxAnswerBytes {
		err := apperr.AnswerTooLarge("The community's template", len(b),
			"it has more channels and overwrites than one template can carry (an import takes at most 1 MiB)")
		if e, ok := apperr.As(err); ok {
			e.Current = tag
		}
		return nil, err
	}
	tag = quoteTag(tag)
	return api.ExportTemplate200JSONResponse{Body: body, Headers: api.ExportTemplate200ResponseHeaders{ETag: &tag}}, nil
}

// templateTag is the entity tag of a template (unquoted, as the domain
// names versions): a digest of its JSON, which encoding/json writes the
// same for the same structure (struct fields in their order, lists in the
// template's order), on every instance.
func templateTag(t template.Document) (string, error) {
	b, err := json.Marshal(toTemplate(t))
	if err != nil {
		return "", fmt.Errorf("encode template: %w", err)
	}
	return digestTag(b), nil
}

// digestTag is the unquoted entity tag of an encoded template.
func digestTag(b []byte) string {
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:18])
}

// ImportTemplate implements POST /import.
func (h *Handler) ImportTemplate(ctx context.Context, req api.ImportTemplateRequestObject) (api.ImportTemplateResponseObject, error) {
	a := actorOf(ctx)
	t, err := fromTemplate(*req.Body)
	if err != nil {
		return nil, err
	}
	changes, err := h.svc.ImportTemplate(ctx, a, t,
		guild.ImportOptions{DryRun: deref(req.Params.DryRun), Prune: deref(req.Params.Prune), Tag: templateTag},
		opts(req.Params.IfMatch, req.Params.XAuditReason))
	if err != nil {
		return nil, err
	}
	return api.ImportTemplate200JSONResponse{Body: api.ImportResult{Changes: toChanges(changes)}}, nil
}

// toChanges is a list of changes as an import or a revert answers it.
func toChanges(changes []template.Change) []api.TemplateChange {
	out := make([]api.TemplateChange, len(changes))
	for i, c := range changes {
		out[i] = api.TemplateChange{Op: api.TemplateChangeOp(c.Op), Kind: api.TemplateChangeKind(c.Kind), Id: c.ID}
		if c.Before != nil {
			out[i].Before = &c.Before
		}
		if c.After != nil {
			out[i].After = &c.After
		}
	}
	return out
}

func toTemplate(t template.Document) api.Template {
	out := api.Template{Format: api.TemplateFormat(t.Format), GlobalPermissions: names(t.Global),
		Roles: make([]api.TemplateRole, len(t.Roles)), Channels: make([]api.TemplateChannel, len(t.Channels))}
	for i, r := range t.Roles {
		out.Roles[i] = api.TemplateRole{Id: r.ID, Name: r.Name, Position: r.Position, Color: nullableString(r.Color), Permissions: names(r.Permissions)}
	}
	for i, c := range t.Channels {
		tc := api.TemplateChannel{Id: c.ID, Kind: api.ChannelKind(c.Kind), Name: c.Name, ParentId: nullableString(c.ParentID),
			Position: c.Position, Topic: nullableString(c.Topic), Overwrites: make([]api.TemplateOverwrite, len(c.Overwrites))}
		for j, o := range c.Overwrites {
			tc.Overwrites[j] = api.TemplateOverwrite{TargetType: api.TemplateOverwriteTargetType(o.TargetType), Allow: names(o.Allow), Deny: names(o.Deny)}
			if o.TargetID != "" {
				tc.Overwrites[j].TargetId = ptr(o.TargetID)
			}
		}
		out.Channels[i] = tc
	}
	return out
}

// fromTemplate reads a template, every bad permission name reported at its
// place.
func fromTemplate(t api.Template) (template.Document, error) {
	var bad []apperr.FieldError
	parse := func(list []api.PermissionName, at string) permissions.Set {
		set, err := parsePermissions(list, at)
		if e, ok := apperr.As(err); ok {
			bad = append(bad, e.Fields...)
		}
		return set
	}
	out := template.Document{Format: string(t.Format), Global: parse(t.GlobalPermissions, "body.global_permissions"),
		Roles: make([]template.Role, len(t.Roles)), Channels: make([]template.Channel, len(t.Channels))}
	for i, r := range t.Roles {
		color, _ := optional(r.Color)
		out.Roles[i] = template.Role{ID: r.Id, Name: r.Name, Position: r.Position, Color: color,
			Permissions: parse(r.Permissions, "body.roles["+strconv.Itoa(i)+"].permissions")}
	}
	for i, c := range t.Channels {
		parent, _ := optional(c.ParentId)
		topic, _ := optional(c.Topic)
		tc := template.Channel{ID: c.Id, Kind: string(c.Kind), Name: c.Name, ParentID: parent, Position: c.Position, Topic: topic,
			Overwrites: make([]template.Overwrite, len(c.Overwrites))}
		for j, o := range c.Overwrites {
			at := "body.channels[" + strconv.Itoa(i) + "].overwrites[" + strconv.Itoa(j) + "]"
			tc.Overwrites[j] = template.Overwrite{TargetType: string(o.TargetType), TargetID: deref(o.TargetId),
				Allow: parse(o.Allow, at+".allow"), Deny: parse(o.Deny, at+".deny")}
		}
		out.Channels[i] = tc
	}
	if len(bad) > 0 {
		return template.Document{}, apperr.InvalidFields(bad)
	}
	return out, nil
}

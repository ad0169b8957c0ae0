package httpapi

import (
	"strconv"
	"strings"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/guildhall/guildhall/gen/api"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/jsonfield"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Conversions between the contract's types (gen/api) and the domain's.

func names(s permissions.Set) api.PermissionNames {
	out := make(api.PermissionNames, 0, s.Len())
	for _, n := range s.Names() {
		out = append(out, api.PermissionName(n))
	}
	return out
}

// parsePermissions turns names into a set; the validator has already checked
// them against the enum, so an error here is a belt-and-braces 400.
func parsePermissions(list []api.PermissionName, at string) (permissions.Set, error) {
	raw := make([]string, len(list))
	for i, n := range list {
		raw[i] = string(n)
	}
	set, errs := permissions.ParseAll(raw)
	if len(errs) > 0 {
		fields := make([]apperr.FieldError, len(errs))
		for i, e := range errs {
			fields[i] = apperr.FieldError{Location: at + "[" + strconv.Itoa(e.Index) + "]", Message: e.Error()}
		}
		return 0, apperr.InvalidFields(fields)
	}
	return set, nil
}

// jsonNullable is p as a response's nullable string (gen/api/overlay.yaml).
func jsonNullable(p *string) jsonfield.Nullable[string] {
	if p == nil {
		return jsonfield.NewNullNullable[string]()
	}
	return jsonfield.NewNullableWithValue(*p)
}

func nullableString(p *string) nullable.Nullable[string] {
	if p == nil {
		return nullable.NewNullNullable[string]()
	}
	return nullable.NewNullableWithValue(*p)
}

// optional reads a merge-patch member: set reports whether it was present,
// and v is nil when it was null.
func optional[T any](n nullable.Nullable[T]) (v *T, set bool) {
	if !n.IsSpecified() {
		return nil, false
	}
	if n.IsNull() {
		return nil, true
	}
	x := n.MustGet()
	return &x, true
}

func toChannel(c model.Channel) api.Channel {
	out := api.Channel{Id: c.ID, Name: c.Name, Topic: jsonNullable(c.Topic), Kind: api.ChannelKind(c.Kind),
		ParentId: jsonNullable(c.ParentID), Position: c.Position, Synced: c.Synced, CreatedAt: api.Timestamp(c.CreatedAt), UpdatedAt: api.Timestamp(c.UpdatedAt)}
	if c.Unviewable {
		out.Viewable = new(false)
	}
	return out
}

func toRole(r model.Role) api.Role {
	return api.Role{Id: r.ID, Name: r.Name, Position: r.Position, Color: jsonNullable(r.Color),
		Permissions: names(r.Permissions), CreatedAt: api.Timestamp(r.CreatedAt), UpdatedAt: api.Timestamp(r.UpdatedAt)}
}

func toRoles(list []model.Role) api.RoleList {
	out := api.RoleList{Items: make([]api.Role, len(list)), NextCursor: jsonfield.NewNullNullable[string]()}
	for i, r := range list {
		out.Items[i] = toRole(r)
	}
	return out
}

func toUser(u model.User) api.User {
	out := api.User{Id: u.ID, Username: u.Username, DisplayName: u.DisplayName, Status: api.UserStatus(u.Status),
		Roles: u.Roles, IsOwner: u.IsOwner, TimeoutUntil: u.TimeoutUntil, CreatedAt: api.Timestamp(u.CreatedAt), UpdatedAt: api.Timestamp(u.UpdatedAt)}
	if out.Roles == nil {
		out.Roles = []string{}
	}
	if !u.EmailHidden {
		if u.Email == nil {
			out.Email = jsonfield.NewNullNullable[api.Email]()
		} else {
			out.Email = jsonfield.NewNullableWithValue(api.Email(*u.Email))
		}
	}
	return out
}

func emailOf(n nullable.Nullable[api.Email]) *string {
	v, _ := optional(n)
	if v == nil {
		return nil
	}
	s := string(*v)
	return &s
}

func toOverwrite(o model.Overwrite) api.Overwrite {
	out := api.Overwrite{TargetType: api.OverwriteTargetType(o.TargetType), Allow: names(o.Allow), Deny: names(o.Deny)}
	if o.TargetID != "" {
		id := o.TargetID
		out.TargetId = &id
	}
	return out
}

func toOverwrites(list []model.Overwrite) api.OverwriteList {
	out := api.OverwriteList{Items: make([]api.Overwrite, len(list)), NextCursor: jsonfield.NewNullNullable[string]()}
	for i, o := range list {
		out.Items[i] = toOverwrite(o)
	}
	return out
}

func toToken(t model.Token) api.Token {
	return api.Token{Id: t.ID, UserId: t.UserID, Name: t.Name, CreatedAt: api.Timestamp(t.CreatedAt), ExpiresAt: nullableTime(t.ExpiresAt)}
}

func nullableTime(t *time.Time) nullable.Nullable[time.Time] {
	if t == nil {
		return nullable.NewNullNullable[time.Time]()
	}
	return nullable.NewNullableWithValue(*t)
}

func toAttachment(a model.Attachment) api.Attachment {
	return api.Attachment{ChannelId: a.ChannelID, Id: a.ID, ContentType: a.ContentType, Size: a.Size, Sha256: a.SHA256,
		CreatedBy: nullableString(a.CreatedBy), UpdatedBy: nullableString(a.UpdatedBy), CreatedAt: api.Timestamp(a.CreatedAt), UpdatedAt: api.Timestamp(a.UpdatedAt)}
}

func toEvent(e model.Event) api.Event {
	return api.Event{Seq: e.Seq, Type: api.EventType(e.Type), ActorId: nullableString(e.ActorID), Subject: e.Subject,
		Data: e.Data, Reason: nullableString(e.Reason), CreatedAt: api.Timestamp(e.CreatedAt)}
}

func cursorOf(c *string) jsonfield.Nullable[string] { return jsonNullable(c) }

func toExplanations(list []permissions.Explanation) *[]api.PermissionExplanation {
	out := make([]api.PermissionExplanation, len(list))
	for i, e := range list {
		steps := make([]api.ExplanationStep, len(e.Steps))
		for j, s := range e.Steps {
			steps[j] = api.ExplanationStep{Kind: api.ExplanationStepKind(s.Kind), Effect: api.ExplanationStepEffect(s.Effect), Detail: s.Detail}
			if s.RoleID != "" {
				id := s.RoleID
				steps[j].RoleId = &id
			}
			if s.FromCategory != "" {
				id := s.FromCategory
				steps[j].FromCategory = &id
			}
			if !s.Until.IsZero() {
				t := api.Timestamp(s.Until)
				steps[j].Until = &t
			}
		}
		out[i] = api.PermissionExplanation{Permission: api.PermissionName(e.Permission.String()), Granted: e.Granted, Steps: steps}
	}
	return &out
}

func toUserPermissions(p guild.UserPermissions) api.UserPermissions {
	out := api.UserPermissions{UserId: p.UserID, ChannelId: jsonNullable(p.ChannelID), Permissions: names(p.Permissions)}
	if p.Explain != nil {
		out.Explain = toExplanations(p.Explain)
	}
	return out
}

// opts turns a write's If-Match and X-Audit-Reason headers into what the
// domain takes.
func opts(ifMatch, reason *string) guild.WriteOpts {
	if reason != nil && strings.TrimSpace(*reason) == "" {
		reason = nil // an empty X-Audit-Reason is no reason
	}
	return guild.WriteOpts{Reason: reason, IfMatch: parseIfMatch(ifMatch)}
}

// parseIfMatch reads an If-Match header (RFC 9110 §13.1.1): absent or
// empty is no precondition, "*" any current version, otherwise a list of
// entity tags compared strongly: a weak tag (W/"3") or anything that is not
// a quoted tag matches no version.
func parseIfMatch(h *string) *guild.Precondition {
	if h == nil || strings.TrimSpace(*h) == "" {
		return nil
	}
	v := strings.TrimSpace(*h)
	if v == "*" {
		return &guild.Precondition{Any: true}
	}
	p := &guild.Precondition{}
	for _, t := range strings.Split(v, ",") {
		t = strings.TrimSpace(t)
		if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
			p.Tags = append(p.Tags, t[1:len(t)-1])
		}
	}
	return p
}

// etag is the strong entity tag of a resource at a version.
func etag(version int64) string { return quoteTag(guild.Tag(version)) }

// quoteTag is the entity tag of a version as the domain names it.
func quoteTag(tag string) string { return `"` + tag + `"` }

func ptr[T any](v T) *T { return &v }

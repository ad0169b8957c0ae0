package guild

import (
	"context"
	"fmt"
	"strconv"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// TemplateFormat names the template document's format.
const TemplateFormat = "guildhall-template/1"

// Template is a community's structure: the global permissions, the roles
// and the channels with their everyone and role overwrites. No users,
// tokens, attachments or user overwrites.
type Template struct {
	Format   string
	Global   permissions.Set
	Roles    []TemplateRole    // by position descending
	Channels []TemplateChannel // in tree order
}

// TemplateRole is a role of a template.
type TemplateRole struct {
	ID          string
	Name        string
	Position    int
	Color       *string
	Permissions permissions.Set
}

// TemplateChannel is a channel of a template.
type TemplateChannel struct {
	ID         string
	Kind       string
	Name       string
	ParentID   *string
	Position   int
	Topic      *string
	Overwrites []TemplateOverwrite // everyone first, then roles by position descending
}

// TemplateOverwrite is an everyone or role overwrite of a template channel.
type TemplateOverwrite struct {
	TargetType string // everyone or role
	TargetID   string // the role, for a role overwrite
	Allow      permissions.Set
	Deny       permissions.Set
}

// TemplateChange is one change an import makes (or would make).
type TemplateChange struct {
	Op     string // create, update, delete
	Kind   string // role, channel, overwrite, global
	ID     string
	Before map[string]any // absent when created
	After  map[string]any // absent when deleted
}

// ImportOptions are an import's switches.
type ImportOptions struct {
	DryRun bool // list the changes, make none
	Prune  bool // delete the roles, channels and overwrites the template leaves out
	// Tag is the entity tag of an export, which the write's IfMatch names.
	// The transport passes it because the domain cannot compute it: the
	// tag is the digest of the export as the contract encodes it in JSON
	// (field names, order, omitted fields), which only the transport
	// knows. It is a function, not a value, because the import computes
	// it from the state it plans against (inside its write transaction),
	// so the check and the changes see the same community.
	Tag func(Template) (string, error)
}

// checkExportTag applies an import's precondition: If-Match names the tag
// of the export the template came from, and the community's export must
// still have it. A prune deletes what the template leaves out, so without
// a tag (or with "*", which any state matches) it could delete what was
// made after the export: it needs one.
func checkExportTag(auth *store.AuthState, opt ImportOptions, ifMatch *Precondition) error {
	if opt.Prune && (ifMatch == nil || ifMatch.Any) {
		return apperr.PreconditionRequired("An import with prune=true needs If-Match with the ETag of the export it was made from.")
	}
	if ifMatch == nil || ifMatch.Any {
		return nil
	}
	tag, err := opt.Tag(templateOf(auth))
	if err != nil {
		return err
	}
	return ifMatch.check(tag)
}

// ExportTemplate is the community's structure as a template, as of the
// request's view. The owner alone may export it.
func (s *Service) ExportTemplate(_ context.Context, a *Actor) (Template, error) {
	if err := a.authorize(opExportTemplate); err != nil {
		return Template{}, err
	}
	return templateOf(a.auth), nil
}

func templateOf(auth *store.AuthState) Template {
	global, _ := auth.Global()
	t := Template{Format: TemplateFormat, Global: global, Roles: []TemplateRole{}, Channels: []TemplateChannel{}}
	for _, r := range auth.Roles() { // by position descending
		t.Roles = append(t.Roles, TemplateRole{ID: r.ID, Name: r.Name, Position: r.Position, Color: r.Color, Permissions: r.Permissions})
	}
	position := func(id string) int {
		r, _ := auth.Role(id)
		return r.Position
	}
	for _, c := range auth.Channels() { // tree order
		tc := TemplateChannel{ID: c.ID, Kind: c.Kind, Name: c.Name, ParentID: c.ParentID, Position: c.Position, Topic: c.Topic,
			Overwrites: []TemplateOverwrite{}}
		list, _, _ := auth.Overwrites(c.ID)
		for _, o := range sortedOverwrites(position, list) {
			if o.TargetType == model.TargetUser {
				continue
			}
			tc.Overwrites = append(tc.Overwrites, TemplateOverwrite{TargetType: o.TargetType, TargetID: o.TargetID, Allow: o.Allow, Deny: o.Deny})
		}
		t.Channels = append(t.Channels, tc)
	}
	return t
}

// ImportTemplate makes the community's structure what the template says,
// matching roles and channels by ID, in one transaction, and lists the
// changes; with DryRun it lists them and writes nothing. The owner alone
// may import.
func (s *Service) ImportTemplate(ctx context.Context, a *Actor, t Template, opt ImportOptions, o WriteOpts) ([]TemplateChange, error) {
	if err := validateTemplate(t); err != nil {
		return nil, err
	}
	if err := a.authorize(opImportTemplate); err != nil {
		return nil, err
	}
	if opt.DryRun {
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return nil, err
		}
		p, err := planImport(a.auth, t, opt.Prune, s.limits)
		if err != nil {
			return nil, err
		}
		return p.changes, nil
	}
	var changes []TemplateChange
	var blobs []string
	err := s.write(store.LargeWrite(ctx), a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opImportTemplate); err != nil {
			return err
		}
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return err
		}
		p, err := planImport(a.auth, t, opt.Prune, s.limits)
		if err != nil {
			return err
		}
		changes = p.changes
		blobs, err = s.applyImport(ctx, tx, a, p, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.deleteBlobs(ctx, blobs)
	return changes, nil
}

// validateTemplate finds what makes a template invalid in itself (400 at
// the member), before anything is compared with the community.
func validateTemplate(t Template) error {
	var bad []apperr.FieldError
	at := func(loc, format string, args ...any) {
		bad = append(bad, apperr.FieldError{Location: loc, Message: fmt.Sprintf(format, args...)})
	}
	if t.Format != TemplateFormat {
		at("body.format", "must be %q", TemplateFormat)
	}
	if t.Global.Has(permissions.Administrator) {
		at("body.global_permissions", "ADMINISTRATOR cannot be a global permission")
	}
	roles := map[string]bool{}
	taken := map[int]bool{}
	for i, r := range t.Roles {
		loc := "body.roles[" + strconv.Itoa(i) + "]"
		if roles[r.ID] {
			at(loc+".id", "role %q is in the template twice", r.ID)
		}
		roles[r.ID] = true
		if msg := names.Check(r.Name); msg != "" {
			at(loc+".name", "%s", msg)
		}
		switch {
		case r.Position < 1 || r.Position > len(t.Roles):
			at(loc+".position", "must be between 1 and %d, the number of roles in the template", len(t.Roles))
		case taken[r.Position]:
			at(loc+".position", "position %d is taken by another role of the template", r.Position)
		}
		taken[r.Position] = true
	}
	kinds := map[string]string{}
	for _, c := range t.Channels {
		if _, dup := kinds[c.ID]; !dup {
			kinds[c.ID] = c.Kind
		}
	}
	seen := map[string]bool{}
	for i, c := range t.Channels {
		loc := "body.channels[" + strconv.Itoa(i) + "]"
		if seen[c.ID] {
			at(loc+".id", "channel %q is in the template twice", c.ID)
		}
		if reservedChannelIDs[c.ID] {
			at(loc+".id", "%q cannot be a channel's ID (POST /channels/%s is another operation)", c.ID, c.ID)
		}
		seen[c.ID] = true
		if msg := names.Check(c.Name); msg != "" {
			at(loc+".name", "%s", msg)
		}
		if c.ParentID != nil {
			switch {
			case c.Kind == model.KindCategory:
				at(loc+".parent_id", "a category cannot be in a category")
			case kinds[*c.ParentID] != model.KindCategory:
				at(loc+".parent_id", "%q is not a category of the template", *c.ParentID)
			}
		}
		targets := map[string]bool{}
		for j, ow := range c.Overwrites {
			oloc := loc + ".overwrites[" + strconv.Itoa(j) + "]"
			mo := model.Overwrite{ChannelID: c.ID, TargetType: ow.TargetType, TargetID: ow.TargetID, Allow: ow.Allow, Deny: ow.Deny}
			if err := validateOverwrite(mo); err != nil {
				e, _ := apperr.As(err)
				for _, f := range e.Fields {
					at(oloc+"."+f.Field, "%s", f.Message)
				}
				continue
			}
			if ow.TargetType == model.TargetRole && !roles[ow.TargetID] {
				at(oloc+".target_id", "role %q is not in the template", ow.TargetID)
			}
			key := ow.TargetType + ":" + ow.TargetID
			if targets[key] {
				at(oloc, "the channel has another overwrite for the same target")
			}
			targets[key] = true
		}
	}
	if len(bad) > 0 {
		return apperr.InvalidFields(bad)
	}
	return nil
}

// MaxAnswerBytes bounds what one answer of the API weighs (docs/design.md
// §14, attachments' bytes aside): an answer that would weigh more is paged,
// or refused before anything is done.
const MaxAnswerBytes = 8 << 20

// AnswerTooLarge is the 409 of an answer that would weigh n bytes, more
// than MaxAnswerBytes; instead says what to do.
func AnswerTooLarge(what string, n int, instead string) error {
	return &apperr.Error{Kind: apperr.ErrLimitExceeded, Limit: "answer_bytes",
		Detail: fmt.Sprintf("%s would take %d bytes or more, over the %d bytes one answer may hold: %s.", what, n, MaxAnswerBytes, instead)}
}

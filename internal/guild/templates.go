package guild

import (
	"context"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/template"
)

// The community template: who may export and import it, an import's
// precondition and its transaction. The document itself (its validity,
// the export and the plan of an import) is internal/template's; the
// apply step is template_apply.go.

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
	Tag func(template.Document) (string, error)
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
	tag, err := opt.Tag(template.Export(auth))
	if err != nil {
		return err
	}
	return ifMatch.check(tag)
}

// ExportTemplate is the community's structure as a template, as of the
// request's view. The owner alone may export it.
func (s *Service) ExportTemplate(_ context.Context, a *Actor) (template.Document, error) {
	if err := a.authorize(opExportTemplate); err != nil {
		return template.Document{}, err
	}
	return template.Export(a.auth), nil
}

// ImportTemplate makes the community's structure what the template says,
// matching roles and channels by ID, in one transaction, and lists the
// changes; with DryRun it lists them and writes nothing. The owner alone
// may import.
func (s *Service) ImportTemplate(ctx context.Context, a *Actor, t template.Document, opt ImportOptions, o WriteOpts) ([]template.Change, error) {
	if err := template.Validate(t); err != nil {
		return nil, err
	}
	if err := a.authorize(opImportTemplate); err != nil {
		return nil, err
	}
	if opt.DryRun {
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return nil, err
		}
		p, err := template.PlanImport(a.auth, t, opt.Prune, s.limits.importLimits())
		if err != nil {
			return nil, err
		}
		return p.Changes, nil
	}
	var changes []template.Change
	var blobs []string
	err := s.write(store.LargeWrite(ctx), a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(opImportTemplate); err != nil {
			return err
		}
		if err := checkExportTag(a.auth, opt, o.IfMatch); err != nil {
			return err
		}
		p, err := template.PlanImport(a.auth, t, opt.Prune, s.limits.importLimits())
		if err != nil {
			return err
		}
		changes = p.Changes
		blobs, err = s.applyImport(ctx, tx, a, p, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.deleteBlobs(ctx, blobs)
	return changes, nil
}

// importLimits are the limits an import's plan checks.
func (l Limits) importLimits() template.Limits {
	return template.Limits{MaxRoles: l.MaxRoles, MaxChannels: l.MaxChannels,
		MaxChannelsPerCategory: l.MaxChannelsPerCategory, MaxOverwrites: l.MaxOverwrites}
}

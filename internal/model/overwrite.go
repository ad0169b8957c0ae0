package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/permissions"
)

// Overwrite target types.
const (
	TargetEveryone = "everyone"
	TargetRole     = "role"
	TargetUser     = "user"
)

// Overwrite adjusts the permissions of a target in one channel.
type Overwrite struct {
	ChannelID  string
	TargetType string
	TargetID   string // "" for everyone
	Allow      permissions.Set
	Deny       permissions.Set
}

// Validate finds what makes an overwrite invalid in itself, whatever
// channel and community it is in: a target ID where none belongs or
// missing, a permission that is not channel-scoped, one both allowed and
// denied. Each is a 400 at its field (target_id, allow, deny); setting an
// overwrite and importing a template check the same.
func (ow Overwrite) Validate() error {
	var fields []apperr.FieldError
	if ow.TargetType == TargetEveryone && ow.TargetID != "" {
		fields = append(fields, apperr.FieldError{Field: "target_id", Message: "must be absent for target_type everyone"})
	}
	if ow.TargetType != TargetEveryone && ow.TargetID == "" {
		fields = append(fields, apperr.FieldError{Field: "target_id", Message: "is required for target_type " + ow.TargetType})
	}
	for _, l := range []struct {
		name string
		set  permissions.Set
	}{{"allow", ow.Allow}, {"deny", ow.Deny}} {
		for _, p := range l.set.Permissions() {
			if !permissions.ChannelScoped.Has(p) {
				fields = append(fields, apperr.FieldError{Field: l.name,
					Message: "permission " + quote(p.String()) + " is not channel-scoped and cannot be overwritten"})
			}
		}
	}
	if both := ow.Allow.Intersect(ow.Deny); !both.IsEmpty() {
		for _, n := range both.Names() {
			fields = append(fields, apperr.FieldError{Field: "deny",
				Message: "permission " + quote(n) + " is both allowed and denied"})
		}
	}
	if len(fields) > 0 {
		return apperr.InvalidFields(fields)
	}
	return nil
}

func quote(s string) string { return "\"" + s + "\"" }

// SortedOverwrites sorts the list into the API's order: everyone, roles by
// position descending, users by ID, on keys computed once per overwrite.
// The list given is left as it was.
func SortedOverwrites(position func(roleID string) int, list []Overwrite) []Overwrite {
	type keyed struct {
		rank     int8
		position int
		o        Overwrite
	}
	keys := make([]keyed, len(list))
	for i, o := range list {
		k := keyed{rank: 2, o: o}
		switch o.TargetType {
		case TargetEveryone:
			k.rank = 0
		case TargetRole:
			k.rank = 1
			k.position = position(o.TargetID)
		}
		keys[i] = k
	}
	slices.SortFunc(keys, func(a, b keyed) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		if a.position != b.position {
			return cmp.Compare(b.position, a.position)
		}
		return strings.Compare(a.o.TargetID, b.o.TargetID)
	})
	out := make([]Overwrite, len(keys))
	for i := range keys {
		out[i] = keys[i].o
	}
	return out
}

package guild

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

var labelPattern = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// MaxLinkURL is the longest URL a profile link may have.
const MaxLinkURL = 2048

// ProfileLinks returns the caller's links.
func (s *Service) ProfileLinks(ctx context.Context, a *Actor) (model.ProfileLinks, error) {
	if err := a.authorize(opGetProfileLinks); err != nil {
		return model.ProfileLinks{}, err
	}
	return s.store.GetProfile(ctx, a.UserID)
}

// ReplaceProfileLinks replaces all of the caller's links.
func (s *Service) ReplaceProfileLinks(ctx context.Context, a *Actor, links map[string]string, o WriteOpts) (model.ProfileLinks, error) {
	if err := validateLinks(links, "links"); err != nil {
		return model.ProfileLinks{}, err
	}
	if len(links) > s.limits.MaxProfileLinks {
		return model.ProfileLinks{}, apperr.Invalid("links", "at most %d links are allowed", s.limits.MaxProfileLinks)
	}
	return s.changeLinks(ctx, a, opReplaceProfileLinks, o, "profile.links.set", func(map[string]string) (map[string]string, error) {
		return links, nil
	})
}

// PatchProfileLinks merges links into the caller's: a nil URL removes the label.
func (s *Service) PatchProfileLinks(ctx context.Context, a *Actor, patch map[string]*string, o WriteOpts) (model.ProfileLinks, error) {
	set := map[string]string{}
	for label, u := range patch {
		if u != nil {
			set[label] = *u
		} else if !labelPattern.MatchString(label) {
			return model.ProfileLinks{}, apperr.Invalid("links."+label, "labels match ^[a-z0-9_-]{1,32}$")
		}
	}
	if err := validateLinks(set, "links"); err != nil {
		return model.ProfileLinks{}, err
	}
	return s.changeLinks(ctx, a, opUpdateProfileLinks, o, "profile.links.set", func(old map[string]string) (map[string]string, error) {
		merged := maps.Clone(old)
		for label, u := range patch {
			if u == nil {
				delete(merged, label)
			} else {
				merged[label] = *u
			}
		}
		// A merge patch limits the patch, not the result: check after merging.
		if len(merged) > s.limits.MaxProfileLinks {
			return nil, apperr.LimitExceeded("profile_links", s.limits.MaxProfileLinks, "profile links")
		}
		return merged, nil
	})
}

// DeleteProfileLinks removes all of the caller's links.
func (s *Service) DeleteProfileLinks(ctx context.Context, a *Actor, o WriteOpts) error {
	_, err := s.changeLinks(ctx, a, opDeleteProfileLinks, o, "profile.links.deleted", func(map[string]string) (map[string]string, error) {
		return map[string]string{}, nil
	})
	return err
}

// changeLinks makes the caller's links what next makes of them, for op.
func (s *Service) changeLinks(ctx context.Context, a *Actor, op Op, o WriteOpts, event string,
	next func(map[string]string) (map[string]string, error)) (model.ProfileLinks, error) {
	var out model.ProfileLinks
	err := s.write(ctx, a, func(tx *store.Tx, a *Actor) error {
		if err := a.authorize(op); err != nil {
			return err
		}
		cur, err := tx.GetProfile(ctx, a.UserID)
		if err != nil {
			return err
		}
		if err := o.IfMatch.check(Tag(cur.Version)); err != nil {
			return err
		}
		links, err := next(cur.Links)
		if err != nil {
			return err
		}
		if maps.Equal(links, cur.Links) {
			out = cur
			return nil
		}
		v, err := tx.PutProfile(ctx, model.ProfileLinks{UserID: a.UserID, Links: links, Version: cur.Version}, s.now())
		if err != nil {
			return err
		}
		out = model.ProfileLinks{UserID: a.UserID, Links: links, Version: v}
		return emit(ctx, tx, a, o, event, "user:"+a.UserID, map[string]any{"before": cur.Links, "after": links})
	})
	return out, err
}

// validateLinks checks labels and URLs, reporting every offender.
func validateLinks(links map[string]string, at string) error {
	labels := make([]string, 0, len(links))
	for l := range links {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	var fields []apperr.FieldError
	for _, l := range labels {
		if !labelPattern.MatchString(l) {
			fields = append(fields, apperr.FieldError{Field: at + "." + l, Message: "labels match ^[a-z0-9_-]{1,32}$"})
			continue
		}
		if msg := checkLinkURL(links[l]); msg != "" {
			fields = append(fields, apperr.FieldError{Field: at + "." + l, Message: msg})
		}
	}
	if len(fields) > 0 {
		return apperr.InvalidFields(fields)
	}
	return nil
}

// checkLinkURL returns why a URL is not acceptable, or "".
func checkLinkURL(raw string) string {
	if len(raw) > MaxLinkURL {
		return fmt.Sprintf("URLs are at most %d characters", MaxLinkURL)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return "must be an absolute http or https URL"
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return "must be an absolute http or https URL"
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return "must not contain whitespace"
	}
	return ""
}

package guild

import (
	"context"
	"errors"
	"fmt"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/store"
)

// checkName refuses a name (of a channel, role or token, or a display name)
// that internal/names refuses, its length included: a 400 at field. The
// contract's length and pattern refuse most such names before they get
// here; the rest (a variation selector out of place, nothing visible,
// code points past U+FFFF that a pattern cannot name, and any name that
// comes by another path than HTTP) stop here, on every path: HTTP,
// import, CLI.
func checkName(field string, name *string) error {
	if name == nil {
		return nil
	}
	if msg := names.Check(*name); msg != "" {
		return apperr.Invalid(field, "%s", msg)
	}
	return nil
}

// CleanReason is the reason of the events that record a stored name
// cleaned by CleanStoredNames.
const CleanReason = "upgrade: removed the characters names may no longer hold"

// cleanBatch is how many names one transaction of CleanStoredNames cleans.
const cleanBatch = 200

// CleanStoredNames brings the names stored under an earlier, looser rule
// under the current one, so that every answer matches the contract: the
// characters the rule refuses are removed, a name longer than 100
// characters is cut to 100, and a name left with nothing visible becomes
// its ID (a display name: the username): names.Usable. Each change is an
// event by the system (no actor) with CleanReason. It runs at
// every start. The store remembers under which rule and up to which event
// it last checked: under the same rule, only the subjects of the events
// since are checked (every write of a name, by any release, writes one:
// an earlier release still serving beside this one during an upgrade
// included); under another rule, or when events since may have been
// purged, every name is. Either way the database skips the names that
// cannot break the rule (store.EachNameToCheck), so a start with nothing
// to clean writes no name. Instances starting together clean each name
// once. It returns how many names it changed.
func (s *Service) CleanStoredNames(ctx context.Context) (int, error) {
	rule, checked, oldest, err := s.store.NamesChecked(ctx)
	if err != nil {
		return 0, err
	}
	last, err := s.store.LastEventSeq(ctx) // before reading names: what comes later is checked next time
	if err != nil {
		return 0, err
	}
	after := checked
	if rule != names.Rule || checked > last || oldest > checked+1 {
		after = -1 // everything
	}
	var todo []store.StoredName
	err = s.store.EachNameToCheck(ctx, after, names.MaxLength, func(n store.StoredName) error {
		if names.Usable(n.Name, n.Fallback) != n.Name {
			todo = append(todo, n)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	cleaned := 0
	for len(todo) > 0 {
		batch := todo[:min(len(todo), cleanBatch)]
		todo = todo[len(batch):]
		n := 0
		err := s.write(ctx, nil, func(tx *store.Tx, _ *Actor) error {
			n = 0 // a write may run twice (store.Write)
			for _, sn := range batch {
				changed, err := s.cleanName(ctx, tx, sn)
				if err != nil {
					return err
				}
				if changed {
					n++
				}
			}
			return nil
		})
		if err != nil {
			return cleaned, err
		}
		cleaned += n
	}
	if rule != names.Rule || last != checked {
		err = s.write(ctx, nil, func(tx *store.Tx, _ *Actor) error { return tx.SetNamesChecked(ctx, names.Rule, last) })
	}
	return cleaned, err
}

// cleanName cleans one stored name as the transaction sees it (another
// instance may have cleaned it, or it may be gone); it reports whether it
// changed it.
func (s *Service) cleanName(ctx context.Context, tx *store.Tx, sn store.StoredName) (bool, error) {
	reason := CleanReason
	o := WriteOpts{Reason: &reason}
	now := s.now()
	switch sn.Table {
	case "channels":
		c, err := tx.GetChannel(ctx, sn.ID)
		if err != nil || names.Usable(c.Name, c.ID) == c.Name {
			return false, ignoreGone(err)
		}
		next := c
		next.Name, next.UpdatedAt = names.Usable(c.Name, c.ID), now
		if _, err := tx.UpdateChannel(ctx, next); err != nil {
			return false, err
		}
		return true, emit(ctx, tx, nil, o, "channel.renamed", "channel:"+c.ID, map[string]any{"before": c.Name, "after": next.Name})
	case "roles":
		r, err := tx.GetRole(ctx, sn.ID)
		if err != nil || names.Usable(r.Name, r.ID) == r.Name {
			return false, ignoreGone(err)
		}
		next := r
		next.Name, next.UpdatedAt = names.Usable(r.Name, r.ID), now
		if _, err := tx.UpdateRole(ctx, next); err != nil {
			return false, err
		}
		return true, emit(ctx, tx, nil, o, "role.renamed", "role:"+r.ID, map[string]any{"before": r.Name, "after": next.Name})
	case "users":
		u, err := tx.GetUser(ctx, sn.ID)
		if err != nil || names.Usable(u.DisplayName, u.Username) == u.DisplayName {
			return false, ignoreGone(err)
		}
		next := u
		next.DisplayName, next.UpdatedAt = names.Usable(u.DisplayName, u.Username), now
		out, err := tx.UpdateUser(ctx, next)
		if err != nil {
			return false, err
		}
		return true, emit(ctx, tx, nil, o, "user.updated", "user:"+u.ID, map[string]any{
			"before": userAudit(u), "after": userAudit(out), "email_changed": false})
	case "tokens":
		t, err := tx.GetToken(ctx, sn.UserID, sn.ID)
		if err != nil || names.Usable(t.Name, t.ID) == t.Name {
			return false, ignoreGone(err)
		}
		name := names.Usable(t.Name, t.ID)
		if err := tx.RenameToken(ctx, t.UserID, t.ID, name); err != nil {
			return false, err
		}
		return true, emit(ctx, tx, nil, o, "user.token.renamed", "user:"+t.UserID,
			map[string]any{"token_id": t.ID, "before": t.Name, "after": name})
	}
	return false, fmt.Errorf("clean names: unknown table %q", sn.Table)
}

// ignoreGone drops a not-found error: what was deleted needs no cleaning.
func ignoreGone(err error) error {
	if errors.Is(err, apperr.ErrNotFound) {
		return nil
	}
	return err
}

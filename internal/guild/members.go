package guild

import (
	"context"
	"slices"
	"strconv"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// MaxMembersChange bounds the users of one bulk membership change (add and
// remove together).
const MaxMembersChange = 1000

// MembersChange is a bulk membership change of one role.
type MembersChange struct {
	Add, Remove []string
}

// MembersResult counts the changes a bulk change made.
type MembersResult struct {
	Added, Removed int
}

// ListRoleMembers pages through the users holding a role, in ID order:
// the list of users filtered by the role, whose cursors it shares.
func (s *Service) ListRoleMembers(ctx context.Context, a *Actor, roleID, rawCursor string, limit int) (Page[model.User], error) {
	if err := a.authorize(opListRoleMembers); err != nil {
		return Page[model.User]{}, err
	}
	// A bad cursor (400) is answered before an unknown role (404), as
	// docs/design.md §11 orders them.
	page, err := s.listUsers(ctx, a, UserFilter{RoleID: roleID}, rawCursor, limit)
	if err != nil {
		return Page[model.User]{}, err
	}
	if _, ok := a.auth.Role(roleID); !ok {
		return Page[model.User]{}, apperr.NotFound("Role %q does not exist.", roleID)
	}
	return page, nil
}

// ChangeRoleMembers gives a role to the users of add and takes it from
// those of remove, all or none, with the checks of a single assignment for
// every user listed. It is idempotent: what is already so is no change,
// and writes no event.
func (s *Service) ChangeRoleMembers(ctx context.Context, a *Actor, roleID string, ch MembersChange, o WriteOpts) (MembersResult, error) {
	if n := len(ch.Add) + len(ch.Remove); n > MaxMembersChange {
		return MembersResult{}, apperr.InvalidAt("body", "at most %d users in all may be added or removed at once; got %d", MaxMembersChange, n)
	}
	if err := checkMembersLists(ch); err != nil {
		return MembersResult{}, err
	}
	var out MembersResult
	err := s.write(store.LargeWrite(ctx), a, func(tx *store.Tx, a *Actor) error {
		users, err := tx.UsersByID(ctx, append(slices.Clone(ch.Add), ch.Remove...))
		if err != nil {
			return err
		}
		var unknown []apperr.FieldError
		for _, list := range []struct {
			name string
			ids  []string
		}{{"add", ch.Add}, {"remove", ch.Remove}} {
			for i, id := range list.ids {
				if _, ok := users[id]; !ok {
					unknown = append(unknown, apperr.FieldError{Location: "body." + list.name + "[" + strconv.Itoa(i) + "]",
						Message: "no user with ID " + quote(id)})
				}
			}
		}
		if len(unknown) > 0 {
			return apperr.InvalidFields(unknown)
		}
		r, err := s.manageableRole(ctx, tx, a, opChangeRoleMembers, roleID)
		if err != nil {
			return err
		}
		// The users in the order given, add first: the first one the
		// caller may not change is the one the 403 names.
		for _, id := range append(slices.Clone(ch.Add), ch.Remove...) {
			if err := a.canChangeRolesOf(users[id]); err != nil {
				return err
			}
		}
		if err := a.canGrant(r.Permissions); err != nil {
			return err
		}
		var add, remove []string
		for _, id := range ch.Add {
			if !slices.Contains(users[id].Roles, roleID) {
				add = append(add, id)
			}
		}
		for _, id := range ch.Remove {
			if slices.Contains(users[id].Roles, roleID) {
				remove = append(remove, id)
			}
		}
		if len(add)+len(remove) == 0 {
			return nil
		}
		now := s.now()
		if out.Added, out.Removed, err = tx.ChangeRoleMembers(ctx, roleID, add, remove, now); err != nil {
			return err
		}
		changed := slices.Concat(add, remove)
		if err := tx.TouchUsers(ctx, changed, now); err != nil {
			return err
		}
		// Each user's roles after the change are worked out, not read
		// again: the store lists them by position, highest first.
		for _, id := range add {
			after := append(slices.Clone(users[id].Roles), roleID)
			slices.SortStableFunc(after, func(x, y string) int {
				rx, _ := a.auth.Role(x)
				ry, _ := a.auth.Role(y)
				return ry.Position - rx.Position
			})
			if err := emit(ctx, tx, a, o, "user.role.assigned", "user:"+id, map[string]any{
				"role_id": roleID, "before": users[id].Roles, "after": after}); err != nil {
				return err
			}
		}
		for _, id := range remove {
			after := slices.DeleteFunc(slices.Clone(users[id].Roles), func(r string) bool { return r == roleID })
			if err := emit(ctx, tx, a, o, "user.role.removed", "user:"+id, map[string]any{
				"role_id": roleID, "before": users[id].Roles, "after": after}); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// checkMembersLists refuses a user listed in both add and remove, at its
// place in remove.
func checkMembersLists(ch MembersChange) error {
	inAdd := make(map[string]bool, len(ch.Add))
	for _, id := range ch.Add {
		inAdd[id] = true
	}
	var both []apperr.FieldError
	for i, id := range ch.Remove {
		if inAdd[id] {
			both = append(both, apperr.FieldError{Location: "body.remove[" + strconv.Itoa(i) + "]",
				Message: "user " + quote(id) + " is also in add; a user may be added or removed, not both"})
		}
	}
	if len(both) > 0 {
		return apperr.InvalidFields(both)
	}
	return nil
}

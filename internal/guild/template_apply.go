package guild

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/template"
)

// importWrite is the transaction an import's changes go through, with
// the caller and options each change's event carries and the one time
// every row is stamped with.
type importWrite struct {
	s   *Service
	tx  *store.Tx
	a   *Actor
	o   WriteOpts
	now time.Time
}

func (w *importWrite) emit(ctx context.Context, typ, subject string, data map[string]any) error {
	return emit(ctx, w.tx, w.a, w.o, typ, subject, data)
}

// applyImport makes a plan's changes, each with its usual event, and
// returns the blobs of deleted channels' attachments, to delete after the
// commit.
func (s *Service) applyImport(ctx context.Context, tx *store.Tx, a *Actor, p *template.Plan, o WriteOpts) ([]string, error) {
	w := &importWrite{s: s, tx: tx, a: a, o: o, now: s.now()}
	if err := w.setGlobal(ctx, p.Global); err != nil {
		return nil, err
	}
	blobs, err := w.deleteChannels(ctx, p.DeleteChannels)
	if err != nil {
		return nil, err
	}
	if err := w.deleteRoles(ctx, p.DeleteRoles); err != nil {
		return nil, err
	}
	if err := w.createRoles(ctx, p.CreateRoles); err != nil {
		return nil, err
	}
	if err := w.updateRoles(ctx, p.UpdateRoles); err != nil {
		return nil, err
	}
	if err := w.placeRoles(ctx, p.Positions, p.Moved); err != nil {
		return nil, err
	}
	if err := w.createChannels(ctx, p.CreateChannels); err != nil {
		return nil, err
	}
	if err := w.updateChannels(ctx, p.UpdateChannels); err != nil {
		return nil, err
	}
	if err := w.replaceOverwrites(ctx, p.Overwrites, p.OverwriteChanges); err != nil {
		return nil, err
	}
	return blobs, nil
}

// setGlobal sets the global permissions, when the plan changes them.
func (w *importWrite) setGlobal(ctx context.Context, global *permissions.Set) error {
	if global == nil {
		return nil
	}
	before, _, err := w.tx.Settings(ctx)
	if err != nil {
		return err
	}
	if err := w.tx.SetGlobal(ctx, *global); err != nil {
		return err
	}
	return w.emit(ctx, "global.permissions.set", "global:permissions", map[string]any{
		"before": before.Names(), "after": global.Names()})
}

// deleteChannels deletes channels as DELETE /channels/{id} does, and
// returns their attachments' blobs.
func (w *importWrite) deleteChannels(ctx context.Context, ids []string) ([]string, error) {
	var blobs []string
	for _, id := range ids {
		c, err := w.tx.GetChannel(ctx, id)
		if err != nil {
			return nil, err
		}
		keys, err := w.s.deleteChannel(ctx, w.tx, w.a, w.o, c)
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, keys...)
	}
	return blobs, nil
}

// deleteRoles deletes roles, highest first: the positions below stay put.
func (w *importWrite) deleteRoles(ctx context.Context, roles []model.Role) error {
	for _, r := range roles {
		overwrites, err := w.tx.OverwritesOf(ctx, model.TargetRole, r.ID)
		if err != nil {
			return err
		}
		holders, err := w.tx.DeleteRole(ctx, r, w.now)
		if err != nil {
			return err
		}
		if err := w.emit(ctx, "role.deleted", "role:"+r.ID, history.RoleDeleted(r, holders, overwrites, false)); err != nil {
			return err
		}
	}
	return nil
}

// createRoles puts the new roles on top, in one statement; placeRoles then
// moves every role to its place once: inserting them one by one at the
// bottom would shift every role once per new role.
func (w *importWrite) createRoles(ctx context.Context, roles []model.Role) error {
	for i := range roles {
		roles[i].CreatedAt, roles[i].UpdatedAt = w.now, w.now
	}
	if err := w.tx.InsertRolesOnTop(ctx, roles); err != nil {
		return err
	}
	for _, r := range roles {
		if err := w.emit(ctx, "role.created", "role:"+r.ID, map[string]any{
			"name": r.Name, "position": r.Position, "color": r.Color, "permissions": r.Permissions.Names(), "created_at": history.Stamp(r.CreatedAt), "shifts": false}); err != nil {
			return err
		}
	}
	return nil
}

// updateRoles changes roles' names, colors and permissions, with the
// events of the single operations that make the same changes.
func (w *importWrite) updateRoles(ctx context.Context, roles []model.Role) error {
	for _, r := range roles {
		before, err := w.tx.GetRole(ctx, r.ID)
		if err != nil {
			return err
		}
		r.UpdatedAt = w.now
		if _, err := w.tx.UpdateRole(ctx, r); err != nil {
			return err
		}
		if r.Name != before.Name || !eqPtr(r.Color, before.Color) {
			typ, data := roleUpdated(before, r)
			if err := w.emit(ctx, typ, "role:"+r.ID, data); err != nil {
				return err
			}
		}
		if r.Permissions != before.Permissions {
			if err := w.emit(ctx, "role.permissions.set", "role:"+r.ID, map[string]any{
				"before": before.Permissions.Names(), "after": r.Permissions.Names()}); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeRoles moves the roles, as they now stand, to where the plan puts
// them (positions), and tells of each role the plan moves (moved: where it
// was).
func (w *importWrite) placeRoles(ctx context.Context, positions, moved map[string]int) error {
	at, err := w.tx.RolePositions(ctx)
	if err != nil {
		return err
	}
	moves := map[string]int{}
	for id, to := range positions {
		if at[id] != to {
			moves[id] = to
		}
	}
	if err := w.tx.SetRolePositions(ctx, moves, w.now); err != nil {
		return err
	}
	for _, id := range sortedKeys(moved) {
		if err := w.emit(ctx, "role.moved", "role:"+id, map[string]any{"before": moved[id], "after": positions[id], "shifts": false}); err != nil {
			return err
		}
	}
	return nil
}

// createChannels inserts channels in the plan's order, categories first.
func (w *importWrite) createChannels(ctx context.Context, channels []model.Channel) error {
	for _, c := range channels {
		c.CreatedAt, c.UpdatedAt = w.now, w.now
		if _, err := w.tx.InsertChannel(ctx, c); err != nil {
			return err
		}
		if err := w.emit(ctx, "channel.created", "channel:"+c.ID, map[string]any{
			"name": c.Name, "topic": c.Topic, "kind": c.Kind, "parent_id": c.ParentID, "position": c.Position, "created_at": history.Stamp(c.CreatedAt), "copied_overwrites": false}); err != nil {
			return err
		}
	}
	return nil
}

// updateChannels updates channels with one read and one statement for
// them all, not two round trips each under the write lock.
func (w *importWrite) updateChannels(ctx context.Context, channels []model.Channel) error {
	updates := slices.Clone(channels)
	ids := make([]string, len(updates))
	for i := range updates {
		ids[i] = updates[i].ID
		updates[i].UpdatedAt = w.now
	}
	befores, err := w.tx.ChannelsByID(ctx, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := befores[id]; !ok {
			return apperr.NotFound("Channel %q does not exist.", id)
		}
	}
	if err := w.tx.UpdateChannels(ctx, updates); err != nil {
		return err
	}
	for _, c := range updates {
		before := befores[c.ID]
		if c.Name != before.Name || !eqPtr(c.Topic, before.Topic) {
			typ, data := channelUpdated(before, c)
			if err := w.emit(ctx, typ, "channel:"+c.ID, data); err != nil {
				return err
			}
		}
		if !eqPtr(c.ParentID, before.ParentID) || c.Position != before.Position {
			if err := w.emit(ctx, "channel.moved", "channel:"+c.ID, movedData(before, c, false)); err != nil {
				return err
			}
		}
	}
	return nil
}

// replaceOverwrites writes the channels' new overwrite lists, then each
// overwrite change's event, as SetOverwrite writes it.
func (w *importWrite) replaceOverwrites(ctx context.Context, overwrites []template.ChannelOverwrites, changes []template.OverwriteChange) error {
	lists := make([]store.OverwriteList, len(overwrites))
	for i, co := range overwrites {
		lists[i] = store.OverwriteList{ChannelID: co.ChannelID, List: co.List}
	}
	if err := w.tx.ReplaceOverwriteLists(ctx, lists); err != nil {
		return err
	}
	for _, c := range changes {
		e := newOverwriteEvent(c.ChannelID, c.Before, c.After)
		if err := w.emit(ctx, e.typ, "channel:"+e.channelID, e.data); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, cmp.Compare[string])
	return out
}

package guild

import (
	"context"
	"fmt"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/store"
)

// Categories (docs/design.md §13): a channel's category and its position
// among its siblings; moving channels, one by one or many at once; and the
// overwrites a category shares with the channels synced with it.

// move is one channel's move: what was asked (position, parent) and, once
// checked, where it goes.
type move struct {
	id        string
	position  *int    // nil: kept, or last in a new category
	setParent bool    // the category is given
	parentID  *string // and is this (nil: out of any)
	lock      bool    // its overwrites become its category's
	from, to  model.Channel
}

// checkMove works out where a channel goes and checks that it may go
// there: a category is never in a category, a channel only goes into a
// category the caller may know of, a lock needs a category. field prefixes
// the location of a refusal ("positions[3]." in a reorder).
func (s *Service) checkMove(ctx context.Context, tx *store.Tx, a *Actor, c model.Channel, mv *move, field string) error {
	mv.from, mv.to = c, c
	if mv.setParent {
		mv.to.ParentID = mv.parentID
	}
	if p := mv.to.ParentID; p != nil && mv.setParent {
		if c.Kind == model.KindCategory {
			return apperr.Invalid(field+"parent_id", "a category cannot be in a category")
		}
		if *p == c.ID {
			return apperr.Invalid(field+"parent_id", "a channel cannot be in itself")
		}
		if _, err := a.category(*p, field+"parent_id"); err != nil {
			return err
		}
	}
	if mv.lock && mv.to.ParentID == nil {
		return apperr.Invalid(field+"lock_permissions", "the channel is in no category whose permissions it could take")
	}
	switch {
	case mv.position != nil:
		mv.to.Position = *mv.position
	case !eqPtr(mv.to.ParentID, c.ParentID):
		next, err := nextPosition(ctx, tx, mv.to.ParentID)
		if err != nil {
			return err
		}
		mv.to.Position = next
	}
	return nil
}

// moved reports whether the move changes the channel.
func (mv *move) moved() bool {
	return !eqPtr(mv.to.ParentID, mv.from.ParentID) || mv.to.Position != mv.from.Position
}

// ChannelMove is one entry of a reorder.
type ChannelMove struct {
	ID        string
	Position  int
	SetParent bool
	ParentID  *string
}

// ReorderChannels applies every move at once, or none, and returns the
// channels that moved, in the order given.
func (s *Service) ReorderChannels(ctx context.Context, a *Actor, moves []ChannelMove, o WriteOpts) ([]model.Channel, error) {
	seen := map[string]int{}
	for i, m := range moves {
		if j, dup := seen[m.ID]; dup {
			return nil, apperr.Invalid(fmt.Sprintf("positions[%d].id", i), "channel %q is moved twice (also at positions[%d])", m.ID, j)
		}
		seen[m.ID] = i
	}
	var out []model.Channel
	err := s.write(store.LargeWrite(ctx), a, func(tx *store.Tx, a *Actor) error {
		out = nil
		checked := make([]move, len(moves))
		for i, m := range moves {
			field := fmt.Sprintf("positions[%d].", i)
			// The caller's state is the transaction's: no read per entry.
			c, ok := a.known(m.ID)
			if !ok {
				return apperr.Invalid(field+"id", "no channel with ID %q", m.ID)
			}
			c.Synced = false // as stored
			position := m.Position
			mv := move{id: m.ID, position: &position, setParent: m.SetParent, parentID: m.ParentID}
			if err := s.checkMove(ctx, tx, a, c, &mv, field); err != nil {
				return err
			}
			checked[i] = mv
		}
		// The entries are valid (400 first, docs/design.md §11); now who may move them.
		if err := a.authorize(opReorderChannels); err != nil {
			return err
		}
		for i := range checked {
			if err := a.canReorder(opReorderChannels, &checked[i]); err != nil {
				return err
			}
		}
		now := s.now()
		touched := map[string]bool{}
		var moved []store.ChannelMove
		for i := range checked {
			mv := &checked[i]
			if !mv.moved() {
				continue
			}
			moved = append(moved, store.ChannelMove{ID: mv.id, ParentID: mv.to.ParentID, Position: mv.to.Position, UpdatedAt: now})
			if p := mv.to.ParentID; p != nil {
				touched[*p] = true
			}
			if err := emit(ctx, tx, a, o, "channel.moved", "channel:"+mv.id, movedData(mv.from, mv.to, false)); err != nil {
				return err
			}
		}
		// One statement for all the moves: a reorder at the limit must not
		// hold the write lock for a round trip per channel.
		if err := tx.MoveChannels(ctx, moved); err != nil {
			return err
		}
		// The limits hold on the state all the moves make.
		for parent := range touched {
			n, err := tx.CountChannels(ctx, parent)
			if err != nil {
				return err
			}
			if n > s.limits.MaxChannelsPerCategory {
				return apperr.LimitExceeded("channels_per_category", s.limits.MaxChannelsPerCategory, "channels in a category")
			}
		}
		var ids []string
		for i := range checked {
			if checked[i].moved() {
				ids = append(ids, checked[i].id)
			}
		}
		var err error
		out, err = storedChannels(ctx, tx, ids)
		return err
	})
	if out == nil {
		out = []model.Channel{}
	}
	for i := range out {
		out[i] = a.shown(out[i])
	}
	return out, err
}

// checkMoveLimit refuses a move into a category that is full.
func (s *Service) checkMoveLimit(ctx context.Context, tx *store.Tx, mv *move) error {
	if mv.to.ParentID == nil || eqPtr(mv.to.ParentID, mv.from.ParentID) {
		return nil
	}
	return s.checkCategoryLimit(ctx, tx, *mv.to.ParentID, 1) // a move adds no channel in all
}

package guild

import (
	"context"
	"errors"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// History answers (?at=): the state of now with the permission-relevant
// events after the instant undone (internal/history), then the permission
// engine, as for an answer of now (docs/design.md, "Notes: history").

// stateAt is the community as of at, following the users of only (nil:
// every user), for op. What op's row asks of at comes first: whether a
// user or channel existed then, or when the oldest event was written, is
// the audit log's to tell. An instant in the future, before the oldest
// event kept, or before one that lacks what undoing it needs, is a 400.
func (s *Service) stateAt(ctx context.Context, a *Actor, op Op, at time.Time, only []string) (*history.State, error) {
	if err := a.authorizeQuery(op, "at"); err != nil {
		return nil, err
	}
	if at.After(a.now) {
		return nil, apperr.InvalidAt("query.at", "%s is in the future", at.Format(time.RFC3339Nano))
	}
	oldest, err := s.store.EventsAfter(ctx, 0, 1)
	if err != nil {
		return nil, err
	}
	if len(oldest) == 0 || at.Before(oldest[0].CreatedAt) {
		return nil, apperr.InvalidAt("query.at", "the oldest event kept is of %s; ask about a later instant", at.Format(time.RFC3339Nano))
	}
	for range 10 {
		st, settled, err := s.stateRound(ctx, at, only)
		if err != nil || settled {
			return st, err
		}
	}
	return nil, apperr.Unavailable(errors.New("history: writes kept landing while the state of now was read"))
}

// stateRound reads the newest seq, the state of now (a fresh read scope
// follows every commit up to it), the events up to that seq, and the
// newest seq again: unmoved, the state is exactly the one after that seq,
// and undoing the events gives the state at the instant (settled); else a
// write landed meanwhile, and the round is to be tried again.
func (s *Service) stateRound(ctx context.Context, at time.Time, only []string) (*history.State, bool, error) {
	last, err := s.store.LastEventSeq(ctx)
	if err != nil {
		return nil, false, err
	}
	now := s.store.ReadScope(ctx)
	auth, err := s.store.AuthState(now)
	if err != nil {
		return nil, false, err
	}
	users, err := s.usersNow(now, only)
	if err != nil {
		return nil, false, err
	}
	events, err := s.store.EventsAfterInstant(ctx, at, last)
	if again, err2 := s.store.LastEventSeq(ctx); err != nil || err2 != nil || again != last {
		return nil, false, errors.Join(err, err2)
	}
	global, _ := auth.Global()
	st := history.Now(global, auth.Roles(), auth.Channels(), func(id string) []model.Overwrite {
		list, _, _ := auth.Overwrites(id)
		return list
	}, users, only)
	for _, ev := range events {
		if err := st.Undo(ev); err != nil {
			return nil, false, apperr.InvalidAt("query.at", "%v, written by an earlier release at %s; ask about a later instant",
				err, ev.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	return st, true, nil
}

// usersNow reads the users of ids that exist now, or every user (nil).
func (s *Service) usersNow(ctx context.Context, ids []string) ([]model.User, error) {
	var out []model.User
	for after := ""; ids == nil; {
		page, keys, err := s.store.HoldersPage(ctx, store.Holders{Everyone: true}, after, maxAccessRead)
		if out = append(out, page...); err != nil || len(page) < maxAccessRead {
			return out, err
		}
		after = keys[len(keys)-1]
	}
	for _, id := range ids {
		if u, err := s.store.User(ctx, id); err == nil {
			out = append(out, u)
		} else if !apperr.IsNotFound(err) {
			return nil, err
		}
	}
	return out, nil
}

// knowsAt reports whether the caller may know of a channel of the state:
// one that exists now as now; one deleted since if they may know of every
// channel now, or could view it then.
func (a *Actor) knowsAt(st *history.State, channelID string, at time.Time) bool {
	if st.Channels[channelID] == nil {
		return false
	}
	if _, exists := a.auth.Channel(channelID); exists || a.knowsEveryChannel() {
		return a.knows(channelID)
	}
	me := st.Users[a.UserID]
	return me != nil && permissions.InChannel(st.Subject(me, at), st.ChannelFor(channelID, a.UserID)).Has(permissions.ViewChannel)
}

// UserPermissionsAt is UserPermissions as of at: a user who did not exist
// then is a 404.
func (s *Service) UserPermissionsAt(ctx context.Context, a *Actor, userID string, channelID *string, explain bool, at time.Time) (UserPermissions, error) {
	st, err := s.stateAt(ctx, a, opGetUserPermissions, at, []string{userID, a.UserID})
	if err != nil {
		return UserPermissions{}, err
	}
	if channelID != nil && !a.knowsAt(st, *channelID, at) {
		return UserPermissions{}, apperr.Invalid("channelID", "no channel with ID %q as of %s", *channelID, at.Format(time.RFC3339Nano))
	}
	u := st.Users[userID]
	if u == nil {
		return UserPermissions{}, apperr.NotFound("User %q did not exist as of %s.", userID, at.Format(time.RFC3339Nano))
	}
	if err := a.authorizeOn(opGetUserPermissions, userID); err != nil {
		return UserPermissions{}, err
	}
	sub, out := st.Subject(u, at), UserPermissions{UserID: userID, ChannelID: channelID}
	if channelID == nil {
		out.Permissions = permissions.Base(sub)
		if explain {
			out.Explain = permissions.Explain(sub, nil)
		}
		return out, nil
	}
	ch := st.ChannelFor(*channelID, userID)
	if ch.SyncedFrom != "" && !a.knowsAt(st, ch.SyncedFrom, at) {
		ch.SyncedFrom = ""
	}
	if out.Permissions = permissions.InChannel(sub, ch); explain {
		out.Explain = permissions.Explain(sub, &ch)
	}
	return out, nil
}

// ListOverwritesAt is ListOverwrites as of at: a channel the caller may
// not know of, or that did not exist then, is a 404.
func (s *Service) ListOverwritesAt(ctx context.Context, a *Actor, channelID string, at time.Time) ([]model.Overwrite, error) {
	st, err := s.stateAt(ctx, a, opListChannelOverwrites, at, []string{a.UserID})
	if err != nil {
		return nil, err
	}
	if !a.knowsAt(st, channelID, at) {
		return nil, channelNotFound(channelID)
	}
	if _, exists := a.auth.Channel(channelID); exists {
		if err := a.authorizeOn(opListChannelOverwrites, channelID); err != nil {
			return nil, err
		}
	}
	position := func(id string) int {
		if r := st.Roles[id]; r != nil {
			return r.Position
		}
		return 0
	}
	return model.SortedOverwrites(position, st.Channels[channelID].List()), nil
}

// ListRolesAt is ListRoles as of at.
func (s *Service) ListRolesAt(ctx context.Context, a *Actor, at time.Time) ([]model.Role, error) {
	if err := a.authorize(opListRoles); err != nil {
		return nil, err
	}
	st, err := s.stateAt(ctx, a, opListRoles, at, []string{})
	if err != nil {
		return nil, err
	}
	return st.RoleList(), nil
}

// ChannelAccessAt is ChannelAccess as of at: the users who existed then
// and held the permission, as they were.
func (s *Service) ChannelAccessAt(ctx context.Context, a *Actor, channelID, permission, rawCursor string, limit int, at time.Time) (Page[model.User], error) {
	p, err := accessPermission(permission)
	if err != nil {
		return Page[model.User]{}, err
	}
	filters := []string{"channel access at", channelID, p.String(), at.UTC().Format(time.RFC3339Nano)}
	after, err := s.cursors.decode(rawCursor, filters...)
	if err != nil {
		return Page[model.User]{}, err
	}
	st, err := s.stateAt(ctx, a, opListChannelAccess, at, nil)
	if err != nil {
		return Page[model.User]{}, err
	}
	if !a.knowsAt(st, channelID, at) {
		return Page[model.User]{}, channelNotFound(channelID)
	}
	if err := a.authorize(opListChannelAccess); err != nil {
		return Page[model.User]{}, err
	}
	held, next := st.Holders(channelID, p, at, after, pageLimit(limit))
	users := make([]model.User, len(held))
	for i, u := range held {
		var email *string
		if now, err := s.store.User(ctx, u.ID); err == nil {
			email = now.Email
		}
		users[i] = st.UserModel(u, email)
	}
	return s.userPage(a, users, next, filters), nil
}

// Package asof answers history questions (?at=): the state of now with
// the permission-relevant events after the instant undone
// (internal/history), then the permission engine, as for an answer of now
// (docs/design.md, "Notes: history"). It builds on internal/guild's
// kernel; its rows of the authorization table are guild's.
package asof

import (
	"context"
	"errors"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// Service answers as of an instant, over the guild service.
type Service struct {
	svc   *guild.Service
	store *store.Store
}

// New is the history service over svc.
func New(svc *guild.Service) *Service { return &Service{svc: svc, store: svc.Store()} }

// maxRead bounds the users a read of every user takes at a time.
const maxRead = 2000

// stateAt is the community as of at, following the users of only (nil:
// every user), for op. What op's row asks of at comes first: whether a
// user or channel existed then, or when the oldest event was written, is
// the audit log's to tell. An instant in the future, before the oldest
// event kept, or before one that lacks what undoing it needs, is a 400.
func (s *Service) stateAt(ctx context.Context, a *guild.Actor, op guild.Op, at time.Time, only []string) (*history.State, error) {
	if err := a.AuthorizeQuery(op, "at"); err != nil {
		return nil, err
	}
	if at.After(a.Now()) {
		return nil, apperr.InvalidAt("query.at", "%s is in the future", at.Format(time.RFC3339Nano))
	}
	oldest, err := s.store.EventsAfter(ctx, 0, 1)
	if err != nil {
		return nil, err
	}
	if len(oldest) == 0 {
		return nil, apperr.InvalidAt("query.at", "no event is kept: the audit log tells of no instant")
	}
	if at.Before(oldest[0].CreatedAt) {
		return nil, apperr.InvalidAt("query.at", "the oldest event kept was written at %s; ask about a later instant",
			oldest[0].CreatedAt.Format(time.RFC3339Nano))
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
		page, keys, err := s.store.HoldersPage(ctx, store.Holders{Everyone: true}, after, maxRead)
		if out = append(out, page...); err != nil || len(page) < maxRead {
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
func knowsAt(a *guild.Actor, st *history.State, channelID string, at time.Time) bool {
	if st.Channels[channelID] == nil {
		return false
	}
	if _, exists := a.Auth().Channel(channelID); exists || a.KnowsEveryChannel() {
		return a.Knows(channelID)
	}
	me := st.Users[a.UserID]
	return me != nil && permissions.InChannel(st.Subject(me, at), st.ChannelFor(channelID, a.UserID)).Has(permissions.ViewChannel)
}

// UserPermissions is guild.Service.UserPermissions as of at: a user who did not exist
// then is a 404.
func (s *Service) UserPermissions(ctx context.Context, a *guild.Actor, userID string, channelID *string, explain bool, at time.Time) (guild.UserPermissions, error) {
	st, err := s.stateAt(ctx, a, guild.OpGetUserPermissions, at, []string{userID, a.UserID})
	if err != nil {
		return guild.UserPermissions{}, err
	}
	if channelID != nil && !knowsAt(a, st, *channelID, at) {
		return guild.UserPermissions{}, apperr.Invalid("channelID", "no channel with ID %q as of %s", *channelID, at.Format(time.RFC3339Nano))
	}
	u := st.Users[userID]
	if u == nil {
		return guild.UserPermissions{}, apperr.NotFound("User %q did not exist as of %s.", userID, at.Format(time.RFC3339Nano))
	}
	if err := a.AuthorizeOn(guild.OpGetUserPermissions, userID); err != nil {
		return guild.UserPermissions{}, err
	}
	sub, out := st.Subject(u, at), guild.UserPermissions{UserID: userID, ChannelID: channelID}
	if channelID == nil {
		out.Permissions = permissions.Base(sub)
		if explain {
			out.Explain = permissions.Explain(sub, nil)
		}
		return out, nil
	}
	ch := st.ChannelFor(*channelID, userID)
	if ch.SyncedFrom != "" && !knowsAt(a, st, ch.SyncedFrom, at) {
		ch.SyncedFrom = ""
	}
	if out.Permissions = permissions.InChannel(sub, ch); explain {
		out.Explain = permissions.Explain(sub, &ch)
	}
	return out, nil
}

// Overwrites is guild.Service.ListOverwrites as of at: a channel the caller may
// not know of, or that did not exist then, is a 404.
func (s *Service) Overwrites(ctx context.Context, a *guild.Actor, channelID string, at time.Time) ([]model.Overwrite, error) {
	st, err := s.stateAt(ctx, a, guild.OpListChannelOverwrites, at, []string{a.UserID})
	if err != nil {
		return nil, err
	}
	if !knowsAt(a, st, channelID, at) {
		return nil, guild.ChannelNotFound(channelID)
	}
	if _, exists := a.Auth().Channel(channelID); exists {
		if err := a.AuthorizeOn(guild.OpListChannelOverwrites, channelID); err != nil {
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

// Roles is guild.Service.ListRoles as of at.
func (s *Service) Roles(ctx context.Context, a *guild.Actor, at time.Time) ([]model.Role, error) {
	if err := a.Authorize(guild.OpListRoles); err != nil {
		return nil, err
	}
	st, err := s.stateAt(ctx, a, guild.OpListRoles, at, []string{})
	if err != nil {
		return nil, err
	}
	return st.RoleList(), nil
}

// ChannelAccess is guild.Service.ChannelAccess as of at: the users who existed then
// and held the permission, as they were.
func (s *Service) ChannelAccess(ctx context.Context, a *guild.Actor, channelID, permission, rawCursor string, limit int, at time.Time) (guild.Page[model.User], error) {
	p, err := guild.AccessPermission(permission)
	if err != nil {
		return guild.Page[model.User]{}, err
	}
	filters := []string{"channel access at", channelID, p.String(), at.UTC().Format(time.RFC3339Nano)}
	after, err := s.svc.Cursors().Decode(rawCursor, filters...)
	if err != nil {
		return guild.Page[model.User]{}, err
	}
	st, err := s.stateAt(ctx, a, guild.OpListChannelAccess, at, nil)
	if err != nil {
		return guild.Page[model.User]{}, err
	}
	if !knowsAt(a, st, channelID, at) {
		return guild.Page[model.User]{}, guild.ChannelNotFound(channelID)
	}
	if err := a.Authorize(guild.OpListChannelAccess); err != nil {
		return guild.Page[model.User]{}, err
	}
	held, next := st.Holders(channelID, p, at, after, guild.PageLimit(limit))
	ids := make([]string, len(held))
	for i, u := range held {
		ids[i] = u.ID
	}
	now, err := s.store.UsersByID(ctx, ids) // their emails, which the log does not keep
	if err != nil {
		return guild.Page[model.User]{}, err
	}
	users := make([]model.User, len(held))
	for i, u := range held {
		users[i] = st.UserModel(u, now[u.ID].Email)
	}
	return s.svc.UserPage(a, users, next, filters), nil
}

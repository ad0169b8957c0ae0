package guild

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/names"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// History answers (?at=): the state of now, from the caller's authorization
// state and the users asked about, with the permission-relevant events
// after the instant undone, newest first (internal/history); then the
// permission engine, as for an answer of now.

// stateAt is the community as of at, following the users of only (nil:
// every user), for op. The caller needs what op's row asks for at first:
// whether a user or a channel existed then, or when the oldest event was
// written, is the audit log's to tell. An instant in the future, before
// the oldest event kept, or before an event that lacks what undoing it
// needs, is a 400 at query.at.
func (s *Service) stateAt(ctx context.Context, a *Actor, op Op, at time.Time, only []string) (*history.State, error) {
	if err := a.authorizeQuery(op, "at"); err != nil {
		return nil, err
	}
	if at.After(a.now) {
		return nil, apperr.InvalidAt("query.at", "%s is in the future", at.Format(time.RFC3339Nano))
	}
	oldest, ok, err := s.store.OldestEventTime(ctx)
	if err != nil {
		return nil, err
	}
	if !ok || at.Before(oldest) {
		return nil, apperr.InvalidAt("query.at", "the oldest event kept was written at %s; ask about a later instant",
			oldest.Format(time.RFC3339Nano))
	}
	for range maxHistoryRounds {
		st, settled, err := s.stateRound(ctx, at, only)
		if err != nil || settled {
			return st, err
		}
	}
	return nil, apperr.Unavailable(errors.New("history: writes kept landing while the state of now was read"))
}

// maxHistoryRounds bounds the tries of stateAt to read the state of now
// and the events after the instant with no write landing in between.
const maxHistoryRounds = 10

// stateRound reads the newest seq, then the state of now (which follows
// every change committed up to it, and maybe more), then the events up to
// that seq, then the newest seq again: when it has not moved, the state is
// exactly the one after that seq, and undoing the events gives the state
// at the instant (settled). Otherwise a write landed meanwhile, and the
// round is to be tried again.
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
	if err != nil {
		return nil, false, err
	}
	if again, err := s.store.LastEventSeq(ctx); err != nil || again != last {
		return nil, false, err
	}
	st := stateOf(auth, users, only)
	for _, ev := range events {
		var inc *history.Incomplete
		if err := st.Undo(ev); errors.As(err, &inc) {
			return nil, false, apperr.InvalidAt("query.at", "event %d (%s, at %s) was written by an earlier release and lacks what "+
				"history needs; ask about an instant after it", ev.Seq, ev.Type, ev.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	return st, true, nil
}

// stateOf is the history state of now.
func stateOf(auth *store.AuthState, users []model.User, only []string) *history.State {
	st := history.New()
	st.Global, _ = auth.Global()
	for _, r := range auth.Roles() {
		st.Roles[r.ID] = &history.Role{ID: r.ID, Name: r.Name, Color: r.Color, Position: r.Position,
			Permissions: r.Permissions, CreatedAt: r.CreatedAt}
	}
	for _, c := range auth.Channels() {
		hc := &history.Channel{ID: c.ID, Name: c.Name, Topic: c.Topic, Kind: c.Kind, ParentID: c.ParentID,
			Position: c.Position, CreatedAt: c.CreatedAt, Overwrites: map[history.Target]permissions.Overwrite{}}
		list, _, _ := auth.Overwrites(c.ID)
		for _, o := range list {
			hc.Overwrites[history.Target{Type: o.TargetType, ID: o.TargetID}] = permissions.Overwrite{Allow: o.Allow, Deny: o.Deny}
		}
		st.Channels[c.ID] = hc
	}
	if only != nil {
		st.Only = map[string]bool{}
		for _, id := range only {
			st.Only[id] = true
		}
	}
	for _, u := range users {
		st.Users[u.ID] = historyUser(u)
	}
	return st
}

// usersNow reads the users of ids that exist now, or every user (nil).
func (s *Service) usersNow(ctx context.Context, ids []string) ([]model.User, error) {
	if ids == nil {
		var out []model.User
		after := ""
		for {
			page, keys, err := s.store.HoldersPage(ctx, store.Holders{Everyone: true}, after, maxAccessRead)
			if err != nil {
				return nil, err
			}
			out = append(out, page...)
			if len(page) < maxAccessRead {
				return out, nil
			}
			after = keys[len(keys)-1]
		}
	}
	var out []model.User
	for _, id := range ids {
		u, err := s.store.User(ctx, id)
		switch {
		case apperr.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			out = append(out, u)
		}
	}
	return out, nil
}

func historyUser(u model.User) *history.User {
	h := &history.User{ID: u.ID, Username: u.Username, DisplayName: u.DisplayName, Status: u.Status, IsOwner: u.IsOwner,
		Roles: map[string]bool{}, TimeoutUntil: u.TimeoutUntil, CreatedAt: u.CreatedAt}
	for _, r := range u.Roles {
		h.Roles[r] = true
	}
	return h
}

// knowsAt reports whether the caller may know of a channel as of the
// state: one that exists now as they may now; one deleted since if they
// may know of every channel now, or could view it then.
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

// UserPermissionsAt is UserPermissions as of at.
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
	sub := st.Subject(u, at)
	out := UserPermissions{UserID: userID, ChannelID: channelID}
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
	out.Permissions = permissions.InChannel(sub, ch)
	if explain {
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
	var out []model.Role
	for _, r := range st.RolesByPosition() {
		out = append(out, model.Role{ID: r.ID, Name: names.Usable(r.Name, r.ID), Position: r.Position, Color: r.Color,
			Permissions: r.Permissions, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt})
	}
	return out, nil
}

// ChannelAccessAt is ChannelAccess as of at: the users who existed then
// and held the permission, as they were (their email as now, by the usual
// rule, and null for a user deleted since).
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
	type keyed struct {
		key string
		u   *history.User
	}
	var held []keyed
	for _, u := range st.Users {
		if permissions.InChannel(st.Subject(u, at), st.ChannelFor(channelID, u.ID)).Has(p) {
			held = append(held, keyed{strings.ToLower(u.Username) + "\x00" + u.ID, u})
		}
	}
	slices.SortFunc(held, func(x, y keyed) int { return cmp.Compare(x.key, y.key) })
	n := pageLimit(limit)
	i, _ := slices.BinarySearchFunc(held, after, func(k keyed, t string) int {
		if k.key <= t {
			return -1
		}
		return 1
	})
	held = held[i:]
	next := ""
	if len(held) > n {
		held, next = held[:n], held[n-1].key
	}
	now, err := s.usersNow(ctx, nil)
	if err != nil {
		return Page[model.User]{}, err
	}
	current := map[string]model.User{}
	for _, u := range now {
		current[u.ID] = u
	}
	users := make([]model.User, len(held))
	for i, k := range held {
		users[i] = userAt(st, k.u, current[k.u.ID])
	}
	return s.userPage(a, users, next, filters), nil
}

// userAt is a user as of a state: as they were, with their email as now.
func userAt(st *history.State, u *history.User, now model.User) model.User {
	out := model.User{ID: u.ID, Username: names.Usable(u.Username, u.ID), DisplayName: names.Usable(u.DisplayName, u.ID),
		Email: now.Email, Status: u.Status, IsOwner: u.IsOwner, TimeoutUntil: u.TimeoutUntil,
		CreatedAt: u.CreatedAt, UpdatedAt: u.CreatedAt, Roles: []string{}}
	for _, r := range st.RolesByPosition() {
		if u.Roles[r.ID] {
			out.Roles = append(out.Roles, r.ID)
		}
	}
	return out
}

// What deletions record beyond what they always did, so that history can
// undo them: the whole of what went (a role's holders and overwrites, a
// user's overwrites and timeout, a channel's overwrites and children).

// stamp is a time as event data holds it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// overwritesData is a list of overwrites as event data holds it.
func overwritesData(list []model.Overwrite, withChannel, withTarget bool) []map[string]any {
	out := make([]map[string]any, 0, len(list))
	for _, o := range list {
		m := map[string]any{"allow": o.Allow.Names(), "deny": o.Deny.Names()}
		if withChannel {
			m["channel_id"] = o.ChannelID
		}
		if withTarget {
			m["target_type"], m["target_id"] = o.TargetType, nilIfEmpty(o.TargetID)
		}
		out = append(out, m)
	}
	return out
}

// roleDeletedData is the data of role.deleted, read before the deletion.
// shifts says whether the roles above moved down (a single deletion) or
// stay for the import that deletes it to place them.
func roleDeletedData(ctx context.Context, tx *store.Tx, r model.Role, overwrites []model.Overwrite, shifts bool) (map[string]any, error) {
	holders, err := tx.RoleHolderIDs(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	return map[string]any{"name": r.Name, "position": r.Position, "permissions": r.Permissions.Names(),
		"users": len(holders), "overwrites": len(overwrites), "color": r.Color, "created_at": stamp(r.CreatedAt),
		"holder_ids": holders, "role_overwrites": overwritesData(overwrites, true, false), "shifts": shifts}, nil
}

// addUserHistory adds to user.deleted's data what history needs.
func addUserHistory(data map[string]any, u model.User, overwrites []model.Overwrite) {
	data["display_name"], data["status"], data["created_at"] = u.DisplayName, u.Status, stamp(u.CreatedAt)
	data["timeout_until"] = timeValue(u.TimeoutUntil)
	data["user_overwrites"] = overwritesData(overwrites, true, false)
}

// channelDeletedData is the data of channel.deleted, read before the
// deletion.
func channelDeletedData(ctx context.Context, tx *store.Tx, c model.Channel) (map[string]any, error) {
	list, err := tx.ChannelOverwrites(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	auth, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	children := []string{}
	for _, ch := range auth.Children(c.ID) {
		children = append(children, ch.ID)
	}
	data := map[string]any{"name": c.Name, "overwrites": len(list), "topic": c.Topic, "kind": c.Kind,
		"parent_id": c.ParentID, "position": c.Position, "created_at": stamp(c.CreatedAt),
		"overwrite_list": overwritesData(list, false, true), "children": children}
	if c.Kind == model.KindCategory {
		data["channels"] = len(children) // left outside any category
	}
	return data, nil
}

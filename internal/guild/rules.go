package guild

import (
	"fmt"
	"maps"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/history"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// The rules of authorization: the caller's permissions, the checks an
// operation's row makes (authz.go), and the contextual rules an operation
// applies beyond its row, from what it acts on: non-disclosure of hidden
// channels, the role and user hierarchy, granting only what one holds,
// where a channel may move, the uploader's and the user's own exceptions.
// Each check that can refuse for lack of a permission or for the hierarchy
// records itself on the caller's trace (TraceChecks).

// --- the caller's permissions

// subjectOf is the permission engine's view of a user with the given roles,
// timed out at now when until is after it.
func subjectOf(auth *store.AuthState, isOwner bool, roleIDs []string, until *time.Time, now time.Time) permissions.Subject {
	global, _ := auth.Global()
	sub := permissions.Subject{IsOwner: isOwner, Global: global, Roles: auth.EngineRoles(roleIDs)}
	if until != nil && until.After(now) {
		sub.TimedOut, sub.TimeoutUntil = true, *until
	}
	return sub
}

// topOf is the highest position among the roles (0 for none).
func topOf(auth *store.AuthState, isOwner bool, roleIDs []string) int {
	if isOwner {
		return math.MaxInt
	}
	top := 0
	for _, id := range roleIDs {
		if r, ok := auth.Role(id); ok && r.Position > top {
			top = r.Position
		}
	}
	return top
}

func (a *Actor) subject() permissions.Subject {
	return subjectOf(a.auth, a.IsOwner, a.Roles, a.TimeoutUntil, a.now)
}

// Base is the caller's base permissions.
func (a *Actor) Base() permissions.Set { return permissions.Base(a.subject()) }

// In is the caller's effective permissions in a channel.
func (a *Actor) In(channelID string) permissions.Set {
	return permissions.InChannel(a.subject(), a.auth.ChannelFor(channelID, a.UserID))
}

// Top is the caller's top position; the owner's is above every role.
func (a *Actor) Top() int { return topOf(a.auth, a.IsOwner, a.Roles) }

// --- permissions and granting

// require checks global (base) permissions.
func (a *Actor) require(need permissions.Set) (err error) {
	if missing := need.Minus(a.Base()); !missing.IsEmpty() {
		err = apperr.MissingPermissions("", missing.Names())
	}
	if a.span != nil {
		a.traceCheck("permissions", err, "", need)
	}
	return err
}

// requireOneOf checks that the base permissions hold at least one of
// some.
func (a *Actor) requireOneOf(some permissions.Set) (err error) {
	if a.Base().Intersect(some).IsEmpty() {
		err = apperr.MissingOneOf(some.Names())
	}
	if a.span != nil {
		a.traceCheck("permissions", err, "", some)
	}
	return err
}

// requireIn checks effective permissions in a channel; a channel the
// caller may not know of is missing (hideChannel).
func (a *Actor) requireIn(channelID string, need permissions.Set) (err error) {
	if err = a.hideChannel(channelID); err == nil {
		if missing := need.Minus(a.In(channelID)); !missing.IsEmpty() {
			err = apperr.MissingPermissions(channelID, missing.Names())
		}
	}
	if a.span != nil {
		a.traceCheck("permissions", err, channelID, need)
	}
	return err
}

// canGrant checks that the caller holds every permission a change adds or
// removes (rules grant_held, hierarchy_and_grant_held).
func (a *Actor) canGrant(changed permissions.Set) (err error) {
	if missing := changed.Minus(a.Base()); !missing.IsEmpty() {
		err = apperr.CannotGrant("", missing.Names())
	}
	if a.span != nil {
		a.traceCheck("grant", err, "", changed)
	}
	return err
}

// canGrantIn is canGrant for an overwrite of a channel (rule grant_held).
func (a *Actor) canGrantIn(channelID string, changed permissions.Set) (err error) {
	if missing := changed.Minus(a.In(channelID)); !missing.IsEmpty() {
		err = apperr.CannotGrant(channelID, missing.Names())
	}
	if a.span != nil {
		a.traceCheck("grant", err, channelID, changed)
	}
	return err
}

// --- non-disclosure (docs/design.md §12)

// A channel the caller cannot view is answered exactly like a missing one,
// in every operation, so that a refusal never tells that a hidden channel
// exists.

// seesOf are the base permissions with which one may know of every channel:
// those who manage channels or their overwrites (and the owner, and
// ADMINISTRATOR, who hold everything).
var seesOf = permissions.Of(permissions.ManageChannels, permissions.ManageRoles)

// knows reports whether the caller may learn that the channel exists:
// VIEW_CHANNEL in it, or a base permission that manages channels.
func (a *Actor) knows(channelID string) bool {
	return a.knowsEveryChannel() || a.In(channelID).Has(permissions.ViewChannel)
}

// knowsEveryChannel reports whether the caller may know of every channel:
// the owner, ADMINISTRATOR, and who manages channels or their overwrites.
func (a *Actor) knowsEveryChannel() bool {
	if a.IsOwner {
		return true
	}
	base := a.Base()
	return base.Has(permissions.Administrator) || !base.Intersect(seesOf).IsEmpty()
}

// knowsExisting is knows for a channel that must exist now: a deleted one
// is known to no one who cannot know every channel.
func (a *Actor) knowsExisting(channelID string) bool {
	if a.knowsEveryChannel() {
		return true
	}
	_, ok := a.auth.Channel(channelID)
	return ok && a.knows(channelID)
}

// known returns a channel of the caller's state that the caller may know
// of; ok is false for one that does not exist or is hidden from them,
// which a request naming it in its body or query gets as a 400.
func (a *Actor) known(id string) (c model.Channel, ok bool) {
	c, ok = a.auth.Channel(id)
	return c, ok && a.knows(id)
}

// hideChannel is the answer for a channel that exists: nothing, or, when the
// caller may not know of it, the store's answer for a missing channel.
func (a *Actor) hideChannel(channelID string) error {
	if a.knows(channelID) {
		return nil
	}
	return channelNotFound(channelID)
}

// channelNotFound is word for word what the store says of a missing channel.
func channelNotFound(id string) error { return apperr.NotFound("Channel %q does not exist.", id) }

// category returns a category the caller may know of; anything else is a
// 400 at field (a hidden category is unknown).
func (a *Actor) category(id, field string) (model.Channel, error) {
	c, ok := a.known(id)
	if !ok {
		return model.Channel{}, apperr.Invalid(field, "no category with ID %q", id)
	}
	if c.Kind != model.KindCategory {
		return model.Channel{}, apperr.Invalid(field, "channel %q is not a category", id)
	}
	return c, nil
}

// shown is a channel as the caller may see it: a category they may not know
// of is not named (parent_id null, not synced), so that no answer holds the
// ID of a channel hidden from them.
func (a *Actor) shown(c model.Channel) model.Channel {
	if c.ParentID != nil && !a.knowsExisting(*c.ParentID) {
		c.ParentID, c.Synced = nil, false
	}
	return c
}

// listing is how the caller's list of channels shows c (rule
// filtered_by_view_channel). Who knows every channel sees it, marked
// Unviewable when they cannot view it; anyone else sees it only when they
// can view it, and as an orphan (shown without its category) when its
// category is hidden from them. every is knowsEveryChannel, asked once per
// list.
func (a *Actor) listing(c model.Channel, every bool) (out model.Channel, listed, orphan bool) {
	viewable := a.In(c.ID).Has(permissions.ViewChannel)
	switch {
	case every:
		c.Unviewable = !viewable
	case !viewable:
		return c, false, false
	case c.ParentID != nil && !a.knowsExisting(*c.ParentID):
		return a.shown(c), true, true
	}
	return c, true, false
}

// redactChannelRefs returns an event's data without the channels the
// caller may not know of: the category of a move (parent_id, before and
// after) and the category a synced change came from (synced_from) become
// null. The data is copied where it changes; events are shared.
func (a *Actor) redactChannelRefs(data map[string]any) map[string]any {
	hidden := func(v any) bool {
		id, ok := v.(string)
		return ok && !a.knowsExisting(id)
	}
	var out map[string]any
	set := func(k string, v any) {
		if out == nil {
			out = maps.Clone(data)
		}
		out[k] = v
	}
	for _, k := range []string{"synced_from", "parent_id"} {
		if hidden(data[k]) {
			set(k, nil)
		}
	}
	for _, k := range []string{"before", "after"} {
		if m, ok := data[k].(map[string]any); ok && hidden(m["parent_id"]) {
			m = maps.Clone(m)
			m["parent_id"] = nil
			set(k, m)
		}
	}
	// A deletion's lists for history: the overwrites in, and the
	// children of, channels hidden from the caller are left out.
	for _, k := range []string{"role_overwrites", "user_overwrites", "children"} {
		if list, ok := history.KeptChannelRefs(data[k], hidden); ok {
			set(k, list)
		}
	}
	if out == nil {
		return data
	}
	return out
}

// --- channels: where they go, and the overwrites categories share

// canPlace checks that the caller may put a channel in a category: op's
// permissions in the category, or, outside any, in the base permissions.
func (a *Actor) canPlace(op Op, parentID *string) error {
	if parentID != nil {
		return a.requireIn(*parentID, op.Permissions)
	}
	return a.require(op.Permissions)
}

// canMove checks what a move needs beyond op's permissions in the channel
// (rule moves_need_destination): for a new category, canPlace, and for a
// lock, MANAGE_ROLES in the category as well.
func (a *Actor) canMove(op Op, mv *move) error {
	if !eqPtr(mv.to.ParentID, mv.from.ParentID) {
		if err := a.canPlace(op, mv.to.ParentID); err != nil {
			return err
		}
	}
	if mv.lock {
		return a.requireIn(*mv.to.ParentID, manageRoles)
	}
	return nil
}

// canReorder checks what a reorder needs of each channel it moves, beyond
// op's base permissions: op's permissions in the channel, then canMove.
func (a *Actor) canReorder(op Op, mv *move) error {
	if err := a.requireIn(mv.id, op.Permissions); err != nil {
		return err
	}
	return a.canMove(op, mv)
}

// syncedChildren are the channels of a category synced with it (their
// overwrites are the category's), as the caller's state says: a change of
// the category's overwrites is theirs too.
func (a *Actor) syncedChildren(categoryID string) []string {
	var out []string
	for _, c := range a.auth.Children(categoryID) {
		if c.Synced {
			out = append(out, c.ID)
		}
	}
	return out
}

// --- attachments

// canUpload checks an upload to a channel, over prev (nil: a new
// attachment): op's permissions in the channel, and, to replace someone
// else's attachment, MANAGE_MESSAGES as well (rule
// replace_others_needs_manage_messages).
func (a *Actor) canUpload(op Op, channelID string, prev *model.Attachment) error {
	need := op.Permissions
	if prev != nil && !a.uploaded(*prev) {
		need = need.Union(manageMessages)
	}
	return a.requireIn(channelID, need)
}

// canDeleteUpload checks the deletion of an attachment: VIEW_CHANNEL in
// the channel and, unless the caller uploaded it, op's permissions too
// (rule or_uploader).
func (a *Actor) canDeleteUpload(op Op, channelID string, att model.Attachment) error {
	need := viewChannel
	if !a.uploaded(att) {
		need = need.Union(op.Permissions)
	}
	return a.requireIn(channelID, need)
}

// uploaded reports whether the caller uploaded the attachment.
func (a *Actor) uploaded(att model.Attachment) bool {
	return att.CreatedBy != nil && *att.CreatedBy == a.UserID
}

// --- the hierarchy of roles and users

// canManageRole checks that a role is strictly below the caller's top.
func (a *Actor) canManageRole(r model.Role) (err error) {
	if r.Position >= a.Top() {
		err = apperr.RoleHierarchy(r.ID, "Role "+quote(r.ID)+" is not below your highest role.")
	}
	if a.span != nil {
		a.traceCheck("role_hierarchy", err, "", 0, attribute.String("guildhall.role_id", r.ID))
	}
	return err
}

// canCreateRole checks that a new role, which lands at 1 while everyone
// else's roles move up, is below the caller's top: it is exactly when the
// caller has a role at all.
func (a *Actor) canCreateRole(id string) error {
	if a.Top() < 1 {
		return apperr.RoleHierarchy(id, "You need a role of your own to create roles below it.")
	}
	return nil
}

// canMoveRoleTo checks that a role's new position is below the caller's top.
func (a *Actor) canMoveRoleTo(id string, position int) error {
	if position >= a.Top() {
		return apperr.RoleHierarchy(id, fmt.Sprintf("Position %d is not below your highest role.", position))
	}
	return nil
}

// canManageUser checks that a user's top role is strictly below the caller's;
// the owner is above everyone and is changed by the owner alone.
func (a *Actor) canManageUser(u model.User) (err error) {
	switch {
	case a.IsOwner:
	case u.IsOwner:
		err = apperr.UserHierarchy(u.ID, "Only the owner can change the owner.")
	case topOf(a.auth, false, u.Roles) >= a.Top():
		err = apperr.UserHierarchy(u.ID, "User "+quote(u.Username)+"'s highest role is not below yours.")
	}
	if a.span != nil {
		a.traceCheck("user_hierarchy", err, "", 0, attribute.String("guildhall.user_id", u.ID))
	}
	return err
}

// canCreateUser checks that a new user, who has no role (top 0), is below
// the caller.
func (a *Actor) canCreateUser() error {
	if a.Top() < 1 {
		return apperr.UserHierarchy("", "You need a role of your own to create users below it.")
	}
	return nil
}

// canChangeRolesOf checks that the caller may change u's roles: changing
// someone else's needs them below the caller, as in Discord; the owner's
// roles are the owner's alone.
func (a *Actor) canChangeRolesOf(u model.User) error {
	if u.ID == a.UserID {
		return nil
	}
	return a.canManageUser(u)
}

// canDeleteRole checks that the caller could take the role away piece by
// piece: from each holder (which needs the holder below the caller, unless
// it is the caller, and holding its permissions) and from each channel
// where it has an overwrite (which needs what setChannelOverwrite needs
// there and holding what the overwrite allows and denies). Deleting it
// must not get round those rules. The checks run in the order of every
// other write: permissions, hierarchy, then granting. highHolder finds a
// holder out of the caller's reach (the owner, or one at or above the
// caller's top).
func (a *Actor) canDeleteRole(op Op, r model.Role, overwrites []model.Overwrite, highHolder func() (model.User, bool, error)) error {
	if err := a.authorize(op); err != nil {
		return err
	}
	for _, o := range overwrites {
		if err := a.authorizeOn(opSetChannelOverwrite, o.ChannelID); err != nil {
			return err
		}
	}
	if err := a.canManageRole(r); err != nil {
		return err
	}
	if !a.IsOwner {
		u, found, err := highHolder()
		if err != nil {
			return err
		}
		if found {
			// The refusal that taking the role from them one by one gets.
			detail := "User " + quote(u.Username) + " holds role " + quote(r.ID) + " and is not below you."
			if u.IsOwner {
				detail = "The owner holds role " + quote(r.ID) + ", and only the owner can change the owner."
			}
			err := apperr.UserHierarchy(u.ID, detail)
			if a.span != nil {
				a.traceCheck("user_hierarchy", err, "", 0, attribute.String("guildhall.user_id", u.ID))
			}
			return err
		}
	}
	if err := a.canGrant(r.Permissions); err != nil {
		return err
	}
	for _, o := range overwrites {
		if err := a.canGrantIn(o.ChannelID, o.Allow.Union(o.Deny)); err != nil {
			return err
		}
	}
	return nil
}

// --- users: their own exceptions, timeouts, emails

// canEditUser checks that the caller may turn u's profile into next, for
// op, whose permissions are what editing another user needs (rules
// user_hierarchy_or_self_except_status, user_patch). One's own username
// and display name need no permission (docs/design.md §12 "Editing
// oneself"); one's own email needs op's permissions, without a hierarchy
// check, since an address one holds unchecked could be anyone's, and since
// only who may see emails may learn that one is taken: this refusal comes
// before the uniqueness check. One's own status, and anything of another
// user, needs op's permissions over that user.
func (a *Actor) canEditUser(op Op, u, next model.User) error {
	if u.ID == a.UserID && next.Status == u.Status {
		if eqPtr(next.Email, u.Email) {
			return nil
		}
		return a.authorize(op)
	}
	if err := a.authorize(op); err != nil {
		return err
	}
	return a.canManageUser(u)
}

// canTimeOut checks that the caller may time a user out (or end their
// timeout): what op's row requires for timeout_until (MODERATE_MEMBERS)
// and the user below the caller's top; never oneself, the owner, or a user
// with ADMINISTRATOR in their base (rule user_patch).
func (a *Actor) canTimeOut(op Op, u model.User) error {
	if err := a.authorizeField(op, "timeout_until"); err != nil {
		return err
	}
	switch {
	case u.ID == a.UserID:
		return apperr.UserHierarchy(u.ID, "You cannot time yourself out.")
	case u.IsOwner:
		return apperr.UserHierarchy(u.ID, "The owner cannot be timed out.")
	case permissions.Base(subjectOf(a.auth, false, u.Roles, nil, a.now)).Has(permissions.Administrator):
		return apperr.UserHierarchy(u.ID, "User "+quote(u.Username)+" holds ADMINISTRATOR and cannot be timed out.")
	}
	return a.canManageUser(u)
}

// seesEmails reports whether the caller may see every user's email
// (MANAGE_USERS); a search by email is theirs alone, since anyone else
// could probe for an address one prefix at a time.
func (a *Actor) seesEmails() bool { return a != nil && a.Base().Has(permissions.ManageUsers) }

// hideEmail removes the email unless the caller is the user or sees emails
// (rule email_visible_to_self_or_manage_users).
func hideEmail(a *Actor, u *model.User) {
	if a != nil && (a.UserID == u.ID || a.seesEmails()) {
		return
	}
	u.Email = nil
	u.EmailHidden = true
}

// --- the trace of the checks

// TraceChecks records the actor's permission and hierarchy checks from now
// on as events ("authorize.check") of span: the HTTP layer passes the
// request's span when the request is traced.
func (a *Actor) TraceChecks(span trace.Span) { a.span = span }

// traceCheck records one check: what it was, in which channel, the
// permissions it needed, and whether it allowed the request (else why not).
func (a *Actor) traceCheck(check string, err error, channelID string, need permissions.Set, more ...attribute.KeyValue) {
	attrs := append(more, attribute.String("guildhall.check", check), attribute.Bool("guildhall.allowed", err == nil))
	if !need.IsEmpty() {
		attrs = append(attrs, attribute.StringSlice("guildhall.permissions", need.Names()))
	}
	if channelID != "" {
		attrs = append(attrs, attribute.String("guildhall.channel_id", channelID))
	}
	if e, ok := apperr.As(err); ok {
		refusal := "not_found" // a channel the caller may not know of
		if e.Forbidden != nil {
			refusal = e.Forbidden.Reason
			if len(e.Forbidden.Missing) > 0 {
				attrs = append(attrs, attribute.StringSlice("guildhall.missing_permissions", e.Forbidden.Missing))
			}
		}
		attrs = append(attrs, attribute.String("guildhall.refusal", refusal))
	}
	a.span.AddEvent("authorize.check", trace.WithAttributes(attrs...))
}

func quote(s string) string { return "\"" + s + "\"" }

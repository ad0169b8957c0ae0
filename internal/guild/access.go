package guild

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// Actor is an authenticated caller, with the authorization state their
// request is judged by. Both come from the store as of the request's read
// scope (store.Store.ReadScope), which the store answers only after
// following every change committed before the request arrived: a revoked
// token, a suspended user or a removed permission holds on the very next
// request, on every instance.
type Actor struct {
	model.Principal
	now       time.Time // when the request was judged (a timeout is compared with it)
	auth      *store.AuthState
	expires   *time.Time // when the token expires (nil: never, or no token)
	tokenHash string     // "" for a caller without a token (an event-stream ticket)
	ticket    string     // hash of the event-stream ticket it authenticated with, until consumed
	span      trace.Span // where its checks are recorded (TraceChecks); nil: not traced
}

// HashToken is how a token is stored and looked up.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Request returns the context of one request: its reads are answered as
// of one moment after this call (store.Store.ReadScope).
func (s *Service) Request(ctx context.Context) context.Context { return s.store.ReadScope(ctx) }

// Authenticate resolves a bearer token to an actor.
func (s *Service) Authenticate(ctx context.Context, token string) (*Actor, error) {
	if token == "" || len(token) > 512 {
		return nil, apperr.Unauthenticated("A bearer token is required.")
	}
	hash := HashToken(token)
	cred, err := s.store.Credentials(ctx, hash)
	if err != nil {
		return nil, err
	}
	if !constantTimeEqual(cred.TokenHash, hash) {
		return nil, apperr.Unauthenticated("The bearer token is unknown or revoked.")
	}
	auth, err := s.store.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	return s.actorFrom(cred, auth)
}

// actorFrom is the actor of credentials, judged by auth; a suspended user
// or an expired token is a 401.
func (s *Service) actorFrom(cred store.Credentials, auth *store.AuthState) (*Actor, error) {
	if err := s.usable(cred); err != nil {
		return nil, err
	}
	return &Actor{Principal: cred.Principal, now: s.now(), auth: auth, expires: cred.ExpiresAt, tokenHash: cred.TokenHash}, nil
}

// usable refuses the credentials of a suspended user or an expired token.
func (s *Service) usable(cred store.Credentials) error {
	if cred.Status != model.StatusActive {
		return apperr.Unauthenticated("The user of this token is suspended.")
	}
	if cred.ExpiresAt != nil && !cred.ExpiresAt.After(s.now()) {
		return apperr.Unauthenticated("The bearer token has expired.")
	}
	return nil
}

// Recheck authenticates a caller whose request outlives its start (an event
// stream) again, against the state as of now: their token (a revoked or
// expired one is a 401), or, for a caller without one (an event-stream
// ticket), their user.
func (s *Service) Recheck(ctx context.Context, a *Actor) (*Actor, error) {
	ctx = s.store.ReadScope(ctx)
	var cred store.Credentials
	var err error
	if a.TokenID != "" {
		cred, err = s.store.CredentialsOfToken(ctx, a.TokenID)
	} else if cred, err = s.store.CredentialsOf(ctx, a.UserID); apperr.IsNotFound(err) {
		err = apperr.Unauthenticated("The user of this ticket no longer exists.")
	}
	if err != nil {
		return nil, err
	}
	auth, err := s.store.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	b, err := s.actorFrom(cred, auth)
	if err != nil {
		return nil, err
	}
	b.TokenID, b.span = a.TokenID, a.span
	return b, nil
}

// inTx judges the caller again inside a write transaction, by exactly the
// state the write commits on, so that a token revoked while the request
// ran (a long upload) commits nothing. Unless the transaction changed
// them, the caller's credentials and the authorization state come from the
// store's cache, which followed every commit before the transaction began.
func (s *Service) inTx(ctx context.Context, tx *store.Tx, a *Actor) (*Actor, error) {
	var cred store.Credentials
	var err error
	if a.tokenHash != "" {
		cred, err = tx.Credentials(ctx, a.tokenHash)
	} else if cred, err = tx.CredentialsOf(ctx, a.UserID); apperr.IsNotFound(err) {
		err = apperr.Unauthenticated("The user of this ticket no longer exists.")
	}
	if err != nil {
		return nil, err
	}
	auth, err := tx.AuthState(ctx)
	if err != nil {
		return nil, err
	}
	b, err := s.actorFrom(cred, auth)
	if err != nil {
		return nil, err
	}
	b.TokenID, b.span = a.TokenID, a.span
	return b, nil
}

// constantTimeEqual compares secrets without leaking where they differ.
func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// subjectOf is the permission engine's view of a user with the given roles,
// timed out at now when until is after it.
func subjectOf(auth *store.AuthState, isOwner bool, roleIDs []string, until *time.Time, now time.Time) permissions.Subject {
	global, _ := auth.Global()
	sub := permissions.Subject{IsOwner: isOwner, Global: global, Roles: make([]permissions.Role, 0, len(roleIDs))}
	if until != nil && until.After(now) {
		sub.TimedOut, sub.TimeoutUntil = true, *until
	}
	for _, id := range roleIDs {
		if r, ok := auth.Role(id); ok {
			sub.Roles = append(sub.Roles, permissions.Role{ID: r.ID, Permissions: r.Permissions})
		}
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

// canGrant checks that the caller holds every permission a change adds or removes.
func (a *Actor) canGrant(changed permissions.Set) (err error) {
	if missing := changed.Minus(a.Base()); !missing.IsEmpty() {
		err = apperr.CannotGrant("", missing.Names())
	}
	if a.span != nil {
		a.traceCheck("grant", err, "", changed)
	}
	return err
}

// canGrantIn is canGrant for an overwrite of a channel.
func (a *Actor) canGrantIn(channelID string, changed permissions.Set) (err error) {
	if missing := changed.Minus(a.In(channelID)); !missing.IsEmpty() {
		err = apperr.CannotGrant(channelID, missing.Names())
	}
	if a.span != nil {
		a.traceCheck("grant", err, channelID, changed)
	}
	return err
}

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

package guild

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/permissions"
	"github.com/guildhall/guildhall/internal/store"
)

// snapshot is the authorization state kept in memory: every role and every
// overwrite, as of one auth version. It is immutable once built.
type snapshot struct {
	version    int64
	global     permissions.Set
	roles      map[string]model.Role
	roleCount  int
	overwrites map[string]*channelOverwrites
}

type channelOverwrites struct {
	everyone permissions.Overwrite
	roles    []permissions.RoleOverwrite
	users    map[string]permissions.Overwrite
}

func newSnapshot(s store.Snapshot) *snapshot {
	snap := &snapshot{version: s.AuthVersion, global: s.Global,
		roles: make(map[string]model.Role, len(s.Roles)), roleCount: len(s.Roles),
		overwrites: map[string]*channelOverwrites{}}
	for _, r := range s.Roles {
		snap.roles[r.ID] = r
	}
	for _, o := range s.Overwrites {
		c := snap.overwrites[o.ChannelID]
		if c == nil {
			c = &channelOverwrites{users: map[string]permissions.Overwrite{}}
			snap.overwrites[o.ChannelID] = c
		}
		ow := permissions.Overwrite{Allow: o.Allow, Deny: o.Deny}
		switch o.TargetType {
		case model.TargetEveryone:
			c.everyone = ow
		case model.TargetRole:
			c.roles = append(c.roles, permissions.RoleOverwrite{RoleID: o.TargetID, Overwrite: ow})
		case model.TargetUser:
			c.users[o.TargetID] = ow
		}
	}
	return snap
}

// authz caches the snapshot and refreshes it when the store's auth version
// moves, which every authenticated request learns in the same round trip
// that checks its token.
type authz struct {
	// load reads the current snapshot from the read pool.
	load func(context.Context) (store.Snapshot, error)
	mu   sync.Mutex
	snap *snapshot
	// loads collapses concurrent read-path loads of one version into one:
	// without it every request that sees a new version loads it itself.
	loads singleflight.Group
}

func (z *authz) current() *snapshot {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.snap
}

// atLeast returns a snapshot of the given version or newer for a read
// request, loading it from the read pool once however many requests ask.
func (z *authz) atLeast(ctx context.Context, version int64) (*snapshot, error) {
	if s := z.current(); s != nil && s.version >= version {
		return s, nil
	}
	v, err, _ := z.loads.Do(strconv.FormatInt(version, 10), func() (any, error) {
		// The first caller's cancellation must not fail the others.
		return z.at(context.WithoutCancel(ctx), version, z.load)
	})
	if err != nil {
		return nil, err
	}
	return v.(*snapshot), nil
}

// at returns a snapshot of exactly the given version, loading it if the
// cached one differs. load reads it: the read pool, or a write transaction,
// which must see exactly the state it commits on.
func (z *authz) at(ctx context.Context, version int64, load func(context.Context) (store.Snapshot, error)) (*snapshot, error) {
	if s := z.current(); s != nil && s.version == version {
		return s, nil
	}
	raw, err := load(ctx)
	if err != nil {
		return nil, err
	}
	s := newSnapshot(raw)
	z.mu.Lock()
	if z.snap == nil || s.version >= z.snap.version {
		z.snap = s
	}
	z.mu.Unlock()
	return s, nil
}

// inTx returns the snapshot a write transaction sees. A write that follows,
// in the same transaction, one that changed authorization state sees state
// that is not committed yet: it is loaded for that write alone and never
// cached, since the transaction may still fail (and its version number then
// be reused by another commit).
func (z *authz) inTx(ctx context.Context, version int64, tx *store.Tx) (*snapshot, error) {
	if s := z.current(); s != nil && s.version == version {
		return s, nil
	}
	if tx.AuthStateUncommitted() {
		raw, err := tx.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		return newSnapshot(raw), nil
	}
	return z.at(ctx, version, tx.Snapshot)
}

// Actor is an authenticated caller, with the authorization state their
// request is judged by.
//
// An actor may come from cached credentials, not yet confirmed: then the
// first read the request makes confirms them (the hottest reads return the
// versions they were read at, in the same statement), or, failing that,
// Confirm does with a read of its own before anything is answered. If the
// versions moved, the request is authenticated again and run again: a
// revoked token, a suspended user or a removed permission holds on the very
// next request on every instance, at the cost of no extra statement on a
// warm instance.
type Actor struct {
	model.Principal
	snap *snapshot
	// versions are what the actor is valid at: the credentials version its
	// credentials were read at, and its snapshot's authorization version.
	versions  store.Versions
	expires   *time.Time // when the token expires (nil: never, or no token)
	confirmed bool       // a read of this request found versions current
	tokenKey  [sha256.Size]byte
	ticket    string // hash of the event-stream ticket it authenticated with, until consumed
}

// Confirmed reports whether the actor's credentials are known to be current
// for this request.
func (a *Actor) Confirmed() bool { return a.confirmed }

// HashToken is how a token is stored and looked up.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// credCache remembers what authenticating a token learned, as of one
// credentials version. Revoking a token, suspending or deleting a user and
// changing a user's roles move that version (store.Tx.BumpCredentials); an
// entry found by a request is confirmed against the version its reads see
// (see Actor), so there is no time-to-live.
type credCache struct {
	mu      sync.RWMutex
	version int64
	m       map[[sha256.Size]byte]store.Credentials
}

// maxCachedCredentials bounds the cache: only valid tokens enter it, but
// their number is up to the users.
const maxCachedCredentials = 1 << 16

func (c *credCache) get(key [sha256.Size]byte) (store.Credentials, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	cred, ok := c.m[key]
	return cred, ok
}

func (c *credCache) put(key [sha256.Size]byte, cred store.Credentials) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := cred.Versions.Credentials
	switch {
	case v < c.version:
		return // read before a change this cache already knows of
	case v > c.version || c.m == nil || len(c.m) >= maxCachedCredentials:
		c.version, c.m = v, make(map[[sha256.Size]byte]store.Credentials)
	}
	c.m[key] = cred
}

// Authenticate resolves a bearer token to an actor. A token cached by an
// earlier request costs no statement: the actor is confirmed by the
// request's own reads (see Actor). Otherwise it costs one.
func (s *Service) Authenticate(ctx context.Context, token string) (*Actor, error) {
	if token == "" || len(token) > 512 {
		return nil, apperr.Unauthenticated("A bearer token is required.")
	}
	key := sha256.Sum256([]byte(token))
	// A refusal (a suspended user, an expired token) is never answered
	// from the cache: the change that ends it must decide the next request.
	if cred, ok := s.creds.get(key); ok && s.usable(cred) == nil {
		a, err := s.actorFrom(ctx, cred)
		if err != nil {
			return nil, err
		}
		a.tokenKey, a.confirmed = key, false
		return a, nil
	}
	hash := hex.EncodeToString(key[:])
	cred, err := s.store.Authenticate(ctx, hash)
	if err != nil {
		return nil, err
	}
	if !constantTimeEqual(cred.TokenHash, hash) {
		return nil, apperr.Unauthenticated("The bearer token is unknown or revoked.")
	}
	s.creds.put(key, cred)
	a, err := s.actorFrom(ctx, cred)
	if err != nil {
		return nil, err
	}
	a.tokenKey = key
	return a, nil
}

// actorFrom is the actor of credentials just read (confirmed).
func (s *Service) actorFrom(ctx context.Context, cred store.Credentials) (*Actor, error) {
	if err := s.usable(cred); err != nil {
		return nil, err
	}
	snap, err := s.authz.atLeast(ctx, cred.Versions.Auth)
	if err != nil {
		return nil, err
	}
	return &Actor{Principal: cred.Principal, snap: snap, versions: store.Versions{Auth: snap.version, Credentials: cred.Versions.Credentials},
		expires: cred.ExpiresAt, confirmed: true}, nil
}

// errStale: a read of the request found versions other than the actor's.
var errStale = errors.New("guild: the caller's credentials changed during the request")

// IsStale reports whether err says the caller must be confirmed again (see
// Confirm) and the request run again.
func IsStale(err error) bool { return errors.Is(err, errStale) }

// confirm checks an actor against the versions a read of its request saw.
func confirm(a *Actor, v store.Versions) error {
	if a == nil || a.confirmed {
		return nil
	}
	if v == a.versions {
		a.confirmed = true
		return nil
	}
	return errStale
}

// Confirm makes sure a request's actor is current: it reads the versions
// (one statement) unless a read of the request already did. It returns the
// actor unchanged (now confirmed), or, when the versions moved, the caller
// read again (fresh is true: the request must run again with it), or the
// 401 of a token revoked or a user suspended meanwhile.
func (s *Service) Confirm(ctx context.Context, a *Actor) (actor *Actor, fresh bool, err error) {
	if a.confirmed {
		return a, false, nil
	}
	v, err := s.store.CurrentVersions(ctx)
	if err != nil {
		return nil, false, err
	}
	if confirm(a, v) == nil {
		return a, false, nil
	}
	cred, err := s.reread(ctx, s.store, a)
	if err != nil {
		return nil, false, err
	}
	if a.TokenID != "" {
		s.creds.put(a.tokenKey, cred)
	}
	b, err := s.actorFrom(ctx, cred)
	if err != nil {
		return nil, false, err
	}
	b.tokenKey = a.tokenKey
	return b, true, nil
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

// credentialSource is where a caller is re-read: the read pool or a write
// transaction.
type credentialSource interface {
	CredentialsOf(ctx context.Context, userID string) (store.Credentials, error)
	CredentialsOfToken(ctx context.Context, tokenID string) (store.Credentials, error)
}

// reread reads the caller again: their token (a revoked or expired one is a
// 401), or, for a caller without one (an event-stream ticket), the user;
// then their status and roles. One statement.
func (s *Service) reread(ctx context.Context, src credentialSource, a *Actor) (store.Credentials, error) {
	var cred store.Credentials
	var err error
	if a.TokenID != "" {
		cred, err = src.CredentialsOfToken(ctx, a.TokenID)
	} else if cred, err = src.CredentialsOf(ctx, a.UserID); apperr.IsNotFound(err) {
		err = apperr.Unauthenticated("The user of this ticket no longer exists.")
	}
	if err != nil {
		return store.Credentials{}, err
	}
	if err := s.usable(cred); err != nil {
		return store.Credentials{}, err
	}
	cred.Principal.TokenID = a.TokenID
	return cred, nil
}

// Recheck re-authenticates a caller whose request outlives its start (an
// event stream) against the current state.
func (s *Service) Recheck(ctx context.Context, a *Actor) (*Actor, error) {
	cred, err := s.reread(ctx, s.store, a)
	if err != nil {
		return nil, err
	}
	return s.actorFrom(ctx, cred)
}

// inTx re-reads the caller inside a write transaction, so the rules are
// checked against exactly the state the write commits on, and a token
// revoked while the request ran (a long upload) commits nothing.
// It costs one statement (and a snapshot load when the auth version moved).
//
// When the transaction's state still has the versions the caller was
// authenticated at (nothing changed credentials or authorization since, in
// this transaction or before it), the caller as authenticated is the caller
// as of now: the versions cost one statement per transaction, not per write.
func (s *Service) inTx(ctx context.Context, tx *store.Tx, a *Actor) (*Actor, error) {
	v, unchanged, err := tx.StartVersions(ctx)
	if err != nil {
		return nil, err
	}
	if unchanged && v == a.versions {
		if a.expires != nil && !a.expires.After(s.now()) {
			return nil, apperr.Unauthenticated("The bearer token has expired.")
		}
		a.confirmed = true
		return a, nil
	}
	cred, err := s.reread(ctx, tx, a)
	if err != nil {
		return nil, err
	}
	snap, err := s.authz.inTx(ctx, cred.Versions.Auth, tx)
	if err != nil {
		return nil, err
	}
	// The request is now judged by the state it commits on: it must never
	// run again, whatever its first actor was.
	a.confirmed = true
	return &Actor{Principal: cred.Principal, snap: snap, versions: cred.Versions, expires: cred.ExpiresAt, confirmed: true}, nil
}

// constantTimeEqual compares secrets without leaking where they differ.
func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// subjectOf is the permission engine's view of a user with the given roles.
func (snap *snapshot) subjectOf(isOwner bool, roleIDs []string) permissions.Subject {
	sub := permissions.Subject{IsOwner: isOwner, Global: snap.global, Roles: make([]permissions.Role, 0, len(roleIDs))}
	for _, id := range roleIDs {
		if r, ok := snap.roles[id]; ok {
			sub.Roles = append(sub.Roles, permissions.Role{ID: r.ID, Permissions: r.Permissions})
		}
	}
	return sub
}

// channelOf is the engine's view of a channel's overwrites for one user.
func (snap *snapshot) channelOf(channelID, userID string) permissions.Channel {
	c := snap.overwrites[channelID]
	if c == nil {
		return permissions.Channel{}
	}
	return permissions.Channel{Everyone: c.everyone, Roles: c.roles, User: c.users[userID]}
}

// topOf is the highest position among the roles (0 for none).
func (snap *snapshot) topOf(isOwner bool, roleIDs []string) int {
	if isOwner {
		return math.MaxInt
	}
	top := 0
	for _, id := range roleIDs {
		if r, ok := snap.roles[id]; ok && r.Position > top {
			top = r.Position
		}
	}
	return top
}

func (a *Actor) subject() permissions.Subject { return a.snap.subjectOf(a.IsOwner, a.Roles) }

// Base is the caller's base permissions.
func (a *Actor) Base() permissions.Set { return permissions.Base(a.subject()) }

// In is the caller's effective permissions in a channel.
func (a *Actor) In(channelID string) permissions.Set {
	return permissions.InChannel(a.subject(), a.snap.channelOf(channelID, a.UserID))
}

// Top is the caller's top position; the owner's is above every role.
func (a *Actor) Top() int { return a.snap.topOf(a.IsOwner, a.Roles) }

// require checks global (base) permissions.
func (a *Actor) require(need permissions.Set) error {
	if missing := need.Minus(a.Base()); !missing.IsEmpty() {
		return apperr.MissingPermissions("", missing.Names())
	}
	return nil
}

// requireIn checks effective permissions in a channel; a channel the
// caller may not know of is missing (hideChannel).
func (a *Actor) requireIn(channelID string, need permissions.Set) error {
	if err := a.hideChannel(channelID); err != nil {
		return err
	}
	if missing := need.Minus(a.In(channelID)); !missing.IsEmpty() {
		return apperr.MissingPermissions(channelID, missing.Names())
	}
	return nil
}

// canGrant checks that the caller holds every permission a change adds or removes.
func (a *Actor) canGrant(changed permissions.Set) error {
	if missing := changed.Minus(a.Base()); !missing.IsEmpty() {
		return apperr.CannotGrant("", missing.Names())
	}
	return nil
}

// canGrantIn is canGrant for an overwrite of a channel.
func (a *Actor) canGrantIn(channelID string, changed permissions.Set) error {
	if missing := changed.Minus(a.In(channelID)); !missing.IsEmpty() {
		return apperr.CannotGrant(channelID, missing.Names())
	}
	return nil
}

// canManageRole checks that a role is strictly below the caller's top.
func (a *Actor) canManageRole(r model.Role) error {
	if r.Position >= a.Top() {
		return apperr.RoleHierarchy(r.ID, "Role "+quote(r.ID)+" is not below your highest role.")
	}
	return nil
}

// canManageUser checks that a user's top role is strictly below the caller's;
// the owner is above everyone and is changed by the owner alone.
func (a *Actor) canManageUser(u model.User) error {
	if a.IsOwner {
		return nil
	}
	if u.IsOwner {
		return apperr.UserHierarchy(u.ID, "Only the owner can change the owner.")
	}
	if a.snap.topOf(false, u.Roles) >= a.Top() {
		return apperr.UserHierarchy(u.ID, "User "+quote(u.Username)+"'s highest role is not below yours.")
	}
	return nil
}

func quote(s string) string { return "\"" + s + "\"" }

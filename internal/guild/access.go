package guild

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/model"
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
	// inWrite is set on the caller re-read inside a write (writeEvents),
	// whose guard, if any, is guard: emit need not look it up again in a
	// context many layers deep, once per event.
	inWrite bool
	guard   *guarded
}

// HashToken is how a token is stored and looked up. Every authenticated
// request hashes its token: the bytes are hashed and hex-encoded in buffers
// on the stack, so that the hash string is its one allocation.
func HashToken(token string) string {
	var sum [sha256.Size]byte
	var in [512]byte // Authenticate refuses longer tokens
	if len(token) <= len(in) {
		sum = sha256.Sum256(append(in[:0], token...))
	} else {
		sum = sha256.Sum256([]byte(token))
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
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

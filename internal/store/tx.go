package store

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// Tx is one request's part of a write transaction (see Write). Its reads
// see the state it will commit on: writers are serialized, and the requests
// before it in the same transaction have already made their changes.
type Tx struct {
	queries           // on the transaction's connection
	sqlTx   *sqldb.Tx // its events, its writes so far, its batch's shared state
	store   *Store
}

// AppendEvent records an event of the request. Its seq is assigned when
// the transaction writes the events of all its requests, after the last:
// Write returns them with it.
func (tx *Tx) AppendEvent(_ context.Context, ev model.Event) error { return tx.sqlTx.AppendEvent(ev) }

// batchState is what the requests of one transaction share
// (sqldb.Tx.Shared).
type batchState struct {
	// ctx makes the cache follow the change log once per transaction
	// (Tx.cacheCtx): it holds the transaction's read scope.
	ctx context.Context
	// from is the version the cache followed to at the transaction's first
	// question (Tx.own); ownChanges are the transaction's changes as read
	// after its ownAt-th statement that may have written.
	from       int64
	fromSet    bool
	ownRead    bool
	ownChanges []fresh.Change
	ownAt      int64
	// auth is the transaction's view of the authorization state
	// (Tx.AuthState), built over authBase (the cache's) after its
	// authAt-th statement that may have written.
	auth, authBase *AuthState
	authAt         int64
}

func newBatchState() any {
	// Nothing written yet: nothing changed.
	return &batchState{ctx: fresh.TxScope(context.Background()), ownRead: true}
}

// batch is the transaction's batchState.
func (tx *Tx) batch() *batchState { return tx.sqlTx.Shared(newBatchState).(*batchState) }

// scope returns ctx in the transaction's read scope.
func (b *batchState) scope(ctx context.Context) context.Context { return fresh.WithScopeOf(ctx, b.ctx) }

// own returns what the transaction changed so far, as the change log's
// triggers logged it (fresh.Cache.Own): what the cache holds of it is not
// what the transaction sees. It is read again only after a statement that
// may have written (sqldb.Tx.WritesSoFar).
func (tx *Tx) own(ctx context.Context) ([]fresh.Change, error) {
	c := tx.store.cache
	if err := c.Fresh(tx.cacheCtx(ctx)); err != nil {
		return nil, err
	}
	b := tx.batch()
	if !b.fromSet {
		// The first question of the transaction: the cache has followed
		// the log under the write lock, so on SQLite what the log holds
		// after its position is the transaction's.
		b.from, b.fromSet = c.Position(), true
	}
	if n := tx.sqlTx.WritesSoFar(); n != b.ownAt || !b.ownRead {
		changes, err := c.Own(ctx, tx.query, tx.store.freshPG(), b.from)
		if err != nil {
			return nil, err
		}
		b.ownChanges, b.ownAt, b.ownRead = changes, n, true
	}
	return b.ownChanges, nil
}

// cacheCtx is ctx in the batch's read scope: the cache follows the change
// log once per transaction, after the write lock is held, so what it holds
// is what the transaction started from.
func (tx *Tx) cacheCtx(ctx context.Context) context.Context {
	if sp := tx.sqlTx.Span(); sp != nil { // traced: the cache's work is the write's
		ctx = trace.ContextWithSpan(ctx, sp)
	}
	return tx.batch().scope(ctx)
}

// Credentials looks a token up by its hash as the transaction sees it: from
// the cache unless the transaction changed the token or its user.
func (tx *Tx) Credentials(ctx context.Context, tokenHash string) (Credentials, error) {
	own, err := tx.own(ctx)
	if err != nil {
		return Credentials{}, err
	}
	c := tx.store.cache
	v, hit := c.Lookup(fresh.Key{Kind: fresh.Credentials, A: tokenHash})
	if hit {
		cred := v.(Credentials)
		for _, d := range credentialDeps(cred) {
			if changed(own, d) {
				hit = false
			}
		}
	}
	c.Traced(tx.cacheCtx(ctx), fresh.Credentials, hit)
	if hit {
		cred := v.(Credentials)
		cred.Principal.Roles = slices.Clone(cred.Principal.Roles)
		return cred, nil
	}
	return tx.tokenCredentials(ctx, false, tokenHash)
}

// changed reports whether changes reach d: its key, its whole table, or
// everything.
func changed(changes []fresh.Change, d fresh.Dep) bool {
	for _, ch := range changes {
		if ch.Table == "*" || ch.Table == d.Table && (ch.Key == d.Key || ch.Key == "") {
			return true
		}
	}
	return false
}

// CredentialsOf is Store.CredentialsOf as the transaction sees it.
func (tx *Tx) CredentialsOf(ctx context.Context, userID string) (Credentials, error) {
	return tx.credentialsOf(ctx, userID)
}

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

// newBatchState is the state of a transaction that has written nothing
// yet, so changed nothing; its read scope starts at the data version it
// read with the write lock, when it read one.
func newBatchState(sqlTx *sqldb.Tx) *batchState {
	ctx := fresh.TxScope(context.Background())
	if v, nonce, ok := sqlTx.LockedVersion(); ok {
		ctx = fresh.TxScopeAt(context.Background(), v, nonce)
	}
	return &batchState{ctx: ctx, ownRead: true}
}

// batch is the transaction's batchState.
func (tx *Tx) batch() *batchState {
	return tx.sqlTx.Shared(func() any { return newBatchState(tx.sqlTx) }).(*batchState)
}

// scope returns ctx in the transaction's read scope.
func (b *batchState) scope(ctx context.Context) context.Context { return fresh.WithScopeOf(ctx, b.ctx) }

// own returns what the transaction changed so far, as the change log's
// triggers logged it (fresh.Cache.Own): what the cache holds of it is not
// what the transaction sees. A question names the logged tables its answer
// depends on (their names in the log): what the transaction changed is
// read again only after a statement that may have written one of them (a
// statement whose table logs as one of them, or that names none). With
// existing, the question is about rows that existed before the
// transaction (the caller's token and user): a plain INSERT into a table
// that logs as itself adds rows under new keys, which cannot change them.
// So a batch of creates asks the database nothing more per write.
func (tx *Tx) own(ctx context.Context, existing bool, logged ...string) ([]fresh.Change, error) {
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
	if b.ownRead && !mayChange(tx.sqlTx.WritesSince(b.ownAt), existing, logged) {
		return b.ownChanges, nil
	}
	n := tx.sqlTx.WritesSoFar()
	changes, err := c.Own(ctx, tx.query, tx.store.freshPG(), b.from)
	if err != nil {
		return nil, err
	}
	b.ownChanges, b.ownAt, b.ownRead = changes, n, true
	return b.ownChanges, nil
}

// mayChange reports whether statements may have changed what a question
// that depends on the logged tables named reads (see Tx.own).
func mayChange(writes []sqldb.Written, existing bool, logged []string) bool {
	for _, w := range writes {
		switch as, ok := loggedAs(w.Table); {
		case w.Op == "SAVEPOINT" || w.Op == "RELEASE":
			// opens or closes a job's savepoint: changes nothing
		case w.Table == "" || w.Op != "INSERT" && w.Op != "UPDATE" && w.Op != "DELETE":
			return true // a statement whose target is not plain (a rollback, a WITH)
		case !ok || !slices.Contains(logged, as):
		case existing && w.Op == "INSERT" && !w.Upsert && as == w.Table:
		default:
			return true
		}
	}
	return false
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
	// The caller's token and user existed before the transaction.
	own, err := tx.own(ctx, true, "tokens", "users")
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

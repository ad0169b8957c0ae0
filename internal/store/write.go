package store

import (
	"context"

	"github.com/guildhall/guildhall/internal/fresh"
	"github.com/guildhall/guildhall/internal/model"
	"github.com/guildhall/guildhall/internal/sqldb"
)

// The writes: every one runs through sqldb's single writer, in a
// transaction that other requests may share (group commit).

// Write runs fn in a write transaction and returns the events it appended,
// with their sequence numbers, once they are committed and durable. If fn
// returns an error, nothing it did is kept, and nothing of the other writes
// that share its transaction is lost.
//
// fn must be deterministic in what it writes given the state it reads, and
// must touch nothing but tx: it runs inside a transaction that other
// requests share, and when another write of that transaction fails it runs
// a second time, the first run undone (a query through the store would also
// wait for the writer that runs it).
//
// ctx bounds the write: its deadline (four statements' time when it has
// none) is when Write returns, with ctx's error when the write never ran,
// or with ErrOutcomeUnknown when its transaction did not answer in time
// (sqldb.DB.Write).
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) ([]model.Event, error) {
	return s.write(ctx, func(sqlTx *sqldb.Tx) error {
		return fn(&Tx{queries: queries{sqlTx.Queries}, sqlTx: sqlTx, store: s})
	})
}

// write is Write on sqldb's transaction: the resources' writes (Write) and
// the webhooks' delivery queue's (WebhookQueue) all run through it.
func (s *Store) write(ctx context.Context, fn func(sqlTx *sqldb.Tx) error) ([]model.Event, error) {
	events, err := s.db.Write(ctx, fn)
	// What the request reads next must include its own write (after a
	// write that never ran, this costs the next read one question).
	fresh.AskAgain(ctx)
	return events, err
}

// LargeWrite marks the context of a write at the limits (a reorder of
// hundreds of channels, a change of a thousand members, an import): it
// runs in a transaction of its own (sqldb.LargeWrite).
func LargeWrite(ctx context.Context) context.Context { return sqldb.LargeWrite(ctx) }

// ErrOutcomeUnknown is the error of a write whose transaction did not
// answer by its deadline once it ran: the write may or may not have been
// carried out (sqldb.ErrOutcomeUnknown).
var ErrOutcomeUnknown = sqldb.ErrOutcomeUnknown

// WriterStats counts the write batches, the writes they carried and the
// batches run again (sqldb.WriterStats).
type WriterStats = sqldb.WriterStats

// WriterStats returns the writer's counters since the store was opened.
func (s *Store) WriterStats() WriterStats { return s.db.WriterStats() }

// WritesSucceed reports whether this instance's writes can succeed now
// (/readyz; sqldb.DB.WritesSucceed).
func (s *Store) WritesSucceed(ctx context.Context) error { return s.db.WritesSucceed(ctx) }

package fresh

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// An instance's heartbeats, which renew its lease and read the data
// version, and its acknowledgements of the other instances' prepares
// (lease.go), each on a connection of its own.

// heartbeats renews the lease, on a connection of its own (the
// listener's is busy waiting). A heartbeat takes the write lock shared,
// so it waits for the write transaction in flight: a lease is never
// granted while a write that prepared nothing (it saw no other lease run)
// may commit, and the heartbeat's notification comes after that commit's.
// The lock is the batch's own (one implicit transaction): it ends with
// it, whatever becomes of this process. The data version is read by the
// batch's second statement, whose snapshot is taken once the lock is
// held, so it covers the write the heartbeat waited for.
func (l *leases) heartbeats(ctx context.Context, c *pgx.Conn) error {
	tick := time.NewTicker(l.opts.Lease / 4)
	defer tick.Stop()
	heartbeat := func() error {
		// Numbered over every connection: a heartbeat of an earlier
		// connection that commits late matches none sent on this one.
		l.mu.Lock()
		l.hbSeq++
		seq := l.hbSeq
		now := time.Now()
		l.sent[seq] = sentAt{mono: int64(now.Sub(l.base)), wall: now.UnixNano()}
		acked := l.heard
		l.mu.Unlock()
		var v, nonce *int64
		// A database that does not answer: reconnect. The bound leaves room
		// for a write that waits out a stopped instance's lease.
		qctx, cancel := context.WithTimeout(ctx, 4*l.opts.Lease)
		defer cancel()
		b := &pgx.Batch{}
		b.Queue(`WITH w AS (SELECT pg_advisory_xact_lock_shared($5)),
up AS (INSERT INTO `+instancesTable(l.pg.Schema)+` (id, expires_at)
  SELECT $1, clock_timestamp() + make_interval(secs => $2) FROM w ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at RETURNING 1),
n AS (SELECT pg_notify($3, $4) FROM up)
SELECT 1 FROM up, n`,
			l.opts.Instance, l.opts.Lease.Seconds(), l.channel, "h "+l.opts.Instance+" "+strconv.FormatInt(acked, 10)+" "+strconv.FormatUint(seq, 10),
			l.pg.WriteKey)
		b.Queue(`SELECT (SELECT v FROM ` + quoteIdent(l.pg.Schema) + `.data_version WHERE id = 1), (SELECT nonce FROM ` +
			quoteIdent(l.pg.Schema) + `.data_version WHERE id = 1)`)
		br := c.SendBatch(qctx, b)
		_, err := br.Exec()
		if err == nil {
			err = br.QueryRow().Scan(&v, &nonce)
		}
		if err := errors.Join(err, br.Close()); err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		l.polled(v, nonce)
		return nil
	}
	if err := heartbeat(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := heartbeat(); err != nil {
				return err
			}
		}
	}
}

// acknowledge sends the acknowledgements the listener asks for.
func (l *leases) acknowledge(ctx context.Context, c *pgx.Conn, ack <-chan int64) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case v := <-ack:
			qctx, cancel := context.WithTimeout(ctx, l.opts.Lease)
			_, err := c.Exec(qctx, "SELECT pg_notify($1, $2)", l.channel, "a "+l.opts.Instance+" "+strconv.FormatInt(v, 10))
			cancel()
			if err != nil {
				return fmt.Errorf("acknowledge: %w", err)
			}
		}
	}
}

// polled takes the data version a heartbeat read: a change that notified
// no one (the row deleted, a history rewritten by a restore) is followed
// by the next round. A version this instance prepared itself is no news:
// its prepare moved want and the floor already.
func (l *leases) polled(v, nonce *int64) {
	if v != nil && nonce != nil {
		if l.at != nil && l.at(*v, *nonce) {
			return
		}
		l.mu.Lock()
		n, mine := l.mine[*v]
		l.mu.Unlock()
		if mine && n == *nonce {
			return
		}
	}
	l.want.Add(1)
}

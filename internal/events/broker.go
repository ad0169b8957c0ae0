// Package events fans committed audit events out to live subscribers (the
// Server-Sent Events stream). It carries only wake-up signals: subscribers
// read the events themselves from the store by seq, so a slow or stalled
// subscriber never blocks a writer or another subscriber, and a resumed
// stream has no gap and no duplicate.
package events

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Broker wakes subscribers when events are committed.
type Broker struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// NewBroker returns an empty broker.
func NewBroker() *Broker { return &Broker{subs: map[chan struct{}]struct{}{}} }

// Subscribe returns a channel that receives a signal (coalesced: at most one
// pending) after each commit, and a function to unsubscribe.
func (b *Broker) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// Published wakes every subscriber; it never blocks.
func (b *Broker) Published(int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// Subscribers is the number of live subscribers.
func (b *Broker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// ListenPostgres relays the NOTIFYs of every instance's commits (sent on
// channel by the store) to the broker until ctx ends, reconnecting after
// failures.
func (b *Broker) ListenPostgres(ctx context.Context, url, channel string, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := b.listen(ctx, url, channel)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = 100 * time.Millisecond // it had been working: reconnect quickly
		}
		log.Warn("event listener disconnected; reconnecting", "err", err, "in", backoff)
		b.Published(0) // subscribers re-read: nothing is missed while reconnecting
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (b *Broker) listen(ctx context.Context, url, channel string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	b.Published(0) // catch up on anything committed before LISTEN took effect
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		seq, _ := strconv.ParseInt(n.Payload, 10, 64)
		b.Published(seq)
	}
}

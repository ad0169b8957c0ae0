package fresh

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// Batches share the reads that miss the cache among concurrent requests,
// on PostgreSQL, where each statement is a round trip and most of its cost
// is the statement itself, not the rows: among a million users read at
// random, nearly every read misses, and one statement a read would cost
// the database more than the rest of the request. They work as the
// questions' rounds do (cache.go): a read joins the batch that is open, or
// opens one; a batch is open until its statement is sent, one at a time,
// so the reads that arrive while one is in flight go together in the next.
// Every read of a batch arrived before its statement was sent, so what it
// answers holds every commit acknowledged before the read. A batch holds
// at most as many keys as there are requests at once.
type Batches[V any] struct {
	// read reads the values of keys (distinct), in one statement; a key
	// with no value is left out.
	read     func(ctx context.Context, keys []string) (map[string]V, error)
	mu       sync.Mutex
	next     *batch[V] // the batch arriving reads join; nil when none is open
	inflight sync.Mutex
	sent     atomic.Int64 // statements sent
	traced   bool         // tracing on (trace.go)
}

type batch[V any] struct {
	keys []string
	done chan struct{}
	got  map[string]V
	err  error
}

// Get returns key's value, and false when it has none. It waits for its
// batch under ctx; the statement runs under none (it answers every read
// of the batch), bounded by the statement deadline.
func (b *Batches[V]) Get(ctx context.Context, key string) (V, bool, error) {
	b.mu.Lock()
	bt := b.next
	if bt == nil {
		bt = &batch[V]{done: make(chan struct{})}
		b.next = bt
		sctx := context.Background()
		if b.traced {
			sctx = trace.ContextWithSpan(sctx, trace.SpanFromContext(ctx))
		}
		go b.send(sctx, bt)
	}
	bt.keys = append(bt.keys, key)
	b.mu.Unlock()
	var zero V
	select {
	case <-bt.done:
		if bt.err != nil {
			return zero, false, bt.err
		}
		v, ok := bt.got[key]
		return v, ok, nil
	case <-ctx.Done():
		return zero, false, ctx.Err()
	}
}

func (b *Batches[V]) send(ctx context.Context, bt *batch[V]) {
	b.inflight.Lock()
	defer b.inflight.Unlock()
	defer close(bt.done)
	b.mu.Lock()
	b.next = nil // closed: later reads open the next batch
	keys := bt.keys
	b.mu.Unlock()
	slices.Sort(keys)
	keys = slices.Compact(keys) // a key read by several requests at once
	b.sent.Add(1)
	defer func() {
		if v := recover(); v != nil {
			bt.err = fmt.Errorf("panic in a batch of reads: %v\n%s", v, debug.Stack())
		}
	}()
	bt.got, bt.err = b.read(ctx, keys)
}

// NewBatches returns batches that read with read (traced: the statement
// carries the span of the read that opened its batch).
func NewBatches[V any](read func(ctx context.Context, keys []string) (map[string]V, error), traced bool) *Batches[V] {
	return &Batches[V]{read: read, traced: traced}
}

// Sent is how many statements the batches sent.
func (b *Batches[V]) Sent() int64 { return b.sent.Load() }

package fresh

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// rounds share questions among concurrent reads: a read joins the round
// that is open, or opens one; a round is open until its question is sent,
// so every read of a round arrived before it was sent, and the answer is
// of a moment after each arrived. Each read waits for its round under its
// own context; the question runs under none (it answers them all; traced,
// it carries the span of the read that opened the round, and nothing else),
// bounded by the statement deadline inside ask.
type rounds struct {
	ask  func(ctx context.Context) error
	mu   sync.Mutex
	next *round // the round arriving reads join; nil when none is open
	// inflight is held by the round whose question is in flight: the next
	// round waits for it, while the reads that arrive meanwhile join it.
	inflight sync.Mutex
	sent     atomic.Int64
	traced   bool // tracing on (trace.go)
}

type round struct {
	done chan struct{}
	err  error
}

func (r *rounds) follow(ctx context.Context) error {
	r.mu.Lock()
	rd := r.next
	if rd == nil {
		rd = &round{done: make(chan struct{})}
		r.next = rd
		qctx := context.Background()
		if r.traced {
			qctx = trace.ContextWithSpan(qctx, trace.SpanFromContext(ctx))
		}
		go r.send(qctx, rd)
	}
	r.mu.Unlock()
	select {
	case <-rd.done:
		return rd.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *rounds) send(ctx context.Context, rd *round) {
	r.inflight.Lock()
	defer r.inflight.Unlock()
	defer close(rd.done)
	r.mu.Lock()
	r.next = nil // closed: later reads open the next round
	r.mu.Unlock()
	r.sent.Add(1)
	defer func() {
		if v := recover(); v != nil {
			rd.err = fmt.Errorf("panic following the change log: %v\n%s", v, debug.Stack())
		}
	}()
	rd.err = r.ask(ctx)
}

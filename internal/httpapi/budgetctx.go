package httpapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// budgetContext is context.WithDeadline(parent, deadline) whose timer starts
// only once something waits on it. Most requests are answered from memory
// and never wait on their database budget; for them, context.WithDeadline's
// timer, its registration with the request's context and their undoing were
// a measurable share of the request's CPU. Anything that waits calls Done
// (the drivers, the pool, the freshness rounds), and from then on the
// context is exactly the one context.WithDeadline would have made.
//
// Until then, Err compares the clock with the deadline (and, past it,
// starts the timer, which then reports the deadline at once), and Value
// answers from the parent; context.Cause, which asks Err first, agrees.
type budgetContext struct {
	parent   context.Context
	deadline time.Time
	once     sync.Once
	started  atomic.Pointer[startedBudget]
}

type startedBudget struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// withBudget returns the budget context and its cancel function, which
// must be called as context.WithDeadline's must.
func withBudget(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c := &budgetContext{parent: parent, deadline: time.Now().Add(d)}
	return c, c.cancel
}

// start makes the real context, once.
func (c *budgetContext) start() *startedBudget {
	c.once.Do(func() {
		ctx, cancel := context.WithDeadline(c.parent, c.deadline)
		c.started.Store(&startedBudget{ctx: ctx, cancel: cancel})
	})
	return c.started.Load()
}

// canceledBudget marks a budget canceled before anything waited on it:
// the end of nearly every request, which then costs no context at all.
var (
	canceledBudget = &startedBudget{}
	closedDone     = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
)

// cancel cancels the started context, or marks the budget canceled, so
// that a wait that begins after cancel ends at once, as it would on a
// canceled context.WithDeadline.
func (c *budgetContext) cancel() {
	c.once.Do(func() { c.started.Store(canceledBudget) })
	if s := c.started.Load(); s != canceledBudget {
		s.cancel()
	}
}

func (c *budgetContext) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *budgetContext) Done() <-chan struct{} {
	if s := c.start(); s != canceledBudget {
		return s.ctx.Done()
	}
	return closedDone
}

func (c *budgetContext) Err() error {
	if s := c.started.Load(); s == canceledBudget {
		return context.Canceled
	} else if s != nil {
		return s.ctx.Err()
	}
	if c.parent.Err() != nil || !time.Now().Before(c.deadline) {
		if s := c.start(); s != canceledBudget { // cancel may have come first
			return s.ctx.Err()
		}
		return context.Canceled
	}
	return nil
}

func (c *budgetContext) Value(key any) any {
	if s := c.started.Load(); s != nil && s != canceledBudget {
		return s.ctx.Value(key)
	}
	return c.parent.Value(key)
}

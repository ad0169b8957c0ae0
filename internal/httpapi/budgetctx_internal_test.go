package httpapi

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type budgetTestKey struct{}

// waitDone waits for ctx to end, failing the test after a long while.
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the budget context did not end")
	}
}

// The budget context answers as context.WithDeadline would, whether or not
// anything waited on it first.
func TestBudgetContextIsWithDeadline(t *testing.T) {
	cases := []struct {
		name   string
		budget time.Duration
		act    func(t *testing.T, parentCancel context.CancelFunc, ctx context.Context, cancel context.CancelFunc)
		want   error
	}{
		{"running, never waited on", time.Hour, func(*testing.T, context.CancelFunc, context.Context, context.CancelFunc) {}, nil},
		{"running, waited on", time.Hour, func(_ *testing.T, _ context.CancelFunc, ctx context.Context, _ context.CancelFunc) { _ = ctx.Done() }, nil},
		{"expired while waited on", 5 * time.Millisecond, func(t *testing.T, _ context.CancelFunc, ctx context.Context, _ context.CancelFunc) { waitDone(t, ctx) }, context.DeadlineExceeded},
		{"expired, never waited on", 5 * time.Millisecond, func(*testing.T, context.CancelFunc, context.Context, context.CancelFunc) {
			time.Sleep(20 * time.Millisecond)
		}, context.DeadlineExceeded},
		{"spent before it began", -time.Second, func(*testing.T, context.CancelFunc, context.Context, context.CancelFunc) {}, context.DeadlineExceeded},
		{"parent canceled, never waited on", time.Hour, func(_ *testing.T, pc context.CancelFunc, _ context.Context, _ context.CancelFunc) { pc() }, context.Canceled},
		{"parent canceled while waited on", time.Hour, func(t *testing.T, pc context.CancelFunc, ctx context.Context, _ context.CancelFunc) {
			d := ctx.Done()
			pc()
			<-d
		}, context.Canceled},
		{"canceled, never waited on", time.Hour, func(_ *testing.T, _ context.CancelFunc, _ context.Context, c context.CancelFunc) { c() }, context.Canceled},
		{"canceled while waited on", time.Hour, func(_ *testing.T, _ context.CancelFunc, ctx context.Context, c context.CancelFunc) {
			d := ctx.Done()
			c()
			<-d
		}, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, parentCancel := context.WithCancel(context.WithValue(context.Background(), budgetTestKey{}, "v"))
			defer parentCancel()
			ctx, cancel := withBudget(parent, tc.budget)
			defer cancel()
			tc.act(t, parentCancel, ctx, cancel)
			if err := ctx.Err(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Err() = %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				waitDone(t, ctx) // an ended context's Done is closed
				if cause := context.Cause(ctx); !errors.Is(cause, tc.want) {
					t.Fatalf("Cause() = %v, want %v", cause, tc.want)
				}
			} else {
				select {
				case <-ctx.Done():
					t.Fatal("Done closed on a running budget")
				default:
				}
			}
			if v := ctx.Value(budgetTestKey{}); v != "v" {
				t.Fatalf("Value() = %v, want the parent's", v)
			}
			if dl, ok := ctx.Deadline(); !ok || dl.After(time.Now().Add(tc.budget)) {
				t.Fatalf("Deadline() = %v, %v, want within the budget", dl, ok)
			}
		})
	}
}

// A budget asked only for its values, deadline and error, and then
// canceled, never makes a timer: what a request answered from memory does.
func TestBudgetContextUnusedStartsNothing(t *testing.T) {
	ctx, cancel := withBudget(context.WithValue(context.Background(), budgetTestKey{}, "v"), time.Hour)
	_, _ = ctx.Deadline()
	_ = ctx.Value(budgetTestKey{})
	if ctx.Err() != nil {
		t.Fatal("a running budget reports an error")
	}
	b := ctx.(*budgetContext)
	if b.started.Load() != nil {
		t.Fatal("the timer started with nothing waiting")
	}
	cancel()
	if b.started.Load() != canceledBudget {
		t.Fatal("cancel before any wait made a context")
	}
}

// A context derived from the budget ends with it.
func TestBudgetContextDerivedEndsWithIt(t *testing.T) {
	ctx, cancel := withBudget(context.Background(), time.Hour)
	child, childCancel := context.WithCancel(context.WithValue(ctx, budgetTestKey{}, 1))
	defer childCancel()
	cancel()
	waitDone(t, child)
	if !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("child Err() = %v", child.Err())
	}
}

// The parent's earlier deadline is the budget's.
func TestBudgetContextParentDeadlineFirst(t *testing.T) {
	parent, pc := context.WithTimeout(context.Background(), time.Minute)
	defer pc()
	ctx, cancel := withBudget(parent, time.Hour)
	defer cancel()
	want, _ := parent.Deadline()
	if got, ok := ctx.Deadline(); !ok || !got.Equal(want) {
		t.Fatalf("Deadline() = %v, want the parent's %v", got, want)
	}
}

// Waiting and canceling from several goroutines at once is safe (go test
// -race) and ends every wait.
func TestBudgetContextConcurrent(t *testing.T) {
	for range 100 {
		ctx, cancel := withBudget(context.Background(), time.Hour)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_ = ctx.Value(budgetTestKey{})
				<-ctx.Done()
			})
		}
		wg.Go(cancel)
		wg.Wait()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err() = %v", ctx.Err())
		}
	}
}

// Err on a spent budget no one waited on, at the same time as cancel,
// answers an error and never panics (go test -race).
func TestBudgetContextErrBesideCancel(t *testing.T) {
	for range 1000 {
		ctx, cancel := withBudget(context.Background(), -time.Second)
		var wg sync.WaitGroup
		var err error
		wg.Go(func() { err = ctx.Err() })
		wg.Go(cancel)
		wg.Wait()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("Err() = %v", err)
		}
	}
}

// A budget no one waits on, against context.WithTimeout: what a request
// answered from memory pays for its database budget.
func BenchmarkBudgetUnused(b *testing.B) {
	parent, pc := context.WithCancel(context.Background())
	defer pc()
	b.Run("budget", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := withBudget(parent, time.Second)
			_ = ctx.Value(budgetTestKey{})
			cancel()
		}
	})
	b.Run("WithTimeout", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(parent, time.Second)
			_ = ctx.Value(budgetTestKey{})
			cancel()
		}
	})
}

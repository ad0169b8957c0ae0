package guild

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/guildhall/guildhall/internal/store"
)

// TestSnapshotLoadedOncePerVersion: when the auth version moves, the
// requests that see it together share one load instead of each reading
// every role and overwrite, and the first caller giving up does not fail
// the others.
func TestSnapshotLoadedOncePerVersion(t *testing.T) {
	// synctest.Wait returns when every goroutine of the bubble is blocked
	// (in the load, or waiting for it): no sleep guesses when they are.
	synctest.Test(t, func(t *testing.T) { snapshotLoadedOncePerVersion(t) })
}

func snapshotLoadedOncePerVersion(t *testing.T) {
	const callers = 16
	var loads atomic.Int32
	release := make(chan struct{})
	z := &authz{load: func(ctx context.Context) (store.Snapshot, error) {
		loads.Add(1)
		<-release
		if err := ctx.Err(); err != nil {
			return store.Snapshot{}, err
		}
		return store.Snapshot{AuthVersion: 2}, nil
	}}
	z.snap = newSnapshot(store.Snapshot{AuthVersion: 1})

	first, cancelFirst := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	versions := make(chan int64, callers)
	for i := range callers {
		ctx := context.Background()
		if i == 0 {
			ctx = first
		}
		wg.Go(func() {
			s, err := z.atLeast(ctx, 2)
			if err != nil {
				errs <- err
				return
			}
			versions <- s.version
		})
		if i == 0 {
			synctest.Wait() // the first caller is in the load the others will join
			if got := loads.Load(); got != 1 {
				t.Fatalf("the first caller made %d loads, want 1", got)
			}
		}
	}
	synctest.Wait() // every caller is waiting for that load
	cancelFirst()
	close(release)
	wg.Wait()
	close(errs)
	close(versions)

	for err := range errs {
		t.Errorf("a caller failed: %v", err)
	}
	n := 0
	for v := range versions {
		n++
		if v != 2 {
			t.Errorf("a caller got version %d, want 2", v)
		}
	}
	if n != callers {
		t.Errorf("%d of %d callers got a snapshot", n, callers)
	}
	if got := loads.Load(); got != 1 {
		t.Errorf("%d loads of version 2 by %d concurrent callers, want 1", got, callers)
	}

	// A cached snapshot newer than the version asked for serves it as is.
	if s, err := z.atLeast(context.Background(), 1); err != nil || s.version != 2 {
		t.Errorf("atLeast(1) = version %v, %v; want the cached version 2", s.version, err)
	}
	if got := loads.Load(); got != 1 {
		t.Errorf("asking for an older version loaded again (%d loads)", got)
	}
}

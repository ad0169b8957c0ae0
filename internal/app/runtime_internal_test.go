package app

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryLimitFollowsPackedUsers: once LimitMemory set the limit, the
// limit is that plus what the cache's packed users hold, as they grow and
// shrink (a cache started over); without LimitMemory (GOMEMLIMIT set, or a
// limit of 0) it is left alone. Not parallel: the limit is the process's.
func TestMemoryLimitFollowsPackedUsers(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // LimitMemory reads it; empty is unset
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prev)
		memoryLimit.Store(0)
	})
	limitNow := func() int64 { return debug.SetMemoryLimit(-1) }
	waitFor := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for limitNow() != want {
			if time.Now().After(deadline) {
				t.Fatalf("memory limit %d, want %d", limitNow(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var packed atomic.Int64

	// Not set by LimitMemory: left alone.
	memoryLimit.Store(0)
	debug.SetMemoryLimit(1 << 40)
	packed.Store(8 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		followMemoryLimit(ctx, time.Millisecond, func() int { return int(packed.Load()) })
		close(done)
	}()
	<-done // returns at once
	cancel()
	if got := limitNow(); got != 1<<40 {
		t.Fatalf("limit changed to %d without LimitMemory", got)
	}

	const base = 96 << 20
	if LimitMemory(base) != base {
		t.Fatal("LimitMemory did not set the limit")
	}
	ctx, cancel = context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		followMemoryLimit(ctx, time.Millisecond, func() int { return int(packed.Load()) })
		close(stopped)
	}()
	defer func() { cancel(); <-stopped }() // before the cleanup restores the limit
	waitFor(base + 8<<20)
	packed.Store(48 << 20)
	waitFor(base + 48<<20)
	packed.Store(0) // started over
	waitFor(base)
}

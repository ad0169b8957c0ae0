package app

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// gcPercent is the GC target of a serving process when GOGC is not set.
//
// What the collector marks of the server's live heap is small (the read
// cache's entries, bounded by their share of its size, and prepared
// statements; its packed users hold no pointer), while each request
// leaves kilobytes of garbage, so with Go's default of 100 the collector
// runs often and takes a noticeable share of a cheap read's CPU. At 400 reads
// cost less CPU and a busy instance's peak RSS grows (docs/performance.md).
// GOGC and GOMEMLIMIT set by the operator win.
const gcPercent = 400

// TuneGC sets the GC target to gcPercent unless GOGC is set, and returns
// the value set (0 when unchanged).
func TuneGC() int {
	if os.Getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(gcPercent)
	return gcPercent
}

// LimitMemory sets the runtime's soft memory limit to limit bytes
// (GUILDHALL_MEMORY_LIMIT) unless GOMEMLIMIT is set or limit is 0, and
// returns the value set (0 when unchanged). With GOGC at 400 the heap
// would otherwise grow to five times what is live before a collection, as
// far as what clients send pushes it. Near the limit the collector runs
// sooner instead, so what clients send moves the collector's work, not the
// memory held.
func LimitMemory(limit int64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" || limit <= 0 {
		return 0
	}
	debug.SetMemoryLimit(limit)
	memoryLimit.Store(limit)
	return limit
}

// memoryLimit is the limit LimitMemory set; 0 when it set none.
var memoryLimit atomic.Int64

// followMemoryLimit keeps the runtime's soft memory limit, when
// LimitMemory set it, at that limit plus what the read cache's packed
// users hold (their share of GUILDHALL_CACHE_BYTES bounds them), looking
// every interval until ctx ends. Those users are live, so counted inside
// the limit they would leave the collector less room as they fill the
// cache, and it would run ever more often; the limit is there to bound
// the garbage that requests leave, which is what stays under it.
func followMemoryLimit(ctx context.Context, interval time.Duration, packed func() int) {
	base := memoryLimit.Load()
	if base <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	set := base
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Moved by a mebibyte at least: the arena grows a chunk (a
		// mebibyte) at a time, the table by doubling.
		if want := base + int64(packed()); want > set+1<<20 || want < set-1<<20 {
			debug.SetMemoryLimit(want)
			set = want
		}
	}
}

// minProcs is the fewest Ps a serving process runs with.
const minProcs = 2

// EnsureProcs raises GOMAXPROCS to minProcs when the runtime chose fewer
// (one CPU, or a CPU quota of one) and the operator did not set GOMAXPROCS,
// and returns the new value (0 when unchanged).
//
// A commit's sync happens inside a cgo call of the SQLite driver, which
// keeps its P for as long as the runtime lets it (until sysmon hands the P
// off). With a single P, no request is served meanwhile, so no write joins
// the next group commit: transactions carried ~2 writes under 32 concurrent
// creates on one CPU. With two Ps on that CPU, the kernel runs the request
// handlers while the writer waits on the disk, and transactions carry
// several times as many writes (see docs/performance.md).
func EnsureProcs() int {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) >= minProcs {
		return 0
	}
	runtime.GOMAXPROCS(minProcs)
	return minProcs
}

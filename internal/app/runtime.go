package app

import (
	"os"
	"runtime"
	"runtime/debug"
)

// gcPercent is the GC target of a serving process when GOGC is not set.
//
// The server's live heap is small (the read cache, bounded by its
// configured size, and prepared statements), while each request leaves
// kilobytes of garbage, so with Go's default of 100 the collector runs
// often and takes a noticeable share of a cheap read's CPU. At 400 reads
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
	return limit
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

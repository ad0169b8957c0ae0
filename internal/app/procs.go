package app

import (
	"os"
	"runtime"
)

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
// handlers while the writer waits on the disk: ~10 writes per transaction
// and a third less CPU per create (see docs/performance.md).
func EnsureProcs() int {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) >= minProcs {
		return 0
	}
	runtime.GOMAXPROCS(minProcs)
	return minProcs
}

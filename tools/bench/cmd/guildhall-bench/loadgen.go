package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/guildhall/guildhall/tools/bench/internal/client"
)

// loadSpec is one load run against one address.
type loadSpec struct {
	addr     string
	src      *client.Source
	conns    int
	duration time.Duration
	// rate > 0: open loop, rate requests per second in all, each timed from
	// its scheduled send time. 0: closed loop, every connection sends its
	// next request as soon as the previous answer is in.
	rate float64
	seed uint64
}

// loadResult is what a run measured.
type loadResult struct {
	requests int64 // responses read, whatever their status
	ok       int64 // 2xx
	non2xx   int64
	sockErrs int64 // failed connections, reads, writes or unparseable responses
	elapsed  time.Duration
	lat      []int64 // nanoseconds, one per response read
	firstBad string  // the first non-2xx response (status and body start) or socket error
	genCPU   time.Duration
}

// worker is one connection's share of a run.
type worker struct {
	c                              *client.Conn
	rng                            *rand.Rand
	bufs                           client.RenderBufs
	lat                            []int64
	requests, ok, non2xx, sockErrs int64
	firstBad                       string
}

func (w *worker) record(resp client.Response, d time.Duration) {
	w.requests++
	w.lat = append(w.lat, int64(d))
	if resp.Status >= 200 && resp.Status < 300 {
		w.ok++
		return
	}
	w.non2xx++
	if w.firstBad == "" {
		w.firstBad = fmt.Sprintf("HTTP %d: %s", resp.Status, trunc(string(resp.Body), 300))
	}
}

// fail notes a socket error and reconnects; false means give up.
func (w *worker) fail(err error, stop *atomic.Bool) bool {
	w.sockErrs++
	if w.firstBad == "" {
		w.firstBad = "socket: " + err.Error()
	}
	if stop.Load() {
		return false
	}
	if err := w.c.Redial(); err != nil {
		w.sockErrs++
		return false
	}
	return true
}

// runLoad drives spec's address for spec.duration and returns what it saw.
// The connections are opened before the clock starts.
func runLoad(ctx context.Context, spec loadSpec) (loadResult, error) {
	var res loadResult
	workers := make([]*worker, spec.conns)
	defer func() {
		for _, w := range workers {
			if w != nil && w.c != nil {
				_ = w.c.Close()
			}
		}
	}()
	expect := 1024
	if spec.rate > 0 {
		expect = int(spec.rate*spec.duration.Seconds())/spec.conns + 16
	}
	for i := range workers {
		c, err := client.Dial(spec.addr)
		if err != nil {
			return res, fmt.Errorf("connect %s: %w", spec.addr, err)
		}
		workers[i] = &worker{c: c, rng: rand.New(rand.NewPCG(spec.seed, uint64(i))), lat: make([]int64, 0, expect)}
	}
	var stop atomic.Bool
	watch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer watch()

	ru0 := selfCPU()
	start := time.Now()
	deadline := start.Add(spec.duration)
	for _, w := range workers {
		// Bounds a request still in flight when the run ends.
		w.c.SetDeadline(deadline.Add(10 * time.Second))
	}
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Add(1)
		if spec.rate > 0 {
			go func() { defer wg.Done(); w.openLoop(spec, i, start, deadline, &stop) }()
		} else {
			go func() { defer wg.Done(); w.closedLoop(spec, deadline, &stop) }()
		}
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.genCPU = selfCPU() - ru0

	n := 0
	for _, w := range workers {
		n += len(w.lat)
	}
	res.lat = make([]int64, 0, n)
	for _, w := range workers {
		res.lat = append(res.lat, w.lat...)
		res.requests += w.requests
		res.ok += w.ok
		res.non2xx += w.non2xx
		res.sockErrs += w.sockErrs
		if res.firstBad == "" {
			res.firstBad = w.firstBad
		}
	}
	return res, ctx.Err()
}

func (w *worker) closedLoop(spec loadSpec, deadline time.Time, stop *atomic.Bool) {
	t0 := time.Now()
	for t0.Before(deadline) && !stop.Load() {
		resp, err := w.c.RoundTrip(spec.src.Next(w.rng, &w.bufs))
		t1 := time.Now()
		if err != nil {
			if !w.fail(err, stop) {
				return
			}
		} else {
			w.record(resp, t1.Sub(t0))
		}
		t0 = t1
	}
}

// openLoop sends this connection's share of a fixed schedule: request j of
// the run is due at start + j/rate, and connection i sends j = i, i+conns,
// ... Latency runs from the due time, so a server that falls behind is
// charged for the wait of every request queued behind a slow one (no
// coordinated omission).
func (w *worker) openLoop(spec loadSpec, i int, start, deadline time.Time, stop *atomic.Bool) {
	interval := float64(time.Second) / spec.rate
	for j := i; !stop.Load(); j += spec.conns {
		due := start.Add(time.Duration(float64(j) * interval))
		if !due.Before(deadline) {
			return
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		resp, err := w.c.RoundTrip(spec.src.Next(w.rng, &w.bufs))
		if err != nil {
			if !w.fail(err, stop) {
				return
			}
			continue
		}
		w.record(resp, time.Since(due))
	}
}

// selfCPU is the CPU time this process has used (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

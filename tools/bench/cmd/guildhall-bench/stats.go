package main

import (
	"math"
	"slices"
)

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value that at least p% of the values do not exceed.
// An empty slice gives 0.
func percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// spread is the median and the range of a few per-round values.
type spread struct {
	med, lo, hi float64
	n           int
}

// summarize returns the median (the mean of the middle two for an even
// count), minimum and maximum of xs, ignoring NaNs.
func summarize(xs []float64) spread {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{med: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	}
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{med: med, lo: v[0], hi: v[n-1], n: n}
}

// pairRatios divides a[i] by b[i] round by round: each value of a is taken
// against the reference measured in the same round. Rounds missing from
// either side (NaN) or with a reference of 0 are skipped.
func pairRatios(a, b []float64) []float64 {
	var out []float64
	for i := 0; i < len(a) && i < len(b); i++ {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) || b[i] <= 0 {
			continue
		}
		out = append(out, a[i]/b[i])
	}
	return out
}

// perRequestMicros converts CPU ticks spent on n requests into
// microseconds per request; NaN when nothing was done.
func perRequestMicros(ticks uint64, hz float64, n int64) float64 {
	if n <= 0 || hz <= 0 {
		return math.NaN()
	}
	return float64(ticks) / hz * 1e6 / float64(n)
}

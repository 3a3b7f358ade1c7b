package reports

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Percentile returns the p-th percentile (p in [0,100]) of sorted (ascending, no NaN) with
// numpy's default method, "linear" (Hyndman & Fan type 7), which sglang bench_serving uses
// through np.percentile: the virtual index is h = (n−1)·p/100 and the result interpolates
// between sorted[⌊h⌋] and sorted[⌊h⌋+1] with weight g = h − ⌊h⌋, computed as numpy's _lerp
// does (from the lower end when g < 0.5, from the upper end otherwise) so results match numpy
// to the last bit for the same float64 inputs.
//
// gonum's stat.Quantile is not used: its LinInterp kind is Hyndman & Fan type 4 (the
// interpolation points sit at i/n, not (i−1)/(n−1)), e.g. the median of 1,2,3,4 is 2 there and
// 2.5 in numpy; its Empirical kind does not interpolate.
//
// An empty slice gives 0. Percentile panics if p is outside [0,100] (a programmer error).
func Percentile(sorted []float64, p float64) float64 {
	if !(p >= 0 && p <= 100) {
		panic(fmt.Sprintf("reports: percentile %v outside [0,100]", p))
	}
	n := len(sorted)
	if n == 0 {
		return 0
	}
	h := float64(n-1) * (p / 100)
	lo := math.Floor(h)
	i := int(lo)
	if i >= n-1 {
		return sorted[n-1]
	}
	return lerp(sorted[i], sorted[i+1], h-lo)
}

// lerp interpolates between a and b with weight g in [0,1) as numpy's _lerp does: from the
// lower end when g < 0.5, from the upper end otherwise.
func lerp(a, b, g float64) float64 {
	d := b - a
	// float64(…) forbids fused multiply-add so every platform rounds as numpy does.
	if g >= 0.5 {
		return b - float64(d*(1-g))
	}
	return a + float64(d*g)
}

// Summarize returns the Stats of samples in ms (it sorts a copy; samples is not modified).
// An empty slice gives zeros.
func Summarize(samples []float64) Stats {
	s := slices.Clone(samples)
	slices.Sort(s)
	return summarizeSorted(s)
}

// summarizeSorted is Summarize over an already sorted slice.
func summarizeSorted(s []float64) Stats {
	if len(s) == 0 {
		return Stats{}
	}
	return Stats{
		Mean: stat.Mean(s, nil),
		P50:  Percentile(s, 50),
		P90:  Percentile(s, 90),
		P95:  Percentile(s, 95),
		P99:  Percentile(s, 99),
		Max:  s[len(s)-1],
	}
}

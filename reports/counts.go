package reports

import (
	"maps"
	"slices"
)

// Counts is a multiset of durations in integer nanoseconds kept as distinct value → count,
// for a level whose samples repeat: a simulator's inter-token latencies take one value per
// decode step, shared by every request in the batch, so millions of ITLs hold a few hundred
// thousand distinct values. Its statistics are in ms (ns/1e6, as the simulator converts) and
// its percentiles exact — the numbers Percentile gives over the samples listed in ms — in the
// memory of the distinct values. The zero value is empty and ready to use.
type Counts struct {
	m        map[int64]int64
	n        int64
	run      int64 // the last value added, not yet in m (consecutive repeats cost no lookup)
	runCount int64
}

// Add adds one sample of v nanoseconds.
func (c *Counts) Add(v int64) {
	c.n++
	if c.runCount > 0 && v == c.run {
		c.runCount++
		return
	}
	c.flush()
	c.run, c.runCount = v, 1
}

// AddN adds n samples of v nanoseconds.
func (c *Counts) AddN(v, n int64) {
	if n <= 0 {
		return
	}
	c.n += n
	if c.runCount > 0 && v == c.run {
		c.runCount += n
		return
	}
	c.flush()
	c.run, c.runCount = v, n
}

// AddAll adds every sample of vs.
func (c *Counts) AddAll(vs []int64) {
	for _, v := range vs {
		c.Add(v)
	}
}

func (c *Counts) flush() {
	if c.runCount == 0 {
		return
	}
	if c.m == nil {
		c.m = map[int64]int64{}
	}
	c.m[c.run] += c.runCount
	c.runCount = 0
}

// Stats summarises the samples as Summarize would: the same percentiles (numpy's linear
// method over the sorted samples) and max; the mean is Σ value·count / n, equal to the listed
// samples' mean up to rounding. No samples give zeros.
func (c *Counts) Stats() Stats {
	c.flush()
	if c.n == 0 {
		return Stats{}
	}
	keys := slices.Sorted(maps.Keys(c.m))
	cum := make([]int64, len(keys)) // cum[i]: samples ≤ keys[i]
	var total int64
	sum := 0.0
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	for i, k := range keys {
		total += c.m[k]
		cum[i] = total
		sum += ms(k) * float64(c.m[k])
	}
	at := func(i int64) float64 { // the i-th sample (0-based) in sorted order, in ms
		j, _ := slices.BinarySearch(cum, i+1)
		return ms(keys[j])
	}
	pct := func(p float64) float64 {
		h := float64(c.n-1) * (p / 100)
		i := int64(h)
		if i >= c.n-1 {
			return ms(keys[len(keys)-1])
		}
		return lerp(at(i), at(i+1), h-float64(i))
	}
	return Stats{Mean: sum / float64(c.n), P50: pct(50), P90: pct(90), P95: pct(95), P99: pct(99), Max: ms(keys[len(keys)-1])}
}

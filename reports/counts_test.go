package reports

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Counts gives the percentiles and max of the listed samples exactly, and their mean to
// rounding, however the repeats are spread.
func TestCountsMatchSummarize(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7, 100, 10_000} {
		var list []float64
		var c Counts
		for len(list) < n {
			v := int64(rng.IntN(50)) * 250_000 // few distinct values (ns), repeated in runs
			for range 1 + rng.IntN(5) {
				list = append(list, float64(v)/1e6)
				c.Add(v)
			}
		}
		want, got := Summarize(list), c.Stats()
		assert.Equal(t, want.P50, got.P50, "n=%d", n)
		assert.Equal(t, want.P90, got.P90, "n=%d", n)
		assert.Equal(t, want.P95, got.P95, "n=%d", n)
		assert.Equal(t, want.P99, got.P99, "n=%d", n)
		assert.Equal(t, want.Max, got.Max, "n=%d", n)
		assert.InDelta(t, want.Mean, got.Mean, 1e-9*max(1, want.Mean), "n=%d", n)
		assert.Equal(t, int64(len(list)), c.n)
	}
}

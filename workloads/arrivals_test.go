package workloads

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArrivalRates(t *testing.T) {
	t.Parallel()
	const n = 10000
	for _, tc := range []struct {
		name string
		a    Arrivals
		rate float64
		cv   float64 // coefficient of variation of the gaps: sd = cv/rate
	}{
		{"poisson rate=5", NewPoisson(5, 1, 0), 5, 1},
		{"poisson rate=200", NewPoisson(200, 2, 0), 200, 1},
		{"gamma rate=10 burstiness=0.25", NewGamma(10, 0.25, 3, 0), 10, 2},
		{"gamma rate=10 burstiness=1", NewGamma(10, 1, 4, 0), 10, 1},
		{"gamma rate=50 burstiness=4", NewGamma(50, 4, 5, 0), 50, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prev := time.Duration(0)
			for i := range n + 1 {
				at, ok := tc.a.At(i)
				require.True(t, ok)
				require.GreaterOrEqual(t, at, prev, "offsets never decrease")
				prev = at
			}
			meanGap := prev.Seconds() / n
			se := tc.cv / tc.rate / math.Sqrt(n)
			assert.InDelta(t, 1/tc.rate, meanGap, 3*se, "mean gap within 3 standard errors")
		})
	}
	t.Run("constant is exact", func(t *testing.T) {
		c := Constant{Rate: 8}
		for i := range n + 1 {
			at, ok := c.At(i)
			require.True(t, ok)
			require.Equal(t, time.Duration(float64(i)/8*1e9), at)
		}
		at, _ := c.At(n)
		assert.Equal(t, 1250*time.Second, at)
	})
}

func TestArrivalLimitsAndDeterminism(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		make func() Arrivals
	}{
		{"constant", func() Arrivals { return Constant{Rate: 3, Limit: 100} }},
		{"burst", func() Arrivals { return Burst{Limit: 100} }},
		{"poisson", func() Arrivals { return NewPoisson(3, 9, 100) }},
		{"gamma", func() Arrivals { return NewGamma(3, 0.5, 9, 100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.make(), tc.make()
			seq := make([]time.Duration, 100)
			for i := range seq {
				var ok bool
				seq[i], ok = a.At(i)
				require.True(t, ok)
			}
			_, ok := a.At(100)
			assert.False(t, ok, "limit")
			_, ok = a.At(-1)
			assert.False(t, ok)
			for _, i := range []int{57, 3, 99, 0, 58} { // random access replays the same offsets
				at, ok := b.At(i)
				require.True(t, ok)
				assert.Equal(t, seq[i], at, "index %d", i)
			}
		})
	}
	at, _ := Burst{}.At(1 << 40)
	assert.Zero(t, at, "burst: everything at t=0")
	a, _ := NewPoisson(3, 1, 0).At(10)
	b, _ := NewPoisson(3, 2, 0).At(10)
	assert.NotEqual(t, a, b, "seed changes the process")
}

func TestTraceArrivals(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.Workload, p.TraceFile, p.TimeScale = WorkloadMooncake, writeFile(t, "m.jsonl", mooncakeRows), 0.1
	ta, closer, err := OpenTraceArrivals(p)
	require.NoError(t, err)
	defer closer.Close()
	want := []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
	for _, i := range []int{3, 0, 1, 2} {
		at, ok := ta.At(i)
		require.True(t, ok)
		assert.Equal(t, want[i], at)
	}
	_, ok := ta.At(4)
	assert.False(t, ok)
	p.Workload = WorkloadRandom
	_, _, err = OpenTraceArrivals(p)
	require.ErrorContains(t, err, "no trace timestamps")
}

func BenchmarkArrivals(b *testing.B) {
	for _, tc := range []struct {
		name string
		a    Arrivals
	}{
		{"process=poisson", NewPoisson(100, 1, 0)},
		{"process=gamma", NewGamma(100, 0.5, 1, 0)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tc.a.At(i)
				i++
			}
		})
	}
}

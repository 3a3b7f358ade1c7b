package reports

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat"
)

// Expected values are np.percentile(x, p) with numpy's default method, worked by hand:
// h = (n−1)·p/100, g = h − ⌊h⌋, result = x[⌊h⌋] + g·(x[⌊h⌋+1] − x[⌊h⌋]) (numpy computes it
// from the upper end when g ≥ 0.5). The last-bit float64 results (e.g. 3.8499999999999996)
// were checked with a line-by-line Python transcription of numpy's "linear" method and _lerp
// (numpy itself is not installed here).
func TestPercentileMatchesNumpy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		x    []float64 // sorted
		p    float64
		want float64
	}{
		{"median of even count interpolates", []float64{1, 2, 3, 4}, 50, 2.5},
		{"p90 of 1..4: h=2.7", []float64{1, 2, 3, 4}, 90, 3.7},
		{"p95 of 1..4: h=2.85, float64 rounding as numpy", []float64{1, 2, 3, 4}, 95, 3.8499999999999996},
		{"p99 of 1..4: h=2.97", []float64{1, 2, 3, 4}, 99, 3.9699999999999998},
		{"p0 is the minimum", []float64{1, 2, 3, 4}, 0, 1},
		{"p100 is the maximum", []float64{1, 2, 3, 4}, 100, 4},
		{"median of odd count is the middle", []float64{80, 95, 120, 150, 200}, 50, 120},
		{"p90 of five: h=3.6", []float64{80, 95, 120, 150, 200}, 90, 180},
		{"p99 of five: h=3.96", []float64{80, 95, 120, 150, 200}, 99, 198},
		{"two values p95", []float64{10, 20}, 95, 19.5},
		{"two values p99", []float64{10, 20}, 99, 19.9},
		{"single value", []float64{5}, 99, 5},
		{"ties", []float64{7, 7, 7, 9}, 50, 7},
		{"empty gives 0", nil, 95, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, Percentile(tc.x, tc.p))
		})
	}
}

// gonum's LinInterp is a different estimator (Hyndman & Fan type 4): it would not compare
// with sglang's numbers, which is why Percentile exists.
func TestPercentileDiffersFromGonumLinInterp(t *testing.T) {
	t.Parallel()
	x := []float64{1, 2, 3, 4}
	assert.Equal(t, 2.0, stat.Quantile(0.5, stat.LinInterp, x, nil))
	assert.Equal(t, 2.5, Percentile(x, 50))
}

func TestPercentilePanicsOutsideRange(t *testing.T) {
	t.Parallel()
	for _, p := range []float64{-1, 100.5, math.NaN()} {
		assert.Panics(t, func() { Percentile([]float64{1}, p) }, "p=%v", p)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	x := []float64{200, 80, 150, 95, 120} // unsorted
	s := Summarize(x)
	assert.Equal(t, Stats{Mean: 129, P50: 120, P90: 180, P95: 190, P99: 198, Max: 200}, s)
	assert.Equal(t, []float64{200, 80, 150, 95, 120}, x, "input not modified")
	assert.Equal(t, Stats{}, Summarize(nil))
	assert.Equal(t, Stats{Mean: 3, P50: 3, P90: 3, P95: 3, P99: 3, Max: 3}, Summarize([]float64{3}))
}

func ExamplePercentile() {
	ttft := []float64{80, 95, 120, 150, 200} // ms, sorted
	fmt.Println(Percentile(ttft, 50), Percentile(ttft, 90), Percentile(ttft, 99))
	// Output: 120 180 198
}

// FuzzPercentile checks Percentile against order properties: it lies between its neighbours
// in the sorted data, never leaves [min, max], and does not decrease as p grows.
func FuzzPercentile(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(95))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 240, 63, 0, 0, 0, 0, 0, 0, 0, 64}, uint8(50))
	f.Fuzz(func(t *testing.T, data []byte, pb uint8) {
		var x []float64
		for len(data) >= 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(data))
			data = data[8:]
			if !math.IsNaN(v) && !math.IsInf(v, 0) && math.Abs(v) < 1e300 {
				x = append(x, v)
			}
		}
		if len(x) == 0 {
			return
		}
		slices.Sort(x)
		p := float64(pb%101) * 1.0
		got := Percentile(x, p)
		require.GreaterOrEqual(t, got, x[0])
		require.LessOrEqual(t, got, x[len(x)-1])
		h := float64(len(x)-1) * (p / 100)
		lo, hi := x[int(math.Floor(h))], x[int(math.Ceil(h))]
		require.GreaterOrEqual(t, got, lo)
		require.LessOrEqual(t, got, hi)
		if p < 100 {
			require.LessOrEqual(t, got, Percentile(x, p+1))
		}
	})
}

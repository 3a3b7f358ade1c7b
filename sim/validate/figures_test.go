package validate

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
)

func TestBands(t *testing.T) {
	t.Parallel()
	for fig, want := range map[string]float64{
		"ttft_ms_mean": 0.25, "ttft_ms_median": 0.25, "ttft_ms_p99": 0.50,
		"tpot_ms_mean": 0.15, "tpot_ms_median": 0.15, "itl_ms_mean": 0.15, "itl_ms_median": 0.15, "itl_ms_p99": 0.50,
		"e2e_ms_mean": 0.25, "e2e_ms_median": 0.25,
		"duration_s": 0.15, "request_throughput_req_s": 0.15, "input_tok_s": 0.15, "output_tok_s": 0.15,
		"total_tok_s": 0.15, "input_tok_s_per_node": 0.15, "output_tok_s_per_gpu": 0.15,
		"output_tok_s_per_node_all_nodes": 0.15,
	} {
		assert.Equal(t, want, Band(fig), fig)
	}
}

func TestCompareAtTheBandEdges(t *testing.T) {
	t.Parallel()
	assert.True(t, Compare("s", "l", "itl_ms_median", 100, 115).Pass, "+15 % is inside ±15 %")
	assert.True(t, Compare("s", "l", "itl_ms_median", 100, 85).Pass, "−15 % is inside ±15 %")
	assert.False(t, Compare("s", "l", "itl_ms_median", 100, 115.5).Pass)
	assert.False(t, Compare("s", "l", "itl_ms_median", 100, 84.5).Pass)
	assert.True(t, Compare("s", "l", "ttft_ms_median", 100, 124).Pass, "TTFT has ±25 %")
	r := Compare("s", "l", "ttft_ms_median", 40, 50)
	assert.InDelta(t, 1.25, r.Ratio, 1e-12)
	assert.True(t, r.Pass)
	z := Compare("s", "l", "output_tok_s", 0, 5)
	assert.True(t, math.IsNaN(z.Ratio))
	assert.False(t, z.Pass, "no ratio against a zero")
	f := Failed("s", "l", "output_tok_s", 10, "not expressible yet: unknown GPU X")
	assert.False(t, f.Pass)
	assert.True(t, math.IsNaN(f.Simulated))
	assert.False(t, InBand(math.NaN(), 1))
}

func TestLevelFigureFromAHandBuiltLevel(t *testing.T) {
	t.Parallel()
	lv := reports.Level{
		DurationS: 100,
		TTFTMs:    reports.Stats{Mean: 30, P50: 25, P99: 90},
		TPOTMs:    reports.Stats{Mean: 12, P50: 11, P99: 20},
		ITLMs:     reports.Stats{Mean: 10, P50: 9, P99: 30},
		E2EMs:     reports.Stats{Mean: 2000, P50: 1800, P99: 5000},
		Throughput: reports.Throughput{
			ReqS: 5, InputTokS: 8000, OutputTokS: 1000,
		},
	}
	sc := Scale{GPUs: 4, Nodes: 2, AllNodes: 8}
	for fig, want := range map[string]float64{
		"ttft_ms_mean": 30, "ttft_ms_median": 25, "ttft_ms_p99": 90,
		"tpot_ms_mean": 12, "tpot_ms_median": 11, "itl_ms_mean": 10, "itl_ms_median": 9, "itl_ms_p99": 30,
		"e2e_ms_mean": 2000, "e2e_ms_median": 1800,
		"duration_s": 100, "request_throughput_req_s": 5,
		"input_tok_s": 8000, "output_tok_s": 1000, "total_tok_s": 9000,
		"output_tok_s_per_gpu": 250, "input_tok_s_per_gpu": 2000,
		"input_tok_s_per_node": 4000, "output_tok_s_per_node": 500,
		"input_tok_s_per_node_all_nodes": 1000, "output_tok_s_per_node_all_nodes": 125,
	} {
		got, ok := LevelFigure(lv, fig, sc)
		assert.True(t, ok, fig)
		assert.Equal(t, want, got, fig)
	}
	for _, fig := range []string{"ttft_ms_p95x", "goodput", "output_tok_s_per_rack"} {
		_, ok := LevelFigure(lv, fig, sc)
		assert.False(t, ok, fig)
	}
	_, ok := Throughput("output_tok_s_per_gpu", 1, 1, Scale{})
	assert.False(t, ok, "per GPU without a GPU count")
}

// A figure its level lists as a known gap does not fail the suite while it lies outside its
// band, and fails once it comes within (the stale entry must go).
func TestKnownGaps(t *testing.T) {
	t.Parallel()
	gap := Compare("s", "l", "tpot_ms_mean", 100, 70)
	gap.Gap = "the scheduler of that SGLang era is not modelled"
	ok := Compare("s", "l", "ttft_ms_mean", 100, 110)
	tally := Count([]Result{gap, ok})
	assert.True(t, tally.OK(), "a known gap outside its band is reported, not failed")
	assert.Equal(t, 1, tally.Gaps)
	assert.Contains(t, tally.String(), "1 known gaps")
	assert.Equal(t, "KNOWN GAP (the notes say why)", verdict(gap))

	closed := Compare("s", "l", "tpot_ms_mean", 100, 95)
	closed.Gap = "stale"
	tally = Count([]Result{closed, ok})
	assert.False(t, tally.OK(), "a known gap within its band fails until its entry is removed")
	assert.Equal(t, 1, tally.Closed)
	assert.Contains(t, verdict(closed), "remove its known_gaps entry")

	s, err := Parse([]byte(`{"name": "gaps", "model": "m", "gpu": "g",
		"levels": [{"load": {"request_rate": 1}, "figures": {"tpot_ms_mean": 10},
		"known_gaps": {"tpot_ms_mean": "why"}}]}`), "gaps.json")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"tpot_ms_mean": "why"}, s.Levels[0].KnownGaps)
}

package sim

import (
	"math"
	"testing"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A "deployment" that is the base profile made 40 % slower in prefill and 35 % faster in
// decode, with other fixed costs: calibration from the base recovers its speed, and the fit
// predicts a level it never saw.
func TestCalibrateRecoversAKnownProfile(t *testing.T) {
	base, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	truth := Fit{Prefill: 1.4, PrefillFixed: base.A0 * 2, Decode: 0.65, DecodeFixed: base.B0 * 1.5, PDOverhead: 0.035, T0: base.T0}.Apply(base)
	truth.Name = "made-up-gpu"
	cl := Cluster{Prefill: 2, Decode: 2}
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	w := workloads.DefaultParams()
	w.Conversations, w.Turns, w.QuestionLen, w.OutputLen = 32, 3, 512, 64
	load := func(c ...int) workloads.LoadParams {
		l := workloads.DefaultLoadParams()
		l.Concurrency, l.Requests = c, 96
		return l
	}
	measure := func(l workloads.LoadParams) CalibrationRun {
		res, err := predict(cl, rc, truth, w, l)
		require.NoError(t, err)
		return CalibrationRun{Name: "run", Workload: w, Load: l, Measured: res.Results.Levels, Records: res.Records}
	}
	runs := []CalibrationRun{measure(load(1)), measure(load(4)), measure(load(16))}
	c, err := Calibrate(CalibrateConfig{Base: base, Cluster: cl, Router: rc, Runs: runs, MaxEvals: 250})
	require.NoError(t, err)
	t.Logf("fit %+v after %d evaluations; rmse base %.3f fitted %.3f", c.Fit, c.Evaluations, c.BaseRMSE, c.FitRMSE)
	assert.Less(t, c.FitRMSE, 0.05, "fitted within ~5 %")
	assert.Greater(t, c.BaseRMSE, 0.2, "the base misses by far more")

	// A level not fitted: concurrency 8.
	want := measure(load(8)).Measured[0]
	got, err := Predict(cl, rc, c.Profile, w, load(8))
	require.NoError(t, err)
	for _, f := range figures[:3] {
		m, s := f.get(want), f.get(got[0])
		assert.InDelta(t, 0, math.Abs(s-m)/m, 0.10, "%s: measured %.2f, calibrated %.2f", f.name, m, s)
	}
}

// figs is a measured or simulated level with the four figures the loss compares.
func figs(label string, ttftP50, ttftP95, tpotP50, itlP50 float64) reports.Level {
	l := reports.Level{Label: label}
	l.TTFTMs.P50, l.TTFTMs.P95, l.TPOTMs.P50, l.ITLMs.P50 = ttftP50, ttftP95, tpotP50, itlP50
	return l
}

// TestLoss checks the loss by hand: the figures' weights are 1 (TTFT P50), 0.5 (TTFT P95),
// 1 (TPOT P50), 0.5 (ITL P50), 3 in all, and 1 for each of the short- and long-prompt TTFT
// medians; a figure off by a ratio r adds weight·ln²r.
func TestLoss(t *testing.T) {
	t.Parallel()
	e := math.E
	ln2sq := math.Log(2) * math.Log(2)
	m := figs("c1", 100, 200, 10, 10)
	run := func(levels ...reports.Level) observed { return observed{levels: levels} }
	split := func(o observed, label string, short, long float64) observed {
		o.split = map[string]promptSplit{label: {short, long}}
		return o
	}
	for _, tc := range []struct {
		name                string
		measured, simulated []observed
		want                float64
	}{
		{"a perfect simulation costs nothing",
			[]observed{run(m)}, []observed{run(m)}, 0},
		{"every figure twice the measured one: ln²2 whatever the weights",
			[]observed{run(m)}, []observed{run(figs("c1", 200, 400, 20, 20))}, ln2sq},
		{"every figure half the measured one: the same, the ratio is symmetric in log",
			[]observed{run(m)}, []observed{run(figs("c1", 50, 100, 5, 5))}, ln2sq},
		{"TTFT P50 e times off, weight 1 of 3",
			[]observed{run(m)}, []observed{run(figs("c1", 100*e, 200, 10, 10))}, 1.0 / 3},
		{"TTFT P95 e times off, weight 0.5 of 3",
			[]observed{run(m)}, []observed{run(figs("c1", 100, 200*e, 10, 10))}, 0.5 / 3},
		{"a level the simulation lost: every figure costs missedLoss",
			[]observed{run(m)}, []observed{run(figs("c2", 100, 200, 10, 10))}, missedLoss},
		{"one figure simulated as 0: missedLoss at its weight",
			[]observed{run(m)}, []observed{run(figs("c1", 100, 200, 0, 10))}, missedLoss * 1.0 / 3},
		{"figures measured as 0 are not compared: TTFT P50 alone, e times off",
			[]observed{run(figs("c1", 100, 0, 0, 0))}, []observed{run(figs("c1", 100*e, 7, 7, 7))}, 1},
		{"nothing measured: 0",
			[]observed{run(figs("c1", 0, 0, 0, 0))}, []observed{run(m)}, 0},
		{"no runs: 0", nil, nil, 0},
		{"a simulated level nobody measured is ignored",
			[]observed{run(m)}, []observed{run(m, figs("c9", 1, 1, 1, 1))}, 0},
		{"split: short prompts e times off, 1 of 3 + 2",
			[]observed{split(run(m), "c1", 50, 150)}, []observed{split(run(m), "c1", 50*e, 150)}, 1.0 / 5},
		{"split measured but not simulated: missedLoss on both, 2 of 5",
			[]observed{split(run(m), "c1", 50, 150)}, []observed{run(m)}, 2 * missedLoss / 5},
		{"split simulated but not measured: not compared",
			[]observed{run(m)}, []observed{split(run(m), "c1", 50, 150)}, 0},
		{"two runs, one perfect, one twice off: the mean, ln²2/2",
			[]observed{run(m), run(m)}, []observed{run(m), run(figs("c1", 200, 400, 20, 20))}, ln2sq / 2},
		{"two levels of one run, one e times off in TPOT: 1 of 6",
			[]observed{run(m, figs("c2", 100, 200, 10, 10))}, []observed{run(m, figs("c2", 100, 200, 10*e, 10))}, 1.0 / 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.InDelta(t, tc.want, loss(tc.measured, tc.simulated), 1e-12)
		})
	}
}

// TestSplitTTFT: the measured side splits each level at its own median uncached prompt and
// returns the thresholds; the simulated side splits at those, read-only, and leaves out the
// levels that have none.
func TestSplitTTFT(t *testing.T) {
	t.Parallel()
	var recs []reports.Record
	add := func(label string, newTokens int, ttft float64) {
		recs = append(recs, reports.Record{Level: label, InputTokens: newTokens + 10, CachedTokens: 10, TTFTMs: &ttft})
	}
	for i := range 8 {
		add("c1", 100+i, 10)  // short: TTFT 10
		add("c1", 1000+i, 50) // long: TTFT 50
	}
	add("c2", 100, 10) // too few on either side: zero split

	split, th := splitTTFT(recs, nil)
	assert.Equal(t, map[string]int{"c1": 1000, "c2": 100}, th, "each level's median uncached prompt")
	assert.Equal(t, map[string]promptSplit{"c1": {10, 50}, "c2": {}}, split)

	given := map[string]int{"c1": 2000}
	split, th = splitTTFT(recs, given)
	assert.Equal(t, map[string]promptSplit{"c1": {}}, split, "all 16 short of 2000 tokens: too few long ones; c2 has no threshold")
	assert.Equal(t, map[string]int{"c1": 2000}, given, "the given thresholds are not changed")
	assert.Equal(t, given, th)
}

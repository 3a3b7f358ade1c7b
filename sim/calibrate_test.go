package sim

import (
	"math"
	"testing"

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

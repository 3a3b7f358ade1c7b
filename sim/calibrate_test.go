package sim

import (
	"fmt"
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
	skipUnderRace(t)
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

// The free factors reach the terms they name and no others: prefill linear (a1) apart from
// prefill attention (a2), decode memory (m0, m2) apart from decode compute (c1, c2); zero
// PrefillAttn and DecodeCompute follow Prefill and Decode.
func TestFitApplySeparatesFactors(t *testing.T) {
	t.Parallel()
	base, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	p := Fit{Prefill: 0.6, PrefillAttn: 10, PrefillFixed: 0.002, Decode: 2, DecodeCompute: 3, DecodeFixed: 0.001, PDOverhead: 0.03, T0: 0.004}.Apply(base)
	assert.InDelta(t, base.A1*0.6, p.A1, 1e-18)
	assert.InDelta(t, base.A2*10, p.A2, 1e-20)
	assert.InDelta(t, base.M0*2, p.M0, 1e-15)
	assert.InDelta(t, base.M2*2, p.M2, 1e-20)
	assert.InDelta(t, base.C1*3, p.C1, 1e-18)
	assert.InDelta(t, base.C2*3, p.C2, 1e-20)
	assert.Equal(t, []float64{0.002, 0.001, 0.03, 0.004}, []float64{p.A0, p.B0, p.PDOverhead, p.T0})
	uniform := Fit{Prefill: 2, Decode: 0.5, PrefillFixed: base.A0, DecodeFixed: base.B0}.Apply(base)
	assert.InDelta(t, base.A2*2, uniform.A2, 1e-20, "PrefillAttn 0: as Prefill")
	assert.InDelta(t, base.C1*0.5, uniform.C1, 1e-18, "DecodeCompute 0: as Decode")
	assert.Equal(t, base, BaseFit(base).Apply(base))
	got := fitOf(BaseFit(base).vector(), base.T0)
	assert.InDelta(t, 1, got.PrefillAttn, 1e-12)
	assert.InDelta(t, base.PDOverhead, got.PDOverhead, 1e-12)
}

// ParseServerInfo reads SGLang's keys one by one: missing, null, non-numeric and negative
// (SGLang's chunked_prefill_size -1: chunking off) stay unset; the role comes from
// disaggregation_mode.
func TestParseServerInfo(t *testing.T) {
	t.Parallel()
	si, err := ParseServerInfo([]byte(`{"chunked_prefill_size":-1,"max_running_requests":null,"max_total_num_tokens":12000,
		"page_size":16,"cuda_graph_max_bs":"x","tp_size":4,"dp_size":2,"enable_dp_attention":true,"disaggregation_mode":"decode","other":[1]}`))
	require.NoError(t, err)
	tr := true
	assert.Equal(t, ServerInfo{Role: "decode", Args: engine.ServerArgs{MaxTotalTokens: 12000, PageSize: 16}, TPSize: 4, DPSize: 2, DPAttention: &tr}, si)
	si, err = ParseServerInfo([]byte(`{"disaggregation_mode":"null"}`))
	require.NoError(t, err)
	assert.Equal(t, ServerInfo{}, si)
	_, err = ParseServerInfo([]byte(`[1]`))
	assert.Error(t, err)
}

// ApplyServerInfo puts each role's recorded arguments into the simulated cluster (explicit
// ones kept) and the decode servers' KV capacity into the profile; disagreeing servers are
// noted.
func TestApplyServerInfo(t *testing.T) {
	t.Parallel()
	base, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	servers := []ServerInfo{
		{URL: "p1", Role: "prefill", Args: engine.ServerArgs{MaxTotalTokens: 50000, ChunkedPrefillSize: 4096}},
		{URL: "d1", Role: "decode", Args: engine.ServerArgs{MaxTotalTokens: 12000, MaxRunningRequests: 64, CUDAGraphMaxBS: 32}},
		{URL: "d2", Role: "decode", Args: engine.ServerArgs{MaxTotalTokens: 13000, PageSize: 16}},
	}
	cl := Cluster{Prefill: 1, Decode: 2, Args: engine.ServerArgs{MaxRunningRequests: 8}} // --max-running-requests 8 given
	got, prof, notes := ApplyServerInfo(cl, base, true, servers)
	require.NotNil(t, got.PrefillArgs)
	require.NotNil(t, got.DecodeArgs)
	assert.Equal(t, engine.ServerArgs{MaxTotalTokens: 50000, ChunkedPrefillSize: 4096, MaxRunningRequests: 8}, *got.PrefillArgs)
	assert.Equal(t, engine.ServerArgs{MaxTotalTokens: 12000, MaxRunningRequests: 8, CUDAGraphMaxBS: 32, PageSize: 16}, *got.DecodeArgs)
	assert.Equal(t, 12000, prof.MaxTotalTokens, "the decode servers' KV capacity")
	assert.Contains(t, notes, "decode servers disagree on max_total_num_tokens (12000, 13000 at d2): using 12000")

	reg, prof, _ := ApplyServerInfo(Cluster{Regular: 1}, base, false, []ServerInfo{{Args: engine.ServerArgs{MaxTotalTokens: 9000}}})
	assert.Equal(t, engine.ServerArgs{MaxTotalTokens: 9000}, reg.Args)
	assert.Equal(t, 9000, prof.MaxTotalTokens)
	none, prof, notes := ApplyServerInfo(cl, base, true, nil)
	assert.Equal(t, cl, none)
	assert.Equal(t, base, prof)
	assert.Empty(t, notes)
}

// --holdout: highest is the level with the most requests in flight (throughput × latency),
// across closed- and open-loop levels; numbers count from 1; labels must be unique or
// qualified by the run.
func TestResolveHoldout(t *testing.T) {
	t.Parallel()
	lv := func(label string, reqS, e2eMs float64) reports.Level {
		l := reports.Level{Label: label}
		l.Throughput.ReqS, l.E2EMs.Mean = reqS, e2eMs
		return l
	}
	runs := []CalibrationRun{
		{Name: "a", Measured: []reports.Level{lv("c2", 10, 200), lv("c8", 30, 260)}}, // 2 and 7.8 in flight
		{Name: "b", Measured: []reports.Level{lv("r20", 20, 500), lv("c8", 5, 100)}}, // 10 and 0.5
	}
	for spec, want := range map[string][]LevelRef{
		"highest": {{1, "r20"}}, "none": nil, "": nil, "2": {{0, "c8"}}, "r20": {{1, "r20"}}, "a/c8": {{0, "c8"}}, "b/c8": {{1, "c8"}},
	} {
		got, err := ResolveHoldout(runs, spec)
		require.NoError(t, err, spec)
		assert.Equal(t, want, got, spec)
	}
	for spec, msg := range map[string]string{"0": "levels 1 to 4", "5": "levels 1 to 4", "c8": "2 runs have that level", "c99": "no such level", "x/c2": "no such level"} {
		_, err := ResolveHoldout(runs, spec)
		assert.ErrorContains(t, err, msg, spec)
	}
	one, err := ResolveHoldout(runs[:1:1][:1], "highest")
	require.NoError(t, err)
	assert.Equal(t, []LevelRef{{0, "c8"}}, one)
	single := []CalibrationRun{{Name: "a", Measured: []reports.Level{lv("c2", 1, 1)}}}
	one, err = ResolveHoldout(single, "highest")
	require.NoError(t, err)
	assert.Nil(t, one, "a single level is never held out by default: nothing would be left to fit")
}

// ExtrapolationWarnings: inside the fitted range (with its 10 % margin) nothing; outside it,
// one warning per range left; a large residual is always worth a warning; no Fit, no warning.
func TestExtrapolationWarnings(t *testing.T) {
	t.Parallel()
	p := engine.Profile{Name: "mine", Fit: &engine.FitRange{PromptTokensMin: 500, PromptTokensMax: 2000, BatchPerRankMax: 10, Residual: 0.03}}
	assert.Empty(t, ExtrapolationWarnings(p, 500, 2000, 10))
	assert.Empty(t, ExtrapolationWarnings(p, 460, 2200, 11), "within the 10 % margin")
	assert.Empty(t, ExtrapolationWarnings(p, 0, 0, 0), "unknown: not checked")
	w := ExtrapolationWarnings(p, 100, 6000, 24)
	require.Len(t, w, 3)
	assert.Contains(t, w[0], "prompts of 500–2000 tokens; this run has prompts up to 6000")
	assert.Contains(t, w[1], "prompts from 100")
	assert.Contains(t, w[2], "up to 10 requests in flight per decode rank; this run reaches 24")
	p.Fit.Residual = 0.2
	w = ExtrapolationWarnings(p, 500, 2000, 10)
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "within 20 %")
	assert.Nil(t, ExtrapolationWarnings(engine.Profile{Name: "preset"}, 1, 1e6, 1000))
}

// residualWarnings names the worst fitted levels when the fit is poor, and a held-out level
// predicted beyond HoldoutWarnThreshold; a good fit and a good prediction warn of nothing.
func TestResidualWarnings(t *testing.T) {
	t.Parallel()
	c := &Calibration{FitRMSE: 0.05, Levels: []LevelResidual{{Run: "r", Level: "c2", RMSE: 0.04}, {Run: "r", Level: "c8", RMSE: 0.06}, {Run: "r", Level: "c24", RMSE: 0.12, HeldOut: true}}}
	assert.Empty(t, residualWarnings(c))
	c.Levels[2].RMSE = 0.3
	c.Points = []FitPoint{{Run: "r", Level: "c24", Metric: "ttft_p50", Measured: 100, Fitted: 110, HeldOut: true},
		{Run: "r", Level: "c24", Metric: "tpot_p50", Measured: 10, Fitted: 6.5, HeldOut: true},
		{Run: "r", Level: "c8", Metric: "tpot_p50", Measured: 10, Fitted: 1}}
	w := residualWarnings(c)
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "held-out level r/c24 is mispredicted (rms log error 0.300 > 0.15; tpot_p50 -35.0 %)")
	c.FitRMSE = 0.2
	c.Levels[0].RMSE, c.Levels[1].RMSE = 0.1, 0.25
	w = residualWarnings(c)
	require.Len(t, w, 2)
	assert.Contains(t, w[0], "rms log error 0.200 > 0.10); largest residual: r/c8 (0.250)")
	assert.NotContains(t, w[0], "r/c2")
}

// A deployment whose KV capacity is far below the base profile's, and whose prefill is
// attention-heavy: with the capacity given (as calibrate reads it from the bench), the fit
// holds out the busiest level, predicts it, records its range, and does not warn.
func TestCalibrateHoldoutWithKnownCapacity(t *testing.T) {
	skipUnderRace(t)
	base, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	truth := Fit{Prefill: 0.8, PrefillAttn: 6, PrefillFixed: base.A0 * 1.5, Decode: 1.3, DecodeCompute: 1.3, DecodeFixed: base.B0, PDOverhead: 0.03, T0: base.T0}.Apply(base)
	truth.MaxTotalTokens = 12000
	cl := Cluster{Prefill: 1, Decode: 1, Args: engine.ServerArgs{MaxTotalTokens: 12000}}
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	w := workloads.DefaultParams()
	w.Conversations, w.Turns, w.SystemPromptLen, w.QuestionLen, w.OutputLen = 24, 3, 512, 512, 32
	measure := func(c int) CalibrationRun {
		l := workloads.DefaultLoadParams()
		l.Concurrency, l.Requests = []int{c}, 48
		res, err := predict(cl, rc, truth, w, l)
		require.NoError(t, err)
		return CalibrationRun{Name: fmt.Sprintf("c%d", c), Workload: w, Load: l, Measured: res.Results.Levels, Records: res.Records}
	}
	runs := []CalibrationRun{measure(2), measure(6), measure(16)}
	held, err := ResolveHoldout(runs, "highest")
	require.NoError(t, err)
	require.Equal(t, []LevelRef{{2, "c16"}}, held)
	c, err := Calibrate(CalibrateConfig{Base: base, Cluster: cl, Router: rc, Runs: runs, MaxEvals: 150, Holdout: held})
	require.NoError(t, err)
	t.Logf("fit %+v, rmse %.3f, held out %.3f, warnings %q", c.Fit, c.FitRMSE, c.HoldoutRMSE, c.Warnings)
	assert.Less(t, c.FitRMSE, 0.05)
	assert.Less(t, c.HoldoutRMSE, HoldoutWarnThreshold)
	assert.Empty(t, c.Warnings)
	require.NotNil(t, c.Profile.Fit)
	assert.Equal(t, c.FitRMSE, c.Profile.Fit.Residual)
	assert.Greater(t, c.Profile.Fit.BatchPerRankMax, 1)
	assert.Less(t, c.Profile.Fit.BatchPerRankMax, 16, "the held-out level's load is not in the fitted range")
	assert.Positive(t, c.Profile.Fit.PromptTokensMin)
	var heldPoints int
	for _, p := range c.Points {
		if p.HeldOut {
			heldPoints++
			assert.Equal(t, "c16", p.Level)
		}
	}
	assert.Equal(t, len(figures), heldPoints)
}

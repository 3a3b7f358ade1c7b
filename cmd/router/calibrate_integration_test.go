//go:build integration

package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// startLivePD starts a live PD cluster of 2 prefill + 2 decode fakeworkers running prof,
// behind the real router (in-process, on loopback), until ctx ends; it returns the router's URL.
func startLivePD(t *testing.T, ctx context.Context, prof engine.Profile) string {
	t.Helper()
	return startLivePDWith(t, ctx, fakeworker.Config{Profile: prof})
}

// startLivePDWith is startLivePD with every worker configured as wc (its Host and Seed set here).
func startLivePDWith(t *testing.T, ctx context.Context, wc fakeworker.Config) string {
	t.Helper()
	wc.Host, wc.Seed = "127.0.0.1", 1
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Prefill: 2, Decode: 2, Worker: wc})
	require.NoError(t, err)
	rc := server.DefaultConfig()
	rc.PDDisaggregation = true
	for _, w := range cl.Workers() {
		switch fakeworker.ModeName(w.Mode()) {
		case "prefill":
			port := w.BootstrapPort()
			rc.Prefill = append(rc.Prefill, router.PrefillWorker{URL: w.URL(), BootstrapPort: &port})
		case "decode":
			rc.Decode = append(rc.Decode, w.URL())
		}
	}
	rc.Seed = new(int64(1))
	srv, err := server.New(server.Options{Config: rc})
	require.NoError(t, err)
	sctx, stopRouter := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { front.Close(); stopRouter(); srv.Wait(); cl.Stop(); _ = cl.Wait() })
	return front.URL
}

// liveBench benches a live cluster into dir, one level per run, each run its own seed.
type liveBench struct {
	t     *testing.T
	ctx   context.Context
	url   string
	dir   string
	seed  uint64
	truth engine.Profile // what the live cluster runs: a run it misses far is re-run (see run)
}

// multiturn is the calibration tests' conversation workload with the next seed.
func (b *liveBench) multiturn() workloads.Params {
	p := workloads.DefaultParams()
	b.seed++
	p.Seed = b.seed
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen, p.RangeRatio = 96, 3, 512, 384, 24, 0.5
	return p
}

// long is a random workload of prompts of about tokens tokens (± 10 %) and 48 output tokens.
func (b *liveBench) long(tokens int) workloads.Params {
	p := workloads.DefaultParams()
	b.seed++
	p.Seed = 100 + b.seed
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen, p.RangeRatio = workloads.WorkloadRandom, 100000, tokens, 48, 0.9
	return p
}

// liveCluster is the live cluster startLivePD runs, as the simulator sees it.
var liveCluster = sim.Cluster{Prefill: 2, Decode: 2, NetLatency: 250 * time.Microsecond}

// stallTries bounds how often run benches a level the machine stalled.
const stallTries = 3

// run benches one level into dir/name. A level whose TTFT P95 comes out over 1.5×, or whose
// TPOT P50 over 1.25×, what the live cluster's own profile simulates for the same requests
// was stalled by other work on the machine, and would teach calibrate the stall, not the
// engine: it is benched again, at most stallTries times, and the last try is kept. Quietly
// the two agree within 3 % at the P50s and 18 % at the P95 (and within 1.53× at load 10);
// at load 8 c8's P95 once came out 1.3 s against 74 ms, and the warning test then failed.
func (b *liveBench) run(name string, p workloads.Params, clients, requests int) string {
	b.t.Helper()
	l := workloads.DefaultLoadParams()
	l.Concurrency, l.Requests, l.Warmup = []int{clients}, requests, 8
	out := filepath.Join(b.dir, name)
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	for try := 1; ; try++ {
		require.NoError(b.t, os.RemoveAll(out))
		res, err := bench.Run(b.ctx, bench.Config{URL: b.url, Workload: p, Load: l, Out: out, RequestTimeout: time.Minute})
		require.NoError(b.t, err, name)
		lv := res.Levels[0]
		b.t.Logf("live %s: TTFT p50 %.1f p95 %.1f ms, TPOT p50 %.2f ms, %d workers recorded, warnings %q", name, lv.TTFTMs.P50, lv.TTFTMs.P95, lv.TPOTMs.P50,
			len(res.Meta.Workers), res.Meta.Warnings)
		require.Len(b.t, res.Meta.Workers, 4, "bench records every worker's /get_server_info")
		require.Empty(b.t, res.Meta.Warnings)
		r, err := readCalibrationRun(out)
		require.NoError(b.t, err)
		own := predictRun(b.t, liveCluster, rc, b.truth, r)
		if lv.TTFTMs.P95 <= 1.5*own.TTFTMs.P95 && lv.TPOTMs.P50 <= 1.25*own.TPOTMs.P50 || try == stallTries {
			return out
		}
		b.t.Logf("live %s stalled (its own profile simulates TTFT p95 %.1f ms, TPOT p50 %.2f ms): benching it again", name, own.TTFTMs.P95, own.TPOTMs.P50)
	}
}

// Calibration that knows its limits (issue 25, a): the live cluster runs a profile outside
// calibrate's family — llama3-8b-h100 with every attention term ×10 (prefill a2, decode KV
// reads m2 and attention FLOPs c2) and every linear term ×0.6 (a1, the weight reads m0, c1).
// Calibrate's decode memory factor scales weights and KV reads together (one bandwidth), so
// it cannot make the decode step grow with context as the truth does while keeping the
// weights' read as short; the busiest level, a workload of ~6,000-token prompts, is held out
// by default, and there the fit cannot carry: its error is printed and the warning names it.
func TestIntegrationCalibrationWarnsOutsideItsFamily(t *testing.T) {
	dir := t.TempDir()
	h100, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	truth := h100
	truth.A1, truth.M0, truth.C1 = 0.6*h100.A1, 0.6*h100.M0, 0.6*h100.C1
	truth.A2, truth.M2, truth.C2 = 10*h100.A2, 10*h100.M2, 10*h100.C2
	truth.Name, truth.Source = "attention-heavy-gpu", "calibration test: attention ×10, linear ×0.6"
	gpuFile := filepath.Join(dir, "attention-heavy.yaml")
	y, err := profileYAML(truth)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(gpuFile, y, 0o600))
	prof, err := loadProfileFile(gpuFile)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &liveBench{t: t, ctx: ctx, url: startLivePD(t, ctx, prof), dir: dir, truth: prof}
	// As in the KV-capacity test, a light run spans the prompt lengths (660–6,600 tokens), so
	// that the held-out level's long prompts are inside the fitted range: what misses there is
	// the family, not an extrapolation in prompt length.
	wide := b.long(6600)
	wide.RangeRatio = 0.1
	// Fewer requests than the capacity test: only the size of the held-out miss (~40 %)
	// matters here, not its precision.
	runs := []string{b.run("c2", b.multiturn(), 2, 40), b.run("c8", b.multiturn(), 8, 96), b.run("wide-c2", wide, 2, 32),
		b.run("long-c12", b.long(6000), 12, 48)}

	fitted := filepath.Join(dir, "fitted.yaml")
	start := time.Now()
	out, err := run(t, append(append([]string{"sim", "calibrate"}, runs...),
		"--prefill", "2", "--decode", "2", "--net-latency", "250us", "--base-profile", "llama3-8b-h100", "--out", fitted)...)
	require.NoError(t, err)
	t.Logf("calibrate took %.1f s:\n%s", time.Since(start).Seconds(), out)

	assert.Regexp(t, `4  long-c12/c12 .* held out`, out, "the busiest level is held out by default")
	assert.Contains(t, out, "held-out level long-c12/c12, predicted by the fit: ttft_p50 ")
	assert.Regexp(t, `(?m)^warning: held-out level long-c12/c12 is mispredicted \(rms log error 0\.\d+ > 0\.15`, out, "the warning names the held-out level")
	fit, err := loadProfileFile(fitted)
	require.NoError(t, err)
	require.NotNil(t, fit.Fit)
	assert.Empty(t, sim.ExtrapolationWarnings(fit, 5400, 6000, 0), "the held-out prompts are inside the fitted range")
}

// The calibration proof, and calibration that knows its limits (issue 25, b): a live PD
// cluster of fakeworkers runs a made-up GPU (a profile 30 % slower than llama3-8b-h100 in
// prefill and 20 % faster in decode, with its own fixed costs) behind the real router, with
// a KV capacity far below its profile's (fakeworker --max-total-tokens 12000, which its
// /get_server_info reports as max_total_num_tokens). router bench measures cached
// (multi-turn) and uncached (random) runs and records the capacity; router sim calibrate
// takes it as given — from a base preset (llama3-8b-a100) with another capacity and other
// speeds — and fits. The fit then predicts a load it did not see, the held-out level and a
// workload of ~6,000-token prompts (two at most per decode rank) within 15 % (P95 within
// 30 %), or, on a machine so busy that the live cluster's own profile misses by more than
// 10 %, within that miss plus 5 points; the uncalibrated base, on the same comparison, misses
// by more on every one of them. (One live cluster for both proofs: they were two tests of
// ~40 s each, fitting and predicting the same way.)
func TestIntegrationCalibrationReadsKVCapacity(t *testing.T) {
	dir := t.TempDir()
	h100, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	truth := sim.Fit{Prefill: 1.3, PrefillFixed: 2 * h100.A0, Decode: 0.8, DecodeFixed: h100.B0, PDOverhead: 0.03, T0: h100.T0}.Apply(h100)
	truth.Name, truth.Source = "small-kv-gpu", "calibration test"
	const capacity = 12000

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exactProf := truth
	exactProf.MaxTotalTokens = capacity
	b := &liveBench{t: t, ctx: ctx, url: startLivePDWith(t, ctx, fakeworker.Config{Profile: truth, MaxTotalTokens: capacity}), dir: dir, truth: exactProf}
	// The fitted runs span the prompt lengths to be predicted (a light run of 660–6,600-token
	// prompts): within the levels alone, 750–1,750 tokens, a1, a2 and a0 trade for one another
	// and a 6,000-token prompt is an extrapolation (sim.ExtrapolationWarnings says so).
	wide := b.long(6600)
	wide.RangeRatio = 0.1
	fitRuns := []string{b.run("c2", b.multiturn(), 2, 64), b.run("c8", b.multiturn(), 8, 160), b.run("c24", b.multiturn(), 24, 240),
		b.run("wide-c2", wide, 2, 48)}
	unseen := []string{b.run("c16", b.multiturn(), 16, 200), b.run("long-c4", b.long(6000), 4, 48)}

	fitted := filepath.Join(dir, "fitted.yaml")
	start := time.Now()
	out, err := run(t, append(append([]string{"sim", "calibrate"}, fitRuns...),
		"--prefill", "2", "--decode", "2", "--net-latency", "250us", "--base-profile", "llama3-8b-a100", "--out", fitted)...)
	require.NoError(t, err)
	t.Logf("calibrate took %.1f s:\n%s", time.Since(start).Seconds(), out)
	assert.Contains(t, out, fmt.Sprintf("decode servers, as recorded: max_total_num_tokens %d", capacity))
	assert.Contains(t, out, "held-out level c24/c24, predicted by the fit:")
	fit, err := loadProfileFile(fitted)
	require.NoError(t, err)
	assert.Equal(t, capacity, fit.MaxTotalTokens, "the capacity read from the bench, not fitted")
	require.NotNil(t, fit.Fit)
	assert.Empty(t, sim.ExtrapolationWarnings(fit, 5400, 6000, 0), "6,000-token prompts are within the fitted range")

	// The fit as router sim --profile FILE runs it (the capacity from the profile), beside the
	// live cluster's own profile and capacity (the simulator's fidelity on this machine now)
	// and beside the fit with the base's capacity (what calibrate would predict had it not read
	// the capacity).
	a100, err := engine.LookupProfile("llama3-8b-a100")
	require.NoError(t, err)
	blind := fit
	blind.MaxTotalTokens = a100.MaxTotalTokens
	simRC := router.DefaultConfig()
	simRC.PDDisaggregation = true
	errPct := func(s, m float64) float64 { return (s - m) / m * 100 }
	for _, d := range append(unseen, fitRuns[2]) { // the unseen runs and the held-out level
		r, err := readCalibrationRun(d)
		require.NoError(t, err)
		live := r.Measured[0]
		predict := func(p engine.Profile) reports.Level { return predictRun(t, liveCluster, simRC, p, r) }
		cal, exact, unaware, base := predict(fit), predict(exactProf), predict(blind), predict(a100)
		line := func(what string, lv reports.Level) string {
			return fmt.Sprintf("%s TTFT p50 %.1f (%+.1f%%), TPOT p50 %.2f (%+.1f%%)", what,
				lv.TTFTMs.P50, errPct(lv.TTFTMs.P50, live.TTFTMs.P50), lv.TPOTMs.P50, errPct(lv.TPOTMs.P50, live.TPOTMs.P50))
		}
		t.Logf("%s: live TTFT p50 %.1f, TPOT p50 %.2f ms\n  %s\n  %s\n  %s\n  %s", r.Name, live.TTFTMs.P50, live.TPOTMs.P50,
			line("calibrated            ", cal), line("live profile itself   ", exact), line("fit, capacity unknown ", unaware),
			line("base a100             ", base))
		within := func(what string, cal, exact, live float64) {
			tol := max(15, abs(errPct(exact, live))+5)
			assert.InDelta(t, 0, errPct(cal, live), tol, "%s %s (the live cluster's own profile misses by %+.1f%%)", r.Name, what, errPct(exact, live))
		}
		within("TTFT P50", cal.TTFTMs.P50, exact.TTFTMs.P50, live.TTFTMs.P50)
		within("TPOT P50", cal.TPOTMs.P50, exact.TPOTMs.P50, live.TPOTMs.P50)
		// P95 carries the queueing the P50s hide: about as well as the live cluster's own
		// profile, which misses the busiest unseen level's P95 by up to 40 % here (the
		// simulator's own error where the KV capacity binds, not the fit's).
		assert.InDelta(t, 0, errPct(cal.TTFTMs.P95, live.TTFTMs.P95), abs(errPct(exact.TTFTMs.P95, live.TTFTMs.P95))+15,
			"%s TTFT P95 (the live cluster's own profile misses by %+.1f%%)", r.Name, errPct(exact.TTFTMs.P95, live.TTFTMs.P95))
		calErr := abs(errPct(cal.TTFTMs.P50, live.TTFTMs.P50)) + abs(errPct(cal.TPOTMs.P50, live.TPOTMs.P50))
		baseErr := abs(errPct(base.TTFTMs.P50, live.TTFTMs.P50)) + abs(errPct(base.TPOTMs.P50, live.TPOTMs.P50))
		assert.Greater(t, baseErr, calErr, "%s: the uncalibrated base misses by more (TTFT+TPOT P50 error, %%)", r.Name)
		if r.Name == "c24" { // the busiest level, where the capacity binds: knowing it is what carries the fit there
			assert.Greater(t, abs(errPct(unaware.TTFTMs.P50, exact.TTFTMs.P50)), abs(errPct(cal.TTFTMs.P50, exact.TTFTMs.P50)),
				"at c24 the fit without the recorded capacity is further from the live cluster's own profile than the fit with it")
		}
	}
}

// predictRun is the simulator's first level for run r's workload and load with profile p.
func predictRun(t *testing.T, cl sim.Cluster, rc router.Config, p engine.Profile, r sim.CalibrationRun) reports.Level {
	t.Helper()
	lv, err := sim.Predict(cl, rc, p, r.Workload, r.Load)
	require.NoError(t, err)
	return lv[0]
}

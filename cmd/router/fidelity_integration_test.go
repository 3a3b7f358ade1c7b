//go:build integration

package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// The fidelity gate: does the simulator predict the live system? A live PD cluster of
// fakeworkers (2 prefill + 2 decode, llama3-8b-h100, no DP-attention lockstep) behind the real
// router runs scenarios without phase lock: open-loop Poisson arrivals at two rates, and a
// closed loop whose clients think between turns. Each scenario runs live twice, which
// measures the noise floor, and once simulated. The whole TTFT and TPOT distributions are
// compared at P10, P25, P50, P75, P90 (and TTFT's P95): the simulated quantile must lie within
// the larger of 3× the live-vs-live gap and a relative band of the first live run (TTFT 8 %,
// 12 % at P90, 15 % at P95 — 16 % and 18 % in the think-time scenario, whose simulated tail is
// short; TPOT 5 %). Kolmogorov-Smirnov distances are logged beside.
//
// The zero-think-time closed loop (make test-fidelity's old scenario) stays out: there each
// client's next turn is phase-locked to its decode server's step grid and a percentile sits on
// a step's edge.

// fidelityScenario is one live/simulated comparison.
type fidelityScenario struct {
	name      string
	workload  workloads.Params
	load      workloads.LoadParams
	ttftBands []band // the TTFT tolerances (ttftBands unless a scenario needs its own)
}

func fidelityScenarios() []fidelityScenario {
	rnd := workloads.DefaultParams()
	rnd.Workload, rnd.NumPrompts, rnd.InputLen, rnd.OutputLen, rnd.RangeRatio = workloads.WorkloadRandom, 100000, 1024, 32, 0.5
	open := workloads.DefaultLoadParams()
	open.Rates, open.Arrival, open.Requests, open.Warmup = []float64{12, 30}, workloads.ArrivalPoisson, 240, 8
	mt := workloads.DefaultParams()
	mt.Conversations, mt.Turns, mt.SystemPromptLen, mt.QuestionLen, mt.OutputLen, mt.RangeRatio = 120, 3, 512, 256, 32, 0.5
	mt.ThinkTime = 40 * time.Millisecond
	closed := workloads.DefaultLoadParams()
	closed.Concurrency, closed.Requests, closed.Warmup = []int{8}, 240, 8
	return []fidelityScenario{{"poisson", rnd, open, ttftBands}, {"think-time", mt, closed, thinkTimeTTFTBands}}
}

// samples are one level's successful TTFT and TPOT values in ms, sorted.
type samples struct{ ttft, tpot []float64 }

func levelSamples(recs []reports.Record) map[string]samples {
	out := map[string]samples{}
	for _, r := range recs {
		if r.Error != nil || r.TTFTMs == nil {
			continue
		}
		s := out[r.Level]
		s.ttft = append(s.ttft, *r.TTFTMs)
		if r.TPOTMs != nil {
			s.tpot = append(s.tpot, *r.TPOTMs)
		}
		out[r.Level] = s
	}
	for k, s := range out {
		slices.Sort(s.ttft)
		slices.Sort(s.tpot)
		out[k] = s
	}
	return out
}

// band is a quantile's relative tolerance.
type band struct {
	q, rel float64
}

// ttftBands: 8 % over the body of the distribution, wider in the tail, where a level of 240
// requests holds 24 (P90) and 12 (P95) samples and the live system's scheduling jitter, which
// the simulator does not model, lengthens it (the simulated P95 of the think-time scenario sits
// 7-9 % below the live one in every run).
var ttftBands = []band{{10, 0.08}, {25, 0.08}, {50, 0.08}, {75, 0.08}, {90, 0.12}, {95, 0.15}}

// thinkTimeTTFTBands: the think-time scenario's TTFT tail, where the simulator is biased low.
// Its simulated P90 sits 6-14 % below the live one and P95 7-14 %: over one evening's eight
// live runs of the scenario the live P90 ranged 51.9-57.0 ms against a simulated 48.9, the two
// runs of one invocation moving together (56.3/57.0 in one make test, so 3× their gap does not
// cover it). The body of the distribution keeps 8 %.
var thinkTimeTTFTBands = []band{{10, 0.08}, {25, 0.08}, {50, 0.08}, {75, 0.08}, {90, 0.16}, {95, 0.18}}

// tpotBands: decode steps are regular; 5 % everywhere.
var tpotBands = []band{{10, 0.05}, {25, 0.05}, {50, 0.05}, {75, 0.05}, {90, 0.05}}

// gateFailures compares a simulated distribution with two live ones and returns what falls
// outside the band, with the distances for the log.
func gateFailures(what string, live1, live2, simulated []float64, bands []band) (failures []string, log string) {
	if len(simulated) == 0 || len(live1) == 0 || len(live2) == 0 {
		return []string{what + ": no samples"}, ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: KS sim-live %.3f, live-live %.3f;", what, reports.KSDistance(simulated, live1), reports.KSDistance(live1, live2))
	for _, bd := range bands {
		q := bd.q
		l1, l2, s := reports.Percentile(live1, q), reports.Percentile(live2, q), reports.Percentile(simulated, q)
		band := math.Max(3*math.Abs(l1-l2), bd.rel*l1)
		ok := math.Abs(s-l1) <= band
		mark := ""
		if !ok {
			mark = "!"
			failures = append(failures, fmt.Sprintf("%s p%.0f: sim %.2f ms, live %.2f/%.2f ms, band ±%.2f", what, q, s, l1, l2, band))
		}
		fmt.Fprintf(&b, " p%.0f %.1f|%.1f|%.1f%s", q, l1, l2, s, mark)
	}
	return failures, b.String()
}

// fidelityGate runs every scenario twice live and once simulated with simProfile, and returns
// the failures of the gate.
func fidelityGate(t *testing.T, frontURL string, live map[string][2][]reports.Record, simProfile engine.Profile) []string {
	t.Helper()
	var failures []string
	cluster := sim.Cluster{Prefill: 2, Decode: 2, NetLatency: 250 * time.Microsecond,
		Profiles: map[string]engine.Profile{simProfile.Name: simProfile}, Profile: simProfile.Name}
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	for _, sc := range fidelityScenarios() {
		seed := int64(sc.workload.Seed)
		rc.Seed = &seed
		// The live router reads the workers' loads every 100 ms (serve's default): modelled.
		routing := sim.Routing{LoadReportInterval: sim.DefaultLoadReportInterval, LoadReportDelay: sim.Delay{Fixed: sim.DefaultLoadReportDelay}}
		res, err := sim.Run(sim.Config{Cluster: cluster, Router: rc, Routing: routing, Workload: sc.workload, Load: sc.load})
		require.NoError(t, err)
		simS := levelSamples(res.Records)
		l1, l2 := levelSamples(live[sc.name][0]), levelSamples(live[sc.name][1])
		for _, level := range slices.Sorted(func(yield func(string) bool) {
			for k := range l1 {
				if !yield(k) {
					return
				}
			}
		}) {
			f1, log1 := gateFailures(sc.name+" "+level+" TTFT", l1[level].ttft, l2[level].ttft, simS[level].ttft, sc.ttftBands)
			f2, log2 := gateFailures(sc.name+" "+level+" TPOT", l1[level].tpot, l2[level].tpot, simS[level].tpot, tpotBands)
			t.Logf("%s (%d/%d/%d requests)\n  %s", log1, len(l1[level].ttft), len(l2[level].ttft), len(simS[level].ttft), log2)
			failures = append(failures, f1...)
			failures = append(failures, f2...)
		}
	}
	return failures
}

func TestIntegrationFidelityGate(t *testing.T) {
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	front := startLivePD(t, ctx, prof)
	dir := t.TempDir()
	live := map[string][2][]reports.Record{}
	for _, sc := range fidelityScenarios() {
		var runs [2][]reports.Record
		for i := range runs {
			w := sc.workload
			w.Seed = uint64(i*100 + 1) // the two live runs draw different traffic of the same shape
			if i == 0 {
				w.Seed = 1
			}
			out := filepath.Join(dir, fmt.Sprintf("%s-%d", sc.name, i))
			_, err := bench.Run(ctx, bench.Config{URL: front, Workload: w, Load: sc.load, Out: out, RequestTimeout: time.Minute})
			require.NoError(t, err, sc.name)
			_, recs, err := reports.ReadDir(out)
			require.NoError(t, err)
			runs[i] = recs
		}
		live[sc.name] = runs
	}
	failures := fidelityGate(t, front, live, prof)
	assert.Empty(t, failures, "the simulator with the live cluster's own profile")

	// A simulator 15 % off (prefill and decode both slower) must not pass.
	off := sim.Fit{Prefill: 1.15, PrefillFixed: prof.A0 * 1.15, Decode: 1.15, DecodeFixed: prof.B0 * 1.15, PDOverhead: prof.PDOverhead, T0: prof.T0}.Apply(prof)
	off.Name = "llama3-8b-h100-15pct-slower"
	failures = fidelityGate(t, front, live, off)
	assert.NotEmpty(t, failures, "a profile 15 %% off must fail the gate")
	t.Logf("perturbed profile: %d failures, e.g. %v", len(failures), failures[:min(3, len(failures))])
}

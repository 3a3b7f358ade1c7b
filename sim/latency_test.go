package sim

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

// pdHotspotConfig is the hot-spot workload on 2 prefill + 4 decode servers at ~80 % of their
// capacity (docs/engine-load.md), load reports every 500 ms, routed by policy.
func pdHotspotConfig(policy string) Config {
	cfg := baseConfig()
	cfg.Router.Policy = policy
	cfg.Cluster.Prefill, cfg.Cluster.Decode = 2, 4
	p := workloads.DefaultParams()
	p.Workload, p.HSRequests = workloads.WorkloadHotspot, 3000
	cfg.Workload = p
	cfg.Load.Concurrency, cfg.Load.Rates = nil, []float64{53}
	cfg.Routing.LoadReportInterval, cfg.Routing.LoadReportDelay = DefaultLoadReportInterval, Delay{Fixed: DefaultLoadReportDelay}
	return cfg
}

// On the hot-spot workload cache_aware (on engine load reports) sends a burst of one hot
// prefix to the prefill worker caching it until its balance check fires; predicted_latency
// sees that worker's queue in the engine model's time and splits the burst as soon as
// waiting costs more than prefilling the prefix elsewhere. Its TTFT mean and P99 are lower at
// the same throughput.
func TestPredictedLatencyBeatsCacheAwareOnHotspot(t *testing.T) {
	t.Parallel()
	run := func(policy string) reports.Level {
		res := mustRun(t, pdHotspotConfig(policy))
		require.Len(t, res.Results.Levels, 1)
		return res.Results.Levels[0]
	}
	ca, pl := run(router.PolicyCacheAware), run(router.PolicyPredictedLatency)
	t.Logf("TTFT mean %.0f → %.0f ms, P99 %.0f → %.0f ms, output %.0f → %.0f tok/s",
		ca.TTFTMs.Mean, pl.TTFTMs.Mean, ca.TTFTMs.P99, pl.TTFTMs.P99, ca.Throughput.OutputTokS, pl.Throughput.OutputTokS)
	assert.Less(t, pl.TTFTMs.Mean, 0.75*ca.TTFTMs.Mean, "mean TTFT at least a quarter lower")
	assert.Less(t, pl.TTFTMs.P99, ca.TTFTMs.P99)
	assert.Greater(t, pl.Throughput.OutputTokS, 0.97*ca.Throughput.OutputTokS, "throughput kept")
	assert.Zero(t, pl.Errors)
}

// The simulator feeds the router what it observes, so corrections stay near 1 when the model
// is the engine's own; the decision log carries every prediction, deterministically.
func TestPredictedLatencyInTheSimulator(t *testing.T) {
	t.Parallel()
	cfg := pdHotspotConfig(router.PolicyPredictedLatency)
	cfg.Workload.HSRequests = 400
	cfg.Router.TPOTSLOMs = 30
	a, logA := runLogged(t, cfg)
	b, logB := runLogged(t, cfg)
	assert.Equal(t, encode(t, a), encode(t, b), "same seed, same results")
	assert.Equal(t, logA, logB)
	// A routing line with the prediction per request, and one with its observation beside it.
	lines := strings.Split(strings.TrimSpace(logA), "\n")
	require.Len(t, lines, 800)
	routed := 0
	for _, l := range lines {
		require.Contains(t, l, `"predicted":{"ttft_ms":`)
		if strings.Contains(l, `"observed":`) {
			require.Regexp(t, `^\{"id":"[^"]+","observed":\{"ttft_ms":[0-9.]+,"tpot_ms":[0-9.]+\},"predicted":`, l)
			continue
		}
		require.Contains(t, l, `"reason":"predicted_latency","match_rate":`)
		routed++
	}
	assert.Equal(t, 400, routed)
	// The servers' corrections carry what the engine model leaves out of a prefill server's
	// TTFT (LPM batching, prompts of a burst that hit the prefix the first one cached, the
	// router's four-characters-a-token estimate), and little of a decode server's TPOT: after
	// the run the corrected predictions' median error over the second half of the requests is
	// within 35 % for TTFT and 20 % for TPOT.
	x, err := newSim(pdHotspotConfig(router.PolicyPredictedLatency))
	require.NoError(t, err)
	var errTTFT, errTPOT []float64
	x.reps[0].rt.OnObserved(func(_ *router.Decision, p router.Prediction) {
		errTTFT = append(errTTFT, math.Abs(float64(p.TTFT-p.ObservedTTFT))/float64(p.ObservedTTFT))
		if p.ObservedTPOT > 0 {
			errTPOT = append(errTPOT, math.Abs(float64(p.TPOT-p.ObservedTPOT))/float64(p.ObservedTPOT))
		}
	})
	require.NoError(t, x.run())
	require.Len(t, errTTFT, 3000)
	require.Len(t, errTPOT, 3000)
	median := func(v []float64) float64 { v = slices.Clone(v[len(v)/2:]); slices.Sort(v); return v[len(v)/2] }
	t.Logf("median error: TTFT %.1f %%, TPOT %.1f %%", 100*median(errTTFT), 100*median(errTPOT))
	assert.Less(t, median(errTTFT), 0.35)
	assert.Less(t, median(errTPOT), 0.20)
	cs := x.reps[0].rt.LatencyCorrections()
	require.Len(t, cs, 6)
	for _, c := range cs {
		assert.Greater(t, c.TTFT*c.TPOT, 0.25, c.Name)
		assert.Less(t, c.TTFT*c.TPOT, 2.0, c.Name)
	}
}

//go:build fidelity

package demo

// The fidelity test is opt-in (make test-fidelity), not part of make test. In this scenario
// (think time 0, DP-attention lockstep) TTFT at c4 and c16 falls on a staircase of decode
// steps (~6.7 ms): each conversation's next turn starts on its decode server's step grid,
// and its first token waits for the next step boundary. The c16 P50 sits at the edge between
// the 40.7 ms and 46.7 ms steps (57 % of requests below it, simulated). Sub-millisecond live
// timing noise (KV hop p99 up to 6 ms on this VM, against a flat 0.25 ms simulated) pushes
// enough requests over the edge that the live P50 jumps a whole step in 20-70 % of runs (c4
// likewise, less often). The simulator matches the noise-free system; a single-run P50
// comparison at a step edge cannot be a stable gate. Issue 9 stays open on that choice (a
// scenario without phase lock, or a step-aware comparison); see the session note.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationDemoFidelity runs the demo scenario live (router + fakeworkers + bench) and
// simulated, and checks that the simulator predicts the live system at concurrency 1, 4 and
// 16: TTFT P50 and TPOT P50 within 10 %, TTFT P95 within 20 %. Every figure is logged.
func TestIntegrationDemoFidelity(t *testing.T) {
	sc := DefaultScenario()
	require.Equal(t, []int{1, 4, 16}, sc.Load.Concurrency)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	o, err := Run(ctx, Config{Scenario: sc, Out: t.TempDir(), Version: "test"})
	require.NoError(t, err)
	t.Logf("scenario: %d prefill + %d decode, dp %d, dp-attention %v, profile %s, speedup %g, net latency %v; "+
		"multiturn %d conversations x %d turns, question %d, output %d tokens, range ratio %g; %d requests per level after %d warm-up; live %.1f s, sim %.2f s, total %.1f s",
		sc.Prefill, sc.Decode, sc.DPSize, sc.DPAttention, sc.Profile, sc.Speedup, sc.NetLatency,
		sc.Workload.Conversations, sc.Workload.Turns, sc.Workload.QuestionLen, sc.Workload.OutputLen, sc.Workload.RangeRatio,
		sc.Load.Requests, sc.Load.Warmup, o.LiveWall.Seconds(), o.SimWall.Seconds(), time.Since(start).Seconds())
	require.Len(t, o.Rows, 3)
	tolerance := map[string]float64{"TTFT p50": 10, "TTFT p95": 20, "TPOT p50": 10}
	for _, r := range o.Rows {
		assert.Zero(t, r.LiveErrs, "%s: live errors", r.Label)
		assert.Zero(t, r.SimErrs, "%s: simulated errors", r.Label)
		for i, m := range Metrics {
			f := r.Figures[i]
			t.Logf("%-4s %s: live %7.2f ms  sim %7.2f ms  diff %+6.1f %%", r.Label, m.Name, f.Live, f.Sim, f.DiffPct())
		}
		ttft, _ := r.Figure("TTFT p50")
		assert.GreaterOrEqual(t, ttft.Live, 20.0, "%s: the scenario must keep live TTFT ≥ 20 ms", r.Label)
		for name, tol := range tolerance {
			f, ok := r.Figure(name)
			require.True(t, ok)
			assert.LessOrEqual(t, abs(f.DiffPct()), tol, "%s %s: sim %.2f ms vs live %.2f ms", r.Label, name, f.Sim, f.Live)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

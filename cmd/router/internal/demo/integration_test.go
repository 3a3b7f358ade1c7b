//go:build integration

package demo

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/sim"
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

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestIntegrationDecisionParity sends a concurrency-1 multi-turn run (think time 50 ms, so
// every leg has finished before the next request) through the live router (--seed,
// --decision-log) and fakeworkers, simulates it with the same seed, and requires identical
// (seq, role, worker index, rank, reason) for every request — and the same bootstrap rooms,
// which come from the same seeded source. cache_aware with --dp-aware is the acceptance case;
// the random policies check that the router's seeded source is consumed alike.
func TestIntegrationDecisionParity(t *testing.T) {
	for _, policy := range []string{"cache_aware", "random", "power_of_two", "round_robin"} {
		t.Run("policy="+policy, func(t *testing.T) {
			sc := DefaultScenario()
			sc.Policy, sc.Seed = policy, 42
			sc.Workload.Conversations, sc.Workload.Turns, sc.Workload.OutputLen = 8, 3, 8
			sc.Workload.ThinkTime = 50 * time.Millisecond
			sc.Load.Concurrency, sc.Load.Requests, sc.Load.Warmup, sc.Load.FlushCache = []int{1}, 0, 0, false

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var liveLog syncBuffer
			l, err := StartLive(ctx, sc, &liveLog)
			require.NoError(t, err)
			rt := l.BenchTransport()
			res, err := bench.Run(ctx, bench.Config{URL: l.URL, Workload: sc.workload(), Load: sc.Load, Transport: rt})
			CloseIdle(rt)
			require.NoError(t, l.Close())
			require.NoError(t, err)
			require.Zero(t, res.Levels[0].Errors, "live errors: %v", res.Levels[0].ErrorsByKind)

			var simLog bytes.Buffer
			scfg := sc.SimConfig("test")
			scfg.DecisionLog = &simLog
			sr, err := sim.Run(scfg)
			require.NoError(t, err)
			require.Zero(t, sr.Results.Levels[0].Errors)

			live, err := ReadDecisions(&liveLog.b)
			require.NoError(t, err)
			simulated, err := ReadDecisions(&simLog)
			require.NoError(t, err)
			want := sc.Workload.Conversations * sc.Workload.Turns
			require.Len(t, live, want, "live decisions")
			require.Len(t, simulated, want, "simulated decisions")
			reasons := map[string]int{}
			for i := range live {
				reasons[live[i].Reason]++
				require.True(t, SameDecision(live[i], simulated[i]), "decision %d differs:\nlive %s\nsim  %s", i+1, live[i], simulated[i])
				assert.Equal(t, live[i].Room, simulated[i].Room, "decision %d: bootstrap_room", i+1)
			}
			t.Logf("%d identical decisions; reasons %v", len(live), reasons)
			if policy == "cache_aware" {
				assert.Positive(t, reasons["cache_hit"], "the run exercises cache hits")
				assert.Positive(t, reasons["cache_miss"], "the run exercises cache misses")
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

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
			sc.Policy, sc.Seed, sc.LoadReports = policy, 42, 0 // decisions on in-flight counts alone (see Scenario.LoadReports)
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

package sim

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/workloads"
)

// speedConfig is the speed acceptance run, scaled by conversations: multiturn at
// concurrency 512 (4 turns, 1,000-token system prompts shared by groups of 16, 200-token
// questions, 128-token replies) on 16 prefill + 16 decode servers with dp 8, with engine load
// reports as `router sim` runs by default (every 100ms, 1ms late).
func speedConfig(conversations int) Config {
	cfg := baseConfig()
	cfg.Routing.LoadReportInterval, cfg.Routing.LoadReportDelay = DefaultLoadReportInterval, Delay{Fixed: DefaultLoadReportDelay}
	cfg.Cluster.Prefill, cfg.Cluster.Decode, cfg.Cluster.DPSize = 16, 16, 8
	p := &cfg.Workload
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = conversations, 4, 1000, 200, 128
	p.SharedSystemPrompts = (conversations + 15) / 16
	cfg.Load.Concurrency = []int{512}
	return cfg
}

// BenchmarkRun reports the simulator's speed: events/s and simulated requests/s of wall time.
func BenchmarkRun(b *testing.B) {
	for _, tc := range []struct {
		name  string
		convs int
	}{{"requests=10000", 2500}, {"requests=100000", 25000}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.convs > 2500 && testing.Short() {
				b.Skip("large run")
			}
			benchRuns(b, speedConfig(tc.convs))
		})
	}
}

// BenchmarkRunLoadReports is BenchmarkRun/requests=10000 with engine load reports polled
// every 10ms, 100ms (the default) and 1s, and off: what the polls cost (they change the routing
// too, so part of a difference is another simulation, not the polls' own work).
func BenchmarkRunLoadReports(b *testing.B) {
	for _, every := range []time.Duration{0, 10 * time.Millisecond, DefaultLoadReportInterval, time.Second} {
		name := "interval=off"
		if every > 0 {
			name = "interval=" + every.String()
		}
		b.Run(name, func(b *testing.B) {
			cfg := speedConfig(2500)
			cfg.Routing.LoadReportInterval = every
			benchRuns(b, cfg)
		})
	}
}

// scaleConfig is the scale run: n requests of the multiturn workload (n/4
// conversations × 4 turns, 256-token replies) arriving at 500 conversations/s on 16 prefill
// + 16 decode servers, dp 8, DP attention.
func scaleConfig(n int) Config {
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode, cfg.Cluster.DPSize, cfg.Cluster.DPAttention = 16, 16, 8, true
	p := workloads.DefaultParams()
	p.Conversations, p.Turns, p.OutputLen = n/4, 4, 256
	cfg.Workload = p
	cfg.Load.Concurrency, cfg.Load.Rates = nil, []float64{500}
	return cfg
}

// BenchmarkRunScale runs scaleConfig at 10k and 100k requests (1M with -short=false and
// SIM_BENCH_1M=1), with KV events off (the approximate tree) and on (cache_aware on the
// engines' events: every prompt matched and every cache change applied), at the engines'
// default page size (1: every token a block, the costliest for the index) and at page 16
// (page=16/…): wall time per run, events/s and requests/s. The target: on costs at
// most 1.3× off (compare the pairs of one run: go test -run '^$' -bench
// 'BenchmarkRunScale/requests=100000' -benchtime 1x -count 3 ./sim).
func BenchmarkRunScale(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv("SIM_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		for _, page := range []int{0, 16} {
			for _, kv := range []string{"off", "on"} {
				name := fmt.Sprintf("requests=%d/kv-events=%s", n, kv)
				if page > 0 {
					name = fmt.Sprintf("requests=%d/page=%d/kv-events=%s", n, page, kv)
				}
				b.Run(name, func(b *testing.B) {
					if n > 10_000 && testing.Short() {
						b.Skip("large run")
					}
					benchScale(b, n, page, kv)
				})
			}
		}
	}
}

// benchScale runs scaleConfig(n) with KV events kv at page size page (0: the default).
func benchScale(b *testing.B, n, page int, kv string) {
	cfg := scaleConfig(n)
	cfg.Cluster.Args.PageSize = page
	cfg.Routing.KVEvents = kv
	benchRuns(b, cfg)
}

// benchRuns runs cfg once per iteration and reports allocations, events/s and requests/s.
func benchRuns(b *testing.B, cfg Config) {
	b.ReportAllocs()
	var events, reqs uint64
	for b.Loop() {
		res, err := Run(cfg)
		require.NoError(b, err)
		events += res.Stats.Events
		reqs += uint64(res.Stats.Requests)
	}
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/s, "events/s")
	b.ReportMetric(float64(reqs)/s, "requests/s")
}

// BenchmarkSweep runs a 16-point grid (cache_threshold × balance_abs_threshold), one run per
// core at a time, and reports runs/s.
func BenchmarkSweep(b *testing.B) {
	b.ReportAllocs()
	cfg := speedConfig(256)
	vars := []Vary{{Key: "cache_threshold", Values: []string{"0.1", "0.3", "0.5", "0.7"}},
		{Key: "balance_abs_threshold", Values: []string{"1", "8", "32", "64"}}}
	runs := 0
	for b.Loop() {
		pts, err := SweepShard(cfg, vars, 0, 0, 1, nil)
		require.NoError(b, err)
		runs += len(pts)
	}
	b.ReportMetric(float64(runs)/b.Elapsed().Seconds(), "runs/s")
}

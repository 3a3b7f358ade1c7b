package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

func last(res *Result) *reports.Level { return &res.Results.Levels[len(res.Results.Levels)-1] }

// gspConfig: sglang's generated-shared-prefix workload on 4 prefill + 2 decode servers.
func gspConfig(policy string) Config {
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode = 4, 2
	cfg.Router.Policy = policy
	p := &cfg.Workload
	p.Workload = workloads.WorkloadGSP
	p.GSPNumGroups, p.GSPPromptsPerGroup, p.GSPSystemPromptLen, p.GSPQuestionLen, p.GSPOutputLen = 16, 8, 1024, 64, 16
	cfg.Load.Concurrency = []int{8}
	return cfg
}

func TestCacheAwareBeatsRoundRobinOnGSP(t *testing.T) {
	t.Parallel()
	ca := last(mustRun(t, gspConfig(router.PolicyCacheAware)))
	rr := last(mustRun(t, gspConfig(router.PolicyRoundRobin)))
	t.Logf("gsp engine cache hit rate: cache_aware %.3f, round_robin %.3f (predicted %.3f / %.3f)",
		*ca.CacheHitRate, *rr.CacheHitRate, ca.Sim.PredictedMatchRate, rr.Sim.PredictedMatchRate)
	assert.Greater(t, *ca.CacheHitRate, *rr.CacheHitRate+0.1)
}

// dpConfig: multi-turn conversations sharing system prompts on DP-attention servers.
func dpConfig(dpAware bool) Config {
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode, cfg.Cluster.DPSize, cfg.Cluster.DPAttention = 2, 2, 4, true
	cfg.Router.DPAware = dpAware
	p := &cfg.Workload
	// A short shared system prompt: a new conversation matches below cache_threshold and goes
	// to the least-loaded target; its later turns match their own history and stay there.
	p.Conversations, p.Turns, p.SystemPromptLen, p.SharedSystemPrompts, p.QuestionLen, p.OutputLen = 64, 4, 128, 4, 512, 64
	cfg.Load.Concurrency = []int{32}
	return cfg
}

func TestDPAwareLowersTTFTUnderLockstep(t *testing.T) {
	t.Parallel()
	on := last(mustRun(t, dpConfig(true)))
	off := last(mustRun(t, dpConfig(false)))
	t.Logf("dp-attention lockstep TTFT P95: dp-aware %.1f ms, not dp-aware %.1f ms (cache hit %.3f / %.3f)",
		on.TTFTMs.P95, off.TTFTMs.P95, *on.CacheHitRate, *off.CacheHitRate)
	assert.Less(t, on.TTFTMs.P95, off.TTFTMs.P95)
}

// lspConfig: one long shared system prompt, short questions, Poisson arrivals near capacity:
// the cache-aware hot spot.
func lspConfig(policy string) Config {
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode = 4, 4
	cfg.Router.Policy = policy
	p := &cfg.Workload
	p.Workload = workloads.WorkloadLongSystemPrompt
	p.LSPPrompts, p.LSPSystemPromptLen, p.LSPQuestionLen, p.LSPOutputLen = 256, 4096, 256, 32
	cfg.Load.Concurrency = nil
	cfg.Load.Rates = []float64{400}
	// Each request ships its whole 4,352-token KV (570 MB): 100 requests/s per prefill server
	// would saturate one 400 Gb/s link now that transfers share it; two NICs keep the link
	// out of the way of the routing effect this tests.
	cfg.Cluster.LinkGbps = 800
	return cfg
}

func TestLongSystemPromptHotSpot(t *testing.T) {
	t.Parallel()
	ca := last(mustRun(t, lspConfig(router.PolicyCacheAware)))
	rr := last(mustRun(t, lspConfig(router.PolicyRoundRobin)))
	t.Logf("long-system-prompt: cache_aware spread %.2f TTFT P95 %.1f ms; round_robin spread %.2f TTFT P95 %.1f ms",
		ca.Sim.LoadSpread, ca.TTFTMs.P95, rr.Sim.LoadSpread, rr.TTFTMs.P95)
	assert.Greater(t, ca.Sim.LoadSpread, rr.Sim.LoadSpread+0.5)
	assert.Greater(t, ca.TTFTMs.P95, rr.TTFTMs.P95)

	vars := []Vary{
		{Key: "cache_threshold", Values: []string{"0.3", "0.99"}},
		{Key: "balance_abs_threshold", Values: []string{"1", "64"}},
		{Key: "balance_rel_threshold", Values: []string{"1.0", "1.5"}},
	}
	pts, err := SweepShard(lspConfig(router.PolicyCacheAware), vars, 0, 0, 1, nil)
	require.NoError(t, err)
	ranked := RankBy(pts, Objective{Name: ObjectiveP95TTFT})
	require.Len(t, ranked, 8)
	best := ranked[0].Last()
	t.Logf("best of the sweep: %s TTFT P95 %.1f ms spread %.2f", ranked[0].Label(vars), best.TTFTMs.P95, best.Sim.LoadSpread)
	assert.Less(t, best.TTFTMs.P95, rr.TTFTMs.P95)
	assert.Less(t, best.TTFTMs.P95, ca.TTFTMs.P95)
}

func TestKillDecodeWorker(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode = 2, 3
	cfg.Workload.Conversations = 64
	cfg.Kills = []Kill{{Worker: WorkerURL(router.Decode, 1), At: 1_500_000_000}}
	res := mustRun(t, cfg)
	lv := last(res)
	t.Logf("kill: %d requests, %d errors %v, %d attempts", lv.Requests, lv.Errors, lv.ErrorsByKind, res.Stats.Attempts)
	assert.Greater(t, res.Stats.Attempts, res.Stats.Requests, "requests on the killed worker were retried")
	for _, r := range res.Records {
		if r.Error != nil {
			assert.Contains(t, *r.Error, "decode "+WorkerURL(router.Decode, 1)+": room ")
			assert.Contains(t, *r.Error, "server killed")
		}
	}
}

// A decode worker killed and restarted (--kill WORKER@T..BACK) serves again once its health
// probes pass: it serves more requests than when it stays dead.
func TestKilledDecodeWorkerRestarts(t *testing.T) {
	t.Parallel()
	victim := WorkerURL(router.Decode, 1)
	served := func(k Kill) int {
		cfg := baseConfig()
		cfg.Cluster.Prefill, cfg.Cluster.Decode = 1, 2
		cfg.Workload.Conversations = 200
		cfg.Router.HealthCheckIntervalSecs = 1
		cfg.Kills = []Kill{k}
		n := 0
		for _, r := range mustRun(t, cfg).Records {
			if r.Error == nil && r.Targets.Decode != nil && *r.Targets.Decode == victim {
				n++
			}
		}
		return n
	}
	dead := served(Kill{Worker: victim, At: 2_000_000_000})
	back := served(Kill{Worker: victim, At: 2_000_000_000, Back: 4_000_000_000})
	t.Logf("requests served by %s: %d killed at 2 s, %d restarted at 4 s", victim, dead, back)
	assert.Greater(t, back, dead+10, "it serves again after its restart")
}

// At --rate inf every request is sent at one instant; they must reach the router in the
// order sent (the arrival jitter spreads them without reordering), so --gsp-ordered sends
// group by group and the router sees the groups one after another.
func TestSameInstantArrivalsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	groups := func(ordered bool) []int {
		cfg := gspConfig(router.PolicyCacheAware)
		cfg.Workload.GSPNumGroups, cfg.Workload.GSPPromptsPerGroup = 4, 4
		cfg.Workload.GSPOrdered = ordered
		cfg.Load.Concurrency, cfg.Load.Rates = nil, []float64{math.Inf(1)}
		var log bytes.Buffer
		cfg.DecisionLog = &log
		mustRun(t, cfg)
		var out []int
		for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
			var d struct {
				ID string `json:"id"` // "gsp-G-J/0"
			}
			require.NoError(t, json.Unmarshal([]byte(l), &d))
			f := strings.Split(strings.TrimSuffix(d.ID, "/0"), "-")
			require.Len(t, f, 3, d.ID)
			g, err := strconv.Atoi(f[1])
			require.NoError(t, err, d.ID)
			out = append(out, g)
		}
		return out
	}
	ordered, shuffled := groups(true), groups(false)
	require.Len(t, ordered, 16)
	require.Len(t, shuffled, 16)
	assert.True(t, slices.IsSorted(ordered), "--gsp-ordered: the router sees group after group: %v", ordered)
	assert.False(t, slices.IsSorted(shuffled), "shuffled: groups interleave: %v", shuffled)
}

// Each level draws conversations of its own: at level 2 the router's tree, which still holds
// level 1's prompts (no --flush-cache), predicts almost no match for level 2's first request;
// with --same-conversations it predicts a near-full match (a replay). With --flush-cache both
// start from nothing.
func TestLevelsDrawFreshConversations(t *testing.T) {
	t.Parallel()
	firstOfLevel2 := func(same, flush bool) float64 {
		cfg := baseConfig()
		cfg.Load.Concurrency = []int{1, 2}
		cfg.Load.Requests = 8
		cfg.Load.SameConversations, cfg.Load.FlushCache = same, flush
		var log bytes.Buffer
		cfg.DecisionLog = &log
		mustRun(t, cfg)
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		require.Len(t, lines, 16)
		var d struct {
			MatchRate float64 `json:"match_rate"`
		}
		require.NoError(t, json.Unmarshal([]byte(lines[8]), &d))
		return d.MatchRate
	}
	assert.Less(t, firstOfLevel2(false, false), 0.2, "fresh conversations: level 1's prompts do not match")
	assert.Greater(t, firstOfLevel2(true, false), 0.9, "--same-conversations: a replay of level 1's first prompt")
	assert.Less(t, firstOfLevel2(false, true), 0.2, "fresh, with --flush-cache")
	assert.Less(t, firstOfLevel2(true, true), 0.2, "replay, but the trees were flushed")
}

package plan

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// small is a plan of llama3-8b on H100s: random 1k-token prompts, 64-token outputs, 120
// requests at 20 req/s, a budget of 4 GPUs. Each simulation takes milliseconds.
func small(t *testing.T) Spec {
	t.Helper()
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	seed := int64(1)
	rc.Seed = &seed
	wp := workloads.DefaultParams()
	wp.Workload, wp.InputLen, wp.OutputLen, wp.NumPrompts, wp.Seed = workloads.WorkloadRandom, 1024, 64, 120, 1
	lp := workloads.DefaultLoadParams()
	lp.Rates, lp.Requests = []float64{20}, 120
	return Spec{
		Base: sim.Config{Router: rc, Workload: wp, Load: lp,
			Cluster: sim.Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", TPSize: 1}},
		GPUs: 4, GPUsPerNode: 8, Objective: ObjectiveMinGPUs, Top: 2, Parallel: 2, VerifySeeds: 2,
		SLO: SLO{Percentile: "p90", TTFTMs: 200, TPOTMs: 15},
	}
}

// Analyze finds the prefixes prompts share: a long-system-prompt workload's requests after the
// first leave at most their question (and a page) uncached; random prompts share nothing.
func TestAnalyzeUncachedMin(t *testing.T) {
	p := workloads.DefaultParams()
	p.Workload, p.LSPPrompts, p.LSPSystemPromptLen, p.LSPQuestionLen, p.LSPOutputLen = workloads.WorkloadLongSystemPrompt, 20, 2000, 100, 32
	w, err := Analyze(p, workloads.DefaultLoadParams())
	require.NoError(t, err)
	require.Equal(t, 20, w.Requests)
	assert.Greater(t, w.UncachedMin[0], 2000-PageTokens, "the first prompt shares nothing")
	for i := 1; i < w.Requests; i++ {
		assert.Less(t, w.UncachedMin[i], 100+2*PageTokens+50, "request %d: the system prompt is shared", i)
		assert.LessOrEqual(t, w.UncachedMin[i], w.Input[i])
	}
	assert.Equal(t, 32, w.Output[5])
	assert.Zero(t, w.Rate, "closed loop: no offered rate")

	r := workloads.DefaultParams()
	r.Workload, r.InputLen, r.OutputLen, r.NumPrompts, r.RangeRatio = workloads.WorkloadRandom, 500, 10, 30, 1
	l := workloads.DefaultLoadParams()
	l.Rates, l.Requests = []float64{3, 7}, 25
	w, err = Analyze(r, l)
	require.NoError(t, err)
	assert.Equal(t, 25, w.Requests, "--requests bounds the requests read")
	assert.Equal(t, 7.0, w.Rate, "the highest open-loop level")
	for i := range w.Requests {
		assert.GreaterOrEqual(t, w.UncachedMin[i], w.Input[i]-PageTokens, "random prompt %d", i)
	}
	assert.Equal(t, 17, Quantile([]int{5, 17, 3, 9, 20}, 0.75))
	assert.Equal(t, 3, Quantile([]int{5, 17, 3, 9, 20}, 0.01))
}

// ServerOptions keeps the parallelisms whose heads divide: llama3-70b (64 heads, 8 KV heads)
// takes tp1…tp8; a MoE card adds DP attention with EP from two GPUs.
func TestServerOptions(t *testing.T) {
	assert.Equal(t, []Server{{1, 1, 1, false}, {2, 1, 1, false}, {4, 1, 1, false}, {8, 1, 1, false}},
		ServerOptions(engine.Llama3Dense70B, 8, 8))
	assert.Equal(t, []Server{{1, 1, 1, false}, {2, 1, 1, false}}, ServerOptions(engine.Llama3Dense70B, 2, 8), "a node of 2")
	odd := engine.Llama3Dense8B
	odd.Heads, odd.KVHeads = 24, 6
	assert.Equal(t, []Server{{1, 1, 1, false}, {2, 1, 1, false}}, ServerOptions(odd, 8, 8), "6 KV heads split over 4 or 8 GPUs unevenly")
	moe := ServerOptions(engine.Qwen3MoE30BA3B, 8, 8)
	assert.Contains(t, moe, Server{TP: 4, DP: 4, EP: 4, DPAttention: true})
	assert.Equal(t, 8, Server{TP: 8, DP: 8, EP: 8, DPAttention: true}.GPUs())
	assert.Equal(t, 4, Server{TP: 2, DP: 2}.GPUs())
	assert.Equal(t, "tp8 dp8 ep8 dpa", Server{TP: 8, DP: 8, EP: 8, DPAttention: true}.String())
}

// Each bound prunes what it should and names itself; a cluster that can make it is left.
func TestBoundReasons(t *testing.T) {
	spec := small(t)
	w, err := Analyze(spec.Base.Workload, spec.Base.Load)
	require.NoError(t, err)
	cfg := func(model string, tp, np, nd int) sim.Config {
		c := spec.Base
		c.Cluster.ModelPath, c.Cluster.TPSize, c.Cluster.Prefill, c.Cluster.Decode = model, tp, np, nd
		return c
	}
	slo := spec.SLO
	assert.Empty(t, Bound(cfg("llama3-8b", 1, 1, 1), w, slo))
	assert.Regexp(t, `^prefill memory: llama3-70b weights \(141 GB\) do not fit in 1×h100-sxm`, Bound(cfg("llama3-70b", 1, 1, 1), w, slo))

	tight := slo
	tight.TTFTMs = 20
	assert.Regexp(t, `^TTFT: the p90 idle prefill \(uncached prompts alone\) takes \d+ ms > 20 ms`, Bound(cfg("llama3-8b", 1, 1, 1), w, tight))
	tight = slo
	tight.TPOTMs = 2
	assert.Regexp(t, `^TPOT: a batch of one at the p90 prompt \(\d+ tokens\) steps in \d+\.\d ms > 2 ms`, Bound(cfg("llama3-8b", 1, 1, 1), w, tight))

	fast := w
	fast.Rate = 100 // 100 × ~1,000 uncached tokens/s: above one H100's prefill
	assert.Regexp(t, `^prefill capacity: \d+ tok/s < offered uncached prompt tokens \d+ tok/s`, Bound(cfg("llama3-8b", 1, 1, 1), fast, slo))
	assert.Empty(t, Bound(cfg("llama3-8b", 1, 8, 1), fast, slo), "eight prefill servers take it")
	long := w
	long.Rate = 40
	long.Output = slices.Repeat([]int{4000}, len(w.Output)) // 160k output tokens/s
	assert.Regexp(t, `^decode capacity: \d+ tok/s < offered output tokens 160000 tok/s`, Bound(cfg("llama3-8b", 1, 8, 1), long, slo))

	kv := w
	kv.Input = slices.Clone(w.Input)
	kv.Input[3] = 2_000_000
	assert.Regexp(t, `^prefill KV: a rank's KV pool \(\d+ tokens\) is smaller than the longest prompt \(2000000\)`, Bound(cfg("llama3-8b", 1, 1, 1), kv, slo))
}

// The TTFT bound is a lower bound: the simulated TTFT percentile of a cluster is never below
// the bound's idle prefill percentile, here on a workload of shared prefixes where the
// uncached part decides.
func TestBoundTTFTIsALowerBound(t *testing.T) {
	spec := small(t)
	spec.Base.Workload.Workload = workloads.WorkloadGSP
	spec.Base.Workload.GSPNumGroups, spec.Base.Workload.GSPPromptsPerGroup = 4, 30
	spec.Base.Workload.GSPSystemPromptLen, spec.Base.Workload.GSPQuestionLen, spec.Base.Workload.GSPOutputLen = 3000, 600, 32
	spec.Base.Load.Rates = []float64{2}
	w, err := Analyze(spec.Base.Workload, spec.Base.Load)
	require.NoError(t, err)
	for _, tp := range []int{1, 2} {
		cfg := spec.Base
		cfg.Cluster.TPSize, cfg.Cluster.Prefill, cfg.Cluster.Decode = tp, 1, 1
		slo := spec.SLO
		slo.TTFTMs = 1 // every cluster is pruned; the reason says the bound
		reason := Bound(cfg, w, slo)
		require.True(t, strings.HasPrefix(reason, "TTFT: "), reason)
		m := regexp.MustCompile(`takes (\d+) ms`).FindStringSubmatch(reason)
		require.Len(t, m, 2, reason)
		boundMs, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		cfg.SLO = nil
		res, err := sim.Run(cfg)
		require.NoError(t, err)
		got := res.Results.Levels[0].TTFTMs.P90
		assert.GreaterOrEqual(t, got, boundMs, "tp%d: simulated TTFT p90 %.1f ms under the bound %.0f ms", tp, got, boundMs)
		t.Logf("tp%d: bound %.0f ms, simulated p90 %.1f ms", tp, boundMs, got)
	}
}

// A plan ranks the clusters meeting the SLO first, fewest GPUs first; its winner met the SLO
// at every verification seed; the same spec gives the same table, byte for byte.
func TestSearchRanksAndIsDeterministic(t *testing.T) {
	spec := small(t)
	spec.Router = []sim.Vary{{Key: "policy", Values: []string{"cache_aware", "round_robin"}}}
	table := func() (string, *Plan) {
		p, err := Search(spec, nil)
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, p.WriteTable(&b, 0, true))
		return b.String(), p
	}
	a, p := table()
	b, _ := table()
	assert.Equal(t, a, b, "same seed, same table")
	t.Log("\n" + a)
	require.NotNil(t, p.Winner, a)
	require.NotEmpty(t, p.Ranked)
	seenMiss := false
	for i, c := range p.Ranked {
		if !c.Meets {
			seenMiss = true
			continue
		}
		assert.False(t, seenMiss, "rank %d meets the SLO after one that misses it", i+1)
		if i > 0 && p.Ranked[i-1].Meets {
			assert.LessOrEqual(t, p.Ranked[i-1].GPUs(), c.GPUs(), "min-gpus: fewer GPUs first")
		}
		assert.LessOrEqual(t, c.TTFTMs, spec.SLO.TTFTMs)
	}
	verified := 0
	for _, v := range p.Verified {
		if v.Candidate == p.Winner {
			assert.True(t, v.Meets, "seed %d", v.Seed)
			verified++
		}
	}
	assert.Equal(t, spec.VerifySeeds, verified)
	assert.NotNil(t, p.Winner.Router, "the winner is one of the --vary settings on a top cluster")
	assert.Contains(t, a, "winner: "+p.Winner.Shape())

	seed := int64(7)
	spec.Base.Router.Seed, spec.Base.Workload.Seed = &seed, 7
	c, _ := table()
	assert.NotEqual(t, a, c, "another seed, other runs")
}

// A plan sharded over two machines and merged ranks exactly as the plan run on one.
func TestShardsMergeAsOnePlan(t *testing.T) {
	spec := small(t)
	spec.Base.Load.Rates = []float64{60} // prunes some clusters by capacity
	whole, err := Search(spec, nil)
	require.NoError(t, err)
	var want bytes.Buffer
	require.NoError(t, whole.WriteTable(&want, 0, true))
	require.Contains(t, want.String(), "prefill capacity", "the bounds prune some clusters")

	dirs := []string{filepath.Join(t.TempDir(), "s0"), filepath.Join(t.TempDir(), "s1")}
	for i, dir := range dirs {
		s := spec
		s.Shard, s.Shards = i, 2
		p, err := Prepare(s)
		require.NoError(t, err)
		p.Run(nil)
		require.NoError(t, p.WriteShard(dir))
	}
	p, err := Prepare(spec)
	require.NoError(t, err)
	require.NoError(t, p.Merge(dirs))
	require.NoError(t, p.Finish(nil))
	var got bytes.Buffer
	require.NoError(t, p.WriteTable(&got, 0, true))
	assert.Equal(t, want.String(), got.String())

	other := spec
	other.GPUs = 3
	q, err := Prepare(other)
	require.NoError(t, err)
	assert.ErrorContains(t, q.Merge(dirs), "another plan's candidates")
	assert.ErrorContains(t, q.Merge(dirs[:1]), "missing")
}

// Over time, a busier hour needs at least the GPUs of a quieter one, equal rates share a plan,
// and the schedule names the servers per role per hour.
func TestHourlySchedule(t *testing.T) {
	spec := small(t)
	spec.VerifySeeds = 1
	s, err := Hourly(spec, []float64{5, 40, 5}, nil)
	require.NoError(t, err)
	require.Len(t, s.Hours, 3)
	require.NotNil(t, s.Hours[0].Plan.Winner)
	require.NotNil(t, s.Hours[1].Plan.Winner)
	assert.Same(t, s.Hours[0].Plan, s.Hours[2].Plan)
	quiet, busy := s.Hours[0].Plan.Winner, s.Hours[1].Plan.Winner
	assert.Less(t, quiet.GPUs(), busy.GPUs())
	var b bytes.Buffer
	require.NoError(t, s.WriteTable(&b))
	t.Log("\n" + b.String())
	assert.Contains(t, b.String(), "prefill servers by hour: ")
	assert.Regexp(t, `(?m)^\s+1\s+40\s+\d+\s+\d+×tp\d`, b.String())
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.GPUs = 1 }, "--gpus 1"},
		{func(s *Spec) { s.SLO.Percentile = "p80" }, "--slo-percentile"},
		{func(s *Spec) { s.SLO.TTFTMs, s.SLO.TPOTMs = 0, 0 }, "--slo-ttft-ms or --slo-tpot-ms"},
		{func(s *Spec) { s.SLO.Goodput = 2 }, "--goodput-target 2"},
		{func(s *Spec) { s.Objective = "cheap" }, "--objective"},
		{func(s *Spec) { s.Base.Router.PDDisaggregation = false }, "PD clusters"},
	} {
		s := small(t)
		tc.edit(&s)
		assert.ErrorContains(t, s.Validate(), tc.want)
	}
	assert.NoError(t, small(t).Validate())
}

// writeTrace writes a Mooncake trace of n1 requests in the first minute and n2 in the second.
func writeTrace(t *testing.T, n1, n2 int) string {
	t.Helper()
	var b strings.Builder
	for i := range n1 + n2 {
		ms := i * 60000 / n1
		if i >= n1 {
			ms = 60000 + (i-n1)*60000/n2
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 900, "output_length": 40, "hash_ids": [%d, %d]}`+"\n", ms, i%3, 100+i)
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// A trace's rate per window comes from its timestamps (after --time-scale), and the hourly plan
// gives the busier window at least the GPUs of the quieter one.
func TestTraceRatesAndHourlyPlan(t *testing.T) {
	p := workloads.DefaultParams()
	p.Workload, p.API, p.TraceFile, p.TimeScale = workloads.WorkloadMooncake, workloads.APICompletions, writeTrace(t, 30, 90), 1
	rates, err := TraceRates(p, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []float64{0.5, 1.5}, rates)
	p.TimeScale = 0.5 // replayed twice as fast: both windows in the first minute
	rates, err = TraceRates(p, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []float64{2}, rates)
	_, err = TraceRates(p, 10*time.Second)
	require.NoError(t, err)
	_, err = TraceRates(workloads.DefaultParams(), time.Hour)
	assert.ErrorContains(t, err, "needs a trace workload")

	p.TimeScale = 1
	spec := small(t)
	spec.Base.Workload = p
	spec.Base.Load.Requests = 60
	spec.VerifySeeds = 0
	s, err := Hourly(spec, []float64{0.5, 1.5}, nil)
	require.NoError(t, err)
	require.NotNil(t, s.Hours[0].Plan.Winner)
	require.NotNil(t, s.Hours[1].Plan.Winner)
	assert.LessOrEqual(t, s.Hours[0].Plan.Winner.GPUs(), s.Hours[1].Plan.Winner.GPUs())
	assert.InDelta(t, 1.5, s.Hours[1].Plan.Workload.Rate, 1e-9, "the hour's rate is the offered rate its bounds use")
}

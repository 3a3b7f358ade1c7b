package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

func TestRunConservation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   int // recorded requests
	}{
		{"pd closed loop", func(*Config) {}, 48},
		{"pd dp-aware lockstep", func(c *Config) {
			c.Cluster.DPSize, c.Cluster.DPAttention, c.Router.DPAware = 4, true, true
		}, 48},
		{"regular mode", func(c *Config) { c.Router.PDDisaggregation, c.Cluster.Regular = false, 3 }, 48},
		{"regular dp-aware", func(c *Config) {
			c.Router.PDDisaggregation, c.Cluster.Regular, c.Cluster.DPSize, c.Router.DPAware = false, 2, 2, true
		}, 48},
		{"open loop poisson", func(c *Config) { c.Load.Concurrency, c.Load.Rates = nil, []float64{20} }, 48},
		{"burst", func(c *Config) { c.Load.Concurrency, c.Load.Rates = nil, []float64{inf()} }, 48},
		{"requests bound and warmup", func(c *Config) { c.Load.Requests, c.Load.Warmup = 20, 5 }, 20},
		{"two levels flush", func(c *Config) { c.Load.Concurrency, c.Load.FlushCache = []int{2, 8}, true }, 96},
		{"constant profile completions", func(c *Config) {
			c.Cluster.Profile, c.Workload.API = "constant", workloads.APICompletions
		}, 48},
		{"generate random", func(c *Config) {
			c.Workload.API, c.Workload.Workload, c.Workload.NumPrompts = workloads.APIGenerate, workloads.WorkloadRandom, 30
			c.Workload.InputLen = 300
		}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := baseConfig()
			tc.mutate(&cfg)
			res := mustRun(t, cfg)
			require.Len(t, res.Records, tc.want)
			for _, l := range res.Results.Levels {
				assert.Zero(t, l.Errors)
				assert.Greater(t, l.TTFTMs.P50, 0.0)
				assert.Greater(t, l.Throughput.ReqS, 0.0)
				require.NotNil(t, l.Sim)
			}
			for _, r := range res.Records {
				if cfg.Router.PDDisaggregation {
					require.NotNil(t, r.Targets.Prefill)
					require.NotNil(t, r.Targets.Decode)
				} else {
					require.NotNil(t, r.Targets.Regular)
				}
			}
		})
	}
}

func inf() float64 { var z float64; return 1 / z }

func TestRunDeterministic(t *testing.T) {
	t.Parallel()
	a, b := encode(t, mustRun(t, baseConfig())), encode(t, mustRun(t, baseConfig()))
	require.Equal(t, string(a), string(b))
	other := baseConfig()
	seed := int64(2)
	other.Router.Seed = &seed
	c := encode(t, mustRun(t, other))
	require.NotEqual(t, string(a), string(c))
	var res reports.Results
	require.NoError(t, json.Unmarshal(a, &res))
	assert.Equal(t, reports.ToolSim, res.Meta.Tool)
	assert.Nil(t, res.Meta.Started)
	assert.NotContains(t, string(a), "started")
}

// TestITLCountedByTheEngineAsFromRecords: without requests.jsonl's ITL lists the engines count
// the gaps straight into each level's ITL (engine.Req.Gaps); the results are the same, byte for
// byte, as when every token reaches the simulator, in PD and regular clusters with warm-up.
func TestITLCountedByTheEngineAsFromRecords(t *testing.T) {
	t.Parallel()
	for _, pd := range []bool{true, false} {
		cfg := baseConfig()
		cfg.Load.Concurrency, cfg.Load.Warmup = []int{2, 8}, 4
		if !pd {
			cfg.Router.PDDisaggregation = false
			cfg.Cluster.Regular = 2
		}
		cfg.Cluster.DPSize = 2
		cfg.KeepITL = true
		every := mustRun(t, cfg)
		cfg.KeepITL = false
		counted := mustRun(t, cfg)
		require.Positive(t, every.Results.Levels[1].ITLMs.P50)
		assert.Equal(t, string(encode(t, every)), string(encode(t, counted)), "pd=%v", pd)
		assert.Equal(t, every.Stats.Events, counted.Stats.Events, "the same run")
	}
}

func TestDecisionLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	cfg := baseConfig()
	cfg.Cluster.DPSize, cfg.Router.DPAware = 2, true
	cfg.DecisionLog = &buf
	res := mustRun(t, cfg)
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		var line struct {
			Seq     uint64 `json:"seq"`
			ID      string `json:"id"`
			RID     string `json:"rid"`
			Room    uint64 `json:"room"`
			Route   string `json:"route"`
			Prefill *struct {
				Worker string `json:"worker"`
				Index  int    `json:"index"`
				Rank   *int   `json:"rank"`
			} `json:"prefill"`
			Decode  *json.RawMessage `json:"decode"`
			Regular *json.RawMessage `json:"regular"`
			Reason  string           `json:"reason"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		assert.Equal(t, uint64(n), line.Seq)
		assert.Regexp(t, `^chatcmpl-[A-Za-z0-9]{24}-sim$`, line.RID)
		assert.Equal(t, "/v1/chat/completions", line.Route)
		require.NotNil(t, line.Prefill)
		require.NotNil(t, line.Prefill.Rank)
		assert.Equal(t, WorkerURL(router.Prefill, line.Prefill.Index), line.Prefill.Worker)
		assert.NotNil(t, line.Decode)
		assert.Nil(t, line.Regular)
		assert.NotEmpty(t, line.Reason)
		assert.NotEmpty(t, line.ID)
	}
	assert.Equal(t, res.Stats.Attempts, n)
}

func TestParseKill(t *testing.T) {
	t.Parallel()
	k, err := ParseKill("http://sim-decode-1:30000@1m30s")
	require.NoError(t, err)
	assert.Equal(t, Kill{Worker: "http://sim-decode-1:30000", At: 90 * time.Second}, k)
	k, err = ParseKill("http://sim-regular-1:30000@60s..90s")
	require.NoError(t, err)
	assert.Equal(t, Kill{Worker: "http://sim-regular-1:30000", At: time.Minute, Back: 90 * time.Second}, k)
	assert.Equal(t, "http://sim-regular-1:30000@1m0s..1m30s", k.String())
	for _, bad := range []string{"http://x", "@3s", "http://x@soon", "http://x@-1s", "http://x@3s..2s", "http://x@3s..later"} {
		_, err := ParseKill(bad)
		assert.Error(t, err, bad)
	}
	cfg := baseConfig()
	cfg.Kills = []Kill{{Worker: "http://nope:1", At: time.Second}}
	_, err = Run(cfg)
	assert.ErrorContains(t, err, "no simulated worker")
}

func TestSweepGridAndRank(t *testing.T) {
	t.Parallel()
	vars := []Vary{{Key: "policy", Values: []string{"cache_aware", "round_robin"}}, {Key: "dp-size", Values: []string{"1", "2"}}}
	pts, err := SweepShard(baseConfig(), vars, 2, 0, 1, nil)
	require.NoError(t, err)
	require.Len(t, pts, 4)
	assert.Equal(t, []string{"cache_aware", "1"}, pts[0].Values)
	assert.Equal(t, "round_robin", pts[3].Config.Router.Policy)
	assert.Equal(t, 2, pts[3].Config.Cluster.DPSize)
	for _, p := range pts {
		require.NoError(t, p.Err)
	}
	ranked := RankBy(pts, Objective{Name: ObjectiveP95TTFT})
	require.Len(t, ranked, 4)
	for i := 1; i < len(ranked); i++ {
		assert.LessOrEqual(t, ranked[i-1].Last().TTFTMs.P95, ranked[i].Last().TTFTMs.P95)
	}
	assert.Empty(t, RankBy(pts, Objective{Name: ObjectiveP95TTFT, SLO: &reports.SLO{TTFTMs: 0.001}}))

	_, err = ParseVary("nope")
	assert.Error(t, err)
	_, err = Grid(baseConfig(), []Vary{{Key: "no_such_key", Values: []string{"1"}}})
	assert.ErrorContains(t, err, "no_such_key")
	_, err = Grid(baseConfig(), []Vary{{Key: "cache_threshold", Values: []string{"high"}}})
	assert.Error(t, err)
}

// TestBaseIndexFillsClusterDefaults: varying a cluster count the base leaves at its default
// (0: DefaultPrefill servers) finds the defaults' point in the grid; it said "the defaults are
// not in the grid" before.
func TestBaseIndexFillsClusterDefaults(t *testing.T) {
	t.Parallel()
	base := baseConfig()
	require.Zero(t, base.Cluster.Prefill)
	vars := []Vary{{Key: "prefill", Values: []string{"1", strconv.Itoa(DefaultPrefill), "3"}}}
	all, err := Grid(base, vars)
	require.NoError(t, err)
	assert.Equal(t, 1, BaseIndex(base, vars, all))
	vars = []Vary{{Key: "prefill", Values: []string{"1", "3"}}}
	all, err = Grid(base, vars)
	require.NoError(t, err)
	assert.Equal(t, -1, BaseIndex(base, vars, all))
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRunStopsOnDecisionLogError(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.DecisionLog = failingWriter{}
	_, err := Run(cfg)
	require.ErrorContains(t, err, "disk full")
}

// The retry rule is serve's (router.Retryable): a prompt beyond the KV capacity fails the
// same way on every worker, so it is not retried; a killed worker is (a transport error).
func TestSimRetriesAsServe(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Workload.Conversations, cfg.Workload.Turns, cfg.Workload.SystemPromptLen = 2, 1, 500_000
	cfg.Load.Concurrency = []int{1}
	res, err := Run(cfg)
	require.NoError(t, err)
	l := res.Results.Levels[0]
	require.Equal(t, 2, l.Errors, "both prompts exceed the 415k-token KV capacity")
	assert.Equal(t, 2, res.Stats.Attempts, "one attempt each: the worker said the request is invalid")
}

// TestTreeCharsBoundsTheRouterTrees: the simulator's tree bound (Config.TreeChars) trims the
// routers' trees only once they reach it, so a run below it is serve's run byte for byte, and
// the lower of it and max_tree_total_chars applies.
func TestTreeCharsBoundsTheRouterTrees(t *testing.T) {
	t.Parallel()
	base := baseConfig()
	base.Workload.Conversations = 48
	base.KeepITL = true
	run := func(treeChars, maxTotal int) *Result {
		cfg := base
		cfg.TreeChars = treeChars
		if maxTotal > 0 {
			cfg.Router.MaxTreeTotalChars = maxTotal
		}
		return mustRun(t, cfg)
	}
	serve := run(-1, 0)
	def := run(0, 0)
	require.Zero(t, serve.Stats.TreeTrims)
	require.Zero(t, def.Stats.TreeTrims, "the default bound is far above a small run's trees")
	require.Equal(t, string(encode(t, serve)), string(encode(t, def)))
	require.Equal(t, serve.Records, def.Records)

	small := run(4000, 0)
	assert.Positive(t, small.Stats.TreeTrims, "TreeChars 4000 trims")
	routerBound := run(-1, 4000).Stats.TreeTrims
	assert.Positive(t, routerBound, "max_tree_total_chars 4000 trims")
	assert.Equal(t, routerBound, run(0, 4000).Stats.TreeTrims, "max_tree_total_chars below the default bound applies")
	assert.Equal(t, routerBound, run(1<<40, 4000).Stats.TreeTrims, "a TreeChars above max_tree_total_chars changes nothing")
	assert.Equal(t, routerBound, small.Stats.TreeTrims, "TreeChars 4000 trims as max_tree_total_chars 4000 does")
}

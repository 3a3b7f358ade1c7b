package sim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
)

// directConfig: 4 regular servers of 2 DP ranks, DP-aware cache_aware, one client sending 60
// single-turn requests one after another, and 24 long requests straight at server 0's rank 0.
func directConfig(reports time.Duration) Config {
	cfg := baseConfig()
	cfg.Router.PDDisaggregation = false
	cfg.Router.DPAware = true
	cfg.Cluster.Regular, cfg.Cluster.DPSize = 4, 2
	p := &cfg.Workload
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 60, 1, 0, 48, 4 // prompts share no prefix: loads decide
	cfg.Load.Concurrency, cfg.Load.Requests, cfg.Load.Warmup = []int{1}, 60, 0
	cfg.Routing.LoadReportInterval = reports
	cfg.Direct = []DirectLoad{{Worker: WorkerURL(router.Regular, 0), Rank: 0, Requests: 24, PromptTokens: 7500, OutputTokens: 600}}
	return cfg
}

// ranksOf reads the regular targets of a decision log.
func ranksOf(t *testing.T, log string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var d struct {
			Regular struct {
				Worker string `json:"worker"`
				Rank   int    `json:"rank"`
			} `json:"regular"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &d))
		out = append(out, router.TargetName(d.Regular.Worker, d.Regular.Rank))
	}
	return out
}

// Requests sent around the router show in the worker's load reports, and the router sends the
// queued rank nothing once it has one; without reports its in-flight counts cannot see them.
func TestDirectLoadIsSeenOnlyThroughReports(t *testing.T) {
	t.Parallel()
	hot := router.TargetName(WorkerURL(router.Regular, 0), 0)
	for _, tc := range []struct {
		name    string
		reports time.Duration
		toHot   func(t assert.TestingT, n int)
	}{
		{"reports every 100ms", 100 * time.Millisecond, func(t assert.TestingT, n int) {
			assert.LessOrEqual(t, n, 1, "at most the request routed before the first report")
		}},
		{"no reports", 0, func(t assert.TestingT, n int) {
			assert.Greater(t, n, 10, "in-flight counts tie: the lowest index takes them")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := directConfig(tc.reports)
			var log bytes.Buffer
			cfg.DecisionLog = &log
			res := mustRun(t, cfg)
			require.Zero(t, res.Stats.LiveRooms, "the direct requests ran to their end too")
			n := 0
			for _, target := range ranksOf(t, log.String()) {
				if target == hot {
					n++
				}
			}
			tc.toHot(t, n)
		})
	}
}

func TestParseDirectLoad(t *testing.T) {
	t.Parallel()
	d, err := ParseDirectLoad("worker=http://sim-regular-1:30000,rank=1,requests=8,prompt=4000,output=100,at=2s")
	require.NoError(t, err)
	assert.Equal(t, DirectLoad{Worker: "http://sim-regular-1:30000", Rank: 1, At: 2 * time.Second, Requests: 8, PromptTokens: 4000, OutputTokens: 100}, d)
	for _, bad := range []string{"", "requests=2,prompt=1,output=1", "worker=w,requests=0,prompt=1,output=1", "worker=w,requests=1,prompt=1,output=1,at=soon", "worker=w,colour=red"} {
		_, err := ParseDirectLoad(bad)
		assert.ErrorContains(t, err, "--direct-load", bad)
	}
	cfg := directConfig(0)
	cfg.Direct[0].Rank = 5
	_, err = Run(cfg)
	assert.ErrorContains(t, err, "rank 5, but it has 2 DP ranks")
	cfg = baseConfig() // PD
	cfg.Direct = []DirectLoad{{Worker: WorkerURL(router.Prefill, 0), Requests: 1, PromptTokens: 1, OutputTokens: 1}}
	_, err = Run(cfg)
	assert.ErrorContains(t, err, "only regular workers")
}

package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/workloads"
)

// baseConfig is a small PD run: multiturn at concurrency 8.
func baseConfig() Config {
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	p := workloads.DefaultParams()
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 16, 3, 256, 64, 32
	l := workloads.DefaultLoadParams()
	l.Concurrency = []int{8}
	return Config{Router: rc, Workload: p, Load: l}
}

// runLogged runs cfg (mustRun) with a decision log, and returns the log too.
func runLogged(t testing.TB, cfg Config) (*Result, string) {
	t.Helper()
	var log bytes.Buffer
	cfg.DecisionLog = &log
	return mustRun(t, cfg), log.String()
}

// mustRun runs cfg and checks conservation: every request recorded or failed with a reason,
// all loads zero, no live engine room.
func mustRun(t testing.TB, cfg Config) *Result {
	t.Helper()
	res, err := Run(cfg)
	require.NoError(t, err)
	for _, ti := range res.Stats.Targets {
		require.Zero(t, ti.Load, "target %s still has load", ti.Name)
	}
	require.Zero(t, res.Stats.LiveRooms)
	for _, r := range res.Records {
		if r.Error != nil {
			require.NotEmpty(t, reports.ErrorKind(*r.Error))
		} else {
			require.NotNil(t, r.TTFTMs, "request %s has no TTFT", r.ID)
		}
	}
	return res
}

func encode(t testing.TB, res *Result) []byte {
	var b bytes.Buffer
	require.NoError(t, reports.EncodeResults(&b, res.Results))
	return b.Bytes()
}

//go:build integration

package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
)

// TestIntegrationSpeedRun is the speed run at full size: 100,000 multiturn requests at
// concurrency 512 on 16 prefill + 16 decode servers with dp 8. It checks conservation and logs
// the speed; the wall-clock bound is generous (the acceptance figure, ≤ 10 s on an idle
// 2-core machine, is measured with BenchmarkRun).
func TestIntegrationSpeedRun(t *testing.T) {
	start := time.Now()
	res := mustRun(t, speedConfig(25000))
	wall := time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	require.Len(t, res.Records, 100000)
	lv := last(res)
	assert.Zero(t, lv.Errors)
	t.Logf("100k requests: %v wall, %d events (%.0f events/s, %.0f requests/s), %.1f s virtual, heap sys %d MiB",
		wall, res.Stats.Events, float64(res.Stats.Events)/wall.Seconds(), 100000/wall.Seconds(),
		res.Stats.Virtual.Seconds(), ms.HeapSys>>20)
	assert.Less(t, wall, 60*time.Second)
}

// TestIntegrationKillPrefillAndDecode kills one worker of each role mid-run on a bigger
// cluster: requests fail or are retried, the breaker opens, and all loads end at zero.
func TestIntegrationKillPrefillAndDecode(t *testing.T) {
	cfg := speedConfig(512)
	cfg.Kills = []Kill{{Worker: WorkerURL(router.Prefill, 3), At: 2 * time.Second},
		{Worker: WorkerURL(router.Decode, 5), At: 3 * time.Second}}
	res := mustRun(t, cfg)
	lv := last(res)
	t.Logf("kills: %d requests, %d errors %v, %d attempts", lv.Requests, lv.Errors, lv.ErrorsByKind, res.Stats.Attempts)
	assert.Greater(t, res.Stats.Attempts, res.Stats.Requests)
}

// TestIntegrationDPAwareLockstepLarge repeats the DP-awareness comparison at a larger scale.
func TestIntegrationDPAwareLockstepLarge(t *testing.T) {
	run := func(aware bool) float64 {
		cfg := dpConfig(aware)
		cfg.Cluster.Prefill, cfg.Cluster.Decode, cfg.Cluster.DPSize = 4, 4, 8
		cfg.Workload.Conversations = 512
		cfg.Load.Concurrency = []int{128}
		return last(mustRun(t, cfg)).TTFTMs.P95
	}
	on, off := run(true), run(false)
	t.Logf("TTFT P95 dp-aware %.1f ms, not %.1f ms", on, off)
	assert.Less(t, on, off)
}

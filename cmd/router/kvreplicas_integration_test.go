//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
)

// roundRobin is a client-side spread over router replicas, one request each in turn, as a
// Kubernetes Service spreads new connections.
func roundRobin(t *testing.T, replicas []*kvRouter) string {
	t.Helper()
	var targets []*url.URL
	for _, r := range replicas {
		u, err := url.Parse(r.url)
		require.NoError(t, err)
		targets = append(targets, u)
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[int(next.Add(1)-1)%len(targets)])
		},
		FlushInterval: -1, // stream as it comes
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	return front.URL
}

// replicaRatios sums the replicas' predicted and worker-reported cached-token ratios since
// before (a snapshot taken by the same function).
type ratioSnapshot struct{ predSum, predN, workSum, workN float64 }

func snapshot(t *testing.T, replicas []*kvRouter) ratioSnapshot {
	var s ratioSnapshot
	for _, r := range replicas {
		m, n := histogramMean(t, r.reg, "pdrouter_prefix_match_ratio")
		s.predSum, s.predN = s.predSum+m*float64(n), s.predN+float64(n)
		m, n = histogramMean(t, r.reg, "pdrouter_worker_cached_token_ratio")
		s.workSum, s.workN = s.workSum+m*float64(n), s.workN+float64(n)
	}
	return s
}

func (s ratioSnapshot) since(before ratioSnapshot) (pred, work float64) {
	return (s.predSum - before.predSum) / (s.predN - before.predN), (s.workSum - before.workSum) / (s.workN - before.workN)
}

// Router replicas on a live fakeworker PD cluster publishing KV events: with events every
// replica sees every worker's cache, so two replicas behind a round-robin client predict and
// reach the cached-token ratio one replica does (within 2 points); each approximate replica
// knows only the half of the traffic it routed, and the loss is measured and printed.
func TestIntegrationKVEventsRouterReplicas(t *testing.T) {
	tok := qwen3Tokenizer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefill, decode := startKVCluster(t, ctx, tok)

	dir := t.TempDir()
	seed := uint64(70)
	type result struct{ pred, work float64 }
	live := func(mode string, n int) result {
		var replicas []*kvRouter
		for range n {
			replicas = append(replicas, startKVRouter(t, ctx, prefill, decode, mode, tok))
		}
		if mode == "auto" {
			for _, r := range replicas {
				testutil.Eventually(t, 10*time.Second, func() bool {
					return counterSum(t, r.reg, "pdrouter_kv_events_connected_targets", nil) >= 8
				}, "every replica subscribed")
			}
		}
		front := replicas[0].url
		if n > 1 {
			front = roundRobin(t, replicas)
		}
		before := snapshot(t, replicas)
		seed++
		benchMultiTurn(t, ctx, front, filepath.Join(dir, fmt.Sprintf("%s-%d", mode, n)), seed)
		pred, work := snapshot(t, replicas).since(before)
		return result{pred, work}
	}
	precise1, precise2 := live("auto", 1), live("auto", 2)
	approx1, approx2 := live("off", 1), live("off", 2)

	// The simulator's prediction of the same four runs: the same cluster, workload shape,
	// concurrency and seeds, its replicas spread round-robin as the test's client does. Its
	// requests are tokenized by the workloads' approximate tokenizer, not Qwen3's: the ratios,
	// not the token counts, are compared.
	simSeed := uint64(70)
	predict := func(kv string, n int) float64 {
		simSeed++
		out, err := run(t, "sim", "--prefill", "2", "--decode", "2", "--dp-size", "2", "--dp-aware", "--profile", "llama3-8b-h100",
			"--page-size", "16", "--kv-events", kv, "--router-replicas", fmt.Sprint(n), "--workload", "multiturn",
			"--conversations", "48", "--turns", "3", "--system-prompt-len", "512", "--question-len", "256", "--output-len", "16",
			"--range-ratio", "0.5", "--concurrency", "6", "--requests", "120", "--warmup", "0", "--seed", fmt.Sprint(simSeed), "--format", "json")
		require.NoError(t, err, out)
		var res struct {
			Levels []struct {
				CacheHitRate *float64 `json:"cache_hit_rate"`
			} `json:"levels"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		require.Len(t, res.Levels, 1)
		require.NotNil(t, res.Levels[0].CacheHitRate)
		return *res.Levels[0].CacheHitRate
	}
	sims := map[string]float64{"precise 1": predict("on", 1), "precise 2": predict("on", 2), "approximate 1": predict("off", 1), "approximate 2": predict("off", 2)}
	lives := map[string]float64{"precise 1": precise1.work, "precise 2": precise2.work, "approximate 1": approx1.work, "approximate 2": approx2.work}
	for _, k := range []string{"precise 1", "precise 2", "approximate 1", "approximate 2"} {
		t.Logf("%-14s live %.3f, simulated %.3f (%+.3f)", k, lives[k], sims[k], sims[k]-lives[k])
		assert.InDelta(t, lives[k], sims[k], 0.05, "%s: the simulator predicts the live cached-token ratio within 5 points", k)
	}
	t.Logf("%-12s %9s %9s   (cached-token ratio: router's prediction / workers' report)", "", "1 replica", "2 replicas")
	t.Logf("%-12s %4.3f/%4.3f %4.3f/%4.3f", "precise", precise1.pred, precise1.work, precise2.pred, precise2.work)
	t.Logf("%-12s %4.3f/%4.3f %4.3f/%4.3f", "approximate", approx1.pred, approx1.work, approx2.pred, approx2.work)
	t.Logf("2 replicas cost: precise %+.3f, approximate %+.3f of the workers' cached-token ratio", precise2.work-precise1.work, approx2.work-approx1.work)
	assert.InDelta(t, precise1.work, precise2.work, 0.02, "precise: two replicas reach one replica's cache hits")
	assert.InDelta(t, precise1.pred, precise2.pred, 0.02, "precise: and predict them")
	assert.InDelta(t, precise2.work, precise2.pred, 0.02, "precise: two replicas' prediction is the workers' cache")
}

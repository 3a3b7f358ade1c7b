//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// HiCache's tiers end to end: two regular fakeworkers with a host tier (--hicache-ratio 4, a
// 1024-token GPU pool) publish tiered KV events over ZMQ; serve's cache_aware, subscribed to
// them, routes a prompt whose blocks its worker evicted from the GPU to the host back to that
// worker as a host-tier hit (the decision log says "tier":"host"), and the worker reports the
// loaded-back prefix as cached.
func TestIntegrationKVEventsHostTier(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Regular: 2, Worker: fakeworker.Config{
		Host: "127.0.0.1", Seed: 1, PageSize: 16, MaxTotalTokens: 1024, Args: engine.ServerArgs{HiCacheRatio: 4},
		KVEventsConfig: `{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}`,
	}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Stop(); _ = cl.Wait() })
	ws := cl.Workers()
	require.Len(t, ws, 2)

	rc := server.DefaultConfig()
	rc.WorkerURLs = []string{ws[0].URL(), ws[1].URL()}
	rc.KVEvents, rc.Seed = "auto", new(int64)
	reg, dlog := prom.NewRegistry(), &syncBuffer{}
	srv, err := server.New(server.Options{Config: rc, Registry: reg, DecisionLog: dlog})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { front.Close(); stop(); srv.Wait() })
	testutil.Eventually(t, 10*time.Second, func() bool {
		return counterSum(t, reg, "pdrouter_kv_events_connected_targets", nil) >= 2
	}, "the router to subscribe to both workers")

	ids := func(base int) []int {
		out := make([]int, 512)
		for i := range out {
			out[i] = base + i
		}
		return out
	}
	send := func(prompt []int) (cached int, target map[string]any) {
		cached = postGenerate(t, front.URL, map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 2}})
		lines := decisionLines(t, dlog)
		return cached, lines[len(lines)-1]["regular"].(map[string]any)
	}
	blocks := func(op string) float64 {
		return counterSum(t, reg, "pdrouter_kv_events_blocks_total", map[string]string{"op": op})
	}

	p := ids(1000)
	_, first := send(p)
	home := first["worker"]
	testutil.Eventually(t, 5*time.Second, func() bool { return blocks("stored") >= 31 }, "p's blocks in the index")
	_, again := send(p)
	assert.Equal(t, home, again["worker"])
	assert.Equal(t, "gpu", again["tier"], "p on its worker's GPU")

	// Two disjoint prompts the same worker takes (a miss goes to the least loaded, lowest
	// index first; both idle) fill its 1024-token GPU pool: p moves to the host tier.
	removedBefore := blocks("removed")
	for i := range 2 {
		_, tg := send(ids(100_000 * (i + 1)))
		require.Equal(t, home, tg["worker"])
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return blocks("removed") >= removedBefore+31 &&
			counterSum(t, reg, "pdrouter_kv_events_index_host_blocks", nil) >= 32
	}, "p's eviction to the host tier in the index")
	cached, tg := send(p)
	t.Logf("p after its eviction: routed to %v, tier %v; the worker reports %d cached tokens", tg["worker"], tg["tier"], cached)
	assert.Equal(t, home, tg["worker"], "the host hit beats the other worker's miss")
	assert.Equal(t, "host", tg["tier"])
	assert.GreaterOrEqual(t, cached, 496, "the worker loaded p back from its host tier")
}

// TestIntegrationKVTiersSimTable prints docs/kv-events.md's "KV tiers" table: `router sim` of
// the cache-pressure workload (150 groups × 6K-token prefix + 1.2K question, 100-token
// replies, 16 req/s, 300 warm-up + 1,200 recorded requests) on 8 llama3-8b-h100 servers whose
// 80K-token GPU pools hold about a third of its 1.8M-token working set, with KV events, and a
// host tier of 4× the GPU pool (--hicache-ratio 4) loaded back at 50, 8 or 2 GB/s; cache_aware
// ignores the host tier (--kv-host-tier-weight 0), weighs it (the default 0.9, or the weight
// the link's bandwidth gives), or counts it as the GPU (1). It checks what the table shows:
// where loading back is cheap, routing to host hits cuts TTFT P90 at least 2× against a
// GPU-only index (seeds 1–3); where it costs more than recomputing (2 GB/s), weight 0 wins.
// A second table runs multi-turn chat (400 conversations of 6 turns, 64 clients) on 4 servers
// of 20K-token GPU pools: the host tier serves a quarter of the prompt tokens whatever the
// weight, since a conversation's GPU-resident system prompt keeps it on its worker anyway.
//
//	go test -tags integration -run TestIntegrationKVTiersSimTable -v ./cmd/router/
func TestIntegrationKVTiersSimTable(t *testing.T) {
	type row struct {
		link, weight           string
		mean, p90, hit, gh, hh float64
	}
	pressure := []string{"--regular", "8", "--workload", "cache-pressure", "--cp-requests", "1500",
		"--cp-output-len", "100", "--rate", "16", "--requests", "1200", "--warmup", "300", "--max-total-tokens", "80000"}
	multiTurn := []string{"--regular", "4", "--workload", "multiturn", "--conversations", "400", "--turns", "6",
		"--concurrency", "64", "--max-total-tokens", "20000"}
	workload := pressure
	sim := func(seed int, link, weight string) row {
		out := t.TempDir()
		args := append(append([]string{"sim"}, workload...), "--kv-events", "on", "--seed", strconv.Itoa(seed),
			"--format", "json", "--out", out)
		if link != "-" {
			args = append(args, "--hicache-ratio", "4", "--hicache-bandwidth", link, "--kv-host-tier-weight", weight)
		}
		_, err := runCmd(t, args...)
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(out, "results.json"))
		require.NoError(t, err)
		var res reports.Results
		require.NoError(t, json.Unmarshal(raw, &res))
		l := res.Levels[len(res.Levels)-1]
		require.Zero(t, l.Errors)
		r := row{link: link, weight: weight, mean: l.TTFTMs.Mean, p90: l.TTFTMs.P90, hit: *l.CacheHitRate}
		if l.Sim.HostCacheHitRate != nil {
			r.gh, r.hh = *l.Sim.GPUCacheHitRate, *l.Sim.HostCacheHitRate
		} else {
			r.gh = r.hit
		}
		return r
	}
	grid := []struct{ link, weight string }{{"-", "-"},
		{"50", "0"}, {"50", "0.9"}, {"50", "1"},
		{"8", "0"}, {"8", "0.56"}, {"8", "1"},
		{"2", "0"}, {"2", "0.9"}, {"2", "1"}}
	table := func(grid []struct{ link, weight string }) map[string]row {
		var b strings.Builder
		fmt.Fprintf(&b, "| host tier, load-back | --kv-host-tier-weight | TTFT mean | TTFT P90 | cached | GPU hit | host hit |\n|---|---|---|---|---|---|---|\n")
		by := map[string]row{}
		for _, g := range grid {
			r := sim(1, g.link, g.weight)
			by[g.link+"/"+g.weight] = r
			link := "none"
			if g.link != "-" {
				link = g.link + " GB/s"
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f ms | %.0f ms | %.1f %% | %.1f %% | %.1f %% |\n", link, g.weight, r.mean, r.p90, 100*r.hit, 100*r.gh, 100*r.hh)
		}
		t.Log("\n" + b.String())
		return by
	}
	by := table(grid)

	assert.Less(t, 2*by["50/0.9"].p90, by["50/0"].p90, "cheap load-back: routing to host hits cuts TTFT P90 2×")
	assert.Greater(t, by["50/0.9"].hh, 2*by["50/0"].hh, "and serves far more from the host tier")
	assert.Less(t, by["8/0.56"].p90, by["8/0"].p90, "at 8 GB/s the weight the link gives still wins")
	assert.Less(t, by["2/0"].mean, by["2/0.9"].mean, "at 2 GB/s a load-back costs more than recomputing: weight 0 wins")
	for _, seed := range []int{2, 3} {
		w0, w := sim(seed, "50", "0"), sim(seed, "50", "0.9")
		t.Logf("seed %d, 50 GB/s: TTFT P90 %.0f ms (weight 0) → %.0f ms (0.9)", seed, w0.p90, w.p90)
		assert.Less(t, 2*w.p90, w0.p90, "seed %d", seed)
	}

	workload = multiTurn
	mt := table(grid[:4])
	for _, w := range []string{"0", "0.9", "1"} {
		assert.Greater(t, mt["50/"+w].hh, 0.1, "weight %s: the host tier serves multi-turn hits", w)
		assert.Less(t, mt["50/"+w].mean, mt["-/-"].mean, "weight %s: and cuts TTFT", w)
	}
}

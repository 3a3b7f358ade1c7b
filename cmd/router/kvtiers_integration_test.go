//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
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
		body, _ := json.Marshal(map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 2}})
		resp, err := http.Post(front.URL+"/generate", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
		var out struct {
			MetaInfo struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"meta_info"`
		}
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		lines := decisionLines(t, dlog)
		return out.MetaInfo.CachedTokens, lines[len(lines)-1]["regular"].(map[string]any)
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
	testutil.Eventually(t, 5*time.Second, func() bool { return blocks("removed") >= removedBefore+31 }, "p's eviction in the index")
	cached, tg := send(p)
	t.Logf("p after its eviction: routed to %v, tier %v; the worker reports %d cached tokens", tg["worker"], tg["tier"], cached)
	assert.Equal(t, home, tg["worker"], "the host hit beats the other worker's miss")
	assert.Equal(t, "host", tg["tier"])
	assert.GreaterOrEqual(t, cached, 496, "the worker loaded p back from its host tier")
}

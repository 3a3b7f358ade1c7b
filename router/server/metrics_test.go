package server

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestMetricsMirrorRouterState(t *testing.T) {
	t.Parallel()
	cfg := router.DefaultConfig()
	cfg.PDDisaggregation = true
	cfg.DPAware = true
	r, err := router.New(cfg, testutil.NewManualClock(time.Unix(0, 0)), rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(router.WorkerSpec{URL: "http://p:1", Role: router.Prefill, DPSize: 2}))
	require.NoError(t, r.AddWorker(router.WorkerSpec{URL: "http://d:1", Role: router.Decode, DPSize: 1}))

	reg := prometheus.NewPedanticRegistry()
	m := newMetrics(reg, r)
	d, err := r.Route(&router.Request{Text: "hello"})
	require.NoError(t, err)
	m.observeDecision(d)
	m.observeRequest("/generate", 200, 0.5)
	m.countResponse("/generate", 200, 0)

	want := `
# HELP pdrouter_target_load Requests routed to the target and not finished (the router's own count).
# TYPE pdrouter_target_load gauge
pdrouter_target_load{role="decode",target="http://d:1@0"} 1
pdrouter_target_load{role="prefill",target="http://p:1@0"} 1
pdrouter_target_load{role="prefill",target="http://p:1@1"} 0
`
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(want), "pdrouter_target_load"))
	d.Done(router.Prefill, router.Success)
	d.Done(router.Decode, router.Success)
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(strings.ReplaceAll(want, "} 1", "} 0")), "pdrouter_target_load"))

	require.Equal(t, 1.0, promtest.ToFloat64(m.PolicyDecisions.WithLabelValues("cache_aware", "prefill", "cache_miss")))
	require.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("/generate", "200")))
	n, err := promtest.GatherAndCount(reg, "pdrouter_tree_chars", "pdrouter_worker_healthy", "pdrouter_cb_state", "pdrouter_prefix_match_ratio")
	require.NoError(t, err)
	require.Equal(t, 2+2+2+1, n)
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(`
# HELP pdrouter_tree_chars Characters held by the cache-aware tree.
# TYPE pdrouter_tree_chars gauge
pdrouter_tree_chars{role="decode"} 5
pdrouter_tree_chars{role="prefill"} 5
`), "pdrouter_tree_chars"))
}

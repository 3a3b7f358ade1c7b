package fakeworker

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/sim/engine"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coreKeys are the entries of every /v1/loads rank, in SGLang's order.
var coreKeys = []string{"dp_rank", "num_running_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens", "num_used_tokens",
	"num_total_tokens", "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput", "cache_hit_rate", "utilization"}

// objectKeys returns the keys of the JSON object raw, in order.
func objectKeys(t testing.TB, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), "not an object: %s", raw)
	dec := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	_, err := dec.Token() // {
	require.NoError(t, err)
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, k.(string))
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return keys
}

// v1Loads fetches /v1/loads with query and returns the status, content type and body.
func v1Loads(t testing.TB, w *Worker, query string) (int, string, []byte) {
	t.Helper()
	resp, err := testClient.Get(w.URL() + "/v1/loads" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), buf.Bytes()
}

// loadsOf fetches /v1/loads (JSON) with query and decodes its ranks.
func loadsOf(t testing.TB, w *Worker, query string) []map[string]any {
	t.Helper()
	status, _, raw := v1Loads(t, w, query)
	require.Equal(t, http.StatusOK, status, string(raw))
	var doc struct{ Loads []map[string]any }
	require.NoError(t, json.Unmarshal(raw, &doc))
	return doc.Loads
}

// parkInBootstrap sends prefill legs with prompts of the given lengths (input_ids) to DP rank
// rank of p; no decode side registers them, so they wait in the bootstrap queue until ctx ends.
func parkInBootstrap(ctx context.Context, wg *sync.WaitGroup, p *Worker, rank int, lengths ...int) {
	for i, n := range lengths {
		ids := make([]string, n)
		for j := range ids {
			ids[j] = strconv.Itoa(1000*i + j + 1)
		}
		body := pdBody(`{"input_ids":[`+strings.Join(ids, ",")+`]}`, p, uint64(100+i), `"data_parallel_rank":`+strconv.Itoa(rank))
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+"/generate", strings.NewReader(body))
			if resp, err := testClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
}

// TestV1Loads: a DP-2 prefill worker with three rooms waiting for their decode side on rank
// 1 reports them on rank 1 only, in SGLang's JSON and Prometheus shapes, with its filters.
func TestV1Loads(t *testing.T) {
	t.Parallel()
	p := startWorker(t, Config{Mode: engine.RolePrefill, DPSize: 2, Profile: engine.ConstantProfile(time.Hour, time.Hour),
		MaxTotalTokens: 4096, TPSize: 2})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	parkInBootstrap(ctx, &wg, p, 1, 10, 20, 30)
	testutil.Eventually(t, 5*time.Second, func() bool { return loadsOf(t, p, "")[1]["num_waiting_reqs"] == 3.0 }, "three rooms in bootstrap on rank 1")

	t.Run("json", func(t *testing.T) {
		status, ctype, raw := v1Loads(t, p, "")
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "application/json", ctype)
		assert.Equal(t, []string{"timestamp", "version", "accelerator", "num_accelerators", "loads"}, objectKeys(t, raw))
		var doc struct {
			Timestamp       string
			Version         string
			Accelerator     *string
			NumAccelerators int `json:"num_accelerators"`
			Loads           []json.RawMessage
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		ts, err := time.Parse(time.RFC3339Nano, doc.Timestamp)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now(), ts, time.Minute)
		assert.True(t, strings.HasSuffix(doc.Timestamp, "+00:00"), "Python's isoformat of a UTC time: %s", doc.Timestamp)
		assert.Equal(t, serverVersion, doc.Version)
		assert.Nil(t, doc.Accelerator)
		assert.Equal(t, 2, doc.NumAccelerators, "TP 2 per DP replica")
		require.Len(t, doc.Loads, 2)
		for _, l := range doc.Loads {
			assert.Equal(t, append(append([]string{}, coreKeys...), "disaggregation", "queues"), objectKeys(t, l))
		}
		want := []map[string]any{
			{"dp_rank": 0.0, "num_running_reqs": 0.0, "num_waiting_reqs": 0.0, "num_waiting_uncached_tokens": 0.0, "num_used_tokens": 0.0,
				"num_total_tokens": 0.0, "max_total_num_tokens": 4096.0, "max_running_requests": 1024.0, "token_usage": 0.0,
				"gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": -1.0,
				"disaggregation": map[string]any{"mode": "prefill", "prefill_bootstrap_queue_reqs": 0.0, "prefill_inflight_queue_reqs": 0.0,
					"decode_prealloc_queue_reqs": 0.0, "decode_transfer_queue_reqs": 0.0, "decode_retracted_queue_reqs": 0.0,
					"kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0},
				"queues": map[string]any{"waiting": 0.0, "grammar": 0.0, "paused": 0.0, "retracted": 0.0}},
		}
		busy := map[string]any{}
		for k, v := range want[0] {
			busy[k] = v
		}
		busy["dp_rank"], busy["num_waiting_reqs"] = 1.0, 3.0
		busy["num_waiting_uncached_tokens"], busy["num_total_tokens"] = 60.0, 60.0 // bootstrap prompts: nothing matched yet
		busy["disaggregation"] = map[string]any{"mode": "prefill", "prefill_bootstrap_queue_reqs": 3.0, "prefill_inflight_queue_reqs": 0.0,
			"decode_prealloc_queue_reqs": 0.0, "decode_transfer_queue_reqs": 0.0, "decode_retracted_queue_reqs": 0.0,
			"kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0}
		assert.Equal(t, append(want, busy), loadsOf(t, p, ""))
		assert.Contains(t, string(raw), `"token_usage":0.0,`, "floats as Python prints them")
	})

	t.Run("filters", func(t *testing.T) {
		for _, tc := range []struct {
			name, query string
			ranks       []float64
			keys        []string
		}{
			{"one rank", "?dp_rank=1", []float64{1}, append(append([]string{}, coreKeys...), "disaggregation", "queues")},
			{"core", "?include=core", []float64{0, 1}, coreKeys},
			{"core and queues", "?include=core,%20queues", []float64{0, 1}, append(append([]string{}, coreKeys...), "queues")},
			{"all", "?include=all&dp_rank=0", []float64{0}, append(append([]string{}, coreKeys...), "disaggregation", "queues")},
			{"sections the worker cannot fill", "?include=memory,spec,lora", []float64{0, 1}, coreKeys},
			{"rank out of range", "?dp_rank=2", nil, nil},
			{"negative rank", "?dp_rank=-1", nil, nil},
			{"json unless prometheus", "?format=xml&dp_rank=1&include=core", []float64{1}, coreKeys},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, _, raw := v1Loads(t, p, tc.query)
				require.Equal(t, http.StatusOK, status, string(raw))
				var doc struct{ Loads []json.RawMessage }
				require.NoError(t, json.Unmarshal(raw, &doc))
				require.NotNil(t, doc.Loads, "an empty list, not null")
				var ranks []float64
				for _, l := range doc.Loads {
					assert.Equal(t, tc.keys, objectKeys(t, l))
					var m map[string]any
					require.NoError(t, json.Unmarshal(l, &m))
					ranks = append(ranks, m["dp_rank"].(float64))
				}
				assert.Equal(t, tc.ranks, ranks)
			})
		}
	})

	t.Run("errors", func(t *testing.T) {
		status, _, raw := v1Loads(t, p, "?include=core,foo,bar")
		assert.Equal(t, http.StatusBadRequest, status)
		assert.JSONEq(t, `{"detail":"Invalid include sections: {'bar', 'foo'}. Valid options: ['all', 'core', 'disagg', 'lora', 'memory', 'queues', 'spec']"}`, string(raw))
		status, _, raw = v1Loads(t, p, "?dp_rank=one")
		assert.Equal(t, http.StatusUnprocessableEntity, status)
		assert.Equal(t, "int_parsing", decodeJSON(t, raw)["detail"].([]any)[0].(map[string]any)["type"])
	})

	t.Run("prometheus", func(t *testing.T) {
		status, ctype, raw := v1Loads(t, p, "?format=prometheus&include=core&dp_rank=1")
		require.Equal(t, http.StatusOK, status)
		assert.Equal(t, "text/plain; version=0.0.4; charset=utf-8", ctype)
		assert.Equal(t, `# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{dp_rank="1"} 0
# TYPE sglang_num_waiting_reqs gauge
sglang_num_waiting_reqs{dp_rank="1"} 3
# TYPE sglang_num_waiting_uncached_tokens gauge
sglang_num_waiting_uncached_tokens{dp_rank="1"} 60
# TYPE sglang_num_used_tokens gauge
sglang_num_used_tokens{dp_rank="1"} 0
# TYPE sglang_num_total_tokens gauge
sglang_num_total_tokens{dp_rank="1"} 60
# TYPE sglang_max_total_num_tokens gauge
sglang_max_total_num_tokens{dp_rank="1"} 4096
# TYPE sglang_max_running_requests gauge
sglang_max_running_requests{dp_rank="1"} 1024
# TYPE sglang_token_usage gauge
sglang_token_usage{dp_rank="1"} 0.0
# TYPE sglang_gen_throughput gauge
sglang_gen_throughput{dp_rank="1"} 0.0
# TYPE sglang_cache_hit_rate gauge
sglang_cache_hit_rate{dp_rank="1"} 0.0
# TYPE sglang_utilization gauge
sglang_utilization{dp_rank="1"} -1.0
`, string(raw))

		_, _, raw = v1Loads(t, p, "?format=prometheus")
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
		require.NoError(t, err, string(raw))
		assert.NotContains(t, fams, "sglang_disagg_mode", "strings are skipped")
		assert.NotContains(t, fams, "sglang_dp_rank")
		for name, f := range fams {
			assert.Equal(t, dto.MetricType_GAUGE, f.GetType(), name)
			assert.Len(t, f.GetMetric(), 2, name)
		}
		for _, name := range []string{"sglang_disagg_prefill_bootstrap_queue_reqs", "sglang_queues_waiting", "sglang_disagg_kv_transfer_speed_gb_s"} {
			require.Contains(t, fams, name)
		}
		assert.Equal(t, 3.0, gaugeOf(t, fams["sglang_disagg_prefill_bootstrap_queue_reqs"], map[string]string{"dp_rank": "1"}))
		assert.Equal(t, 0.0, gaugeOf(t, fams["sglang_disagg_prefill_bootstrap_queue_reqs"], map[string]string{"dp_rank": "0"}))

		_, _, raw = v1Loads(t, p, "?format=prometheus&dp_rank=9")
		assert.Equal(t, "\n", string(raw))
	})

	t.Run("metrics", func(t *testing.T) {
		fams := scrape(t, p)
		labels := map[string]string{"model_name": DefaultModelPath, "engine_type": "prefill", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": "1"}
		for name, want := range map[string]float64{
			"sglang:num_running_reqs":                 0,
			"sglang:num_queue_reqs":                   0, // SGLang's waiting queue only
			"sglang:num_prefill_bootstrap_queue_reqs": 3,
			"sglang:num_used_tokens":                  0,
			"sglang:max_total_num_tokens":             4096,
			"sglang:token_usage":                      0,
			"sglang:gen_throughput":                   0,
			"sglang:cache_hit_rate":                   0,
		} {
			require.Contains(t, fams, name)
			assert.Len(t, fams[name].GetMetric(), 2, name)
			assert.Equal(t, want, gaugeOf(t, fams[name], labels), name)
		}
	})
}

// gaugeOf returns the value of f's series with exactly labels.
func gaugeOf(t testing.TB, f *dto.MetricFamily, labels map[string]string) float64 {
	t.Helper()
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			return m.GetGauge().GetValue()
		}
	}
	require.Failf(t, "no series", "%s has no series %v", f.GetName(), labels)
	return 0
}

// scrape fetches and parses w's /metrics.
func scrape(t testing.TB, w *Worker) map[string]*dto.MetricFamily {
	t.Helper()
	status, raw := get(t, w.URL()+"/metrics")
	require.Equal(t, http.StatusOK, status)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	require.NoError(t, err)
	return fams
}

// TestV1LoadsDecodingRank: a DP-2 regular worker decoding one request on rank 0 reports it
// running, with its decode rate, on rank 0 only (JSON and gauges).
func TestV1LoadsDecodingRank(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{DPSize: 2, DPAttention: true, TPSize: 4, EPSize: 4, Profile: engine.ConstantProfile(time.Millisecond, 5*time.Millisecond)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+"/generate",
			strings.NewReader(`{"text":"keep decoding","sampling_params":{"max_new_tokens":100000},"data_parallel_rank":0}`))
		if resp, err := testClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	testutil.Eventually(t, 5*time.Second, func() bool {
		l := loadsOf(t, w, "?include=core")
		return l[0]["num_running_reqs"] == 1.0 && l[0]["gen_throughput"].(float64) > 0
	}, "rank 0 decoding")
	l := loadsOf(t, w, "?include=core")
	// At most one token per 5 ms step; a loaded machine steps later and decodes fewer (a unit
	// test asserts no wall-clock rate from below).
	assert.Positive(t, l[0]["gen_throughput"])
	assert.LessOrEqual(t, l[0]["gen_throughput"], 200*1.1, "one token per 5 ms step at most")
	for _, k := range coreKeys[1:8] {
		if k != "max_total_num_tokens" && k != "max_running_requests" {
			assert.Zero(t, l[1][k], "rank 1 %s", k)
		}
	}
	assert.Zero(t, l[1]["gen_throughput"])
	assert.Equal(t, 0.0, l[0]["utilization"], "not a prefill server")

	fams := scrape(t, w)
	rank := func(dp, tp, ep string) map[string]string {
		return map[string]string{"model_name": DefaultModelPath, "engine_type": "unified", "tp_rank": tp, "pp_rank": "0", "moe_ep_rank": ep, "dp_rank": dp}
	}
	assert.Equal(t, 1.0, gaugeOf(t, fams["sglang:num_running_reqs"], rank("0", "0", "0")))
	assert.Equal(t, 0.0, gaugeOf(t, fams["sglang:num_running_reqs"], rank("1", "2", "2")), "DP attention: rank 1 reports from TP rank 2")
	assert.Positive(t, gaugeOf(t, fams["sglang:gen_throughput"], rank("0", "0", "0")))
	assert.Zero(t, gaugeOf(t, fams["sglang:gen_throughput"], rank("1", "2", "2")))
}

// TestNoLoadReports: a worker told to report no load answers 404 on /v1/loads and exports no
// per-rank gauges; the rest of /metrics and the deprecated /get_load stay.
func TestNoLoadReports(t *testing.T) {
	t.Parallel()
	w := startWorker(t, Config{DPSize: 2, NoLoadReports: true})
	status, _, _ := v1Loads(t, w, "?include=core")
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = post(t, w.URL()+"/v1/completions", compBody)
	require.Equal(t, http.StatusOK, status)
	fams := scrape(t, w)
	for _, d := range rankGauges {
		name := strings.SplitN(d.desc.String(), `"`, 3)[1]
		assert.NotContains(t, fams, name)
	}
	assert.Contains(t, fams, "sglang:generation_tokens_total")
	assert.Contains(t, fams, "sglang:cache_config_info")
	assert.Len(t, loadOf(t, w), 2)
}

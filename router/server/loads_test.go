package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// v1Loads answers GET /v1/loads with one rank holding running, waiting and uncached, and 404
// for /metrics.
func v1Loads(running, waiting, uncached int, usage float64) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/loads" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"timestamp":"2026-11-29T00:00:00+00:00","version":"0.5.5","loads":[{"dp_rank":0,"num_running_reqs":%d,"num_waiting_reqs":%d,"num_waiting_uncached_tokens":%d,"num_used_tokens":0,"num_total_tokens":0,"max_total_num_tokens":100000,"max_running_requests":64,"token_usage":%g,"gen_throughput":0,"cache_hit_rate":0,"utilization":0}]}`,
			running, waiting, uncached, usage)
	}
}

// loadsConfig is a regular-mode config over ws polling every 10 ms, reports fresh for 300 ms.
func loadsConfig(ws ...*testWorker) Config {
	cfg := regularConfig(ws...)
	cfg.LoadPollIntervalMs = 10
	cfg.LoadReportMaxAgeMs = 300
	return cfg
}

// workerLoad returns /workers' entry of url.
func workerLoad(t *testing.T, tr *testRouter, url string) workerJSON {
	var list struct{ Workers []workerJSON }
	getJSON(t, tr.srv.URL+"/workers", &list)
	for _, w := range list.Workers {
		if w.URL == url {
			return w
		}
	}
	t.Fatalf("%s not in /workers", url)
	return workerJSON{}
}

func waitSource(t *testing.T, tr *testRouter, url, source string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() bool {
		w := workerLoad(t, tr, url)
		return w.LoadSource == source && (source == loadSourceNone || w.LoadReportAgeMs != nil)
	}, url+"'s load source "+source)
}

// A worker the engines say is queued up (another router replica loaded it, or a client behind
// the router's back) gets no traffic from this router, though this router sent it nothing: the
// decision log says the engine load decided, and how old the report was.
func TestEngineLoadSteersAwayFromAQueuedWorker(t *testing.T) {
	t.Parallel()
	busy, idle := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	busy.setLoads(v1Loads(40, 100, 40000, 0.6))
	idle.setLoads(v1Loads(2, 0, 0, 0.1))
	tr := startRouter(t, loadsConfig(busy, idle))
	waitSource(t, tr, busy.URL(), loadSourceV1)
	waitSource(t, tr, idle.URL(), loadSourceV1)
	for i := range 8 {
		status, _, body := tr.post(t, "/generate", fmt.Sprintf(`{"text":"prompt %d"}`, i), nil)
		require.Equal(t, http.StatusOK, status, body)
	}
	assert.Empty(t, busy.callsTo("/generate"))
	assert.Len(t, idle.callsTo("/generate"), 8)
	var line struct {
		Regular struct {
			Signal    string   `json:"signal"`
			LoadAgeMs *float64 `json:"load_age_ms"`
		} `json:"regular"`
	}
	first, _, _ := strings.Cut(tr.dlog.String(), "\n")
	require.NoError(t, json.Unmarshal([]byte(first), &line))
	assert.Equal(t, "engine_load", line.Regular.Signal)
	require.NotNil(t, line.Regular.LoadAgeMs)
	assert.Less(t, *line.Regular.LoadAgeMs, 300.0)
}

// Each way a worker can fail to report leaves routing on in-flight counts with one warning per
// problem (not one per poll): no report at all, the older gauges only, a garbage answer, a
// report that never comes.
func TestLoadReportFallbacksWarnOnce(t *testing.T) {
	t.Parallel()
	gauges := newWorker(t, jsonReply(genReply))
	gauges.setLoads(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(gaugesDP2))
	})
	silent := newWorker(t, jsonReply(genReply)) // 404 on both
	garbage := newWorker(t, jsonReply(genReply))
	garbage.setLoads(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"loads": [{"dp_rank": "zero"}`)) })
	hangs := newWorker(t, jsonReply(genReply))
	hangs.setLoads(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	var logs syncBuffer
	tr := startRouterLogging(t, loadsConfig(gauges, silent, garbage, hangs), slog.New(slog.NewTextHandler(&logs, nil)))
	waitSource(t, tr, gauges.URL(), loadSourceGauges)
	waitSource(t, tr, silent.URL(), loadSourceNone)
	waitSource(t, tr, garbage.URL(), loadSourceNone)
	// The hanging one keeps its source unknown-or-v1 and times out poll after poll.
	testutil.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(logs.String(), "engine load report failed") >= 1
	}, "the timeout's warning")
	for i := range 8 {
		text := strings.Repeat(string(rune('a'+i)), 12) // no shared prefix: no cache hit
		status, _, body := tr.post(t, "/generate", `{"text":"`+text+`"}`, nil)
		require.Equal(t, http.StatusOK, status, body)
	}
	// Not every worker has a fresh report: the policies compared in-flight counts.
	assert.Equal(t, 8, strings.Count(tr.dlog.String(), `"signal":"in_flight"`), tr.dlog.String())
	// Many polls later, still one warning per worker and problem.
	polls := tr.s.metrics.LoadReports.WithLabelValues("failed")
	testutil.Eventually(t, 10*time.Second, func() bool { return counterValue(polls) > 5 }, "more failed polls")
	out := logs.String()
	assert.Equal(t, 2, strings.Count(out, "reports no engine load"), out)
	assert.Equal(t, 1, strings.Count(out, "engine load report failed"), out)
	assert.NotContains(t, out, "panic")
}

// When every worker is over a bound, the request is shed at once with 503 and Retry-After,
// counted and logged as a decision, not queued.
func TestOverloadShedsWithRetryAfter(t *testing.T) {
	t.Parallel()
	a, b := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	a.setLoads(v1Loads(60, 0, 0, 0.99))
	b.setLoads(v1Loads(10, 0, 0, 0.5))
	cfg := loadsConfig(a, b)
	cfg.WorkerOverloadTokenUsage = 0.95
	tr := startRouter(t, cfg)
	waitSource(t, tr, a.URL(), loadSourceV1)
	waitSource(t, tr, b.URL(), loadSourceV1)
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Len(t, b.callsTo("/generate"), 1, "the overloaded worker is passed over")

	b.setLoads(v1Loads(60, 0, 0, 0.97))
	testutil.Eventually(t, 10*time.Second, func() bool {
		status, _, _ := tr.post(t, "/generate", `{"text":"x"}`, nil)
		return status == http.StatusServiceUnavailable
	}, "a 503 once both are overloaded")
	status, hdr, body := tr.post(t, "/generate", `{"text":"y"}`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, body, "--worker-overload")
	assert.Positive(t, counterValue(tr.s.metrics.Shed.WithLabelValues(router.Regular.String())))
	assert.Contains(t, tr.dlog.String(), `"reason":"overloaded"`)
}

// counterValue reads a counter's value.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// BenchmarkLoadPoll is one poll of one worker (GET /v1/loads?include=core, its parse and the
// report to the router), through the h1 transport the poller uses and through net/http's
// client: what polling costs the router per worker and interval.
func BenchmarkLoadPoll(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(v1LoadsDP2))
	}))
	defer srv.Close()
	cfg := router.DefaultConfig()
	cfg.WorkerURLs = []string{srv.URL}
	r, err := router.New(cfg, router.ClockFunc(time.Now), router.NewRand(1))
	require.NoError(b, err)
	require.NoError(b, r.AddWorker(router.WorkerSpec{URL: srv.URL, Role: router.Regular}))
	for _, tc := range []struct {
		name   string
		client doer
	}{
		{"client=h1", newLegClient(time.Minute, nil)},
		{"client=net-http", clientDoer{&http.Client{Transport: newTransport(time.Minute)}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := &loadPoller{Router: r, Client: tc.client, Interval: time.Second, Timeout: time.Second,
				Log: slog.New(slog.DiscardHandler), Now: time.Now}
			require.True(b, p.claim(srv.URL, time.Now()))
			p.poll(context.Background(), srv.URL)
			b.ReportAllocs()
			for b.Loop() {
				p.claim(srv.URL, time.Now())
				p.poll(context.Background(), srv.URL)
			}
		})
	}
}

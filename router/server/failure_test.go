package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func noRetries(cfg Config) Config {
	cfg.DisableRetries = true
	return cfg
}

// A prefill failure is answered at once with prefill's status, naming the prefill worker, and
// the decode leg (which would otherwise wait for a bootstrap timeout) is cancelled.
func TestPDPrefillFailureFailsFast(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{})
	pw := newWorker(t, after(waiting, statusReply(http.StatusInternalServerError, "prefill exploded")))
	dw := newWorker(t, arrivedThen(waiting, hangReply(nil)))
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
	status, _, body := tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, http.StatusInternalServerError, status)
	assert.Contains(t, body, "prefill worker "+pw.URL())
	assert.Contains(t, body, "prefill exploded")
	assert.Contains(t, body, `"type":"upstream_error"`)
	waitFor(t, func() bool { return dw.cancelledCount() == 1 })
	tr.requireLoadsZero(t)
}

// A prefill transport error answers 502.
func TestPDPrefillTransportError(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, hangReply(nil))
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
	pw.srv.Close()
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusBadGateway, status, body)
	assert.Contains(t, body, "prefill worker")
	tr.requireLoadsZero(t)
}

// A decode failure cancels the prefill leg and answers with decode's error.
func TestPDDecodeFailureCancelsPrefill(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{})
	pw := newWorker(t, arrivedThen(waiting, hangReply(nil)))
	dw := newWorker(t, after(waiting, statusReply(http.StatusServiceUnavailable, "decode full")))
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
	status, _, body := tr.post(t, "/v1/completions", `{"prompt":"x"}`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "decode worker "+dw.URL())
	waitFor(t, func() bool { return pw.cancelledCount() == 1 })
	tr.requireLoadsZero(t)
}

// A 4xx from a worker is the client's fault: not retried, relayed as is.
func TestPDClientErrorNotRetried(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, statusReply(http.StatusBadRequest, "max_tokens too large"))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "max_tokens too large")
	assert.Contains(t, body, `"type":"invalid_request_error"`)
	require.Len(t, dw.callsTo("/generate"), 1)
	tr.requireLoadsZero(t)
}

// A retryable failure is retried with a fresh rid and room on re-selected targets.
func TestPDRetryThenSuccess(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		if n.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		jsonReply(genReply)(w, r, c)
	})
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.RetryInitialBackoffMs = 1
	tr := startRouter(t, cfg)
	status, hdr, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusOK, status, body)
	calls := dw.callsTo("/generate")
	require.Len(t, calls, 2)
	assert.NotEqual(t, calls[0].body["rid"], calls[1].body["rid"], "each attempt gets a fresh rid")
	assert.NotEqual(t, calls[0].body["bootstrap_room"], calls[1].body["bootstrap_room"])
	assert.Equal(t, calls[0].body["rid"], hdr.Get("X-Request-Id"), "the client-visible id stays the first")
	assert.Equal(t, 2, strings.Count(tr.dlog.String(), "\n"), "one decision line per attempt")
	tr.requireLoadsZero(t)
}

// Non-streaming logprob merge: prefill's input_token_logprobs are prepended to decode's.
func TestPDLogprobMerge(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, jsonReply(`{"meta_info":{"input_token_logprobs":[[-1,1],[-2,2]]}}`))
	dw := newWorker(t, jsonReply(`{"text":"ok","meta_info":{"input_token_logprobs":[[-3,3]]}}`))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, _, body := tr.post(t, "/generate", `{"text":"x","return_logprob":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"text":"ok","meta_info":{"input_token_logprobs":[[-1,1],[-2,2],[-3,3]]}}`, body)

	// Without logprobs asked for, decode's body is relayed untouched.
	status, _, body = tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"text":"ok","meta_info":{"input_token_logprobs":[[-3,3]]}}`, body)
	tr.requireLoadsZero(t)
}

// Streaming: prefill's SSE answer carries the logprobs; every decode event gets them merged.
func TestPDStreamLogprobMerge(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, sseReply([]string{`data: {"meta_info":{"input_token_logprobs":[[-1,1]]}}`, "data: [DONE]"}, nil))
	dw := newWorker(t, sseReply([]string{
		`data: {"text":"a","meta_info":{"input_token_logprobs":[[-2,2]]}}`,
		`data: {"text":"ab","meta_info":{"input_token_logprobs":[[-2,2]]}}`,
		"data: [DONE]"}, nil))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, hdr, body := tr.post(t, "/generate", `{"text":"x","stream":true,"return_logprob":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
	events := dataEvents(body)
	require.Len(t, events, 3)
	assert.JSONEq(t, `{"text":"a","meta_info":{"input_token_logprobs":[[-1,1],[-2,2]]}}`, events[0])
	assert.JSONEq(t, `{"text":"ab","meta_info":{"input_token_logprobs":[[-1,1],[-2,2]]}}`, events[1])
	assert.Equal(t, "[DONE]", events[2])
	tr.requireLoadsZero(t)
}

func dataEvents(body string) []string {
	var out []string
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

// A decode stream that breaks after it started ends with an error event and [DONE].
func TestPDMidStreamFailure(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, func(w http.ResponseWriter, r *http.Request, _ call) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"text\":\"a\"}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // cut the chunked stream mid-way
		}
	})
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, _, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	events := dataEvents(body)
	require.Len(t, events, 3, body)
	assert.JSONEq(t, `{"text":"a"}`, events[0])
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(events[1]), &e))
	assert.Equal(t, "upstream_error", e.Error.Type)
	assert.Contains(t, e.Error.Message, dw.URL())
	assert.Equal(t, "[DONE]", events[2])
	tr.requireLoadsZero(t)
}

// A client that disconnects mid-stream cancels both legs and aborts its rid on both workers.
func TestPDClientDisconnectAborts(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	defer close(gate)
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, sseReply([]string{`data: {"text":"a"}`, `data: {"text":"b"}`, "data: [DONE]"}, map[int]<-chan struct{}{1: gate}))
	for _, w := range []*testWorker{pw, dw} {
		inner := w.handle
		w.handle = func(rw http.ResponseWriter, r *http.Request, c call) {
			if r.URL.Path == "/abort_request" {
				return
			}
			inner(rw, r, c)
		}
	}
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.srv.URL+"/generate", strings.NewReader(`{"text":"x","stream":true}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "data: {\"text\":\"a\"}\n", line)
	cancel()
	resp.Body.Close()

	rid := dw.callsTo("/generate")[0].body["rid"]
	for _, w := range []*testWorker{pw, dw} {
		waitFor(t, func() bool { return len(w.callsTo("/abort_request")) == 1 })
		assert.Equal(t, rid, w.callsTo("/abort_request")[0].body["rid"])
	}
	waitFor(t, func() bool { return dw.cancelledCount() == 1 })
	tr.requireLoadsZero(t)
}

// Headers are held until prefill has succeeded: a stream whose prefill fails before decode's
// first event gets the prefill error, not a 200.
func TestPDHeadersHeldUntilPrefillOrFirstEvent(t *testing.T) {
	t.Parallel()
	prefillGate := make(chan struct{})
	pw := newWorker(t, func(w http.ResponseWriter, r *http.Request, _ call) {
		<-prefillGate
		http.Error(w, "late prefill failure", http.StatusInternalServerError)
	})
	dw := newWorker(t, func(w http.ResponseWriter, r *http.Request, _ call) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK) // headers at once, events only after prefill
		w.(http.Flusher).Flush()
		close(prefillGate)
		<-r.Context().Done()
	})
	tr := startRouter(t, noRetries(pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)))
	status, _, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	require.Equal(t, http.StatusInternalServerError, status, body)
	assert.Contains(t, body, "late prefill failure")
	tr.requireLoadsZero(t)

}

// A 500 whose body says the request itself is invalid (a prompt beyond the KV capacity or the
// context length) fails at once: it would fail on every worker. A plain 500 is retried.
func TestInvalidRequest500IsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		msg      string
		attempts int64
	}{
		{"room 7: needs 900000 KV tokens, more than the rank's capacity of 415000", 1},
		{"The input (9000 tokens) is longer than the model's context length (8192 tokens).", 1},
		{"CUDA error: an illegal memory access", 3},
	} {
		w := newWorker(t, statusReply(http.StatusInternalServerError, tc.msg))
		cfg := DefaultConfig()
		cfg.WorkerURLs = []string{w.URL()}
		cfg.RetryMaxRetries, cfg.RetryInitialBackoffMs, cfg.RetryMaxBackoffMs = 3, 1, 1
		cfg.DisableCircuitBreaker = true
		tr := startRouter(t, cfg)
		status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
		require.Equal(t, http.StatusInternalServerError, status, body)
		assert.Contains(t, body, tc.msg)
		assert.Equal(t, tc.attempts, int64(w.callCount()), tc.msg)
	}
}

// A worker that fails requests: its breaker opens and the log names it at once (WARN, with the
// reason); every view then agrees it takes no traffic — /workers, /readiness, /get_loads and
// pdrouter_worker_healthy. A passing health probe puts it back on probation at once (INFO),
// without waiting out --cb-timeout-duration-secs.
func TestOneHealthTruthAndLoudFailures(t *testing.T) {
	good := newWorker(t, jsonReply(genReply))
	bad := newWorker(t, statusReply(http.StatusInternalServerError, "exploded"))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{good.URL(), bad.URL()}
	cfg.Policy = router.PolicyRoundRobin
	cfg.CBFailureThreshold, cfg.DisableRetries = 2, true
	cfg.HealthCheckIntervalSecs = 3600 // probes by hand below
	logs := &syncBuffer{}
	cfg.Seed = new(int64(1))
	s, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); s.Wait() })
	tr := &testRouter{s: s, srv: srv}

	for range 4 {
		tr.post(t, "/generate", `{"text":"x"}`, nil)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "worker stopped taking traffic") })
	line := logs.String()
	assert.Contains(t, line, "level=WARN")
	assert.Contains(t, line, "worker="+bad.URL())
	assert.Contains(t, line, "to=breaker_open")
	assert.Contains(t, line, "2 failed requests in a row")
	assert.Contains(t, logs.String(), `msg="attempt failed" worker=`+bad.URL())

	var workers struct{ Workers []map[string]any }
	getJSON(t, srv.URL+"/workers", &workers)
	require.Len(t, workers.Workers, 2)
	for _, w := range workers.Workers {
		bad := w["url"] == bad.URL()
		assert.Equal(t, !bad, w["healthy"], w)
		assert.Equal(t, !bad, w["is_healthy"], w)
		if bad {
			assert.Equal(t, "breaker_open", w["state"])
		}
	}
	var ready map[string]any
	getJSON(t, srv.URL+"/readiness", &ready)
	assert.Equal(t, map[string]any{"healthy": 1.0, "total": 2.0, "draining": 0.0}, ready["workers"].(map[string]any)["regular"])
	var loads struct{ Workers []map[string]any }
	getJSON(t, srv.URL+"/get_loads", &loads)
	for _, l := range loads.Workers {
		assert.Equal(t, l["worker"] != bad.URL(), l["healthy"], l)
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `pdrouter_worker_healthy{role="regular",worker="`+bad.URL()+`"} 0`)

	_, err = s.Router().ObserveHealth(bad.URL(), nil, time.Now())
	require.NoError(t, err)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "worker takes traffic again") })
	assert.Contains(t, logs.String(), "reason=\"health probe passed\"")
	workers.Workers = nil
	getJSON(t, srv.URL+"/workers", &workers)
	for _, w := range workers.Workers {
		assert.Equal(t, true, w["healthy"], w)
	}
}

func getJSON(t *testing.T, url string, dst any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(dst))
}

// A 94-byte request cannot make the router expand it into a million rids and rooms: n above
// wire.MaxN answers 400 naming it, and a request at the cap costs a few MB at most (measured as
// bytes allocated by the whole process, workers included).
func TestBatchAmplificationCapped(t *testing.T) {
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, jsonReply(genReply))
	for _, pd := range []bool{true, false} {
		cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
		if !pd {
			cfg = DefaultConfig()
			cfg.WorkerURLs = []string{pw.URL()}
		}
		tr := startRouter(t, cfg)
		body := `{"messages":[{"role":"user","content":"hi"}],"n":1000000}`
		status, _, resp := tr.post(t, "/v1/chat/completions", body, nil)
		require.Equal(t, http.StatusBadRequest, status, resp)
		assert.Contains(t, resp, "n must be an integer between 1 and 128")

		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		status, _, resp = tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":128}`, nil)
		runtime.ReadMemStats(&after)
		require.Less(t, status, 600, resp)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "pd=%v: bytes allocated for one request at the cap", pd)
	}
}

// Credentials in a worker URL never leave the router: not in the log, /workers, /get_loads,
// /metrics, nor the error a client gets (SPEC §1.7).
func TestWorkerURLCredentialsRedacted(t *testing.T) {
	w := newWorker(t, jsonReply(genReply))
	secretURL := strings.Replace(w.URL(), "http://", "http://admin:s3cret@", 1)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{secretURL}
	cfg.DisableRetries = true
	logs := &syncBuffer{}
	cfg.Seed = new(int64(1))
	s, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); cancel(); s.Wait() })
	tr := &testRouter{s: s, srv: srv}

	_, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	var seen strings.Builder
	seen.WriteString(body)
	for _, path := range []string{"/workers", "/get_loads", "/list_workers"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen.Write(b)
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	seen.WriteString(rec.Body.String())
	seen.WriteString(logs.String())
	assert.Contains(t, seen.String(), "http://***@127.0.0.1:", "the worker is still named, its credentials hidden")
	assert.NotContains(t, seen.String(), "s3cret")
}

// With a retry budget of one request retrying at once (--retry-budget-percent 1,
// --retry-min-concurrency 1), a request that fails while another is being retried is answered
// its failure at once, not retried, and counted in pdrouter_retries_over_budget_total; the
// request being retried succeeds.
func TestRetryBudgetRefusesWhileFull(t *testing.T) {
	t.Parallel()
	held, arrived := make(chan struct{}), make(chan struct{}, 1)
	busy := func(w http.ResponseWriter, _ *http.Request, _ call) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"busy"}}`))
	}
	var bCalls atomic.Int32
	a := newWorker(t, busy)
	b := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		if bCalls.Add(1) > 1 {
			busy(w, r, c)
			return
		}
		arrived <- struct{}{}
		<-held
		jsonReply(genReply)(w, r, c)
	})
	cfg := regularConfig(a, b)
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryBudgetPercent, cfg.RetryMinConcurrency = 1, 1
	cfg.RetryInitialBackoffMs = 1
	tr := startRouter(t, cfg)

	first := make(chan int, 1)
	go func() {
		status, _, _ := tr.post(t, "/generate", `{"text":"first"}`, nil)
		first <- status
	}()
	<-arrived // the first request failed on a and is being retried on b
	require.Equal(t, 1, a.callCount(), "the first request went to a first (round robin)")

	status, _, body := tr.post(t, "/generate", `{"text":"second"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, body)
	assert.Contains(t, tr.metricsText(), `pdrouter_retries_over_budget_total{route="/generate"} 1`)
	close(held)
	assert.Equal(t, http.StatusOK, <-first, "the request being retried is answered")
	assert.Equal(t, 3, a.callCount()+int(bCalls.Load()), "two attempts of the first request, one of the second")
}

// serve with no workers at all says so at start, and a request then hears why no worker takes
// it: the 503 names each worker, its state and the cause (here none registered; with workers,
// router.NoTargetError lists them).
func TestServeWithoutWorkersWarns(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	tr := startRouterLogging(t, DefaultConfig(), slog.New(slog.NewTextHandler(logs, nil)))
	assert.Contains(t, logs.String(), `msg="no workers: every request is answered 503 until some are added (--worker-urls, POST /workers, or --service-discovery)"`)
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "no regular workers registered")
}

// A 503 for want of a worker names each, its state and why it is in it.
func TestNoWorkerAnswerNamesTheWorkers(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(w))
	_, err := tr.s.r.ObserveFailureProbe(w.URL(), false, time.Now(), "GET /health: connection refused")
	require.NoError(t, err)
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, w.URL()+" unhealthy (a request failed to reach it and a health probe then failed: GET /health: connection refused)")
}

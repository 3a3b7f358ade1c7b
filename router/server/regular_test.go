package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func regularConfig(ws ...*testWorker) Config {
	cfg := DefaultConfig()
	for _, w := range ws {
		cfg.WorkerURLs = append(cfg.WorkerURLs, w.URL())
	}
	return cfg
}

// Regular mode proxies the body as sent (no rid), adding data_parallel_rank under --dp-aware.
func TestRegularProxyAndDPRank(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(`{"id":"x","choices":[]}`))
	w.dpSize = 2
	cfg := regularConfig(w)
	cfg.DPAware = true
	cfg.Policy = router.PolicyRoundRobin
	tr := startRouter(t, cfg)
	for range 2 {
		status, hdr, body := tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"zz":1}`, nil)
		require.Equal(t, http.StatusOK, status)
		assert.JSONEq(t, `{"id":"x","choices":[]}`, body)
		assert.True(t, strings.HasPrefix(hdr.Get("X-Request-Id"), "chatcmpl-"), hdr.Get("X-Request-Id"))
	}
	calls := w.callsTo("/v1/chat/completions")
	require.Len(t, calls, 2)
	assert.Equal(t, float64(0), calls[0].body["data_parallel_rank"])
	assert.Equal(t, float64(1), calls[1].body["data_parallel_rank"], "round robin over url@0, url@1")
	assert.NotContains(t, calls[0].body, "rid")
	assert.NotContains(t, calls[0].body, "bootstrap_room")
	assert.Equal(t, float64(1), calls[0].body["zz"])
	tr.requireLoadsZero(t)
}

func TestRegularStreamPassesThrough(t *testing.T) {
	t.Parallel()
	w := newWorker(t, sseReply([]string{`data: {"choices":[{"delta":{"content":"a"}}]}`, ": keep-alive", "data: [DONE]"}, nil))
	tr := startRouter(t, regularConfig(w))
	status, hdr, body := tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
	assert.Equal(t, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n: keep-alive\n\ndata: [DONE]\n\n", body, "byte for byte")
	tr.requireLoadsZero(t)
}

func TestRejectionsNeverReachWorkers(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(`{}`))
	cfg := regularConfig(w)
	cfg.MaxPayloadSize = 64
	cfg.APIKey = "sekret"
	tr := startRouter(t, cfg)
	auth := map[string]string{"Authorization": "Bearer sekret"}

	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, body, "API key")
	status, _, body = tr.post(t, "/generate", `{"text":`, auth)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `"type":"invalid_request_error"`)
	status, _, _ = tr.post(t, "/v1/chat/completions", `{"messages":[]}`, auth)
	assert.Equal(t, http.StatusBadRequest, status)
	status, _, body = tr.post(t, "/generate", `{"text":"`+strings.Repeat("x", 100)+`"}`, auth)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status)
	assert.Contains(t, body, "--max-payload-size 64")
	assert.Empty(t, w.callsTo("/generate"))

	// Health stays open without the key.
	resp, err := http.Get(tr.srv.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestNoWorkersAnd501InPD(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.PDDisaggregation = true
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "no prefill workers registered")
	status, _, body = tr.post(t, "/v1/embeddings", `{"input":"x"}`, nil)
	assert.Equal(t, http.StatusNotImplemented, status)
	assert.Contains(t, body, "not supported in PD mode")
	resp, err := http.Get(tr.srv.URL + "/readiness")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestAdmissionQueueFull(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, c call) {
		hangReply(release)(rw, r, c)
		jsonReply(`{}`)(rw, r, c)
	})
	cfg := regularConfig(w)
	cfg.MaxConcurrentRequests = 1
	cfg.QueueSize = 0
	tr := startRouter(t, cfg)
	done := make(chan int)
	go func() {
		status, _, _ := tr.post(t, "/generate", `{"text":"x"}`, nil)
		done <- status
	}()
	waitFor(t, func() bool { return len(w.callsTo("/generate")) == 1 })
	status, _, body := tr.post(t, "/generate", `{"text":"y"}`, nil)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, body, "queue is full")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	tr.requireLoadsZero(t)
}

func TestWorkerManagementAPI(t *testing.T) {
	t.Parallel()
	p := newWorker(t, jsonReply(genReply))
	d := newWorker(t, jsonReply(genReply))
	p.dpSize, d.dpSize = 2, 1
	cfg := DefaultConfig()
	cfg.PDDisaggregation = true
	cfg.DPAware = true
	// KV events off: with auto, readiness says "warming up" (503) in the router's first
	// seconds until it has asked each worker whether it publishes them, and the readiness
	// check below raced that question for the worker just added (8 in 200 runs).
	cfg.KVEvents = "off"
	tr := startRouter(t, cfg)

	// Add through the JSON API and the legacy form.
	resp, err := http.Post(tr.srv.URL+"/workers", "application/json",
		strings.NewReader(fmt.Sprintf(`{"url":%q,"worker_type":"prefill","bootstrap_port":8998}`, p.URL())))
	require.NoError(t, err)
	var added map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&added))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "the Model Gateway's 202, with the worker's id")
	assert.Equal(t, workerID(p.URL()), added["worker_id"])
	assert.Equal(t, "accepted", added["status"])
	resp, err = http.Post(tr.srv.URL+"/add_worker?role=decode&url="+url.QueryEscape(d.URL()), "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Post(tr.srv.URL+"/add_worker?role=decode&url="+url.QueryEscape(d.URL()), "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	resp, err = http.Post(tr.srv.URL+"/add_worker?url=ftp://x", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// /get_loads has the SPEC §2 shape, one entry per DP target.
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusOK, status, body)
	// The response does not wait for the prefill leg's own answer: let it finish first.
	tr.requireLoadsZero(t)
	waitFor(t, func() bool { return p.callCount() == 1 })
	r, err := http.Get(tr.srv.URL + "/get_loads")
	require.NoError(t, err)
	raw, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var loads struct {
		Workers []map[string]any `json:"workers"`
	}
	require.NoError(t, json.Unmarshal(raw, &loads))
	require.Len(t, loads.Workers, 3)
	assert.Equal(t, map[string]any{"worker": p.URL(), "target": p.URL() + "@0", "role": "prefill", "dp_rank": float64(0), "load": float64(0), "healthy": true}, loads.Workers[0])
	assert.Equal(t, float64(8998), p.callsTo("/generate")[0].body["bootstrap_port"])

	// Readiness, listing, removal.
	r, err = http.Get(tr.srv.URL + "/readiness")
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusOK, r.StatusCode)
	r, err = http.Get(tr.srv.URL + "/list_workers")
	require.NoError(t, err)
	raw, _ = io.ReadAll(r.Body)
	r.Body.Close()
	assert.JSONEq(t, fmt.Sprintf(`{"urls":[%q,%q,%q]}`, p.URL()+"@0", p.URL()+"@1", d.URL()+"@0"), string(raw), "one per DP rank, as sgl-router")
	req, _ := http.NewRequest(http.MethodDelete, tr.srv.URL+"/workers/"+url.PathEscape(d.URL()), nil)
	r, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusAccepted, r.StatusCode)
	r, err = http.Get(tr.srv.URL + "/readiness")
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "no decode worker left")
}

func TestFlushCacheFanOut(t *testing.T) {
	t.Parallel()
	good := newWorker(t, jsonReply(`{}`))
	bad := newWorker(t, statusReply(http.StatusInternalServerError, "nope"))
	tr := startRouter(t, regularConfig(good, bad))
	status, _, _ := tr.post(t, "/generate", `{"text":"cached text"}`, nil)
	require.Equal(t, http.StatusOK, status)
	size, _ := tr.s.Router().TreeStats(router.Regular)
	chars := size.Chars
	require.Positive(t, chars)
	status, _, body := tr.post(t, "/flush_cache", ``, nil)
	assert.Equal(t, http.StatusPartialContent, status)
	size, _ = tr.s.Router().TreeStats(router.Regular)
	chars = size.Chars
	assert.Zero(t, chars, "the router's tree is reset with the workers' caches")
	assert.Contains(t, body, bad.URL())
	assert.Len(t, good.callsTo("/flush_cache"), 1)
}

// GET /get_router_config answers the effective settings with the API key redacted.
func TestRouterConfigEndpoint(t *testing.T) {
	w := newWorker(t, nil)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.CacheThreshold = 0.42
	cfg.APIKey = "s3cret"
	tr := startRouter(t, cfg)
	req, _ := http.NewRequest(http.MethodGet, tr.srv.URL+"/get_router_config", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "protected like the other admin routes")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, 0.42, got["cache_threshold"])
	assert.Equal(t, "<redacted>", got["api_key"])
	assert.NotContains(t, string(raw), "s3cret")
}

// A known path with the wrong method answers 405 with Allow; DELETE /workers/{url} takes the
// worker URL raw (docs/serve.md's form, no 307 from path cleaning) or percent-encoded.
func TestMethodNotAllowedAndRawWorkerURLs(t *testing.T) {
	a, b := newWorker(t, nil), newWorker(t, nil)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{a.URL(), b.URL()}
	tr := startRouter(t, cfg)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string) *http.Response {
		req, err := http.NewRequest(method, tr.srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	r := do(http.MethodGet, "/generate")
	assert.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)
	assert.Equal(t, "POST", r.Header.Get("Allow"))
	r = do(http.MethodDelete, "/get_loads")
	assert.Equal(t, http.StatusMethodNotAllowed, r.StatusCode)
	assert.Equal(t, http.StatusNotFound, do(http.MethodGet, "/no/such/route").StatusCode)
	assert.Equal(t, http.StatusMethodNotAllowed, do(http.MethodPut, "/workers/"+url.PathEscape(a.URL())).StatusCode)

	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/workers/"+a.URL()).StatusCode, "raw URL")
	assert.Equal(t, http.StatusAccepted, do(http.MethodDelete, "/workers/"+a.URL()).StatusCode, "raw URL, no 307")
	assert.Equal(t, http.StatusAccepted, do(http.MethodDelete, "/workers/"+url.PathEscape(b.URL())).StatusCode, "percent-encoded")
	assert.Equal(t, http.StatusNotFound, do(http.MethodDelete, "/workers/"+a.URL()).StatusCode, "already removed")
}

// Every response is counted in requests_total — 401s, 404s and 405s included, unknown paths
// under one "other" label — and /metrics carries the Go and process collectors.
func TestEveryResponseCountedAndProcessMetrics(t *testing.T) {
	w := newWorker(t, nil)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.APIKey = "k"
	tr := startRouter(t, cfg)
	get := func(path string, auth bool) int {
		req, _ := http.NewRequest(http.MethodGet, tr.srv.URL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get("/get_loads", false))
	require.Equal(t, http.StatusOK, get("/get_loads", true))
	require.Equal(t, http.StatusNotFound, get("/scan/me", true))
	require.Equal(t, http.StatusMethodNotAllowed, get("/generate", true))
	require.Equal(t, http.StatusOK, get("/health", false))
	m := tr.s.metrics
	assert.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("/get_loads", "401")))
	assert.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("/get_loads", "200")))
	assert.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("other", "404")))
	assert.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("/generate", "405")))
	assert.Equal(t, 1.0, promtest.ToFloat64(m.Requests.WithLabelValues("/health", "200")))

	rec := httptest.NewRecorder()
	tr.s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), "go_goroutines ")
	assert.Contains(t, rec.Body.String(), "process_resident_memory_bytes ")
}

// A declared Content-Length above --max-payload-size is answered 413 before any of the body is
// read (the client has sent none here), and the connection closes; a chunked body is cut at
// the limit as it is counted.
func TestPayloadLimitBeforeReading(t *testing.T) {
	w := newWorker(t, nil)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.MaxPayloadSize = 1000
	tr := startRouter(t, cfg)
	addr := strings.TrimPrefix(tr.srv.URL, "http://")

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 600000000\r\n\r\n")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "answered without the body being sent")
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.True(t, resp.Close, "the connection closes")

	body := `{"text":"` + strings.Repeat("x", 2000) + `"}`
	req, _ := http.NewRequest(http.MethodPost, tr.srv.URL+"/generate", io.MultiReader(strings.NewReader(body)))
	req.ContentLength = -1 // chunked
	r2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	r2.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, r2.StatusCode)
	assert.Zero(t, w.callCount(), "nothing reached the worker")
}

// POST /workers for a worker that does not answer its health probe is refused at once with
// a 502 naming it, with and without --dp-aware (whose discovery would otherwise wait for the
// 600 s startup timeout), and nothing is registered.
func TestAddingAnUnreachableWorkerFailsAtOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	ln.Close()
	for _, dpAware := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.DPAware = dpAware
		tr := startRouter(t, cfg)
		resp, err := http.Post(tr.srv.URL+"/workers", "application/json", strings.NewReader(fmt.Sprintf(`{"url":%q}`, dead)))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "dp-aware %v", dpAware)
		assert.Contains(t, string(body), "worker "+dead+" does not answer: GET /health")
		assert.Empty(t, tr.s.Router().Workers(), "nothing registered")
	}
}

// Failed attempts are counted per worker (pdrouter_worker_errors_total{worker,role,kind}), and
// a removed worker's series go with it.
func TestWorkerErrorsPerWorker(t *testing.T) {
	t.Parallel()
	bad := newWorker(t, statusReply(http.StatusServiceUnavailable, "busy"))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL()}
	cfg.DisableRetries = true
	tr := startRouter(t, cfg)
	status, _, _ := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	scrape := func() string {
		rec := httptest.NewRecorder()
		tr.s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	assert.Contains(t, scrape(), fmt.Sprintf(`pdrouter_worker_errors_total{kind="regular_status",role="regular",worker=%q} 1`, bad.URL()))
	req, _ := http.NewRequest(http.MethodDelete, tr.srv.URL+"/workers/"+bad.URL(), nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.NotContains(t, scrape(), "pdrouter_worker_errors_total{", "the removed worker's series are gone")
}

// The worker API as the SGLang Model Gateway's clients use it: every entry has a stable id,
// the listing carries total and per-role stats, and /workers/{id} reaches the worker as
// /workers/{url} does (GET and DELETE).
func TestWorkerAPIIDsTotalAndStats(t *testing.T) {
	t.Parallel()
	p, d := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	tr := startRouter(t, pdConfig([]*testWorker{p}, []*testWorker{d}, nil))
	var list struct {
		Workers []map[string]any `json:"workers"`
		Total   int              `json:"total"`
		Stats   map[string]int   `json:"stats"`
	}
	getJSON(t, tr.srv.URL+"/workers", &list)
	require.Len(t, list.Workers, 2)
	assert.Equal(t, 2, list.Total)
	assert.Equal(t, map[string]int{"prefill_count": 1, "decode_count": 1, "regular_count": 0}, list.Stats)
	id := list.Workers[1]["id"].(string)
	assert.Equal(t, workerID(d.URL()), id)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)

	var one map[string]any
	getJSON(t, tr.srv.URL+"/workers/"+id, &one)
	assert.Equal(t, d.URL(), one["url"])
	req, _ := http.NewRequest(http.MethodDelete, tr.srv.URL+"/workers/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	getJSON(t, tr.srv.URL+"/workers", &list)
	assert.Equal(t, 1, list.Total)
}

// The access log names each request's own id, concurrent requests included (it reads the
// response header's X-Request-Id after the handler).
func TestRegularAccessLogIDs(t *testing.T) {
	t.Parallel()
	w := newWorker(t, sseReply([]string{`data: {"choices":[{"delta":{"content":"a"}}]}`, "data: [DONE]"}, nil))
	cfg := regularConfig(w)
	require.NoError(t, cfg.Validate())
	cfg.Seed = new(int64(42))
	var access syncBuffer
	s, err := New(Options{Config: cfg, DecisionLog: &syncBuffer{}, AccessLog: &access})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		s.Wait()
	})
	tr := &testRouter{s: s, srv: srv}
	const n = 24
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			hdr := map[string]string{}
			if i%2 == 0 { // half carry their own id, half get a generated one
				hdr["X-Request-Id"] = fmt.Sprintf("client-%d", i)
			}
			status, h, _ := tr.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, hdr)
			assert.Equal(t, http.StatusOK, status)
			ids <- h.Get("X-Request-Id")
		})
	}
	wg.Wait()
	close(ids)
	log := access.String()
	assert.Equal(t, n, strings.Count(log, "POST /v1/chat/completions 200"), log)
	for id := range ids {
		require.NotEmpty(t, id)
		assert.Equal(t, 1, strings.Count(log, " id="+id+"\n"), "id %s once in the access log:\n%s", id, log)
	}
}

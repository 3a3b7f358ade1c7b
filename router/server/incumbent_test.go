package server

// Scenarios of the incumbent router's own integration suite (sgl-router's
// py_test/integration: test_circuit_breaker.py, test_fault_tolerance.py, test_retries.py,
// test_worker_management.py, test_api_auth.py, test_payload_size.py; smg's test_manual.py), ported as our own tests
// against serve's handler with real HTTP workers. Those that need the breaker's timeout to pass
// in wall time are covered with an injected clock in router/statemachines_test.go instead.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const completion = `{"model":"m","prompt":"x","max_tokens":1,"stream":false}`

// test_circuit_breaker_per_worker_isolation: one worker always failing, one well; once the
// failing worker's breaker opens, every request succeeds.
func TestIncumbentBreakerPerWorkerIsolation(t *testing.T) {
	t.Parallel()
	bad, good := newWorker(t, statusReply(500, "boom")), newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL(), good.URL()}
	cfg.Policy = router.PolicyRoundRobin
	cfg.CBFailureThreshold, cfg.CBSuccessThreshold, cfg.CBTimeoutDurationSecs = 2, 1, 60
	cfg.DisableRetries = true
	tr := startRouter(t, cfg)
	failures := 0
	for range 4 { // round robin: the bad worker gets every other request until it opens
		if status, _, _ := tr.post(t, "/v1/completions", completion, nil); status == 500 {
			failures++
		}
	}
	require.Equal(t, 2, failures, "two failures open the breaker")
	for i := range 20 {
		status, _, body := tr.post(t, "/v1/completions", completion, nil)
		require.Equal(t, http.StatusOK, status, "request %d after the breaker opened: %s", i, body)
	}
}

// test_circuit_breaker_with_retries: the same pair with retries on: the first request already
// succeeds (the retry avoids the failing worker).
func TestIncumbentBreakerWithRetries(t *testing.T) {
	t.Parallel()
	bad, good := newWorker(t, statusReply(500, "boom")), newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL(), good.URL()}
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryMaxRetries, cfg.RetryInitialBackoffMs, cfg.RetryMaxBackoffMs = 3, 10, 50
	tr := startRouter(t, cfg)
	for range 4 {
		status, _, body := tr.post(t, "/v1/completions", completion, nil)
		require.Equal(t, http.StatusOK, status, body)
	}
}

// test_circuit_breaker_disable_flag: with the breaker disabled, an always-failing worker's
// error reaches the client every time (no 503 from an open breaker).
func TestIncumbentBreakerDisabled(t *testing.T) {
	t.Parallel()
	bad := newWorker(t, statusReply(500, "boom"))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL()}
	cfg.DisableCircuitBreaker, cfg.DisableRetries = true, true
	tr := startRouter(t, cfg)
	for range 12 {
		status, _, _ := tr.post(t, "/v1/completions", completion, nil)
		require.Equal(t, 500, status)
	}
}

// test_circuit_breaker_opens_and_recovers (first half) and test_circuit_breaker_half_open_
// failure_reopens (first half): a single failing worker's breaker opens and the router answers
// 503 without sending; the timed halves are TestBreakerLifecycle's (injected clock).
func TestIncumbentBreakerOpensTo503(t *testing.T) {
	t.Parallel()
	bad := newWorker(t, statusReply(500, "boom"))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{bad.URL()}
	cfg.CBFailureThreshold, cfg.CBTimeoutDurationSecs = 3, 60
	cfg.DisableRetries = true
	tr := startRouter(t, cfg)
	var statuses []int
	for range 5 {
		status, _, _ := tr.post(t, "/v1/completions", completion, nil)
		statuses = append(statuses, status)
	}
	assert.Equal(t, []int{500, 500, 500, 503, 503}, statuses)
	assert.Len(t, bad.callsTo("/v1/completions"), 3, "an open breaker sends nothing")
}

// test_worker_crash_reroute_with_retries: a worker that drops the connection on its first
// request; the retry reaches the healthy one and the client gets 200.
func TestIncumbentWorkerCrashRerouted(t *testing.T) {
	t.Parallel()
	crash := newWorker(t, func(w http.ResponseWriter, _ *http.Request, _ call) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // dies mid-request: no response at all
		}
	})
	good := newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{crash.URL(), good.URL()}
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryMaxRetries, cfg.RetryInitialBackoffMs, cfg.RetryMaxBackoffMs = 3, 10, 50
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/v1/completions", `{"model":"m","prompt":"crash","max_tokens":1}`, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

// test_add_and_remove_worker: a worker added at run time takes round-robin traffic; once
// removed, it takes none.
func TestIncumbentAddAndRemoveWorker(t *testing.T) {
	t.Parallel()
	w1, w2 := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w1.URL()}
	cfg.Policy = router.PolicyRoundRobin
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/workers", fmt.Sprintf(`{"url":%q}`, w2.URL()), nil)
	require.Equal(t, http.StatusAccepted, status, body)
	for range 10 {
		status, _, _ := tr.post(t, "/v1/completions", completion, nil)
		require.Equal(t, http.StatusOK, status)
	}
	assert.Len(t, w1.callsTo("/v1/completions"), 5)
	assert.Len(t, w2.callsTo("/v1/completions"), 5, "the added worker takes its share")
	req, _ := http.NewRequest(http.MethodDelete, tr.srv.URL+"/workers/"+w2.URL(), nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "the Model Gateway's DELETE answer")
	for range 6 {
		status, _, _ := tr.post(t, "/v1/completions", completion, nil)
		require.Equal(t, http.StatusOK, status)
	}
	assert.Len(t, w2.callsTo("/v1/completions"), 5, "a removed worker takes nothing")
}

// test_api_auth: with --api-key, requests without the key (or with a wrong one) get 401 and
// never reach a worker; with it they pass.
func TestIncumbentAPIKey(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.APIKey = "secret"
	tr := startRouter(t, cfg)
	status, _, _ := tr.post(t, "/v1/completions", completion, nil)
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = tr.post(t, "/v1/completions", completion, map[string]string{"Authorization": "Bearer wrong"})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Empty(t, w.callsTo("/v1/completions"))
	status, _, body := tr.post(t, "/v1/completions", completion, map[string]string{"Authorization": "Bearer secret"})
	assert.Equal(t, http.StatusOK, status, body)
}

// test_payload_size: a body over --max-payload-size gets 413 and never reaches a worker; one
// under it passes.
func TestIncumbentPayloadSize(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.MaxPayloadSize = 1 << 20
	tr := startRouter(t, cfg)
	big := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat("x", 2<<20))
	status, _, _ := tr.post(t, "/v1/completions", big, nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status)
	assert.Empty(t, w.callsTo("/v1/completions"))
	small := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, strings.Repeat("x", 512<<10))
	status, _, body := tr.post(t, "/v1/completions", small, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

// smg's test_manual.py, test_manual_routing_with_header: under the manual policy, ten routing
// keys over two workers use both, and a second pass of each key reaches the worker of its
// first.
func TestIncumbentManualRoutingWithHeader(t *testing.T) {
	t.Parallel()
	ws := []*testWorker{newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))}
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyManual
	tr := startRouter(t, cfg)
	for range 2 {
		for i := range 10 {
			key := fmt.Sprintf("user-%d", i)
			status, _, out := tr.post(t, "/v1/completions", fmt.Sprintf(`{"model":"test","prompt":"hi","max_tokens":1,"stream":false,"key":%q}`, key),
				map[string]string{"X-SMG-Routing-Key": key})
			require.Equal(t, http.StatusOK, status, out)
		}
	}
	byKey := keyedCallsTo(ws, "/v1/completions")
	require.Len(t, byKey, 10)
	used := map[string]bool{}
	for k, workers := range byKey {
		require.Len(t, workers, 1, "key %s should stick to one worker", k)
		for u := range workers {
			used[u] = true
		}
	}
	assert.Len(t, used, 2, "the keys should spread over both workers")
}

// smg's test_manual.py, test_manual_routing_without_header: without a routing key the manual
// policy falls back to random, so twenty requests reach both workers.
func TestIncumbentManualRoutingWithoutHeader(t *testing.T) {
	t.Parallel()
	ws := []*testWorker{newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))}
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyManual
	tr := startRouter(t, cfg)
	for range 20 {
		status, _, out := tr.post(t, "/v1/completions", `{"model":"test","prompt":"hi","max_tokens":1,"stream":false,"key":"none"}`, nil)
		require.Equal(t, http.StatusOK, status, out)
	}
	assert.Len(t, keyedCallsTo(ws, "/v1/completions")["none"], 2, "random fallback should use both workers")
}

package server

// The SGLang Model Gateway's worker-management and DP-aware scenarios, written from what its
// Python suites assert (sgl-router py_test/integration/test_worker_management.py with
// fixtures/router_manager.py, and py_test/e2e/test_regular_router.py
// test_dp_aware_worker_expansion_and_api_key), against our serve.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// del sends DELETE path and decodes the JSON answer.
func delJSON(t *testing.T, base, path string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, base+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// workerIDHeader is a worker answering completions with its own id, as the incumbent's
// mock_worker does (X-Worker-Id), so a test can tell who served.
func workerIDHeader(id string) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, _ *http.Request, _ call) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Worker-Id", id)
		_, _ = w.Write([]byte(genReply))
	}
}

// router_manager.remove_worker: DELETE /workers/{quote(url, safe="")} must answer 202, and
// test_add_and_remove_worker: both workers are seen after an add (POST /workers, 202); after the
// removal only the first one serves.
func TestIncumbentWorkerManagementDelete202(t *testing.T) {
	t.Parallel()
	w1, w2 := newWorker(t, workerIDHeader("w1")), newWorker(t, workerIDHeader("w2"))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w1.URL()}
	cfg.Policy = router.PolicyRoundRobin
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/workers", fmt.Sprintf(`{"url":%q}`, w2.URL()), nil)
	require.Equal(t, http.StatusAccepted, status, body)

	seen := map[string]bool{}
	for i := 0; i < 20 && len(seen) < 2; i++ {
		status, hdr, body := tr.post(t, "/v1/completions", fmt.Sprintf(`{"model":"test-model","prompt":"x%d","max_tokens":1,"stream":false}`, i), nil)
		require.Equal(t, http.StatusOK, status, body)
		seen[hdr.Get("X-Worker-Id")] = true
	}
	assert.Equal(t, map[string]bool{"w1": true, "w2": true}, seen)

	status, out := delJSON(t, tr.srv.URL, "/workers/"+url.QueryEscape(w2.URL()))
	require.Equal(t, http.StatusAccepted, status, out)
	assert.Equal(t, "accepted", out["status"])
	assert.Equal(t, workerID(w2.URL()), out["worker_id"], "the Model Gateway's worker_id")

	for i := range 10 {
		status, hdr, body := tr.post(t, "/v1/completions", fmt.Sprintf(`{"model":"test-model","prompt":"y%d","max_tokens":1,"stream":false}`, i), nil)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "w1", hdr.Get("X-Worker-Id"))
	}
}

// DELETE /workers/{id} answers 202 with that id, /workers/{raw url} too; an unknown one 404
// (the Gateway's WORKER_NOT_FOUND); the legacy POST /remove_worker keeps its 200.
func TestWorkerDeleteByIDURLAndLegacy(t *testing.T) {
	t.Parallel()
	a, b, c := newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply)), newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(a, b, c))

	status, out := delJSON(t, tr.srv.URL, "/workers/"+workerID(a.URL()))
	require.Equal(t, http.StatusAccepted, status, out)
	assert.Equal(t, map[string]any{"status": "accepted", "worker_id": workerID(a.URL()), "url": a.URL(), "message": "worker removed"}, out)

	status, out = delJSON(t, tr.srv.URL, "/workers/"+b.URL())
	require.Equal(t, http.StatusAccepted, status, out)
	assert.Equal(t, workerID(b.URL()), out["worker_id"])

	status, out = delJSON(t, tr.srv.URL, "/workers/"+workerID(a.URL()))
	assert.Equal(t, http.StatusNotFound, status, "already gone: %v", out)

	resp, err := http.Post(tr.srv.URL+"/remove_worker?url="+url.QueryEscape(c.URL()), "", nil)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	assert.JSONEq(t, fmt.Sprintf(`{"status":"accepted","worker_id":%q,"url":%q,"message":"worker removed"}`, workerID(c.URL()), c.URL()), string(raw))

	var list struct{ Total int }
	getJSON(t, tr.srv.URL+"/workers", &list)
	assert.Zero(t, list.Total)
}

// test_dp_aware_worker_expansion_and_api_key: a router-only instance with --dp-aware and an API
// key; a worker with dp_size 2 added through /add_worker expands to two logical workers,
// /list_workers gives {url@0, url@1}; inference without the key is 401, with it 200. Beyond
// the incumbent's assertions: /workers lists the two ranks (each with its own id, dp_rank,
// dp_size and load), its total agrees with /readiness and /get_loads, GET and DELETE by a
// rank's id work, and the DELETE takes the whole worker.
func TestIncumbentDPAwareExpansionAndAPIKey(t *testing.T) {
	t.Parallel()
	const key = "test-api-key"
	w := newWorker(t, jsonReply(genReply))
	w.dpSize = 2
	cfg := DefaultConfig()
	cfg.DPAware = true
	cfg.APIKey = key
	cfg.Policy = router.PolicyRoundRobin
	tr := startRouter(t, cfg)
	auth := map[string]string{"Authorization": "Bearer " + key}

	do := func(method, path string, hdr map[string]string) (int, []byte) {
		req, err := http.NewRequest(method, tr.srv.URL+path, nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	status, raw := do(http.MethodPost, "/add_worker?url="+url.QueryEscape(w.URL()), auth)
	require.Equal(t, http.StatusOK, status, string(raw))

	status, raw = do(http.MethodGet, "/list_workers", auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	var legacy struct{ URLs []string }
	require.NoError(t, json.Unmarshal(raw, &legacy))
	assert.ElementsMatch(t, []string{w.URL() + "@0", w.URL() + "@1"}, legacy.URLs)

	status, _, _ = tr.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, nil)
	assert.Equal(t, http.StatusUnauthorized, status)
	for range 2 { // round robin: one per rank
		status, _, body := tr.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, auth)
		assert.Equal(t, http.StatusOK, status, body)
	}
	ranks := map[float64]int{}
	for _, c := range w.callsTo("/v1/completions") {
		ranks[c.body["data_parallel_rank"].(float64)]++
	}
	assert.Equal(t, map[float64]int{0: 1, 1: 1}, ranks, "each rank took one request")
	tr.requireLoadsZero(t)

	// /workers: one entry per rank, as the Gateway registers them.
	status, raw = do(http.MethodGet, "/workers", auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	var list struct {
		Workers []map[string]any
		Total   int
		Stats   map[string]int
	}
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Workers, 2)
	assert.Equal(t, 2, list.Total)
	assert.Equal(t, map[string]int{"prefill_count": 0, "decode_count": 0, "regular_count": 2}, list.Stats)
	for rank, e := range list.Workers {
		name := fmt.Sprintf("%s@%d", w.URL(), rank)
		assert.Equal(t, name, e["url"])
		assert.Equal(t, workerID(name), e["id"])
		assert.Equal(t, float64(rank), e["dp_rank"])
		assert.Equal(t, 2.0, e["dp_size"])
		assert.Equal(t, "regular", e["worker_type"])
		assert.Equal(t, true, e["is_healthy"])
		assert.Equal(t, "healthy", e["state"])
		assert.Equal(t, 0.0, e["load"])
	}
	assert.NotEqual(t, list.Workers[0]["id"], list.Workers[1]["id"])

	// The same count in /readiness and /get_loads.
	status, raw = do(http.MethodGet, "/readiness", nil)
	require.Equal(t, http.StatusOK, status, string(raw))
	var ready struct{ Workers map[string]map[string]int }
	require.NoError(t, json.Unmarshal(raw, &ready))
	assert.Equal(t, map[string]int{"healthy": 2, "total": 2, "draining": 0}, ready.Workers["regular"])
	status, raw = do(http.MethodGet, "/get_loads", auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	var loads struct{ Workers []map[string]any }
	require.NoError(t, json.Unmarshal(raw, &loads))
	require.Len(t, loads.Workers, list.Total)
	for i, l := range loads.Workers {
		assert.Equal(t, list.Workers[i]["url"], l["target"])
	}

	// A rank by its id or name; the worker by its URL.
	rankID := list.Workers[1]["id"].(string)
	status, raw = do(http.MethodGet, "/workers/"+rankID, auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	var one map[string]any
	require.NoError(t, json.Unmarshal(raw, &one))
	assert.Equal(t, w.URL()+"@1", one["url"])
	status, raw = do(http.MethodGet, "/workers/"+url.PathEscape(w.URL()+"@0"), auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	assert.Contains(t, string(raw), `"dp_rank":0`)
	status, raw = do(http.MethodGet, "/workers/"+w.URL(), auth)
	require.Equal(t, http.StatusOK, status, string(raw))
	assert.NotContains(t, string(raw), "dp_rank", "the worker itself, not a rank")

	status, _ = do(http.MethodDelete, "/workers/"+rankID, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "the worker API wants the key too")
	status, raw = do(http.MethodDelete, "/workers/"+rankID, auth)
	require.Equal(t, http.StatusAccepted, status, string(raw))
	assert.JSONEq(t, fmt.Sprintf(`{"status":"accepted","worker_id":%q,"url":%q,"message":"worker removed"}`, rankID, w.URL()), string(raw))
	status, raw = do(http.MethodGet, "/workers", auth)
	require.Equal(t, http.StatusOK, status)
	assert.True(t, strings.Contains(string(raw), `"total":0`), "both ranks go with their worker: %s", raw)
}

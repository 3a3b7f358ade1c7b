package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitState polls the worker's state until it is want or the deadline passes (nothing else can
// tell when the background probe has landed).
func waitState(t *testing.T, s *Server, url string, want router.WorkerState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, w := range s.Router().Workers() {
			if w.URL == url && w.State == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s never became %s: %+v", url, want, s.Router().Workers())
		}
		time.Sleep(5 * time.Millisecond) // bounded poll: the probe runs on the health loop
	}
}

// A request refused by a dead worker probes it at once; the failed probe takes it out of
// rotation, long before --health-failure-threshold scheduled probes (60 s apart) or the
// breaker's --cb-failure-threshold failures.
func TestRefusedConnectionTakesWorkerOutAtOnce(t *testing.T) {
	alive := newWorker(t, jsonReply(`{"text":"ok"}`))
	dead := newWorker(t, jsonReply(`{"text":"ok"}`))
	cfg := DefaultConfig()
	cfg.Policy = router.PolicyRoundRobin
	cfg.WorkerURLs = []string{dead.URL(), alive.URL()}
	tr := startRouter(t, cfg)
	dead.srv.Close() // connections refused from now on

	code, _, _ := tr.post(t, "/generate", `{"text":"a"}`, nil)
	require.Equal(t, http.StatusOK, code, "the retry goes to the live worker")
	waitState(t, tr.s, dead.URL(), router.WorkerUnhealthy)

	before := alive.callCount()
	for range 6 {
		code, _, _ := tr.post(t, "/generate", `{"text":"b"}`, nil)
		require.Equal(t, http.StatusOK, code)
	}
	assert.Equal(t, before+6, alive.callCount(), "every request went to the live worker at once, none paid a retry")
	m := tr.metricsText()
	assert.Contains(t, m, `pdrouter_worker_state{role="regular",state="unhealthy",worker="`+dead.URL()+`"} 1`)
	assert.Contains(t, m, `sgl_router_worker_health{worker="`+dead.URL()+`"} 0`)
	assert.Contains(t, m, `sgl_router_active_workers 1`)
}

// A probe that passes after a failed connection changes nothing: the worker stays in rotation.
func TestPassingSuspectProbeKeepsWorker(t *testing.T) {
	w := newWorker(t, jsonReply(`{"text":"ok"}`))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	tr := startRouter(t, cfg)
	flipped, err := tr.s.Router().ObserveFailureProbe(w.URL(), true, time.Now(), "")
	require.NoError(t, err)
	assert.False(t, flipped)
	waitState(t, tr.s, w.URL(), router.WorkerHealthy)
}

// A stream that ends in the worker's error event (then [DONE]) is relayed as it came and counted
// as the client saw it — requests_total under the 200 sent — and as an error everywhere else:
// stream_errors_total under the event's status, errors_total, the worker's errors, sgl-router's
// error counter; a stream cut mid-way likewise, as 502.
func TestStreamEndingInErrorIsAnError(t *testing.T) {
	cases := []struct {
		name   string
		events []string
		code   string
	}{
		{"error event", []string{`data: {"text":"a"}`, `data: {"error":{"message":"boom","code":503}}`, `data: [DONE]`}, "503"},
		{"error event without code", []string{`data: {"text":"a"}`, `data: {"error":"boom"}`}, "500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, sseReply(tc.events, nil))
			cfg := DefaultConfig()
			cfg.WorkerURLs = []string{w.URL()}
			tr := startRouter(t, cfg)
			code, _, body := tr.post(t, "/generate", `{"text":"a","stream":true}`, nil)
			require.Equal(t, http.StatusOK, code, "the head went out as the worker sent it")
			assert.Contains(t, body, "boom", "relayed as it came")
			m := tr.metricsText()
			assert.Contains(t, m, `pdrouter_requests_total{code="200",route="/generate"} 1`, "the status the client got")
			assert.Contains(t, m, `pdrouter_stream_errors_total{code="`+tc.code+`",route="/generate"} 1`)
			assert.Contains(t, m, `pdrouter_errors_total{kind="regular_stream"} 1`)
			assert.Contains(t, m, `pdrouter_worker_errors_total{kind="stream",role="regular",worker="`+w.URL()+`"} 1`)
			assert.Contains(t, m, `sgl_router_request_errors_total{error_type="`+errorType(atoi(t, tc.code))+`",route="/generate"} 1`)
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}

// The router measures TTFT, inter-token latency and TPOT of every stream, by worker role.
func TestTokenTimingPerRole(t *testing.T) {
	w := newWorker(t, sseReply([]string{`data: {"text":"a"}`, `data: {"text":"ab"}`, `data: {"text":"abc"}`, `data: [DONE]`}, nil))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	tr := startRouter(t, cfg)
	code, _, _ := tr.post(t, "/generate", `{"text":"a","stream":true}`, nil)
	require.Equal(t, http.StatusOK, code)
	m := tr.metricsText()
	assert.Contains(t, m, `pdrouter_stream_ttft_seconds_count{role="regular"} 1`)
	assert.Contains(t, m, `pdrouter_inter_token_latency_seconds_count{role="regular"} 2`, "three text events: two gaps")
	assert.Contains(t, m, `pdrouter_tpot_seconds_count{role="regular"} 1`)
	assert.Contains(t, m, `sgl_router_processed_requests_total{worker="`+w.URL()+`"} 1`)
}

// A worker whose /get_server_info says it runs in another disaggregation mode than the role it
// is given is refused, with a message saying so.
func TestWorkerInAnotherModeIsRefused(t *testing.T) {
	serve := func(mode string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/get_server_info" {
				_ = json.NewEncoder(w).Encode(map[string]any{"dp_size": 1, "disaggregation_mode": mode})
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	prefill, decode, regular := serve("prefill"), serve("decode"), serve("null")
	cases := []struct {
		name string
		cfg  func() Config
		want []string
	}{
		{"prefill given as decode", func() Config {
			c := DefaultConfig()
			c.PDDisaggregation, c.Prefill, c.Decode = true, []router.PrefillWorker{{URL: decode.URL}}, []string{prefill.URL}
			return c
		}, []string{"given as a", "runs as a"}},
		{"regular on a prefill port", func() Config {
			c := DefaultConfig()
			c.WorkerURLs = []string{prefill.URL}
			return c
		}, []string{prefill.URL, "given as a regular worker", "runs as a prefill server", "--prefill"}},
		{"prefill given a regular server", func() Config {
			c := DefaultConfig()
			c.PDDisaggregation, c.Prefill, c.Decode = true, []router.PrefillWorker{{URL: regular.URL}}, []string{decode.URL}
			return c
		}, []string{regular.URL, "given as a prefill worker", "runs as a regular server"}},
	}
	for _, tc := range cases {
		for _, dpAware := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := tc.cfg()
				cfg.DPAware = dpAware
				s, err := New(Options{Config: cfg})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				defer func() { cancel(); s.Wait() }()
				err = s.Start(ctx)
				require.Error(t, err)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w)
				}
			})
		}
	}
	// The right roles start.
	cfg := DefaultConfig()
	cfg.PDDisaggregation, cfg.Prefill, cfg.Decode = true, []router.PrefillWorker{{URL: prefill.URL}}, []string{decode.URL}
	s, err := New(Options{Config: cfg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); s.Wait() }()
	require.NoError(t, s.Start(ctx))
	assert.Len(t, s.Router().Workers(), 2)
}

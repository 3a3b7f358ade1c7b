//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// TestIntegrationPredictedLatency: serve routes two regular fakeworkers (llama3-8b-h100) by
// predicted_latency with the llama3-8b-h100 model (--latency-profile, wired as cmd/router
// wires it). Worker 1 runs 2× slower than the model says (--slow-factor 2, behind the router's
// back): the online correction finds it from the router's own timings of the streams, and it
// gets less traffic than worker 0. Every request's prediction and observation are in the
// decision log and the metrics; the SLO headers are read (a malformed one is the client's
// error), and under --slo-miss shed a request no worker can serve in time gets 503 with
// Retry-After.
func TestIntegrationPredictedLatency(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := startLatencyWorkers(t, ctx, 1, 2)
	start := func(tweak func(*server.Config)) (string, *server.Server, *syncBuffer) {
		return startLatencyServe(t, ctx, urls, func(c *server.Config) {
			c.LatencyCorrectionHalfLifeMs = 2000
			if tweak != nil {
				tweak(c)
			}
		})
	}
	front, srv, log := start(nil)

	send := func(url string, i int, hdr map[string]string) (*http.Response, []byte) {
		body, _ := json.Marshal(map[string]any{"text": fmt.Sprintf("%d %s", i, strings.Repeat("a question of its own ", 40+i%7)),
			"stream": true, "sampling_params": map[string]any{"max_new_tokens": 24, "ignore_eos": true}})
		req, _ := http.NewRequest(http.MethodPost, url+"/generate", bytes.NewReader(body))
		req.Header.Set("X-Request-Id", fmt.Sprintf("req-%d", i))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	const clients, perClient = 6, 30
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perClient {
				resp, b := send(front, c*perClient+k, nil)
				assert.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			}
		}()
	}
	wg.Wait()

	// The decision log: a routing line with the prediction, then a line with the observation.
	type figures struct{ TTFTMs, TPOTMs float64 }
	var routed, routedIDs []string // workers and request ids in routing order
	obs := map[string][2]figures{}
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var line struct {
			ID        string
			Regular   *struct{ Worker string }
			Predicted *struct {
				TTFTMs float64 `json:"ttft_ms"`
				TPOTMs float64 `json:"tpot_ms"`
			}
			Observed *struct {
				TTFTMs float64 `json:"ttft_ms"`
				TPOTMs float64 `json:"tpot_ms"`
			}
		}
		require.NoError(t, json.Unmarshal([]byte(l), &line), l)
		require.NotNil(t, line.Predicted, l)
		if line.Observed == nil {
			routed, routedIDs = append(routed, line.Regular.Worker), append(routedIDs, line.ID)
			continue
		}
		obs[line.ID] = [2]figures{{line.Predicted.TTFTMs, line.Predicted.TPOTMs}, {line.Observed.TTFTMs, line.Observed.TPOTMs}}
	}
	require.Len(t, routed, clients*perClient)
	require.Len(t, obs, clients*perClient, "every streamed request observed")

	// The slow worker is found out, and loses traffic.
	cs := srv.Router().LatencyCorrections()
	require.Len(t, cs, 2)
	t.Logf("corrections: %s TTFT %.2f TPOT %.2f; %s TTFT %.2f TPOT %.2f", cs[0].Name, cs[0].TTFT, cs[0].TPOT, cs[1].Name, cs[1].TTFT, cs[1].TPOT)
	// Once worker 1 gets few requests its correction decays back towards the model (by the
	// half-life, 2 s here): at the end it is above worker 0's, not 2×.
	assert.Greater(t, cs[1].TPOT, cs[0].TPOT, "worker 1 decodes 2× slower than the model")
	assert.Greater(t, cs[1].TPOT, 1.25)
	late := routed[len(routed)/2:]
	n1 := 0
	for _, w := range late {
		if w == urls[1] {
			n1++
		}
	}
	t.Logf("second half: %d of %d requests to the slow worker", n1, len(late))
	assert.Less(t, n1, len(late)/2, "the slow worker gets less than half")

	// The corrected predictions against the router's own timings: over the requests routed in
	// the second half (after warm-up), and over clients 3–5's (half the requests too, but their
	// first ones were routed before any correction), which the bounds are checked on. Quietly
	// TTFT comes out 5–9 % and TPOT 4–5 % (docs/predicted-latency.md). The bounds are loose, as
	// under other work on the machine TTFT has reached 22 %: they catch a model grossly wrong,
	// not the 15 %, which is measured quietly (the two faults fixed in issue 42, the
	// admission step counted and the running batch's step missed, gave 14–21 % under load and
	// would pass them).
	medians := func(ids []string) (ttft, tpot float64) {
		var eTTFT, eTPOT []float64
		for _, id := range ids {
			o := obs[id]
			eTTFT = append(eTTFT, math.Abs(o[0].TTFTMs-o[1].TTFTMs)/o[1].TTFTMs)
			eTPOT = append(eTPOT, math.Abs(o[0].TPOTMs-o[1].TPOTMs)/o[1].TPOTMs)
		}
		slices.Sort(eTTFT)
		slices.Sort(eTPOT)
		return eTTFT[len(eTTFT)/2], eTPOT[len(eTPOT)/2]
	}
	var clients35 []string
	for i := clients * perClient / 2; i < clients*perClient; i++ {
		clients35 = append(clients35, fmt.Sprintf("req-%d", i))
	}
	eTTFT, eTPOT := medians(routedIDs[len(routedIDs)/2:])
	oTTFT, oTPOT := medians(clients35)
	t.Logf("median |predicted − observed| ÷ observed, second half: TTFT %.1f %%, TPOT %.1f %% (clients 3–5: %.1f %%, %.1f %%)",
		100*eTTFT, 100*eTPOT, 100*oTTFT, 100*oTPOT)
	assert.Less(t, oTTFT, 0.3)
	assert.Less(t, oTPOT, 0.3)

	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `pdrouter_latency_correction{kind="tpot",role="regular",target="`+urls[1]+`"}`)
	assert.Contains(t, rec.Body.String(), fmt.Sprintf(`pdrouter_latency_prediction_ratio_count{kind="ttft"} %d`, clients*perClient))

	resp, b := send(front, 1000, map[string]string{"x-slo-ttft-ms": "soon"})
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(b), "x-slo-ttft-ms")
	resp, _ = send(front, 1001, map[string]string{"x-sgl-tps-slo": "100000"}) // best_effort: routed all the same
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	shedFront, _, _ := start(func(c *server.Config) { c.SLOMiss = router.SLOMissShed })
	resp, b = send(shedFront, 1002, map[string]string{"x-slo-ttft-ms": "0.001"})
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(b), "predicted to meet")
	resp, _ = send(shedFront, 1003, map[string]string{"x-slo-ttft-ms": "60000", "x-slo-tpot-ms": "1000"})
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// startLatencyWorkers starts a regular llama3-8b-h100 fakeworker per slow factor and returns
// their URLs.
func startLatencyWorkers(t *testing.T, ctx context.Context, slow ...float64) []string {
	t.Helper()
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	var urls []string
	for i, s := range slow {
		w, err := fakeworker.Start(ctx, fakeworker.Config{Host: "127.0.0.1", Mode: engine.RoleUnified, Profile: prof, Seed: uint64(i + 1),
			Failures: fakeworker.Failures{SlowFactor: s}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Wait() })
		urls = append(urls, w.URL())
	}
	return urls
}

// startLatencyServe starts serve in front of urls routed by predicted_latency with the
// llama3-8b-h100 model (wired as cmd/router wires it), engine loads polled every 100 ms and
// tweak applied, and returns its URL, the server and its decision log.
func startLatencyServe(t *testing.T, ctx context.Context, urls []string, tweak func(*server.Config)) (string, *server.Server, *syncBuffer) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.WorkerURLs, cfg.Policy, cfg.LatencyProfile, cfg.Seed = urls, router.PolicyPredictedLatency, "llama3-8b-h100", new(int64(1))
	cfg.LoadPollIntervalMs = 100
	if tweak != nil {
		tweak(&cfg)
	}
	models, err := latencyModels(cfg)
	require.NoError(t, err)
	log := &syncBuffer{}
	srv, err := server.New(server.Options{Config: cfg, DecisionLog: log, LatencyModels: models})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { front.Close(); stop(); srv.Wait() })
	return front.URL, srv, log
}

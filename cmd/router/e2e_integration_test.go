//go:build integration

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireServeLoadsZero polls the router's /get_loads until every target is back at zero.
func requireServeLoadsZero(t *testing.T, base string, wantTargets int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/get_loads")
		require.NoError(t, err)
		var got struct {
			Workers []struct {
				Worker string `json:"worker"`
				Target string `json:"target"`
				Role   string `json:"role"`
				DPRank *int   `json:"dp_rank"`
				Load   int    `json:"load"`
			} `json:"workers"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		resp.Body.Close()
		require.Len(t, got.Workers, wantTargets)
		busy := 0
		for _, w := range got.Workers {
			require.NotNil(t, w.DPRank, "dp-aware targets carry their rank")
			busy += w.Load
		}
		if busy == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "loads stuck: %+v", got.Workers)
		time.Sleep(5 * time.Millisecond)
	}
}

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// TestIntegrationServeFakeworkerCluster runs router serve (PD, --dp-aware) in front of a
// fakeworker cluster (2 prefill + 2 decode, dp 4) and checks every route, streaming and not,
// plus errors, retries and client disconnects, with /get_loads back at zero after each.
func TestIntegrationServeFakeworkerCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Prefill: 2, Decode: 2,
		Worker: fakeworker.Config{DPSize: 4, Profile: engine.ConstantProfile(20*time.Millisecond, 2*time.Millisecond)}})
	require.NoError(t, err)
	defer func() { cl.Stop(); _ = cl.Wait() }()
	args := append(cl.ServeArgs(), "--policy", "cache_aware", "--retry-initial-backoff-ms", "1", "--seed", "3")
	if !slices.Contains(args, "--dp-aware") {
		args = append(args, "--dp-aware")
	}
	base, metricsURL, stop, done := startServeMetrics(t, args...)
	const targets = 16 // (2 prefill + 2 decode) × dp 4

	chat := `{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]`
	t.Run("routes", func(t *testing.T) {
		status, body := postJSON(t, base+"/v1/chat/completions", chat+`}`)
		require.Equal(t, http.StatusOK, status, body)
		var c struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &c))
		require.Len(t, c.Choices, 1)
		assert.NotEmpty(t, c.Choices[0].Message.Content, "the reply comes from decode (prefill answers meta only)")
		assert.Equal(t, 8, c.Usage.CompletionTokens)
		requireServeLoadsZero(t, base, targets)

		status, body = postJSON(t, base+"/v1/chat/completions", chat+`,"stream":true,"stream_options":{"include_usage":true}}`)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, `"delta":{"content":`)
		assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), body)
		requireServeLoadsZero(t, base, targets)

		status, body = postJSON(t, base+"/v1/completions", `{"model":"m","prompt":"once upon a time","max_tokens":4}`)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, `"text":`)
		status, body = postJSON(t, base+"/v1/completions", `{"model":"m","prompt":"once upon a time","max_tokens":4,"stream":true}`)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, "data: [DONE]")
		requireServeLoadsZero(t, base, targets)

		status, body = postJSON(t, base+"/generate", `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":4},"return_logprob":true}`)
		require.Equal(t, http.StatusOK, status, body)
		var g struct {
			Text     string `json:"text"`
			MetaInfo struct {
				CompletionTokens int             `json:"completion_tokens"`
				Logprobs         [][]json.Number `json:"input_token_logprobs"`
			} `json:"meta_info"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &g))
		assert.NotEmpty(t, g.Text)
		assert.Equal(t, 4, g.MetaInfo.CompletionTokens)
		status, body = postJSON(t, base+"/generate", `{"text":"the quick brown fox","sampling_params":{"max_new_tokens":4},"stream":true}`)
		require.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, "data: [DONE]")
		requireServeLoadsZero(t, base, targets)
	})

	t.Run("metrics move", func(t *testing.T) {
		resp, err := http.Get(metricsURL)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(raw)
		for _, want := range []string{
			`pdrouter_requests_total{code="200",route="/v1/chat/completions"} 2`,
			`pdrouter_policy_decisions_total{policy="cache_aware",reason="cache_miss",role="prefill"}`,
			`pdrouter_target_load{role="decode",target="` + cl.Workers()[2].URL() + `@0"} 0`,
			`pdrouter_worker_healthy{role="prefill",worker="` + cl.Workers()[0].URL() + `"} 1`,
			`pdrouter_cb_state{worker=`, `pdrouter_tree_chars{role="prefill"}`, `pdrouter_tree_nodes{role="decode"}`,
			`pdrouter_ttft_seconds_count{route="/v1/chat/completions"} 1`, `pdrouter_prefix_match_ratio_count 6`,
			`pdrouter_request_duration_seconds_count{route="/generate"} 2`,
		} {
			assert.Contains(t, m, want)
		}
		assert.Regexp(t, `pdrouter_worker_cached_token_ratio_count [1-9]`, m, "worker-reported cache hits are observed")
	})

	t.Run("bad request", func(t *testing.T) {
		status, body := postJSON(t, base+"/v1/chat/completions", `{"messages":"nope"}`)
		require.Equal(t, http.StatusBadRequest, status, body)
		requireServeLoadsZero(t, base, targets)
	})

	t.Run("client disconnect", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(cctx, http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"a long story"}]}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, err = bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		ccancel()
		resp.Body.Close()
		requireServeLoadsZero(t, base, targets)
	})

	t.Run("retries move to a healthy decode worker", func(t *testing.T) {
		// A decode worker that answers 503 is listed first, so ties pick it and every
		// request must be retried on the healthy one.
		bad, err := fakeworker.Start(ctx, fakeworker.Config{Mode: engine.RoleDecode, DPSize: 4,
			Failures: fakeworker.Failures{ErrorRate: 1, ErrorStatus: http.StatusServiceUnavailable}})
		require.NoError(t, err)
		defer bad.Stop()
		var prefill, decode []string
		for _, w := range cl.Workers() {
			switch w.Mode() {
			case engine.RolePrefill:
				prefill = []string{"--prefill", w.URL(), fmt.Sprint(w.BootstrapPort())}
			case engine.RoleDecode:
				decode = []string{"--decode", w.URL()}
			}
		}
		args := append(append([]string{"--pd-disaggregation", "--dp-aware", "--retry-initial-backoff-ms", "1",
			"--cb-failure-threshold", "1000", "--decode", bad.URL()}, prefill...), decode...)
		base2, metrics, stop2, done2 := startServeMetrics(t, args...)
		for i := range 6 {
			status, body := postJSON(t, base2+"/generate", fmt.Sprintf(`{"text":"fresh prompt %d %s","sampling_params":{"max_new_tokens":2}}`, i, strings.Repeat("x", i)))
			require.Equal(t, http.StatusOK, status, body)
		}
		requireServeLoadsZero(t, base2, 12)
		resp, err := http.Get(metrics)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Contains(t, string(raw), `pdrouter_retries_total{route="/generate"}`, "requests were retried")
		assert.Contains(t, string(raw), `pdrouter_errors_total{kind="decode_status"}`)
		stop2()
		require.NoError(t, <-done2)
	})

	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// tenantFront is serve in front of two regular fakeworkers (llama3-8b-h100 timings), tenants
// named by X-SMG-Tenant-Id.
type tenantFront struct {
	url     string
	metrics string
	log     *syncBuffer
}

func startTenantFront(t *testing.T, ctx context.Context, edit func(*server.Config)) tenantFront {
	t.Helper()
	prof, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cl, err := fakeworker.StartCluster(ctx, fakeworker.ClusterConfig{Regular: 2, Worker: fakeworker.Config{
		Host: "127.0.0.1", Seed: 1, Profile: prof}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Stop(); _ = cl.Wait() })
	cfg := server.DefaultConfig()
	cfg.Seed, cfg.Policy, cfg.TrustTenantHeader = new(int64(1)), router.PolicyRoundRobin, true
	for _, w := range cl.Workers() {
		cfg.WorkerURLs = append(cfg.WorkerURLs, w.URL())
	}
	edit(&cfg)
	tf := tenantFront{log: &syncBuffer{}}
	srv, err := server.New(server.Options{Config: cfg, DecisionLog: tf.log})
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	require.NoError(t, srv.Start(sctx))
	front := httptest.NewServer(srv.Handler())
	mets := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(func() { front.Close(); mets.Close(); stop(); srv.Wait() })
	tf.url, tf.metrics = front.URL, mets.URL
	return tf
}

// streamTTFT sends a streamed /generate as tenant and returns its status and time to the first
// event, and the response head.
func streamTTFT(ctx context.Context, url, tenant string, body map[string]any, hdr map[string]string) (int, time.Duration, http.Header, string, error) {
	body["stream"] = true
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/generate", bytes.NewReader(raw))
	if err != nil {
		return 0, 0, nil, "", err
	}
	req.Header.Set("X-SMG-Tenant-Id", tenant)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, 0, resp.Header, string(out), nil
	}
	sc := bufio.NewScanner(resp.Body)
	var ttft time.Duration
	for sc.Scan() {
		if ttft == 0 && strings.HasPrefix(sc.Text(), "data:") {
			ttft = time.Since(start)
		}
	}
	return resp.StatusCode, ttft, resp.Header, "", sc.Err()
}

// TestIntegrationTenantFloodKeepsOthersTTFT: two tenants, one flooding. The calm tenant's
// requests (one client, one after another) are measured alone and with the flooder's 8
// clients sending long requests as fast as the router lets them (rounds of each, alternating): the flooder's entry bounds it
// to 2 requests in the router and 2000 tokens a second, so it gets 429s with Retry-After naming
// the limit, and the calm tenant's TTFT P99 stays within 1.5× of its solo run.
func TestIntegrationTenantFloodKeepsOthersTTFT(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tf := startTenantFront(t, ctx, func(c *server.Config) {
		c.MaxConcurrentRequests, c.QueueSize = 16, 64
		c.Tenants = []router.TenantSpec{
			{Name: "flood", Keys: []string{"header:flood"}, MaxConcurrentRequests: 2, TokensPerSecond: 2000},
			{Name: "calm", Keys: []string{"header:calm"}}}
	})
	// A prompt of its own each time (no prefix cache hit): TTFT is mostly its prefill.
	var asked atomic.Int64
	calmBody := func(int) map[string]any {
		return map[string]any{"text": fmt.Sprintf("calm question %d: %s", asked.Add(1), strings.Repeat("tell me about the weather ", 200)),
			"sampling_params": map[string]any{"max_new_tokens": 1}}
	}
	// Solo and flooded rounds alternate, so whatever else the machine runs meanwhile weighs on
	// both measures alike.
	var solo, flooded []float64
	calm := func(into *[]float64, n int) {
		for i := range n {
			status, ttft, _, out, err := streamTTFT(ctx, tf.url, "calm", calmBody(i), nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status, out)
			*into = append(*into, float64(ttft)/1e6)
		}
	}
	calm(new([]float64), 10) // warm the connections
	var ok, limited, noRetryAfter atomic.Int64
	var limitBody atomic.Value
	flood := func() (stop func()) {
		fctx, stopFlood := context.WithCancel(ctx)
		var flooders sync.WaitGroup
		for c := range 8 {
			flooders.Go(func() {
				pace := time.NewTicker(100 * time.Millisecond) // a client's own pace: at most 10 requests a second
				defer pace.Stop()
				for i := 0; ; i++ {
					body := map[string]any{"text": fmt.Sprintf("flood %d-%d", c, i),
						"sampling_params": map[string]any{"max_new_tokens": 200, "ignore_eos": true}}
					status, _, hdr, out, err := streamTTFT(fctx, tf.url, "flood", body, nil)
					switch {
					case err != nil && fctx.Err() != nil:
						return
					case status == http.StatusOK:
						ok.Add(1)
					case status == http.StatusTooManyRequests:
						limited.Add(1)
						limitBody.Store(out)
						if hdr.Get("Retry-After") == "" {
							noRetryAfter.Add(1)
						}
					}
					select {
					case <-fctx.Done():
						return
					case <-pace.C:
					}
				}
			})
		}
		before := limited.Load()
		testutil.Eventually(t, 10*time.Second, func() bool {
			return metricValue(t, tf.metrics+"/metrics", `pdrouter_tenant_queued{tenant="flood"}`)+
				metricValue(t, tf.metrics+"/metrics", `pdrouter_tenant_admitted_total{tenant="flood"}`) > 0 && limited.Load() > before
		}, "the flood under way")
		return func() { stopFlood(); flooders.Wait() }
	}
	const rounds, n = 8, 30
	for range rounds {
		calm(&solo, n)
		stop := flood()
		calm(&flooded, n)
		stop()
	}
	slices.Sort(solo)
	slices.Sort(flooded)
	soloP99, floodP99 := reports.Percentile(solo, 99), reports.Percentile(flooded, 99)
	t.Logf("calm TTFT ms: solo P50 %.1f P99 %.1f; with the flood P50 %.1f P99 %.1f (%.2f×); flood: %.0f admitted (%d finished before its round ended), %d answered 429",
		reports.Percentile(solo, 50), soloP99, reports.Percentile(flooded, 50), floodP99, floodP99/soloP99,
		metricValue(t, tf.metrics+"/metrics", `pdrouter_tenant_admitted_total{tenant="flood"}`), ok.Load(), limited.Load())
	assert.LessOrEqual(t, floodP99, 1.5*soloP99, "the calm tenant's TTFT P99 within 1.5× of its solo run")
	require.Positive(t, limited.Load(), "the flooder got 429s")
	assert.Zero(t, noRetryAfter.Load(), "every 429 carries Retry-After")
	assert.Contains(t, limitBody.Load(), "tenant flood")
	m := tf.metrics + "/metrics"
	assert.Positive(t, metricValue(t, m, `pdrouter_tenant_rejected_total{reason="tenant_concurrency",tenant="flood"}`)+
		metricValue(t, m, `pdrouter_tenant_rejected_total{reason="tenant_tokens",tenant="flood"}`))
	assert.Zero(t, metricValue(t, m, `pdrouter_tenant_rejected_total{reason="tenant_concurrency",tenant="calm"}`))
	assert.Equal(t, float64(10+2*rounds*n), metricValue(t, m, `pdrouter_tenant_admitted_total{tenant="calm"}`))
}

// TestIntegrationPriorityOvertakesQueued: with one slot held, three priority-0 requests queue,
// then one of priority 10; when the slot frees, the priority-10 request is routed first (the
// decision log's order), as SGLang's default polarity.
func TestIntegrationPriorityOvertakesQueued(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tf := startTenantFront(t, ctx, func(c *server.Config) { c.MaxConcurrentRequests, c.QueueSize = 1, 10 })
	m := tf.metrics + "/metrics"
	var wg sync.WaitGroup
	send := func(id string, prio, tokens int) {
		wg.Go(func() {
			body := map[string]any{"text": "question " + id, "priority": prio,
				"sampling_params": map[string]any{"max_new_tokens": tokens, "ignore_eos": true}}
			status, _, _, out, err := streamTTFT(ctx, tf.url, "", body, map[string]string{"X-Request-Id": id})
			assert.NoError(t, err)
			assert.Equal(t, http.StatusOK, status, out)
		})
	}
	send("hold", 0, 400) // about 3 s of decode: the others queue behind it
	testutil.Eventually(t, 5*time.Second, func() bool {
		return metricValue(t, m, `pdrouter_tenant_admitted_total{tenant="default"}`) == 1
	}, "the first request admitted")
	for i, id := range []string{"low-1", "low-2", "low-3", "high"} {
		prio := 0
		if id == "high" {
			prio = 10
		}
		send(id, prio, 4)
		testutil.Eventually(t, 5*time.Second, func() bool {
			return metricValue(t, m, `pdrouter_tenant_queued{tenant="default"}`) == float64(i+1)
		}, id+" queued")
	}
	wg.Wait()
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(tf.log.String()), "\n") {
		var d struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(line), &d))
		order = append(order, d.ID)
	}
	require.Equal(t, []string{"hold", "high", "low-1", "low-2", "low-3"}, order)
}

//go:build integration

package fakeworker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Integration tests: real loopback HTTP with timing tolerances (run without -race).

const (
	wantTTFT = 200 * time.Millisecond
	wantITL  = 20 * time.Millisecond
)

// hasText reports whether an event carries new reply text (content, text, or more cumulative
// generate text than prev), as the bench defines TTFT and ITL.
func hasText(t *testing.T, route wire.Route, data []byte, prev *int) bool {
	if wire.IsDone(data) {
		return false
	}
	var m struct {
		Text    string `json:"text"`
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(data, &m))
	switch route {
	case wire.Generate:
		if len(m.Text) > *prev {
			*prev = len(m.Text)
			return true
		}
		return false
	case wire.Chat:
		return len(m.Choices) > 0 && m.Choices[0].Delta.Content != ""
	}
	return len(m.Choices) > 0 && m.Choices[0].Text != ""
}

// measure streams body to url and returns TTFT (from send) and the mean gap between text events.
func measure(t *testing.T, route wire.Route, url, body string) (ttft, itl time.Duration, tokens int) {
	t.Helper()
	start := time.Now()
	resp, evs, err := stream(t, url, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var times []time.Time
	prev := 0
	for _, ev := range evs {
		if hasText(t, route, ev.data, &prev) {
			times = append(times, ev.at)
		}
	}
	require.GreaterOrEqual(t, len(times), 2)
	t.Logf("%s: TTFT %s, mean ITL %s over %d text events", url, times[0].Sub(start), times[len(times)-1].Sub(times[0])/time.Duration(len(times)-1), len(times))
	return times[0].Sub(start), times[len(times)-1].Sub(times[0]) / time.Duration(len(times)-1), len(times)
}

// within asserts that got is want within frac, plus however far the reference (ref, a timing
// of the same thing measured at the same moment on a bare paced server) landed from want.
func within(t *testing.T, want, got, ref time.Duration, frac float64, what string) {
	t.Helper()
	slack := (ref - want).Abs()
	assert.InDelta(t, float64(want), float64(got), frac*float64(want)+float64(slack),
		"%s: want %s ±%.0f%% + %s (the reference's own error in this run: %s), got %s", what, want, frac*100, slack, ref, got)
}

// reference is a bare SSE server paced by the fakeworker's own waker, with no engine or
// scheduler: a request gets a completions text event after ttft, then one every itl, n in
// all. Streamed at the same moment as a fakeworker, how far its timings land from (ttft, itl)
// is what this machine's scheduling and loopback add right then: the same-run reference the
// timing checks allow for, so that load moves both and fails neither (a loaded machine once
// gave a PD ITL of 23.3 ms against 20 ms ±10 %, where the reference would have been as late).
type reference struct {
	url       string
	ttft, itl time.Duration
	n         int
}

func startReference(t *testing.T, ttft, itl time.Duration, n int) *reference {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		fl := rw.(http.Flusher)
		wk := newWaker()
		defer wk.Close()
		start := time.Now()
		for i := range n {
			due := start.Add(ttft + time.Duration(i)*itl)
			for d := time.Until(due); d > 0; d = time.Until(due) {
				wk.Arm(d)
				select {
				case <-wk.C():
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(rw, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n")
			fl.Flush()
		}
		_, _ = io.WriteString(rw, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return &reference{url: srv.URL, ttft: ttft, itl: itl, n: n}
}

// timings are a stream's measured TTFT, mean ITL and end-to-end time.
type timings struct{ ttft, itl, e2e time.Duration }

// beside runs f while the reference streams one request, and returns the reference's timings.
func (r *reference) beside(t *testing.T, f func()) timings {
	t.Helper()
	var ref timings
	var text []time.Time
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { // no require here: it may not stop the test from another goroutine
		start := time.Now()
		var resp *http.Response
		if resp, err = testClient.Post(r.url, "application/json", nil); err != nil {
			return
		}
		defer resp.Body.Close()
		var evs []event
		evs, err = readEvents(resp.Body)
		ref.e2e = time.Since(start)
		for _, ev := range evs {
			if !wire.IsDone(ev.data) {
				text = append(text, ev.at)
			}
		}
		if len(text) > 0 {
			ref.ttft = text[0].Sub(start)
		}
		if len(text) > 1 {
			ref.itl = text[len(text)-1].Sub(text[0]) / time.Duration(len(text)-1)
		}
	})
	f()
	wg.Wait()
	require.NoError(t, err, "the reference stream")
	require.Len(t, text, r.n, "the reference's events")
	t.Logf("reference beside: TTFT %s, mean ITL %s, E2E %s", ref.ttft, ref.itl, ref.e2e)
	return ref
}

func TestIntegrationConstantTimingsRegular(t *testing.T) {
	w := startWorker(t, Config{Profile: engine.ConstantProfile(wantTTFT, wantITL)})
	ref := startReference(t, wantTTFT, wantITL, 11)
	for _, tc := range []struct {
		route wire.Route
		body  string
	}{
		{wire.Chat, `{"model":"m","messages":[{"role":"user","content":"time me"}],"max_tokens":11,"stream":true}`},
		{wire.Completions, `{"prompt":"time me","max_tokens":11,"stream":true}`},
		{wire.Generate, `{"text":"time me","sampling_params":{"max_new_tokens":11},"stream":true}`},
	} {
		t.Run(tc.route.String(), func(t *testing.T) {
			var ttft, itl time.Duration
			var n int
			r := ref.beside(t, func() { ttft, itl, n = measure(t, tc.route, w.URL()+tc.route.String(), tc.body) })
			assert.Equal(t, 11, n)
			within(t, wantTTFT, ttft, r.ttft, 0.10, "TTFT")
			within(t, wantITL, itl, r.itl, 0.10, "ITL")
		})
	}
	t.Run("non-streaming e2e", func(t *testing.T) {
		var e2e time.Duration
		r := ref.beside(t, func() {
			start := time.Now()
			status, _ := post(t, w.URL()+"/v1/completions", `{"prompt":"time me","max_tokens":11}`)
			e2e = time.Since(start)
			assert.Equal(t, http.StatusOK, status)
		})
		within(t, wantTTFT+10*wantITL, e2e, r.e2e, 0.10, "E2E")
	})
}

// The decode stream starts only after the prefill and the transfer: with the constant profile
// the decode's first token comes at the prefill's TTFT (plus the transfer), never before the
// prefill leg answered.
func TestIntegrationPDTimings(t *testing.T) {
	prof := engine.ConstantProfile(wantTTFT, wantITL)
	p := startWorker(t, Config{Mode: engine.RolePrefill, DPSize: 2, Profile: prof})
	d := startWorker(t, Config{Mode: engine.RoleDecode, DPSize: 2, Profile: prof})
	body := pdBody(`{"model":"m","messages":[{"role":"user","content":"pd timing"}],"max_tokens":11,"stream":true}`, p, 1234, "")
	start := time.Now()
	var prefillDone time.Time
	var wg sync.WaitGroup
	wg.Go(func() {
		status, _ := post(t, p.URL()+"/v1/chat/completions", body)
		assert.Equal(t, http.StatusOK, status)
		prefillDone = time.Now()
	})
	var ttft, itl time.Duration
	var n int
	r := startReference(t, wantTTFT, wantITL, 11).beside(t, func() { ttft, itl, n = measure(t, wire.Chat, d.URL()+"/v1/chat/completions", body) })
	wg.Wait()
	assert.Equal(t, 11, n)
	within(t, wantTTFT, ttft, r.ttft, 0.10, "PD TTFT")
	within(t, wantITL, itl, r.itl, 0.10, "PD ITL")
	assert.False(t, start.Add(ttft).Before(prefillDone.Add(-5*time.Millisecond)), "decode streamed before the prefill leg finished")
}

func TestIntegrationSpeedupAndSlowFactor(t *testing.T) {
	// Model timings chosen so that the expected real timings are never below 200 ms / 20 ms,
	// keeping scheduling noise on this shared machine well inside the tolerance.
	for _, tc := range []struct {
		name      string
		cfg       Config
		ttft, itl time.Duration // model
		want      time.Duration // real TTFT; real ITL is want/10
	}{
		{"speedup 2", Config{Speedup: 2}, 2 * wantTTFT, 2 * wantITL, wantTTFT},
		{"slow factor 2", Config{Failures: Failures{SlowFactor: 2}}, wantTTFT, wantITL, 2 * wantTTFT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Profile = engine.ConstantProfile(tc.ttft, tc.itl)
			w := startWorker(t, tc.cfg)
			var ttft, itl time.Duration
			r := startReference(t, tc.want, tc.want/10, 6).beside(t, func() {
				ttft, itl, _ = measure(t, wire.Completions, w.URL()+"/v1/completions", `{"prompt":"x","max_tokens":6,"stream":true}`)
			})
			within(t, tc.want, ttft, r.ttft, 0.10, "TTFT")
			within(t, tc.want/10, itl, r.itl, 0.10, "ITL")
		})
	}
}

func TestIntegrationBootstrapTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	p := startWorker(t, Config{Mode: engine.RolePrefill})
	d := startWorker(t, Config{Mode: engine.RoleDecode, BootstrapTimeout: timeout})
	var elapsed time.Duration
	r := startReference(t, timeout, wantITL, 2).beside(t, func() {
		start := time.Now()
		status, raw := post(t, d.URL()+"/generate", pdBody(`{"text":"nobody prefills me"}`, p, 55, ""))
		elapsed = time.Since(start)
		assert.Equal(t, http.StatusInternalServerError, status)
		assert.Contains(t, string(raw), "room 55")
	})
	within(t, timeout, elapsed, r.ttft, 0.25, "bootstrap timeout")
}

func TestIntegrationClusterStartsFast(t *testing.T) {
	start := time.Now()
	c, err := StartCluster(context.Background(), ClusterConfig{Prefill: 2, Decode: 2, Worker: Config{DPSize: 4}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Stop(); c.Wait() })
	for _, w := range c.Workers() {
		status, raw := get(t, w.URL()+"/get_server_info")
		require.Equal(t, http.StatusOK, status)
		assert.EqualValues(t, 4, decodeJSON(t, raw)["dp_size"])
	}
	assert.Less(t, time.Since(start), 2*time.Second, "cluster up and answering")
}

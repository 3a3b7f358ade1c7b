//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashClock is a slog handler that records when a fakeworker logs its crash: the kill time,
// taken as the worker dies (before its listeners and connections close).
type crashClock struct{ at chan time.Time }

func (c crashClock) Enabled(context.Context, slog.Level) bool { return true }
func (c crashClock) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c crashClock) WithGroup(string) slog.Handler            { return c }
func (c crashClock) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "fakeworker crashed" {
		select {
		case c.at <- r.Time:
		default:
		}
	}
	return nil
}

// metricValue reads one series (name{labels}, labels as Prometheus writes them) from /metrics;
// 0 when absent.
func metricValue(t *testing.T, metricsURL, series string) float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	return 0
}

// metricSum adds the values of the series of name whose labels contain every one of want and
// none of skip.
func metricSum(t *testing.T, metricsURL, name string, want []string, skip string) float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	sum := 0.0
lines:
	for _, line := range strings.Split(string(raw), "\n") {
		rest, found := strings.CutPrefix(line, name+"{")
		if !found || (skip != "" && strings.Contains(rest, skip)) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(rest, w) {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndex(rest, " ")+1:], 64)
		require.NoError(t, err, line)
		sum += f
	}
	return sum
}

// workerState reads the state /workers shows for url.
func workerState(t *testing.T, base, url string) string {
	t.Helper()
	resp, err := http.Get(base + "/workers")
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct {
		Workers []struct {
			URL   string `json:"url"`
			State string `json:"state"`
		} `json:"workers"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	for _, w := range got.Workers {
		if w.URL == url {
			return w.State
		}
	}
	return ""
}

// Killing a worker under load: it is out of rotation within 2 s of the kill (a refused or reset
// request probes it at once; the failed probe takes it out, with --health-check-interval-secs
// 30 and the breaker's ten failures far away), no request is routed to it after, and every
// stream the kill cut counts as an error in the metrics.
func TestIntegrationKilledWorkerLeavesRotation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	killed := make(chan time.Time, 1)
	// The victim decodes five times slower than the others and dies on its fourth request. Its
	// first requests come with the clients' first wave (8 clients, round robin over 3 workers:
	// 2 or 3 reach it) and stream for about 1.2 s; the fourth can only come once a client is
	// done on a fast worker (about 0.25 s), so the crash always finds streams past their first
	// byte on the victim. (Crashing on its 31st request cut none on a CI run: the clients'
	// equal-length streams ran in waves, and the 31st arrived when the victim was empty.)
	var urls []string
	var victim *fakeworker.Worker
	for i := range 3 {
		cfg := fakeworker.Config{Profile: engine.ConstantProfile(5*time.Millisecond, 2*time.Millisecond), Seed: uint64(i + 1)}
		if i == 0 {
			cfg.Profile = engine.ConstantProfile(5*time.Millisecond, 10*time.Millisecond)
			cfg.Failures.CrashAfter = 3
			cfg.Logger = slog.New(crashClock{at: killed})
		}
		w, err := fakeworker.Start(ctx, cfg)
		require.NoError(t, err)
		defer func() { w.Stop(); _ = w.Wait() }()
		if i == 0 {
			victim = w
		}
		urls = append(urls, w.URL())
	}
	args := append([]string{"--worker-urls"}, urls...)
	args = append(args, "--policy", "round_robin", "--retry-initial-backoff-ms", "1",
		"--health-check-interval-secs", "30", "--seed", "5")
	base, metricsURL, _, _ := startServeMetrics(t, args...)
	dead := victim.URL()

	// The load: 8 clients streaming /generate back to back until told to stop. A stream whose
	// body carries an error event was cut; its start time says whether it began after the
	// worker left rotation.
	var ok, cut, other atomic.Int64
	var outAt atomic.Int64 // unix ns when the worker was seen out of rotation; 0 before
	var lateFailures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				started := time.Now().UnixNano()
				// Long streams (120 tokens): a stream cut before its first byte is retried
				// elsewhere and shows nothing about cut streams.
				body := fmt.Sprintf(`{"text":"client %d request %d","sampling_params":{"max_new_tokens":120},"stream":true}`, c, n)
				resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(body))
				if err != nil {
					other.Add(1)
					continue
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				failed := resp.StatusCode != http.StatusOK || strings.Contains(string(raw), `"error"`)
				switch {
				case resp.StatusCode != http.StatusOK:
					other.Add(1)
				case failed:
					cut.Add(1)
				default:
					ok.Add(1)
				}
				if o := outAt.Load(); failed && o != 0 && started > o {
					lateFailures.Add(1)
				}
			}
		}()
	}
	var killAt time.Time
	select {
	case killAt = <-killed:
	case <-time.After(60 * time.Second):
		close(stop)
		wg.Wait()
		t.Fatal("the victim never crashed: no load reached it")
	}
	// Poll /workers until the victim is out (nothing else tells when the probe lands).
	deadline := killAt.Add(30 * time.Second)
	for workerState(t, base, dead) == "healthy" {
		require.True(t, time.Now().Before(deadline), "the killed worker is still healthy 30 s after the kill")
		time.Sleep(2 * time.Millisecond)
	}
	out := time.Now()
	outAt.Store(out.UnixNano())
	state := workerState(t, base, dead)
	routed := metricValue(t, metricsURL, `sgl_router_processed_requests_total{worker="`+dead+`"}`)

	// Keep the load on for 200 more successful streams, then stop.
	for target := ok.Load() + 200; ok.Load() < target; {
		require.True(t, time.Now().Before(out.Add(60*time.Second)), "the load stalled after the kill")
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	took := out.Sub(killAt)
	t.Logf("killed worker out of rotation %v after the kill (state %s); streams: %d ok, %d cut, %d other", took, state, ok.Load(), cut.Load(), other.Load())
	assert.Less(t, took, 2*time.Second, "out of rotation within 2 s of the kill")
	assert.Equal(t, "unhealthy", state, "taken out by the failed probe, not by the breaker's ten failures")
	assert.Equal(t, routed, metricValue(t, metricsURL, `sgl_router_processed_requests_total{worker="`+dead+`"}`), "no request was routed to the killed worker once it was out")
	assert.Zero(t, lateFailures.Load(), "no request started after it left rotation failed")
	assert.Zero(t, other.Load(), "refused attempts are retried elsewhere: every request was answered 200")
	require.Positive(t, cut.Load(), "the kill cut streams in flight (else this test shows nothing about them)")
	assert.Equal(t, float64(cut.Load()), metricValue(t, metricsURL, `pdrouter_errors_total{kind="regular_stream"}`), "every cut stream is an error")
	// As the client saw them (200) in requests_total, and as stream errors under the status of
	// the error event: 502 for a cut connection, the worker's own code when it managed to send
	// an error event first.
	assert.Zero(t, metricSum(t, metricsURL, "pdrouter_requests_total", []string{`route="/generate"`}, `code="200"`), "every request was sent 200")
	assert.Equal(t, float64(cut.Load()), metricSum(t, metricsURL, "pdrouter_stream_errors_total", []string{`route="/generate"`}, ""), "every cut stream is a stream error")
	assert.Equal(t, float64(cut.Load()), metricSum(t, metricsURL, "sgl_router_request_errors_total", []string{`route="/generate"`}, ""))
	assert.Equal(t, float64(cut.Load()), metricValue(t, metricsURL, `pdrouter_worker_errors_total{kind="stream",role="regular",worker="`+dead+`"}`))
}

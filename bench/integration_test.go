//go:build integration

package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// accuracyConfig is a random workload of short prompts and out output tokens, fixed lengths.
func accuracyConfig(url string, out int) Config {
	p := workloads.DefaultParams()
	p.Workload, p.NumPrompts, p.InputLen, p.OutputLen = workloads.WorkloadRandom, 100000, 16, out
	return Config{URL: url, Workload: p, Load: workloads.DefaultLoadParams(), RequestTimeout: 30 * time.Second}
}

// Against a server with constant TTFT 100 ms and ITL 20 ms, the reported TTFT P50 is within
// ±3 ms and TPOT P50 within ±1 ms at concurrency 1, 16 and 64 (issue 7), both compared with
// what the server actually did: at 64 streams its timers, sharing two cores with the bench and
// whatever else loads the machine, fire late (server-side TTFT P50 103 ms on a busy machine),
// which is the server's delay, faithfully measured, not the bench's error. The server's own
// TTFT must not be early (a timer never fires before its time; a late first token makes the
// server's own TPOT a little short of 20 ms, so only its TTFT is checked that way). Each client
// first sends one unrecorded request, which opens its connection: the server's clock starts
// when a request arrives, the bench's when it is sent, so a measured request that also dialled
// would add the connect time to one side only (up to 9 ms at c64 beside two CPU hogs and
// another test process, where the warm connections' P50 stayed within 1.6 ms).
func TestIntegrationAccuracyConstantServer(t *testing.T) {
	f := &fakeSSE{TTFT: 100 * time.Millisecond, ITL: 20 * time.Millisecond}
	srv := startFake(t, f)
	for _, tc := range []struct {
		clients, requests int
	}{{1, 10}, {16, 64}, {64, 192}} {
		cfg := accuracyConfig(srv.URL, 8)
		cfg.Load.Concurrency = []int{tc.clients}
		cfg.Load.Requests, cfg.Load.Warmup = tc.requests, tc.clients
		f.takeFirsts()
		f.takeTPOTs()
		res := runOK(t, cfg)
		l := res.Levels[0]
		require.Zero(t, l.Errors, l.ErrorsByKind)
		require.Equal(t, tc.requests, l.Requests)
		firsts := f.takeFirsts()
		require.Len(t, firsts, tc.requests+cfg.Load.Warmup)
		served := reports.Summarize(durationsMs(firsts)).P50
		servedTPOT := reports.Summarize(durationsMs(f.takeTPOTs())).P50
		t.Logf("c%d: TTFT p50 %.2f ms (server-side %.2f), TPOT p50 %.3f ms (server-side %.3f), E2E p50 %.1f ms",
			tc.clients, l.TTFTMs.P50, served, l.TPOTMs.P50, servedTPOT, l.E2EMs.P50)
		assert.InDelta(t, served, l.TTFTMs.P50, 3, "c%d TTFT P50 against the server's own", tc.clients)
		assert.GreaterOrEqual(t, served, 100.0, "c%d: the server's own TTFT P50 is not early", tc.clients)
		assert.InDelta(t, servedTPOT, l.TPOTMs.P50, 1, "c%d TPOT P50 against the server's own", tc.clients)
	}
}

// Open loop at a constant 100 requests/s for 5 s achieves the rate within ±2 % (the 30 s run
// of issue 7, against the fakeworker, is in cmd/router). The level's duration runs to the last
// response, so its requests/s also carries the last request's latency, which a loaded machine
// stretches: the rate the sends kept is (requests − 1) ÷ (duration − the last request's E2E),
// taken between the same with the level's typical (P50) and its largest E2E (measured in the
// same run); that range must reach within 2 % of 100.
func TestIntegrationOpenLoopRate(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{TTFT: 10 * time.Millisecond, ITL: 5 * time.Millisecond}
	srv := startFake(t, f)
	cfg := accuracyConfig(srv.URL, 4)
	cfg.Load.Rates = []float64{100}
	cfg.Load.Arrival = workloads.ArrivalConstant
	cfg.Load.Duration = 5 * time.Second
	res := runOK(t, cfg)
	l := res.Levels[0]
	require.Zero(t, l.Errors, l.ErrorsByKind)
	t.Logf("r100: %d requests in %.3f s: %.3f req/s; queue p99 %.2f ms", l.Requests, l.DurationS, l.Throughput.ReqS, l.QueueMs.P99)
	sends := float64(l.Requests - 1)
	fastest, slowest := sends/(l.DurationS-l.E2EMs.Max/1e3), sends/(l.DurationS-min(l.E2EMs.P50, l.E2EMs.Mean)/1e3)
	t.Logf("the sends' rate: %.2f–%.2f req/s (E2E P50 %.1f ms, max %.1f ms)", slowest, fastest, l.E2EMs.P50, l.E2EMs.Max)
	assert.GreaterOrEqual(t, fastest, 98.0, "the sends kept 100 req/s within 2 %%")
	assert.LessOrEqual(t, slowest, 102.0, "the sends kept 100 req/s within 2 %%")
	assert.InDelta(t, 500, l.Requests, 2)
}

// At 500 requests/s against a server whose first token leaves 20 ms after the request arrives,
// the bench's TTFT P50 is within 0.5 ms of the server's own measurement of when it flushed
// that token (same process, same clock): the bench's overhead, send and receive paths
// included. The server's timers run late on a loaded machine, so the comparison is against
// the server's actual flush, not the nominal 20 ms (which is logged).
func TestIntegrationOverheadAt500PerSecond(t *testing.T) {
	var mu sync.Mutex
	var flushed []float64 // ms from the handler's start to the first token's flush
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fl.Flush()
		for i := range 4 {
			time.Sleep(time.Until(start.Add(20*time.Millisecond + time.Duration(i)*5*time.Millisecond)))
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\" w%d\"}}]}\n\n", i)
			fl.Flush()
			if i == 0 {
				d := ms(time.Since(start))
				mu.Lock()
				flushed = append(flushed, d)
				mu.Unlock()
			}
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	cfg := accuracyConfig(srv.URL, 4)
	cfg.Load.Rates = []float64{500}
	cfg.Load.Arrival = workloads.ArrivalConstant
	cfg.Load.Duration = 4 * time.Second
	res := runOK(t, cfg)
	l := res.Levels[0]
	require.Zero(t, l.Errors, l.ErrorsByKind)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(flushed)
	server := reports.Percentile(flushed, 50)
	t.Logf("r500: bench TTFT p50 %.3f ms, server first flush p50 %.3f ms (nominal 20 ms)", l.TTFTMs.P50, server)
	assert.InDelta(t, server, l.TTFTMs.P50, 0.5)
}

// durationsMs converts durations to milliseconds.
func durationsMs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / 1e6
	}
	return out
}

// takeFirsts returns the server-side times to first event recorded so far, sorted, and
// forgets them.
func (f *fakeSSE) takeFirsts() []time.Duration { return f.take(&f.firsts) }

// takeTPOTs returns the server-side time per output token of the streams recorded so far,
// sorted, and forgets them.
func (f *fakeSSE) takeTPOTs() []time.Duration { return f.take(&f.tpots) }

// take returns *list sorted and empties it, under f.mu.
func (f *fakeSSE) take(list *[]time.Duration) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := *list
	*list = nil
	slices.Sort(out)
	return out
}

//go:build unix

package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
)

// BenchmarkUpstreamSSE measures the upstream path on a production-shaped load, through the
// whole router (handler, upstream transport, relay, flush policy): a worker that takes 2 ms to
// its first event, then streams 256 SSE events 250 µs apart (flushing each, like SGLang), 8
// clients in a closed loop (the router well below saturation). One op is one request read to
// its end. Reported: process CPU per request (router, worker and client in one process) and
// the client's time to first event and to the end, P50/P99. In issue 26's A/B of the h1
// transport against net/http's (commit 9541a77 has both arms) it saw no difference within
// noise, in one process; BenchmarkProxy, the router as its own process beside nginx, then
// showed net/http costing 11-18 % more router CPU per request, and the h1 transport stayed.
func BenchmarkUpstreamSSE(b *testing.B) {
	const events, gap, prefill, clients = 256, 250 * time.Microsecond, 2 * time.Millisecond, 8
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/generate" {
			return // health probes
		}
		time.Sleep(prefill)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range events {
			if i > 0 {
				time.Sleep(gap)
			}
			_, _ = fmt.Fprintf(w, "data: {\"text\":\"tok%d\",\"meta_info\":{\"completion_tokens\":%d}}\n\n", i, i+1)
			f.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer worker.Close()
	idle := 3 * time.Second
	cfg := DefaultConfig()
	cfg.Policy = router.PolicyRoundRobin
	cfg.WorkerURLs = []string{worker.URL}
	cfg.Seed = new(int64(1))
	s, err := New(Options{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(s.Handler())
	defer func() { front.Close(); cancel(); s.Wait() }()
	client := &http.Client{Transport: newTransport(idle)}
	defer client.CloseIdleConnections()
	body := `{"text":"a prompt of a few words","stream":true,"sampling_params":{"max_new_tokens":256}}`
	one := func(buf []byte) (ttft, total time.Duration, err error) {
		start := time.Now()
		resp, err := client.Post(front.URL+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 && ttft == 0 {
				ttft = time.Since(start)
			}
			if err == io.EOF {
				return ttft, time.Since(start), nil
			}
			if err != nil {
				return 0, 0, err
			}
		}
	}
	one(make([]byte, 32<<10)) // warm the pools
	var mu sync.Mutex
	var ttfts, totals []time.Duration
	b.ReportAllocs()
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0))) // × GOMAXPROCS goroutines
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 32<<10)
		for pb.Next() {
			ttft, total, err := one(buf)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			ttfts, totals = append(ttfts, ttft), append(totals, total)
			mu.Unlock()
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(percentile(ttfts, 0.50), "ttft-p50-µs")
	b.ReportMetric(percentile(ttfts, 0.99), "ttft-p99-µs")
	b.ReportMetric(percentile(totals, 0.50), "e2e-p50-µs")
	b.ReportMetric(percentile(totals, 0.99), "e2e-p99-µs")
}

// processCPU is the CPU time (user + system) this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the q-quantile of ds in µs (nearest rank).
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds())
}

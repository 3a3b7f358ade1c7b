package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pdrouter/pdrouter/router"
)

// BenchmarkHotPath measures the router's per-request cost in-process (router, instant worker
// and client in one process; the client's and worker's costs are included): closed loop, 16
// concurrent small streamed chat requests. mode=direct sends the same requests to the worker
// without the router: the router's own allocations per request are regular's (or pd's) minus
// direct's. The -traced modes run with --enable-trace, exporting to a receiver in the process
// that reads and drops the batches: what tracing costs when it is on. Profile it with
// -cpuprofile to find hot spots.
func BenchmarkHotPath(b *testing.B) {
	for _, mode := range []string{"direct", "regular", "pd", "regular-traced", "pd-traced"} {
		b.Run("mode="+mode, func(b *testing.B) {
			_, wurl := newInstantWorker(b, false)
			_, purl := newInstantWorker(b, true)
			cfg := DefaultConfig()
			cfg.Policy = router.PolicyRoundRobin
			if strings.HasPrefix(mode, "pd") {
				cfg.PDDisaggregation = true
				cfg.Prefill = []router.PrefillWorker{{URL: purl}}
				cfg.Decode = []string{wurl}
			} else {
				cfg.WorkerURLs = []string{wurl}
			}
			cfg.Seed = new(int64(1))
			if strings.HasSuffix(mode, "-traced") {
				rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
				defer rcv.Close()
				cfg.EnableTrace, cfg.OTLPTracesEndpoint = true, rcv.URL
			}
			url := wurl
			if mode != "direct" {
				s, err := New(Options{Config: cfg})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if err := s.Start(ctx); err != nil {
					b.Fatal(err)
				}
				front := httptest.NewServer(s.Handler())
				defer front.Close()
				url = front.URL
			}
			lc := newLoadClient()
			work := make(chan struct{})
			var wg sync.WaitGroup
			var errs sync.Map
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						if _, err := lc.one(url); err != nil {
							errs.Store(err.Error(), true)
						}
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				work <- struct{}{}
			}
			close(work)
			wg.Wait()
			errs.Range(func(k, _ any) bool { b.Error(fmt.Sprint(k)); return false })
		})
	}
}

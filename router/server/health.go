package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
)

// healthChecker probes every registered worker's health endpoint and feeds the results into
// the router core's health-threshold machines (SPEC §1.6). Unhealthy workers are skipped by
// the policies, never removed.
type healthChecker struct {
	Router   *router.Router
	Client   *http.Client
	Endpoint string        // --health-check-endpoint, e.g. /health
	Timeout  time.Duration // --health-check-timeout-secs, per probe
	Interval time.Duration // --health-check-interval-secs, between rounds
	APIKey   string        // sent as a bearer token when set
	Now      func() time.Time
	// OnFlip, if set, is called when a worker's verdict changes (for logs).
	OnFlip func(url string, healthy bool)
}

// checkAll probes every registered worker once, concurrently, and returns when all probes
// are done. Draining workers are not probed: they take no new requests whatever the verdict.
func (h *healthChecker) checkAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range h.Router.Workers() {
		if w.State == router.WorkerDraining {
			continue
		}
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			ok := h.probe(ctx, url)
			if ctx.Err() != nil {
				return // shutting down: a cancelled probe says nothing about the worker
			}
			flipped, err := h.Router.ObserveHealth(url, ok, h.Now())
			if err == nil && flipped && h.OnFlip != nil {
				h.OnFlip(url, ok)
			}
		}(w.URL)
	}
	wg.Wait()
}

func (h *healthChecker) probe(ctx context.Context, url string) bool { return h.check(ctx, url) == nil }

// check probes url's health endpoint once and says why it failed.
func (h *healthChecker) check(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+h.Endpoint, nil)
	if err != nil {
		return err
	}
	if h.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.APIKey)
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", h.Endpoint, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("GET %s: status %d", h.Endpoint, resp.StatusCode)
	}
	return nil
}

// startingProbeInterval separates the probes of workers that have not passed one yet: a
// worker coming up takes traffic within a second, not a whole --health-check-interval-secs.
const startingProbeInterval = time.Second

// checkStarting probes the workers still starting once, concurrently, and returns why each
// that failed did.
func (h *healthChecker) checkStarting(ctx context.Context) map[string]error {
	var mu sync.Mutex
	failed := map[string]error{}
	var wg sync.WaitGroup
	for _, w := range h.Router.Workers() {
		if w.State != router.WorkerStarting {
			continue
		}
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			err := h.check(ctx, url)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				mu.Lock()
				failed[url] = err
				mu.Unlock()
			}
			flipped, rerr := h.Router.ObserveHealth(url, err == nil, h.Now())
			if rerr == nil && flipped && h.OnFlip != nil {
				h.OnFlip(url, err == nil)
			}
		}(w.URL)
	}
	wg.Wait()
	return failed
}

// Run probes every worker every Interval, and starting workers every second, until ctx is
// done.
func (h *healthChecker) Run(ctx context.Context) {
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	fast := time.NewTicker(startingProbeInterval)
	defer fast.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.checkAll(ctx)
		case <-fast.C:
			h.checkStarting(ctx)
		}
	}
}

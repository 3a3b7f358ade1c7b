package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

	once        sync.Once
	suspects    chan string     // workers a request could not reach, for Run to probe at once
	mu          sync.Mutex      // protects probing and recovering
	probing     map[string]bool // workers with a suspect probe queued or running
	recovering  map[string]*recovery
	recoverBusy atomic.Bool // a checkFailed round is running (Run starts at most one at a time)
}

// recovery is the probe schedule of a worker out of rotation (unhealthy or breaker open), kept
// while a pass has it on probation (breaker half-open), so that a breaker that opens again
// goes on with the schedule rather than starting it over.
type recovery struct {
	next  time.Time     // when to probe it next
	delay time.Duration // the wait after the next probe that fails, or that grants probation
	down  bool          // a probe failed since it left rotation: a pass now means it came back
}

// Probes of a worker out of rotation back off from recoveryFirstProbe to recoveryMaxProbe
// (never past --health-check-interval-secs): a worker restarted after any outage is seen within
// recoveryMaxProbe plus one probe per --health-success-threshold, not a whole interval
// (60 s by default) later, for one GET every few seconds per failed worker.
const (
	recoveryFirstProbe = time.Second
	recoveryMaxProbe   = 3 * time.Second // with --health-success-threshold 2: back within 4 s of a restart, under the 5 s of issue 45
)

// init makes the suspect queue (the struct is built as a literal).
func (h *healthChecker) init() {
	h.once.Do(func() {
		h.suspects = make(chan string, 64)
		h.probing = map[string]bool{}
		h.recovering = map[string]*recovery{}
	})
}

// suspect asks Run to probe url now: a request to it was refused or reset. A failed probe takes
// the worker out of rotation at once (router.ObserveFailureProbe), so a dead worker stops
// taking requests within one probe of the first failure instead of after the breaker's
// --cb-failure-threshold failures or the next scheduled probe. One probe per worker at a time:
// a burst of failures costs one GET. Never blocks.
func (h *healthChecker) suspect(url string) {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probing[url] {
		return
	}
	select {
	case h.suspects <- url:
		h.probing[url] = true
	default: // the queue is full: those probes come first, this one with the next failure
	}
}

// probeSuspect probes a suspected worker and feeds the result to the router.
func (h *healthChecker) probeSuspect(ctx context.Context, url string) {
	defer func() {
		h.mu.Lock()
		delete(h.probing, url)
		h.mu.Unlock()
	}()
	err := h.check(ctx, url)
	if ctx.Err() != nil {
		return
	}
	cause := ""
	if err != nil {
		cause = err.Error()
	}
	flipped, rerr := h.Router.ObserveFailureProbe(url, err == nil, h.Now(), cause)
	if rerr == nil && flipped && h.OnFlip != nil {
		h.OnFlip(url, false)
	}
}

// connFailure reports whether err, a request's transport error, says the worker's end of the
// connection is gone: refused, reset, or closed mid-response. Timeouts and our own
// cancellations say nothing about the worker.
func connFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
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
			perr := h.check(ctx, url)
			if ctx.Err() != nil {
				return // shutting down: a cancelled probe says nothing about the worker
			}
			flipped, err := h.Router.ObserveHealth(url, perr, h.Now())
			if err == nil && flipped && h.OnFlip != nil {
				h.OnFlip(url, perr == nil)
			}
		}(w.URL)
	}
	wg.Wait()
}

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
			flipped, rerr := h.Router.ObserveHealth(url, err, h.Now())
			if rerr == nil && flipped && h.OnFlip != nil {
				h.OnFlip(url, err == nil)
			}
		}(w.URL)
	}
	wg.Wait()
	return failed
}

// checkFailed probes, once each and concurrently, the workers out of rotation (unhealthy or
// breaker open) whose turn has come at h.Now(), and returns when the probes are done. The
// schedule backs off per worker from recoveryFirstProbe, doubling after each failed probe up
// to recoveryMaxProbe (or Interval, if shorter); a passing probe of a worker that failed one
// brings the next back to recoveryFirstProbe, so the --health-success-threshold passes a
// recovery needs come a second apart. Results go to the health machine as scheduled probes' do
// (ObserveHealth, whose pass also half-opens an open breaker). A worker whose breaker opened
// while its health endpoint kept answering (a hang, a broken model: no probe failed) is put on
// probation by each pass too — at most --cb-success-threshold requests at once — but each such
// grant doubles the wait before the next (up to recoveryMaxProbe): a worker that recovered is
// back within seconds, not at the breaker's 60 s timeout, and one still broken takes its
// probation share at most once per recoveryMaxProbe.
func (h *healthChecker) checkFailed(ctx context.Context) {
	h.init()
	now := h.Now()
	maxDelay := min(recoveryMaxProbe, h.Interval)
	type due struct {
		url       string
		unhealthy bool
		rec       *recovery
	}
	var todo []due
	h.mu.Lock()
	keep := map[string]bool{}
	for _, w := range h.Router.Workers() {
		if w.State != router.WorkerUnhealthy && w.State != router.WorkerBreakerOpen {
			// On probation after a pass: should its breaker open again, the schedule goes on.
			keep[w.URL] = w.State == router.WorkerHealthy && w.Breaker == router.BreakerHalfOpen
			continue
		}
		keep[w.URL] = true
		rec := h.recovering[w.URL]
		if rec == nil { // it just left rotation: first probe a second from now
			rec = &recovery{next: now.Add(recoveryFirstProbe), delay: recoveryFirstProbe}
			h.recovering[w.URL] = rec
		}
		if !now.Before(rec.next) {
			todo = append(todo, due{w.URL, w.State == router.WorkerUnhealthy, rec})
		}
	}
	for url := range h.recovering {
		if !keep[url] {
			delete(h.recovering, url) // back in rotation (or gone): its schedule starts over next time
		}
	}
	h.mu.Unlock()

	var wg sync.WaitGroup
	for _, d := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := h.check(ctx, d.url)
			if ctx.Err() != nil {
				return
			}
			at := h.Now()
			h.mu.Lock()
			if err != nil {
				d.rec.down = true
			}
			if err == nil && (d.unhealthy || d.rec.down) {
				d.rec.delay = recoveryFirstProbe // came back: the next passes a second apart
			} else {
				d.rec.delay = min(2*d.rec.delay, maxDelay) // still down, or probation granted
			}
			d.rec.next = at.Add(d.rec.delay)
			h.mu.Unlock()
			flipped, rerr := h.Router.ObserveHealth(d.url, err, at)
			if rerr == nil && flipped && h.OnFlip != nil {
				h.OnFlip(d.url, err == nil)
			}
		}()
	}
	wg.Wait()
}

// Run probes every worker every Interval, starting workers every second, workers out of
// rotation on checkFailed's schedule, and suspected ones (suspect) at once, until ctx is done.
func (h *healthChecker) Run(ctx context.Context) {
	h.init()
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	fast := time.NewTicker(startingProbeInterval)
	defer fast.Stop()
	var probes sync.WaitGroup
	defer probes.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case url := <-h.suspects:
			probes.Add(1)
			go func() { defer probes.Done(); h.probeSuspect(ctx, url) }()
		case <-t.C:
			h.checkAll(ctx)
		case <-fast.C:
			if h.recoverBusy.CompareAndSwap(false, true) { // a probe may take Timeout: never two rounds at once
				probes.Add(1)
				go func() {
					defer probes.Done()
					defer h.recoverBusy.Store(false)
					h.checkFailed(ctx)
				}()
			}
			h.checkStarting(ctx)
		}
	}
}

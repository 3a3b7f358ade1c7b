package router

import (
	"fmt"
	"time"
)

// HealthConfig holds the health-check settings (SPEC §1.6, [Config.Health]): how the prober
// asks each worker, and the thresholds of its [Health] machine.
type HealthConfig struct {
	// Interval is the time between two probes of a worker (default 60 s).
	Interval time.Duration
	// Timeout bounds one probe (default 5 s); the live prober's alone.
	Timeout time.Duration
	// Endpoint is the path probed on each worker (default /health); the live prober's alone.
	Endpoint string
	// FailureThreshold consecutive failed probes mark a healthy worker unhealthy (default 3).
	FailureThreshold int
	// SuccessThreshold consecutive passed probes mark an unhealthy worker healthy (default 2).
	SuccessThreshold int
}

// Health is one worker's health-threshold machine, fed by probe results. A new worker starts
// healthy: it is registered only after it answered discovery. Not safe for concurrent use: the
// [Router] guards it.
type Health struct {
	cfg       HealthConfig
	healthy   bool
	starting  bool // not yet passed a probe (NewStartingHealth): the first pass makes it healthy
	failures  int  // consecutive failed probes
	successes int  // consecutive passed probes
}

// NewHealth returns a healthy machine.
func NewHealth(cfg HealthConfig) *Health { return &Health{cfg: cfg, healthy: true} }

// NewStartingHealth returns the machine of a worker not yet probed: unhealthy until its first
// passing probe, which makes it healthy at once (SuccessThreshold applies to recoveries).
func NewStartingHealth(cfg HealthConfig) *Health { return &Health{cfg: cfg, starting: true} }

// Starting reports whether the worker has never passed a probe.
func (h *Health) Starting() bool { return h.starting }

// Healthy reports the current verdict.
func (h *Health) Healthy() bool { return h.healthy }

// Observe feeds one probe result and reports whether the verdict flipped.
func (h *Health) Observe(ok bool) (flipped bool) {
	if h.starting {
		if !ok {
			h.failures++
			return false
		}
		h.starting, h.healthy, h.failures, h.successes = false, true, 0, 1
		return true
	}
	if ok {
		h.failures = 0
		h.successes++
		if !h.healthy && h.successes >= h.cfg.SuccessThreshold {
			h.healthy = true
			return true
		}
		return false
	}
	h.successes = 0
	h.failures++
	if h.healthy && h.failures >= h.cfg.FailureThreshold {
		h.healthy = false
		return true
	}
	return false
}

// Down marks the worker unhealthy at once, whatever FailureThreshold says, and reports whether
// the verdict flipped: for a probe that failed right after a request could not reach the
// worker (refused or reset connection), when two independent signals agree it is gone. It
// comes back as after any unhealthy verdict: SuccessThreshold passed probes in a row.
func (h *Health) Down() (flipped bool) {
	h.successes = 0
	h.failures = max(h.failures+1, h.cfg.FailureThreshold)
	if h.starting || !h.healthy {
		return false
	}
	h.healthy = false
	return true
}

// ObserveFailureProbe feeds the result of a probe sent because a request to the worker with
// url failed to connect or was reset: a failed one takes the worker out of rotation at once
// ([Health.Down]) rather than after --health-failure-threshold scheduled probes or
// --cb-failure-threshold failed requests; a passed one changes nothing (the failure was the
// connection's, not the worker's). It reports whether the verdict flipped.
func (r *Router) ObserveFailureProbe(url string, ok bool, now time.Time, cause string) (flipped bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	role, i, found := r.findLocked(url)
	if !found {
		return false, fmt.Errorf("router: health of %s: not registered", url)
	}
	if ok {
		return false, nil
	}
	w := r.workers[role][i]
	before := workerState(w, now)
	flipped = w.health.Down()
	r.noteLocked(w, before, now, "a request failed to reach it and a health probe then failed: "+cause)
	return flipped, nil
}

package router

import "time"

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

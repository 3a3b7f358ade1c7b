package router

import (
	"fmt"
	"time"
)

// BreakerState is a circuit breaker's state.
type BreakerState uint8

const (
	// BreakerClosed lets traffic through and counts consecutive failures.
	BreakerClosed BreakerState = iota
	// BreakerOpen blocks traffic until the timeout has elapsed.
	BreakerOpen
	// BreakerHalfOpen lets traffic through on probation: consecutive successes close the
	// breaker, any failure reopens it. At most SuccessThreshold requests are on probation at
	// once while another worker can take the rest (see [Breaker.Vacant]).
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("breaker_state(%d)", s)
}

// BreakerConfig parameterises a [Breaker] (SPEC §1.6).
type BreakerConfig struct {
	// FailureThreshold consecutive failures open a closed breaker (default 10).
	FailureThreshold int
	// SuccessThreshold consecutive successes close a half-open breaker (default 3).
	SuccessThreshold int
	// Timeout is how long an open breaker stays open before it half-opens (default 60 s).
	Timeout time.Duration
	// Disabled keeps the breaker closed whatever happens.
	Disabled bool
}

// Breaker is one worker's circuit breaker, driven only by reported outcomes and the time
// passed in. The zero value is not usable; build it with [NewBreaker]. Not safe for concurrent
// use: the [Router] guards it.
type Breaker struct {
	cfg       BreakerConfig
	state     BreakerState
	failures  int       // consecutive failures while closed
	successes int       // consecutive successes while half-open
	openedAt  time.Time // when the breaker last opened
	// trials counts requests admitted while half-open and not yet finished; probation numbers
	// each half-open spell, so a trial admitted in an earlier spell never frees a later one's slot.
	trials    int
	probation uint32
}

// NewBreaker returns a closed breaker.
func NewBreaker(cfg BreakerConfig) *Breaker { return &Breaker{cfg: cfg} }

// State returns the state at now, moving an open breaker to half-open once its timeout has
// elapsed (the transition is lazy: it happens when somebody looks).
func (b *Breaker) State(now time.Time) BreakerState {
	if b.state == BreakerOpen && !now.Before(b.openedAt.Add(b.cfg.Timeout)) {
		b.halfOpen()
	}
	return b.state
}

// Vacant reports whether the worker may take one more request at now: closed, or half-open
// with fewer than SuccessThreshold requests on probation (at least one). sgl-router lets every
// request through a half-open breaker, so a worker back from an outage takes a whole burst
// before its first outcome is known; the [Router] sends the rest elsewhere — and to a full
// half-open worker only when no other worker is available, so probation never turns requests
// away.
func (b *Breaker) Vacant(now time.Time) bool {
	switch {
	case b.cfg.Disabled:
		return true
	case b.State(now) == BreakerHalfOpen:
		return b.trials < max(1, b.cfg.SuccessThreshold)
	}
	return b.state == BreakerClosed
}

// Admit records that a request was sent to the worker at now. If the breaker is half-open the
// request is on probation: ok is true and the returned spell must be passed to [Breaker.Finish]
// when the request ends, whatever its outcome.
func (b *Breaker) Admit(now time.Time) (spell uint32, ok bool) {
	if b.cfg.Disabled || b.State(now) != BreakerHalfOpen {
		return 0, false
	}
	b.trials++
	return b.probation, true
}

// Finish frees the probation slot of a request admitted in half-open spell (a no-op once
// that spell is over: the breaker closed or reopened since).
func (b *Breaker) Finish(spell uint32) {
	if b.state == BreakerHalfOpen && spell == b.probation && b.trials > 0 {
		b.trials--
	}
}

func (b *Breaker) halfOpen() {
	b.state = BreakerHalfOpen
	b.successes = 0
	b.trials = 0
	b.probation++
}

// Allow reports whether traffic may go to the worker at now (closed or half-open).
func (b *Breaker) Allow(now time.Time) bool {
	return b.cfg.Disabled || b.State(now) != BreakerOpen
}

// Record feeds one outcome observed at now.
func (b *Breaker) Record(success bool, now time.Time) {
	if b.cfg.Disabled {
		return
	}
	switch b.State(now) {
	case BreakerClosed:
		if success {
			b.failures = 0
			return
		}
		b.failures++
		if b.failures >= b.cfg.FailureThreshold {
			b.open(now)
		}
	case BreakerHalfOpen:
		if !success {
			b.open(now)
			return
		}
		b.successes++
		if b.successes >= b.cfg.SuccessThreshold {
			b.state = BreakerClosed
			b.failures = 0
			b.successes = 0
			b.trials = 0
		}
	case BreakerOpen:
		// Outcomes of requests sent before the breaker opened change nothing.
	}
}

// ProbePassed is a passing health probe at now: an open breaker moves to half-open at once,
// rather than after the rest of its timeout, so a worker restarted in seconds takes traffic
// again (on probation) within one health interval. It reports whether the state changed.
func (b *Breaker) ProbePassed(now time.Time) bool {
	if b.cfg.Disabled || b.State(now) != BreakerOpen {
		return false
	}
	b.halfOpen()
	return true
}

func (b *Breaker) open(now time.Time) {
	b.state = BreakerOpen
	b.openedAt = now
	b.failures = 0
	b.successes = 0
	b.trials = 0
}

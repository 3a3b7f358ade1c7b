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
	// breaker, any failure reopens it.
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
}

// NewBreaker returns a closed breaker.
func NewBreaker(cfg BreakerConfig) *Breaker { return &Breaker{cfg: cfg} }

// State returns the state at now, moving an open breaker to half-open once its timeout has
// elapsed (the transition is lazy: it happens when somebody looks).
func (b *Breaker) State(now time.Time) BreakerState {
	if b.state == BreakerOpen && !now.Before(b.openedAt.Add(b.cfg.Timeout)) {
		b.state = BreakerHalfOpen
		b.successes = 0
	}
	return b.state
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
	b.state = BreakerHalfOpen
	b.successes = 0
	return true
}

func (b *Breaker) open(now time.Time) {
	b.state = BreakerOpen
	b.openedAt = now
	b.failures = 0
	b.successes = 0
}

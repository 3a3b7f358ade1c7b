package router

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryConfig parameterises retries (SPEC §1.6).
type RetryConfig struct {
	// MaxAttempts is the total number of attempts including the first (--retry-max-retries,
	// default 5; --disable-retries makes it 1).
	MaxAttempts int
	// InitialBackoff is the wait before the first retry (default 50 ms).
	InitialBackoff time.Duration
	// MaxBackoff caps the wait before jitter (default 30 s).
	MaxBackoff time.Duration
	// Multiplier grows the wait per attempt (default 1.5).
	Multiplier float64
	// Jitter scales the wait by a uniform factor in [1-Jitter, 1+Jitter] (default 0.2).
	Jitter float64
}

// Backoff returns the wait before retry number attempt (0 = the first retry):
// min(initial·multiplier^attempt, max)·(1 + jitter·u) with u uniform in [-1, 1) drawn from rng.
// A nil rng applies no jitter.
func (c RetryConfig) Backoff(attempt int, rng *rand.Rand) time.Duration {
	base := float64(c.InitialBackoff) * math.Pow(c.Multiplier, float64(attempt))
	if base > float64(c.MaxBackoff) || math.IsInf(base, 0) || math.IsNaN(base) {
		base = float64(c.MaxBackoff)
	}
	if rng != nil && c.Jitter > 0 {
		base *= 1 + c.Jitter*(2*rng.Float64()-1)
	}
	if base < 0 {
		base = 0
	}
	return time.Duration(base)
}

// RetryableStatus reports whether an upstream HTTP status may be retried: 408, 429, 500, 502,
// 503 and 504.
func RetryableStatus(status int) bool {
	switch status {
	case 408, 429, 500, 502, 503, 504:
		return true
	}
	return false
}

// Attempt describes how one attempt failed, for [Retrier.Next].
type Attempt struct {
	// Status is the upstream HTTP status, 0 for a transport error.
	Status int
	// Transport is true when no response was received (connection refused, reset, timeout).
	Transport bool
	// Started is true once any response byte reached the client: no retry is possible then.
	Started bool
}

// Retrier is one request's retry budget. Get it from [Router.NewRetrier]; it is owned by the
// request's goroutine, and draws jitter from the router under the router's lock.
type Retrier struct {
	r        *Router
	cfg      RetryConfig
	attempts int // attempts made so far
}

// Next records a failed attempt and reports whether to try again and after how long. It
// returns false when the failure is not retryable, the response already started, or the
// budget of MaxAttempts attempts is spent.
func (rt *Retrier) Next(a Attempt) (wait time.Duration, retry bool) {
	rt.attempts++
	if a.Started || rt.attempts >= rt.cfg.MaxAttempts {
		return 0, false
	}
	if !a.Transport && !RetryableStatus(a.Status) {
		return 0, false
	}
	return rt.r.backoff(rt.cfg, rt.attempts-1), true
}

// Attempts returns how many attempts have been recorded as failed.
func (rt *Retrier) Attempts() int { return rt.attempts }

package router

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBreakerLifecycle(t *testing.T) {
	t.Parallel()
	b := NewBreaker(BreakerConfig{FailureThreshold: 3, SuccessThreshold: 2, Timeout: 10 * time.Second})
	now := epoch
	require.Equal(t, BreakerClosed, b.State(now))

	// A success in between resets the consecutive count.
	b.Record(false, now)
	b.Record(false, now)
	b.Record(true, now)
	b.Record(false, now)
	b.Record(false, now)
	require.Equal(t, BreakerClosed, b.State(now), "only 2 consecutive failures")
	b.Record(false, now)
	require.Equal(t, BreakerOpen, b.State(now), "3rd consecutive failure opens")
	require.False(t, b.Allow(now))

	// Half-opens only once the timeout has elapsed in injected time.
	require.False(t, b.Allow(now.Add(10*time.Second-time.Nanosecond)))
	require.Equal(t, BreakerOpen, b.State(now.Add(10*time.Second-time.Nanosecond)))
	now = now.Add(10 * time.Second)
	require.True(t, b.Allow(now))
	require.Equal(t, BreakerHalfOpen, b.State(now))

	// A failure while half-open reopens, with a fresh timeout.
	b.Record(false, now)
	require.Equal(t, BreakerOpen, b.State(now))
	require.Equal(t, BreakerOpen, b.State(now.Add(9*time.Second)))
	now = now.Add(10 * time.Second)
	require.Equal(t, BreakerHalfOpen, b.State(now))

	// M consecutive successes close it.
	b.Record(true, now)
	require.Equal(t, BreakerHalfOpen, b.State(now))
	b.Record(true, now)
	require.Equal(t, BreakerClosed, b.State(now))

	// Closed again with a fresh failure count.
	b.Record(false, now)
	b.Record(false, now)
	require.Equal(t, BreakerClosed, b.State(now))
}

func TestBreakerDisabledNeverOpens(t *testing.T) {
	t.Parallel()
	b := NewBreaker(BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: time.Second, Disabled: true})
	for range 100 {
		b.Record(false, epoch)
	}
	require.True(t, b.Allow(epoch))
	require.Equal(t, BreakerClosed, b.State(epoch))
}

func TestBreakerIgnoresOutcomesWhileOpen(t *testing.T) {
	t.Parallel()
	b := NewBreaker(BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: time.Minute})
	b.Record(false, epoch)
	b.Record(true, epoch.Add(time.Second)) // a late success of a request sent earlier
	require.Equal(t, BreakerOpen, b.State(epoch.Add(time.Second)))
}

func TestHealthThresholds(t *testing.T) {
	t.Parallel()
	h := NewHealth(HealthConfig{FailureThreshold: 3, SuccessThreshold: 2})
	require.True(t, h.Healthy(), "a new worker starts healthy")
	steps := []struct {
		ok      bool
		healthy bool
		flipped bool
	}{
		{false, true, false},
		{false, true, false},
		{true, true, false}, // resets the failure run
		{false, true, false},
		{false, true, false},
		{false, false, true}, // third consecutive failure flips
		{false, false, false},
		{true, false, false},
		{false, false, false}, // resets the success run
		{true, false, false},
		{true, true, true}, // second consecutive success flips back
		{true, true, false},
	}
	for i, s := range steps {
		flipped := h.Observe(s.ok)
		require.Equal(t, s.healthy, h.Healthy(), "step %d", i)
		require.Equal(t, s.flipped, flipped, "step %d", i)
	}
}

func TestBackoffFormula(t *testing.T) {
	t.Parallel()
	c := RetryConfig{MaxAttempts: 10, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2}
	// Without jitter: min(50ms·1.5^k, 300ms).
	const ms, us = time.Millisecond, time.Microsecond
	want := []time.Duration{50 * ms, 75 * ms, 112500 * us, 168750 * us, 253125 * us, 300 * ms, 300 * ms}
	for k, w := range want {
		require.Equal(t, w, c.Backoff(k, nil), "attempt %d", k)
	}
	// With jitter: within ±20 % of the formula, and actually jittered.
	rng := rand.New(rand.NewPCG(1, 2))
	distinct := map[time.Duration]bool{}
	for k := range 200 {
		base := math.Min(50*math.Pow(1.5, float64(k%8)), 300) * float64(time.Millisecond)
		got := float64(c.Backoff(k%8, rng))
		require.GreaterOrEqual(t, got, base*0.8-1, "attempt %d", k)
		require.LessOrEqual(t, got, base*1.2+1, "attempt %d", k)
		distinct[time.Duration(got)] = true
	}
	require.Greater(t, len(distinct), 100)
	// Same seed, same sequence.
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for k := range 10 {
		require.Equal(t, c.Backoff(k, a), c.Backoff(k, b))
	}
	// Huge attempt numbers saturate instead of overflowing.
	require.Equal(t, 300*time.Millisecond, c.Backoff(100000, nil))
}

func TestRetryableStatus(t *testing.T) {
	t.Parallel()
	for _, s := range []int{408, 429, 500, 502, 503, 504} {
		assert.True(t, RetryableStatus(s), s)
	}
	for _, s := range []int{200, 400, 401, 404, 413, 501, 505} {
		assert.False(t, RetryableStatus(s), s)
	}
}

func TestRetrierBudget(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.RetryMaxRetries = 3
	cfg.RetryJitterFactor = 0
	r := newTestRouter(t, cfg)

	rt := r.NewRetrier()
	w, ok := rt.Next(Attempt{Status: 503})
	require.True(t, ok)
	require.Equal(t, 50*time.Millisecond, w)
	w, ok = rt.Next(Attempt{Transport: true})
	require.True(t, ok)
	require.Equal(t, 75*time.Millisecond, w)
	_, ok = rt.Next(Attempt{Status: 503})
	require.False(t, ok, "3 attempts made: budget spent")
	require.Equal(t, 3, rt.attempts)

	_, ok = r.NewRetrier().Next(Attempt{Status: 400})
	require.False(t, ok, "400 is not retryable")
	_, ok = r.NewRetrier().Next(Attempt{Status: 503, Started: true})
	require.False(t, ok, "no retry once bytes reached the client")

	cfg.DisableRetries = true
	_, ok = newTestRouter(t, cfg).NewRetrier().Next(Attempt{Status: 503})
	require.False(t, ok, "--disable-retries means one attempt")
}

// The retry budget (Envoy's shape): requests may start retrying while fewer than
// max(--retry-min-concurrency, --retry-budget-percent of those in flight) are; one already
// retrying goes on; Done frees its place (once); 100 % is no budget.
func TestRetryBudgetBoundsConcurrentRetries(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.RetryBudgetPercent = 20 // Envoy's; at least 3 (the default)
	r := newTestRouter(t, cfg)
	var rts []*Retrier
	for range 10 {
		rts = append(rts, r.NewRetrier())
	}
	for i, rt := range rts[:3] {
		_, ok := rt.Next(Attempt{Status: 503})
		require.True(t, ok, "retry %d: within the floor of 3", i)
	}
	_, ok := rts[3].Next(Attempt{Status: 503})
	assert.False(t, ok, "a fourth retrying request of 10 in flight: over max(3, 20 % of 10)")
	assert.True(t, rts[3].OverBudget())
	_, ok = rts[4].Next(Attempt{Status: 400})
	assert.False(t, ok)
	assert.False(t, rts[4].OverBudget(), "a 400 is final, whatever the budget")
	_, ok = rts[0].Next(Attempt{Status: 503})
	assert.True(t, ok, "a request already retrying goes on")
	inFlight, retrying := r.RetryBudget()
	assert.Equal(t, [2]int{10, 3}, [2]int{inFlight, retrying})

	rts[0].Done()
	rts[0].Done() // a second Done changes nothing
	inFlight, retrying = r.RetryBudget()
	assert.Equal(t, [2]int{9, 2}, [2]int{inFlight, retrying})
	_, ok = rts[3].Next(Attempt{Status: 503})
	assert.True(t, ok, "a place was freed")
	assert.False(t, rts[3].OverBudget())

	// 20 % of 39 in flight: 7 retrying at once.
	for range 30 {
		rts = append(rts, r.NewRetrier())
	}
	allowed := 3 // retrying now
	for _, rt := range rts[4:] {
		if _, ok := rt.Next(Attempt{Transport: true}); ok {
			allowed++
		}
	}
	assert.Equal(t, 7, allowed, "20 % of 39 in flight, rounded down")
	for _, rt := range rts {
		rt.Done()
	}
	inFlight, retrying = r.RetryBudget()
	assert.Equal(t, [2]int{0, 0}, [2]int{inFlight, retrying})

	cfg.RetryBudgetPercent = 100
	r = newTestRouter(t, cfg)
	for range 10 {
		_, ok := r.NewRetrier().Next(Attempt{Status: 503})
		require.True(t, ok, "100 %: no budget")
	}
}

// The one retry rule: transport errors and 408/429/502/503/504 and a 500 that does not say the
// request is invalid; nothing once the response started; any other status is final.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		a    Attempt
		want bool
	}{
		{Attempt{Transport: true}, true},
		{Attempt{Transport: true, Started: true}, false},
		{Attempt{Status: 503}, true},
		{Attempt{Status: 429}, true},
		{Attempt{Status: 408}, true},
		{Attempt{Status: 500, Body: []byte(`{"error":{"message":"worker crashed"}}`)}, true},
		{Attempt{Status: 500, Body: []byte(`{"error":{"message":"Requested token count exceeds the model's maximum context length"}}`)}, false},
		{Attempt{Status: 500, Body: []byte("needs 9 KV tokens, more than the rank's capacity of 8")}, false},
		{Attempt{Status: 400}, false},
		{Attempt{Status: 401}, false},
		{Attempt{Status: 404}, false},
		{Attempt{Status: 501}, false},
	} {
		assert.Equal(t, tc.want, Retryable(tc.a), "%+v %s", tc.a, tc.a.Body)
	}
}

// A starting worker is unhealthy until its first passing probe, which makes it healthy at
// once; failures before that keep it starting.
func TestStartingHealth(t *testing.T) {
	h := NewStartingHealth(HealthConfig{FailureThreshold: 3, SuccessThreshold: 2})
	assert.True(t, h.Starting())
	assert.False(t, h.Healthy())
	for range 5 {
		assert.False(t, h.Observe(false))
		assert.True(t, h.Starting())
	}
	assert.True(t, h.Observe(true), "the first pass flips it")
	assert.True(t, h.Healthy())
	assert.False(t, h.Starting())
	// From then on the usual thresholds.
	assert.False(t, h.Observe(false))
	assert.False(t, h.Observe(false))
	assert.True(t, h.Observe(false))
	assert.False(t, h.Healthy())
}

func TestBreakerProbationSlots(t *testing.T) {
	t.Parallel()
	b := NewBreaker(BreakerConfig{FailureThreshold: 1, SuccessThreshold: 2, Timeout: time.Second})
	_, trial := b.Admit(epoch)
	require.False(t, trial, "a closed breaker admits without probation")
	require.True(t, b.Vacant(epoch))
	b.Record(false, epoch)
	require.False(t, b.Vacant(epoch), "open")

	now := epoch.Add(time.Second)
	s1, ok1 := b.Admit(now)
	s2, ok2 := b.Admit(now)
	require.True(t, ok1)
	require.True(t, ok2)
	require.False(t, b.Vacant(now), "two requests on probation fill SuccessThreshold=2 slots")
	require.True(t, b.Allow(now), "half-open still allows: the router decides when a full breaker is offered")
	b.Finish(s1)
	require.True(t, b.Vacant(now), "a finished trial frees its slot")

	// A failure reopens; a trial of that spell finishing later frees nothing in the next one.
	b.Record(false, now)
	now = now.Add(time.Second)
	s3, _ := b.Admit(now)
	_, _ = b.Admit(now)
	require.False(t, b.Vacant(now))
	b.Finish(s2)
	require.False(t, b.Vacant(now), "a stale spell's trial does not free the new spell's slot")
	b.Finish(s3)
	require.True(t, b.Vacant(now))

	// Closing clears the slots.
	b.Record(true, now)
	b.Record(true, now)
	require.Equal(t, BreakerClosed, b.State(now))
	require.True(t, b.Vacant(now))
	_, trial = b.Admit(now)
	require.False(t, trial)
}

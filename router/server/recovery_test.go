package server

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
)

// recoveryRig is one regular worker behind a router on a manual clock, and a health checker
// at the default interval whose checkFailed rounds the test drives second by second, as Run's
// one-second ticker does.
type recoveryRig struct {
	r      *router.Router
	h      *healthChecker
	clock  *testutil.ManualClock
	url    string
	up     atomic.Bool  // /health answers 200 (else 503)
	probes atomic.Int64 // /health requests received
}

func newRecoveryRig(t *testing.T) *recoveryRig {
	t.Helper()
	rig := &recoveryRig{clock: testutil.NewManualClock(time.Unix(1000, 0))}
	w := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rig.probes.Add(1)
		if !rig.up.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(w.Close)
	rig.url = w.URL
	cfg := router.DefaultConfig() // --health-check-interval-secs 60, thresholds 3 and 2, breaker 10 / 60 s
	r, err := router.New(cfg, rig.clock, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(router.WorkerSpec{URL: w.URL, Role: router.Regular}))
	rig.r = r
	rig.h = &healthChecker{Router: r, Client: http.DefaultClient, Endpoint: "/health", Timeout: 5 * time.Second,
		Interval: cfg.Health().Interval, Now: rig.clock.Now}
	return rig
}

func (rig *recoveryRig) state() router.WorkerState { return rig.r.Workers()[0].State }

// tick advances the clock one second and runs one round, as Run's ticker would.
func (rig *recoveryRig) tick() {
	rig.clock.Advance(time.Second)
	rig.h.checkFailed(context.Background())
}

// A worker that went down (a request was refused, then a probe failed) and comes back after a
// long outage is healthy again within recoveryMaxProbe plus a second per further passing probe
// of when it came back — at the default 60 s interval, where the scheduled probes alone would
// take up to a minute. While it is down, the probes back off rather than poll every second.
func TestRestartedWorkerReturnsWithinSeconds(t *testing.T) {
	t.Parallel()
	rig := newRecoveryRig(t)
	require.Equal(t, time.Minute, rig.h.Interval)
	_, err := rig.r.ObserveFailureProbe(rig.url, false, rig.clock.Now(), "connection refused")
	require.NoError(t, err)
	require.Equal(t, router.WorkerUnhealthy, rig.state())

	const outage = 45 // seconds down
	for range outage {
		rig.tick()
		require.Equal(t, router.WorkerUnhealthy, rig.state())
	}
	downProbes := rig.probes.Load()
	assert.GreaterOrEqual(t, downProbes, int64(outage/int(recoveryMaxProbe/time.Second)), "probed every few seconds while down")
	assert.Less(t, downProbes, int64(outage/2), "the probes backed off while it stayed down")

	rig.up.Store(true)
	back := rig.clock.Now()
	var returned time.Duration
	for range 60 {
		rig.tick()
		if rig.state() == router.WorkerHealthy {
			returned = rig.clock.Now().Sub(back)
			break
		}
	}
	require.NotZero(t, returned, "the worker never came back within a minute of its restart")
	bound := recoveryMaxProbe + time.Duration(router.DefaultConfig().HealthSuccessThreshold-1)*recoveryFirstProbe
	t.Logf("healthy again %s after it came back (bound %s)", returned, bound)
	assert.LessOrEqual(t, returned, bound)
}

// A worker whose breaker opened on failed requests while its health endpoint kept passing (a
// hang: fakeworker's --hang-rate) is put on probation by the first pass, a second later, not at
// the breaker's 60 s timeout. While its probation keeps failing, each grant doubles the wait
// before the next, up to recoveryMaxProbe (a still-broken worker takes its probation share at
// most that often); once a probation succeeds, the breaker closes.
func TestBreakerOpenWorkerOnProbationWithinSeconds(t *testing.T) {
	t.Parallel()
	rig := newRecoveryRig(t)
	rig.up.Store(true)
	cfg := router.DefaultConfig()
	route := func(o router.Outcome) {
		t.Helper()
		d, err := rig.r.Route(&router.Request{})
		require.NoError(t, err)
		d.Done(router.Regular, o)
	}
	for range cfg.CBFailureThreshold {
		route(router.Failure)
	}
	require.Equal(t, router.WorkerBreakerOpen, rig.state())
	var reasons []string // why it left rotation, each time
	rig.r.OnWorkerEvent(func(e router.WorkerEvent) {
		if e.To == router.WorkerBreakerOpen {
			reasons = append(reasons, e.Reason)
		}
	})
	// untilProbation ticks until the breaker half-opens and returns how long that took.
	untilProbation := func() time.Duration {
		t.Helper()
		from := rig.clock.Now()
		for range 60 {
			rig.tick()
			if rig.r.Workers()[0].Breaker == router.BreakerHalfOpen {
				return rig.clock.Now().Sub(from)
			}
		}
		t.Fatal("no probation within a minute")
		return 0
	}
	var waits []time.Duration
	for range 4 {
		waits = append(waits, untilProbation())
		assert.Equal(t, router.WorkerHealthy, rig.state(), "on probation: in rotation")
		route(router.Failure) // still broken: the probation fails and the breaker opens again
		require.Equal(t, router.WorkerBreakerOpen, rig.state())
	}
	// The first: the round a second after it opened sees it out of rotation and probes it a
	// second later.
	assert.Equal(t, []time.Duration{time.Second + recoveryFirstProbe, 2 * recoveryFirstProbe, recoveryMaxProbe, recoveryMaxProbe}, waits,
		"seconds after it opened, then backing off while its probations fail")
	require.Len(t, reasons, 4)
	assert.Equal(t, "a request on probation failed (breaker half-open)", reasons[0], "not the closed breaker's threshold")

	untilProbation()
	for range cfg.CBSuccessThreshold {
		route(router.Success)
	}
	assert.Equal(t, router.BreakerClosed, rig.r.Workers()[0].Breaker, "recovered: closed")
	rig.tick()
	rig.h.mu.Lock()
	defer rig.h.mu.Unlock()
	assert.Empty(t, rig.h.recovering, "a closed breaker's schedule is dropped: the next outage starts over")
}

// End to end through Run at the default interval: a worker a request could not reach is out
// of rotation, and back in it soon after it answers again (far inside the 60 s interval).
func TestServeProbesAFailedWorkerUntilItReturns(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	up.Store(true)
	w := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte(genReply))
	}))
	defer w.Close()
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL}
	tr := startRouter(t, cfg)
	require.Equal(t, router.WorkerHealthy, tr.s.r.Workers()[0].State)
	up.Store(false)
	_, err := tr.s.r.ObserveFailureProbe(w.URL, false, time.Now(), "connection refused")
	require.NoError(t, err)
	require.Equal(t, router.WorkerUnhealthy, tr.s.r.Workers()[0].State)
	up.Store(true)
	require.Eventually(t, func() bool { return tr.s.r.Workers()[0].State == router.WorkerHealthy },
		20*time.Second, 20*time.Millisecond, "back in rotation without waiting for the 60 s scheduled probe")
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

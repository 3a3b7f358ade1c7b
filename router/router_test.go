package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestRouter(t testing.TB, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg, NewManualClock(epoch), rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	return r
}

func regularRouter(t testing.TB, policy string, urls ...string) *Router {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = policy
	r := newTestRouter(t, cfg)
	for _, u := range urls {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Regular}))
	}
	return r
}

func pdConfig() Config {
	cfg := DefaultConfig()
	cfg.PDDisaggregation = true
	return cfg
}

func names(r *Router) []string {
	var out []string
	for _, t := range r.Targets() {
		out = append(out, t.Name)
	}
	return out
}

func TestTargetOrderAndDPExpansion(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.DPAware = true
	r := newTestRouter(t, cfg)
	port := 8998
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d1:30000", Role: Decode, DPSize: 2}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p2:30000", Role: Prefill, DPSize: 1, BootstrapPort: &port}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://[::1]:30001", Role: Prefill, DPSize: 3}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d0:30000", Role: Decode, DPSize: 1}))
	// Role first, then registration order, then rank.
	require.Equal(t, []string{
		"http://p2:30000@0",
		"http://[::1]:30001@0", "http://[::1]:30001@1", "http://[::1]:30001@2",
		"http://d1:30000@0", "http://d1:30000@1",
		"http://d0:30000@0",
	}, names(r))

	// Removing a worker keeps the others' order; re-adding puts it last.
	require.NoError(t, r.RemoveWorker("http://p2:30000"))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p2:30000", Role: Prefill, DPSize: 1}))
	require.Equal(t, "http://[::1]:30001@0", names(r)[0])
	require.Equal(t, "http://p2:30000@0", names(r)[3])

	ws := r.Workers()
	require.Len(t, ws, 4)
	require.Equal(t, 3, ws[0].DPSize)
	require.Nil(t, ws[1].BootstrapPort, "re-added without a port")

	// Errors name the problem.
	require.ErrorContains(t, r.AddWorker(WorkerSpec{URL: "http://d0:30000", Role: Decode, DPSize: 1}), "already registered")
	require.ErrorContains(t, r.AddWorker(WorkerSpec{URL: "http://x:1", Role: Decode}), "dp_size")
	require.ErrorContains(t, r.AddWorker(WorkerSpec{URL: "http://x:1", Role: Regular, DPSize: 1}), "not served in PD mode")
	require.ErrorContains(t, r.AddWorker(WorkerSpec{URL: "ftp://x:1", Role: Decode, DPSize: 1}), "http://")
	require.ErrorContains(t, r.AddWorker(WorkerSpec{URL: "http://x:1", Role: Decode, DPSize: 1, BootstrapPort: &port}), "only for prefill")
	require.ErrorContains(t, r.RemoveWorker("http://nope:1"), "not registered")
}

func TestSplitTargetName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		rank      int
	}{
		{"http://a:1@3", "http://a:1", 3},
		{"http://a:1", "http://a:1", -1},
		{"http://[::1]:30000@12", "http://[::1]:30000", 12},
		{"http://user@host:1", "http://user@host:1", -1},
		{"http://a:1@-1", "http://a:1@-1", -1},
		{"http://a:1@+1", "http://a:1@+1", -1},
	} {
		url, rank := SplitTargetName(tc.name)
		assert.Equal(t, tc.url, url, tc.name)
		assert.Equal(t, tc.rank, rank, tc.name)
		if tc.rank >= 0 {
			assert.Equal(t, tc.name, TargetName(url, rank))
		}
	}
}

func TestDecisionDoneExactlyOnce(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.Policy = PolicyRoundRobin
	r := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p:1", Role: Prefill}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d:1", Role: Decode}))

	d1, err := r.Route(&Request{Text: "a"})
	require.NoError(t, err)
	d2, err := r.Route(&Request{Text: "b"})
	require.NoError(t, err)
	require.Nil(t, d1.Regular)
	require.Equal(t, int64(2), d1.Prefill.Load())
	require.Equal(t, int64(2), d1.Decode.Load())

	require.True(t, d1.Done(Prefill, Success))
	require.False(t, d1.Done(Prefill, Success), "second Done on a leg is a detectable no-op")
	require.False(t, d1.Done(Regular, Success), "no such leg")
	require.False(t, d1.Finished())
	require.Equal(t, int64(1), d1.Prefill.Load())
	require.Equal(t, int64(2), d1.Decode.Load(), "decode leg still running")
	require.True(t, d1.Done(Decode, Cancelled))
	require.True(t, d1.Finished())
	require.True(t, d2.Done(Decode, Failure))
	require.True(t, d2.Done(Prefill, Success))
	for _, ti := range r.Targets() {
		require.Zero(t, ti.Load, ti.Name)
	}
	l, ok := d2.Leg(Decode)
	require.True(t, ok)
	require.Equal(t, 0, l.WorkerIndex)
	require.Equal(t, ReasonRoundRobin, l.Reason)
}

func TestDoneConcurrentCallsDecrementOnce(t *testing.T) {
	t.Parallel()
	r := regularRouter(t, PolicyRoundRobin, "http://a:1")
	d, err := r.Route(&Request{})
	require.NoError(t, err)
	results := make(chan bool, 8)
	for range 8 {
		go func() { results <- d.Done(Regular, Success) }()
	}
	wins := 0
	for range 8 {
		if <-results {
			wins++
		}
	}
	require.Equal(t, 1, wins)
	require.Zero(t, d.Regular.Load())
}

// A removed worker keeps its targets and their loads: requests routed to it before its
// removal still balance them (what serve's draining state shows), and nothing new is routed.
func TestRemovedWorkerKeepsItsLoad(t *testing.T) {
	t.Parallel()
	r := regularRouter(t, PolicyRoundRobin, "http://a:1", "http://b:1")
	w, info, ok := r.Worker("http://a:1")
	require.True(t, ok)
	assert.Equal(t, WorkerInfo{URL: "http://a:1", Role: Regular, State: WorkerHealthy, Healthy: true, Breaker: BreakerClosed}, info)
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	require.Same(t, w, d.Regular.Worker())
	require.NoError(t, r.RemoveWorker("http://a:1"))
	_, _, ok = r.Worker("http://a:1")
	require.False(t, ok)
	require.Equal(t, int64(1), w.Load())
	require.Equal(t, []*Target{d.Regular}, w.Targets())
	for range 3 {
		d2, err := r.Route(&Request{Text: "x"})
		require.NoError(t, err)
		require.Equal(t, "http://b:1", d2.Regular.URL())
		d2.Done(Regular, Success)
	}
	d.Done(Regular, Success)
	require.Zero(t, w.Load())
}

func TestRouteNoTargets(t *testing.T) {
	t.Parallel()
	r := newTestRouter(t, pdConfig())
	_, err := r.Route(&Request{Text: "x"})
	var nt *NoTargetError
	require.ErrorAs(t, err, &nt)
	require.Equal(t, Prefill, nt.Role)
	require.Contains(t, err.Error(), "no prefill workers registered")
	require.False(t, r.Ready())

	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p:1", Role: Prefill}))
	_, err = r.Route(&Request{Text: "x"})
	require.ErrorAs(t, err, &nt)
	require.Equal(t, Decode, nt.Role)
	// Nothing was incremented, and the prefill tree was not touched.
	require.Zero(t, r.Targets()[0].Load)
	chars, _, ok := r.TreeStats(Prefill)
	require.True(t, ok)
	require.Zero(t, chars)

	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d:1", Role: Decode}))
	require.True(t, r.Ready())
	_, err = r.Route(&Request{Text: "x"})
	require.NoError(t, err)
}

func TestUnhealthyAndOpenWorkersAreSkipped(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Policy = PolicyRoundRobin
	cfg.CBFailureThreshold = 2
	cfg.CBSuccessThreshold = 1
	cfg.CBTimeoutDurationSecs = 30
	cfg.HealthFailureThreshold = 1
	cfg.HealthSuccessThreshold = 1
	clock := NewManualClock(epoch)
	r, err := New(cfg, clock, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	for _, u := range []string{"http://a:1", "http://b:1", "http://c:1"} {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Regular}))
	}
	route := func() string {
		d, err := r.Route(&Request{})
		require.NoError(t, err)
		d.Done(Regular, Cancelled)
		return d.Regular.URL()
	}
	// b fails its probe: skipped.
	flipped, err := r.ObserveHealth("http://b:1", false, clock.Now())
	require.NoError(t, err)
	require.True(t, flipped)
	got := []string{route(), route(), route()}
	require.NotContains(t, got, "http://b:1")

	// a's breaker opens after 2 reported failures.
	for range 2 {
		d, err := r.Route(&Request{})
		require.NoError(t, err)
		for d.Regular.URL() != "http://a:1" {
			d.Done(Regular, Cancelled)
			d, err = r.Route(&Request{})
			require.NoError(t, err)
		}
		d.Done(Regular, Failure)
	}
	for range 4 {
		require.Equal(t, "http://c:1", route())
	}
	// Everything unavailable → NoTargetError naming the count.
	_, err = r.ObserveHealth("http://c:1", false, clock.Now())
	require.NoError(t, err)
	_, err = r.Route(&Request{})
	require.EqualError(t, err, "no available regular workers (3 registered, all starting, unhealthy or circuit open)")
	require.False(t, r.Ready())

	// After the breaker timeout, a is half-open and gets traffic again.
	clock.Advance(30 * time.Second)
	require.Equal(t, "http://a:1", route())
	require.True(t, r.Ready())
	r.RecordOutcome("http://a:1", Success)
	require.Equal(t, BreakerClosed, r.Workers()[0].Breaker)
	_, err = r.ObserveHealth("http://nope:1", true, clock.Now())
	require.Error(t, err)
}

func TestLoadsNeverDrift(t *testing.T) {
	t.Parallel()
	// Random interleavings of Route and Done (with repeats) leave every load at zero.
	cfg := pdConfig()
	cfg.DPAware = true
	cfg.BalanceAbsThreshold = 2
	r := newTestRouter(t, cfg)
	for i := range 3 {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://p%d:1", i), Role: Prefill, DPSize: 2}))
		require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://d%d:1", i), Role: Decode, DPSize: 4}))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var live []*Decision
	for i := range 2000 {
		if len(live) == 0 || rng.IntN(3) > 0 {
			d, err := r.Route(&Request{Text: fmt.Sprintf("prompt %d %d", i%17, i)})
			require.NoError(t, err)
			live = append(live, d)
			continue
		}
		j := rng.IntN(len(live))
		d := live[j]
		d.Done(Role(1+rng.IntN(2)), Outcome(rng.IntN(3)))
		d.Done(Role(rng.IntN(3)), Cancelled) // repeats and unknown legs are no-ops
		if d.Finished() {
			live = append(live[:j], live[j+1:]...)
		}
	}
	for _, d := range live {
		d.Done(Prefill, Cancelled)
		d.Done(Decode, Cancelled)
	}
	for _, ti := range r.Targets() {
		require.Zero(t, ti.Load, ti.Name)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.CacheThreshold = 2
	_, err := New(cfg, NewManualClock(epoch), rand.New(rand.NewPCG(1, 1)))
	require.ErrorContains(t, err, "--cache-threshold")
	_, err = New(DefaultConfig(), nil, nil)
	require.Error(t, err)
}

func TestNoTargetErrorIsTyped(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", &NoTargetError{Role: Decode, Registered: 2})
	var nt *NoTargetError
	require.True(t, errors.As(err, &nt))
	require.Equal(t, 2, nt.Registered)
}

func TestNewRandIsDeterministicPerSeed(t *testing.T) {
	t.Parallel()
	a, b, c := NewRand(7), NewRand(7), NewRand(8)
	for range 10 {
		x := a.Uint64()
		require.Equal(t, x, b.Uint64())
		require.NotEqual(t, x, c.Uint64())
	}
}

func TestRouteAvoidMovesToAnotherTarget(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.DPAware = true
	r := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p0:1", Role: Prefill, DPSize: 1}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d0:1", Role: Decode, DPSize: 2}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d1:1", Role: Decode, DPSize: 2}))
	// The text is cached on d0 after the first route; avoiding d0 moves the retry to d1, while
	// the only prefill worker is kept even though it is "avoided".
	d, err := r.Route(&Request{Text: "same prompt"})
	require.NoError(t, err)
	require.Equal(t, "http://d0:1", d.Decode.URL())
	d.Done(Prefill, Success)
	d.Done(Decode, Failure)
	d, err = r.Route(&Request{Text: "same prompt", Avoid: []string{"http://d0:1", "http://p0:1"}})
	require.NoError(t, err)
	require.Equal(t, "http://d1:1", d.Decode.URL())
	require.Equal(t, "http://p0:1", d.Prefill.URL())
	d.Done(Prefill, Success)
	d.Done(Decode, Success)
}

func TestResetTreesForgetsRoutedTexts(t *testing.T) {
	t.Parallel()
	r := regularRouter(t, PolicyCacheAware, "http://a:1", "http://b:1")
	for range 2 {
		d, err := r.Route(&Request{Text: "remember me"})
		require.NoError(t, err)
		d.Done(Regular, Success)
	}
	chars, _, _ := r.TreeStats(Regular)
	require.Equal(t, 11, chars)
	r.ResetTrees()
	chars, nodes, _ := r.TreeStats(Regular)
	require.Zero(t, chars)
	require.Zero(t, nodes)
	d, err := r.Route(&Request{Text: "remember me"})
	require.NoError(t, err)
	require.Equal(t, ReasonCacheMiss, d.Reason, "nothing is remembered after a reset")
	d.Done(Regular, Success)
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://10.0.0.1:30000":           "http://10.0.0.1:30000",
		"http://10.0.0.1:30000@3":         "http://10.0.0.1:30000@3",
		"http://user:pw@10.0.0.1:30000":   "http://***@10.0.0.1:30000",
		"http://user:pw@10.0.0.1:30000@3": "http://***@10.0.0.1:30000@3",
		"https://tok@host/path?q=a@b":     "https://***@host/path?q=a@b",
		"http://host/path@x":              "http://host/path@x",
		"not a url":                       "not a url",
		"http://a%40b:p%3Aw@h:1":          "http://***@h:1",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}

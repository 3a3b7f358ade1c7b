package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestRouter(t testing.TB, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg, testutil.NewManualClock(epoch), rand.New(rand.NewPCG(1, 2)))
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
	_, err := r.RemoveWorker("http://p2:30000", Removal{})
	require.NoError(t, err)
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
	_, err = r.RemoveWorker("http://nope:1", Removal{})
	require.ErrorContains(t, err, "not registered")
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
	require.False(t, d1.finished())
	require.Equal(t, int64(1), d1.Prefill.Load())
	require.Equal(t, int64(2), d1.Decode.Load(), "decode leg still running")
	require.True(t, d1.Done(Decode, Cancelled))
	require.True(t, d1.finished())
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

// A removed worker with a request in flight keeps its targets and their loads and stays in
// every view as draining — nothing new is routed to it — until that request is done; then it
// is gone. Each step is one event, in order.
func TestRemovedWorkerDrainsThenGoes(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Policy = PolicyRoundRobin
	clock := testutil.NewManualClock(epoch)
	r, err := New(cfg, clock, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	var events []WorkerEvent
	r.OnWorkerEvent(func(ev WorkerEvent) { events = append(events, ev) })
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://a:1", Role: Regular, Source: "config"}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://b:1", Role: Regular, Starting: true, Source: "api"}))
	assert.Equal(t, []WorkerEvent{
		{URL: "http://a:1", Role: Regular, From: WorkerAdded, To: WorkerHealthy, Reason: "registered", Source: "config"},
		{URL: "http://b:1", Role: Regular, From: WorkerAdded, To: WorkerStarting, Reason: "registered", Source: "api"},
	}, events)
	_, err = r.ObserveHealth("http://b:1", nil, epoch)
	require.NoError(t, err)
	events = nil

	w, info, ok := r.worker("http://a:1")
	require.True(t, ok)
	assert.Equal(t, WorkerInfo{URL: "http://a:1", Role: Regular, State: WorkerHealthy, Healthy: true, Breaker: BreakerClosed}, info)
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	require.Same(t, w, d.Regular.Worker())
	clock.Advance(time.Second)
	info, err = r.RemoveWorker("http://a:1", Removal{Source: "api", Reason: "removed through the API"})
	require.NoError(t, err)
	assert.Equal(t, WorkerDraining, info.State)
	assert.Equal(t, int64(1), info.Load)
	assert.Equal(t, []WorkerEvent{{URL: "http://a:1", Role: Regular, From: WorkerHealthy, To: WorkerDraining,
		Reason: "removed through the API", Source: "api", InFlight: 1}}, events)

	// Every view shows it draining, after the registered workers, with its load.
	_, info, ok = r.worker("http://a:1")
	require.True(t, ok)
	assert.Equal(t, WorkerDraining, info.State)
	assert.False(t, info.Healthy)
	ws := r.Workers()
	require.Len(t, ws, 2)
	assert.Equal(t, "http://b:1", ws[0].URL)
	assert.Equal(t, WorkerInfo{URL: "http://a:1", Role: Regular, State: WorkerDraining, Breaker: BreakerClosed, Load: 1}, ws[1])
	assert.Equal(t, []TargetInfo{
		{Name: "http://b:1", URL: "http://b:1", Role: Regular, Rank: -1, Healthy: true},
		{Name: "http://a:1", URL: "http://a:1", Role: Regular, Rank: -1, Load: 1},
	}, r.Targets())
	assert.True(t, r.Ready())

	// Nothing new goes to it; removing it again changes nothing.
	for range 3 {
		d2, err := r.Route(&Request{Text: "x"})
		require.NoError(t, err)
		require.Equal(t, "http://b:1", d2.Regular.URL())
		d2.Done(Regular, Success)
	}
	info, err = r.RemoveWorker("http://a:1", Removal{Source: "api"})
	require.NoError(t, err)
	assert.Equal(t, WorkerDraining, info.State)
	require.Len(t, events, 1)

	// Its request is done: it is gone, from every view, as an event.
	clock.Advance(1500 * time.Millisecond)
	d.Done(Regular, Cancelled)
	require.Zero(t, w.Load())
	assert.Equal(t, WorkerEvent{URL: "http://a:1", Role: Regular, From: WorkerDraining, To: WorkerGone,
		Reason: "drained in 1.5s after it was removed through the API", Source: "api"}, events[1])
	_, _, ok = r.worker("http://a:1")
	assert.False(t, ok)
	assert.Len(t, r.Workers(), 1)
	assert.Len(t, r.Targets(), 1)
	_, err = r.RemoveWorker("http://a:1", Removal{})
	assert.ErrorContains(t, err, "not registered")

	// An idle worker goes at once.
	info, err = r.RemoveWorker("http://b:1", Removal{Source: "discovery", Reason: "its pod left service discovery"})
	require.NoError(t, err)
	assert.Equal(t, WorkerGone, info.State)
	assert.Equal(t, WorkerEvent{URL: "http://b:1", Role: Regular, From: WorkerHealthy, To: WorkerGone,
		Reason: "its pod left service discovery", Source: "discovery"}, events[2])
	assert.Empty(t, r.Workers())
	assert.False(t, r.Ready())
}

// A worker registered again while draining replaces the draining one in the views; the old
// registration's request still finishes and balances its own counter, and emits nothing more.
func TestWorkerReAddedWhileDraining(t *testing.T) {
	t.Parallel()
	r := regularRouter(t, PolicyRoundRobin, "http://a:1")
	var events []WorkerEvent
	r.OnWorkerEvent(func(ev WorkerEvent) { events = append(events, ev) })
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	_, err = r.RemoveWorker("http://a:1", Removal{Source: "api", Reason: "removed through the API"})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://a:1", Role: Regular, Source: "api"}))
	require.Len(t, events, 2)
	assert.Equal(t, WorkerEvent{URL: "http://a:1", Role: Regular, From: WorkerDraining, To: WorkerHealthy,
		Reason: "registered again while draining", Source: "api", InFlight: 1}, events[1])
	ws := r.Workers()
	require.Len(t, ws, 1, "listed once")
	assert.Equal(t, WorkerInfo{URL: "http://a:1", Role: Regular, State: WorkerHealthy, Healthy: true, Breaker: BreakerClosed}, ws[0])

	old := d.Regular.Worker()
	d.Done(Regular, Failure)
	assert.Zero(t, old.Load())
	assert.Len(t, events, 2, "the old registration ends unshown")
	_, info, _ := r.worker("http://a:1")
	assert.Equal(t, BreakerClosed, info.Breaker, "the old registration's outcome does not feed the new breaker")
}

// Done racing with RemoveWorker ends the drain exactly once, whichever comes first.
func TestDrainRaceEndsOnce(t *testing.T) {
	t.Parallel()
	for range 50 {
		r := regularRouter(t, PolicyRoundRobin, "http://a:1")
		var gone atomic.Int32
		r.OnWorkerEvent(func(ev WorkerEvent) {
			if ev.To == WorkerGone {
				gone.Add(1)
			}
		})
		d, err := r.Route(&Request{Text: "x"})
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { defer close(done); d.Done(Regular, Cancelled) }()
		_, err = r.RemoveWorker("http://a:1", Removal{})
		require.NoError(t, err)
		<-done
		require.Equal(t, int32(1), gone.Load())
		require.Empty(t, r.Workers())
	}
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
	size, ok := r.TreeStats(Prefill)
	require.True(t, ok)
	require.Zero(t, size.Chars)

	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d:1", Role: Decode}))
	require.True(t, r.Ready())
	_, err = r.Route(&Request{Text: "x"})
	require.NoError(t, err)
}

func TestUnhealthyAndOpenWorkersAreSkipped(t *testing.T) {
	t.Parallel()
	r, clock := breakerRouter(t, 2, 1, "http://a:1", "http://b:1", "http://c:1")
	route := func() string {
		d, err := r.Route(&Request{})
		require.NoError(t, err)
		d.Done(Regular, Cancelled)
		return d.Regular.URL()
	}
	// b fails its probe: skipped.
	flipped, err := r.ObserveHealth("http://b:1", errors.New("status 503"), clock.Now())
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
	// Everything unavailable → NoTargetError naming the count, each worker, its state and why.
	_, err = r.ObserveHealth("http://c:1", errors.New("GET /health: status 503"), clock.Now())
	require.NoError(t, err)
	_, err = r.Route(&Request{})
	require.EqualError(t, err, "no available regular workers (3 registered, all starting, unhealthy or circuit open): "+
		"http://a:1 breaker_open (2 failed requests in a row (--cb-failure-threshold)); "+
		"http://b:1 unhealthy (health probe failed: status 503); "+
		"http://c:1 unhealthy (health probe failed: GET /health: status 503)")
	require.False(t, r.Ready())

	// After the breaker timeout, a is half-open and gets traffic again.
	clock.Advance(30 * time.Second)
	require.Equal(t, "http://a:1", route())
	require.True(t, r.Ready())
	r.recordOutcome("http://a:1", Success)
	require.Equal(t, BreakerClosed, r.Workers()[0].Breaker)
	_, err = r.ObserveHealth("http://nope:1", nil, clock.Now())
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
		if d.finished() {
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
	_, err := New(cfg, testutil.NewManualClock(epoch), rand.New(rand.NewPCG(1, 1)))
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
	size, _ := r.TreeStats(Regular)
	require.Equal(t, 11, size.Chars)
	require.Positive(t, size.Bytes)
	r.ResetTrees()
	size, _ = r.TreeStats(Regular)
	require.Equal(t, TreeSize{}, size)
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

// A worker URL without a scheme is told what to write, not url.Parse's own wording; the other
// checks name what is wrong.
func TestCheckWorkerURL(t *testing.T) {
	for raw, want := range map[string]string{
		"10.0.0.1:30001":                `worker URL "10.0.0.1:30001" must start with http:// or https:// (e.g. http://10.0.0.1:30001)`,
		"localhost:30000":               `worker URL "localhost:30000" must start with http:// or https:// (e.g. http://localhost:30000)`,
		"grpc://w:1":                    `worker URL "grpc://w:1" must start with http:// or https://`,
		"http://":                       `worker URL "http://" has no host`,
		"http://w:1/?a=b":               `worker URL "http://w:1/?a=b" must not have a query or fragment`,
		"http://10.0.0.1:30001":         "",
		"https://user:pw@w.example:443": "",
	} {
		err := CheckWorkerURL(raw)
		if want == "" {
			assert.NoError(t, err, raw)
			continue
		}
		assert.EqualError(t, err, want, raw)
	}
}

// A worker whose breaker half-opens gets at most --cb-success-threshold requests on probation
// while another worker can take the rest, and all of them when none can.
func TestHalfOpenWorkerTakesABoundedBurst(t *testing.T) {
	t.Parallel()
	r, clock := breakerRouter(t, 1, 2, "http://a:1", "http://b:1")
	r.recordOutcome("http://a:1", Failure)
	require.Equal(t, BreakerOpen, r.Workers()[0].Breaker)
	clock.Advance(30 * time.Second)

	// A burst of 10 concurrent requests: a takes 2 (round robin would give it 5).
	var burst []*Decision
	toA := 0
	for range 10 {
		d, err := r.Route(&Request{})
		require.NoError(t, err)
		if d.Regular.URL() == "http://a:1" {
			toA++
		}
		burst = append(burst, d)
	}
	assert.Equal(t, 2, toA, "requests on probation at once")
	// A cancelled trial frees its slot without feeding the breaker.
	for _, d := range burst {
		if d.Regular.URL() == "http://a:1" {
			d.Done(Regular, Cancelled)
			break
		}
	}
	d, err := r.Route(&Request{})
	require.NoError(t, err)
	for d.Regular.URL() != "http://a:1" {
		burst = append(burst, d)
		d, err = r.Route(&Request{})
		require.NoError(t, err)
	}
	burst = append(burst, d)

	// With b gone, the full half-open a still takes every request: probation never refuses.
	_, err = r.ObserveHealth("http://b:1", errors.New("status 503"), clock.Now())
	require.NoError(t, err)
	for range 3 {
		d, err := r.Route(&Request{})
		require.NoError(t, err)
		require.Equal(t, "http://a:1", d.Regular.URL())
		burst = append(burst, d)
	}
	for _, d := range burst {
		d.Done(Regular, Success)
	}
	assert.Equal(t, BreakerClosed, r.Workers()[0].Breaker)
	for _, w := range r.Workers() {
		assert.Zero(t, w.Load, w.URL)
	}
}

// breakerRouter is a round-robin router over regular workers urls whose breakers open after
// failures consecutive failures and close after successes, half-opening 30 s after opening;
// one probe flips health either way.
func breakerRouter(t *testing.T, failures, successes int, urls ...string) (*Router, *testutil.ManualClock) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = PolicyRoundRobin
	cfg.CBFailureThreshold = failures
	cfg.CBSuccessThreshold = successes
	cfg.CBTimeoutDurationSecs = 30
	cfg.HealthFailureThreshold = 1
	cfg.HealthSuccessThreshold = 1
	clock := testutil.NewManualClock(epoch)
	r, err := New(cfg, clock, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	for _, u := range urls {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Regular}))
	}
	return r, clock
}

// RetainRoutedTexts changes where the trees keep their texts, not what they decide: a
// retaining router routes a conversation-shaped sequence as a copying one does, before and
// after its trees are reset, and its cache-aware policy keeps retaining after the reset.
func TestRetainRoutedTextsRoutesAsCopying(t *testing.T) {
	t.Parallel()
	urls := []string{"http://a:1", "http://b:1", "http://c:1"}
	copying, retaining := regularRouter(t, PolicyCacheAware, urls...), regularRouter(t, PolicyCacheAware, urls...)
	retaining.RetainRoutedTexts()
	buf := make([]byte, 0, 1<<16)
	route := func(step int) {
		buf = append(buf, fmt.Sprintf(" turn %d of a long conversation %s", step, strings.Repeat("w", step%7))...)
		text := string(buf[:len(buf)/(1+step%3)])
		var got [2]string
		for i, r := range []*Router{copying, retaining} {
			d, err := r.Route(&Request{Text: text})
			require.NoError(t, err)
			got[i] = d.Regular.Name() + " " + string(d.Reason)
			d.Done(Regular, Success)
		}
		require.Equal(t, got[0], got[1], "step %d", step)
	}
	for step := range 200 {
		route(step)
		if step == 100 {
			copying.ResetTrees()
			retaining.ResetTrees()
		}
	}
	require.True(t, retaining.Policy(Regular).(*CacheAware).retain)
	a, _ := copying.TreeStats(Regular)
	b, _ := retaining.TreeStats(Regular)
	require.Equal(t, a, b)
	require.Positive(t, a.Chars)
}

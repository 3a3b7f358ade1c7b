package router

import (
	"errors"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// engineRouter is a regular-mode router on a manual clock with workers a, b, c and the
// policy given.
func engineRouter(t *testing.T, policy string, tweak func(*Config)) (*Router, *testutil.ManualClock) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = policy
	if tweak != nil {
		tweak(&cfg)
	}
	clk := testutil.NewManualClock(epoch)
	r, err := New(cfg, clk, NewRand(1))
	require.NoError(t, err)
	for _, u := range []string{"http://a", "http://b", "http://c"} {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Regular}))
	}
	return r, clk
}

func report(t *testing.T, r *Router, at time.Time, loads map[string]EngineLoad) {
	t.Helper()
	for name, l := range loads {
		require.NoError(t, r.ReportLoad(name, l, at))
	}
}

// With fresh engine reports for every candidate, cache_aware's balance check and fallback look
// at the engines: a worker that another router replica (or a client behind the router's back)
// has queued up loses traffic though this router sent it nothing.
func TestCacheAwareRoutesOnEngineLoadWhenFresh(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyCacheAware, nil)
	now := clk.Now()
	report(t, r, now, map[string]EngineLoad{
		"http://a": {RunningReqs: 40, WaitingReqs: 100, WaitingUncachedTokens: 40000},
		"http://b": {RunningReqs: 4, WaitingReqs: 0},
		"http://c": {RunningReqs: 6, WaitingReqs: 0},
	})
	d, err := r.Route(&Request{Text: "hello"})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL(), "imbalanced on the engines' counts: least loaded by the comparator")
	assert.Equal(t, ReasonImbalance, d.Reason)
	leg, _ := d.Leg(Regular)
	assert.Equal(t, SignalEngineLoad, leg.Signal)
	assert.Zero(t, leg.LoadAge)

	// A report that is too old counts as absent: back on in-flight counts (b has one now).
	clk.Advance(1500 * time.Millisecond)
	d2, err := r.Route(&Request{Text: "other"})
	require.NoError(t, err)
	leg, _ = d2.Leg(Regular)
	assert.Equal(t, SignalInFlight, leg.Signal)
	assert.Equal(t, "http://a", d2.Regular.URL(), "least in-flight, lowest index")
}

// One candidate without a fresh report makes the whole Pick fall back to in-flight counts: the
// comparator never mixes the two scales.
func TestEngineLoadNeedsEveryCandidate(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyCacheAware, nil)
	report(t, r, clk.Now(), map[string]EngineLoad{
		"http://a": {WaitingReqs: 500, WaitingUncachedTokens: 1 << 20},
		"http://b": {WaitingReqs: 500, WaitingUncachedTokens: 1 << 20},
	})
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	leg, _ := d.Leg(Regular)
	assert.Equal(t, SignalInFlight, leg.Signal)
	assert.Equal(t, "http://a", d.Regular.URL())
}

// The comparator's order of precision: queued uncached tokens, then waiting requests, then
// in-flight; requests routed since a report count until the next one replaces it.
func TestLoadComparatorOrder(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyLeastLoad, nil)
	now := clk.Now()
	report(t, r, now, map[string]EngineLoad{
		"http://a": {WaitingReqs: 9, WaitingUncachedTokens: 100},
		"http://b": {WaitingReqs: 1, WaitingUncachedTokens: 100},
		"http://c": {WaitingReqs: 0, WaitingUncachedTokens: 5000},
	})
	d, err := r.Route(&Request{Text: "abcd"}) // one token
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL(), "tokens tie, fewer waiting")
	// b now has one more token queued than a, as the router knows: a wins.
	d, err = r.Route(&Request{Text: "abcd"})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d.Regular.URL(), "what was routed since the report counts")
	// A new report replaces what was routed since.
	report(t, r, now.Add(10*time.Millisecond), map[string]EngineLoad{"http://b": {WaitingReqs: 1, WaitingUncachedTokens: 10}})
	d, err = r.Route(&Request{Text: "abcd"})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL())
}

// A request routed since a report counts only while it is in flight: one that finished before
// the next report is neither in the engine nor in that report. One routed under an older
// report is the engine's to count once a newer one came.
func TestRoutedSinceReportCountsWhileInFlight(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyLeastLoad, nil)
	now := clk.Now()
	idle := map[string]EngineLoad{"http://a": {}, "http://b": {}, "http://c": {}}
	report(t, r, now, idle)
	routed := map[string]*Decision{}
	for range 3 { // one to each: a, b, c (tokens and waiting tie, then in-flight)
		d, err := r.Route(&Request{Text: "abcd"})
		require.NoError(t, err)
		routed[d.Regular.URL()] = d
	}
	require.Len(t, routed, 3)
	view := func(u string) engineView {
		r.mu.Lock()
		defer r.mu.Unlock()
		role, i, ok := r.findLocked(u)
		require.True(t, ok)
		return r.workers[role][i].targets[0].engine
	}
	assert.EqualValues(t, 1, view("http://a").sentReqs)
	routed["http://a"].Done(Regular, Success)
	a := view("http://a")
	assert.Zero(t, a.sentReqs, "finished before the next report: no longer queued")
	assert.Zero(t, a.sentTokens)
	assert.EqualValues(t, 1, a.routedTokens, "the prefill rate still learns from it")
	d, err := r.Route(&Request{Text: "abcd"})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d.Regular.URL(), "a holds nothing of this router's now")

	// A newer report counts b's request (or not) itself: its end does not take a request
	// routed under the new report out of the count.
	report(t, r, now.Add(10*time.Millisecond), map[string]EngineLoad{"http://b": {WaitingReqs: 1}})
	d, err = r.Route(&Request{Text: "abcd"})
	require.NoError(t, err)
	require.Equal(t, "http://b", d.Regular.URL(), "b's fresh report holds no queued tokens")
	routed["http://b"].Done(Regular, Success)
	assert.EqualValues(t, 1, view("http://b").sentReqs, "the request routed under the new report still counts")
	routed["http://c"].Done(Regular, Cancelled)
	assert.Zero(t, view("http://c").sentReqs, "a cancelled request leaves the count too")
}

// least_load divides queued tokens by each worker's prefill rate, learned from its reports: a
// worker that works off its queue twice as fast takes twice the queue.
func TestLeastLoadUsesLearnedPrefillRate(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyLeastLoad, nil)
	t0 := clk.Now()
	report(t, r, t0, map[string]EngineLoad{"http://a": {WaitingUncachedTokens: 4000}, "http://b": {WaitingUncachedTokens: 4000}, "http://c": {WaitingUncachedTokens: 4000}})
	report(t, r, t0.Add(time.Second), map[string]EngineLoad{"http://a": {WaitingUncachedTokens: 3000}, "http://b": {WaitingUncachedTokens: 2000}, "http://c": {WaitingUncachedTokens: 2500}})
	clk.Set(t0.Add(time.Second))
	// In that second a worked off 1000 tokens, b 2000, c 1500: waits of 3 s, 1 s and 1.67 s.
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL())
	leg, _ := d.Leg(Regular)
	assert.Equal(t, SignalEngineLoad, leg.Signal)
	assert.Equal(t, ReasonLeastLoad, leg.Reason)
}

// Overload protection: an overloaded worker is passed over while another is not; when every
// one is, the request is shed with a typed error carrying Retry-After.
func TestOverloadedWorkersArePassedOverThenShed(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyRoundRobin, func(c *Config) {
		c.WorkerOverloadTokenUsage = 0.95
		c.WorkerOverloadWaitingRequests = 50
	})
	now := clk.Now()
	report(t, r, now, map[string]EngineLoad{
		"http://a": {TokenUsage: 0.97},
		"http://b": {WaitingReqs: 60},
		"http://c": {TokenUsage: 0.5, WaitingReqs: 3},
	})
	for range 3 {
		d, err := r.Route(&Request{Text: "x"})
		require.NoError(t, err)
		assert.Equal(t, "http://c", d.Regular.URL())
	}
	report(t, r, now, map[string]EngineLoad{"http://c": {TokenUsage: 0.99}})
	_, err := r.Route(&Request{Text: "x"})
	var oe *OverloadError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, Regular, oe.Role)
	assert.Equal(t, 3, oe.Targets)
	assert.Positive(t, oe.RetryAfter)
	assert.Contains(t, err.Error(), "--worker-overload")
	// Stale reports say nothing: overloaded workers whose reports aged out take traffic again.
	clk.Advance(2 * time.Second)
	_, err = r.Route(&Request{Text: "x"})
	require.NoError(t, err)
}

// --max-worker-requests: a worker with that many requests in flight from this router is
// passed over, however strongly cache_aware's tree attracts the request to it (a hung worker
// holds at most that many); every worker at the cap sheds the request with Retry-After; a
// finished request frees its place.
func TestMaxWorkerRequestsCapsEachWorker(t *testing.T) {
	t.Parallel()
	r, _ := engineRouter(t, PolicyCacheAware, func(c *Config) { c.MaxWorkerRequests = 2 })
	var ds []*Decision
	per := map[string]int{}
	for range 6 {
		d, err := r.Route(&Request{Text: "the same long prompt, cached where it went first"})
		require.NoError(t, err)
		ds = append(ds, d)
		per[d.Regular.URL()]++
	}
	assert.Equal(t, map[string]int{"http://a": 2, "http://b": 2, "http://c": 2}, per, "two each, then the next worker")
	_, err := r.Route(&Request{Text: "x"})
	var oe *OverloadError
	require.True(t, errors.As(err, &oe), "%v", err)
	assert.Equal(t, 3, oe.Targets)
	assert.Positive(t, oe.RetryAfter)
	assert.Contains(t, err.Error(), "--max-worker-requests")
	ds[0].Done(Regular, Success)
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	assert.Equal(t, ds[0].Regular.URL(), d.Regular.URL(), "the one place freed")
}

// A report older than the one kept is dropped; an unknown target is an error; a whole worker's
// ranks add up.
func TestReportLoad(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyCacheAware, nil)
	now := clk.Now()
	require.NoError(t, r.ReportLoad("http://a", EngineLoad{WaitingReqs: 5}, now))
	require.NoError(t, r.ReportLoad("http://a", EngineLoad{WaitingReqs: 1}, now.Add(-time.Second)))
	ts := r.targets[Regular]
	assert.Equal(t, 5, ts[0].engine.load.WaitingReqs, "a late, older report is dropped")
	require.Error(t, r.ReportLoad("http://nope", EngineLoad{}, now))
	require.Error(t, r.ReportLoad("http://a@3", EngineLoad{}, now), "no such rank")

	sum := EngineLoad{RunningReqs: 1, WaitingReqs: 2, WaitingUncachedTokens: 30, UsedTokens: 100, MaxTotalTokens: 1000, TokenUsage: 0.1, MaxRunningRequests: 8}.
		Add(EngineLoad{RunningReqs: 3, WaitingReqs: 4, WaitingUncachedTokens: -1, UsedTokens: 700, MaxTotalTokens: 1000, TokenUsage: 0.7, MaxRunningRequests: 8})
	assert.Equal(t, EngineLoad{RunningReqs: 4, WaitingReqs: 6, WaitingUncachedTokens: -1, UsedTokens: 800, MaxTotalTokens: 2000, TokenUsage: 0.4, MaxRunningRequests: 16}, sum)
}

func TestEngineLoadConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  func(*Config)
		flag string
	}{
		{func(c *Config) { c.LoadReportMaxAgeMs = -1 }, "--load-report-max-age-ms"},
		{func(c *Config) { c.WorkerOverloadTokenUsage = 1.5 }, "--worker-overload-token-usage"},
		{func(c *Config) { c.WorkerOverloadWaitingRequests = -2 }, "--worker-overload-waiting-requests"},
		{func(c *Config) { c.MaxWorkerRequests = -1 }, "--max-worker-requests"},
		{func(c *Config) { c.BalanceUncachedTokenThreshold = -1 }, "--balance-uncached-token-threshold"},
	} {
		cfg := DefaultConfig()
		tc.set(&cfg)
		assert.ErrorContains(t, cfg.Validate(), tc.flag)
	}
}

// The balance check's engine scalar never falls below the router's own in-flight count: a
// prefill engine reports no running requests and counts a request in its prefill step as
// neither running nor waiting, so on reports alone a prefill busy with this router's requests
// looked idle.
func TestBalanceCheckKeepsInFlightAsLowerBound(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyCacheAware, nil)
	for range 70 { // 70 in flight on a
		_, err := r.Route(&Request{Text: "warm", Avoid: []string{"http://b", "http://c"}})
		require.NoError(t, err)
	}
	report(t, r, clk.Now(), map[string]EngineLoad{"http://a": {}, "http://b": {}, "http://c": {}})
	ts := r.targets[Regular]
	c := newLoadCmp(clk.Now(), ts, time.Second)
	require.True(t, c.engine)
	assert.Equal(t, ts[0].Load(), c.reqs(ts[0]), "a report of 0 requests does not hide 70 in flight")
	assert.True(t, imbalancedBy(c, ts, 64, 0, 1.5))
}

// cache_aware's balance check weighs the engines' queued work: with fresh reports for every
// candidate, a worker whose queue holds far more uncached prompt tokens than another's is
// passed over for a prompt it caches, though the request counts are within
// --balance-abs-threshold (a hot prefix piling onto one prefill worker); within
// --balance-uncached-token-threshold, or the relative rule, or with a report gone stale, or with
// the rule off, the cache hit stands, as sgl-router's counts alone decide.
func TestCacheAwareBalancesOnQueuedUncachedTokens(t *testing.T) {
	t.Parallel()
	const hot = "a long system prompt that worker a caches, and a question"
	for _, tc := range []struct {
		name       string
		tokens     int // --balance-uncached-token-threshold
		a, b, c    int // queued uncached tokens reported
		age        time.Duration
		want       string
		wantReason Reason
		wantSignal Signal
	}{
		{"tokens apart", 65536, 80000, 0, 1000, 0, "http://b", ReasonImbalance, SignalEngineLoad},
		{"within the bound", 65536, 60000, 0, 1000, 0, "http://a", ReasonCacheHit, SignalCacheMatch},
		{"within the relative rule", 65536, 300000, 210000, 220000, 0, "http://a", ReasonCacheHit, SignalCacheMatch},
		{"report stale", 65536, 80000, 0, 1000, 1500 * time.Millisecond, "http://a", ReasonCacheHit, SignalCacheMatch},
		{"rule off", 0, 80000, 0, 1000, 0, "http://a", ReasonCacheHit, SignalCacheMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, clk := engineRouter(t, PolicyCacheAware, func(c *Config) { c.BalanceUncachedTokenThreshold = tc.tokens })
			d, err := r.Route(&Request{Text: hot, Avoid: []string{"http://b", "http://c"}})
			require.NoError(t, err)
			require.Equal(t, "http://a", d.Regular.URL())
			d.Done(Regular, Success)
			// Request counts 10, 8 and 9: within 64 of each other.
			report(t, r, clk.Now(), map[string]EngineLoad{
				"http://a": {RunningReqs: 2, WaitingReqs: 8, WaitingUncachedTokens: tc.a},
				"http://b": {RunningReqs: 2, WaitingReqs: 6, WaitingUncachedTokens: tc.b},
				"http://c": {RunningReqs: 2, WaitingReqs: 7, WaitingUncachedTokens: tc.c},
			})
			clk.Advance(tc.age)
			d, err = r.Route(&Request{Text: hot})
			require.NoError(t, err)
			assert.Equal(t, tc.want, d.Regular.URL())
			assert.Equal(t, tc.wantReason, d.Reason)
			leg, _ := d.Leg(Regular)
			assert.Equal(t, tc.wantSignal, leg.Signal)
		})
	}
}

// The token rule is the prefill side's: decode targets, which queue no prompt tokens, are
// balanced on the requests they hold alone; and on in-flight counts there is no token rule.
func TestTokenBalanceRuleOnlyForFreshPrefillLoads(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	r := newTestRouter(t, cfg)
	for _, w := range []WorkerSpec{{URL: "http://p0:1", Role: Prefill}, {URL: "http://p1:1", Role: Prefill},
		{URL: "http://d0:1", Role: Decode}, {URL: "http://d1:1", Role: Decode}} {
		require.NoError(t, r.AddWorker(w))
	}
	loads := map[string]EngineLoad{
		"http://p0:1": {WaitingReqs: 1, WaitingUncachedTokens: 100000}, "http://p1:1": {WaitingReqs: 1},
		"http://d0:1": {RunningReqs: 1, WaitingUncachedTokens: 100000}, "http://d1:1": {RunningReqs: 1},
	}
	report(t, r, epoch, loads)
	for _, role := range []Role{Prefill, Decode} {
		ts := r.targets[role]
		fresh := newLoadCmp(epoch, ts, time.Second)
		require.True(t, fresh.engine)
		assert.Equal(t, role == Prefill, imbalancedBy(fresh, ts, 64, 65536, 1.5), "%s targets on fresh reports", role)
		assert.False(t, imbalancedBy(loadCmp{}, ts, 64, 65536, 1.5), "%s targets on in-flight counts", role)
	}
}

// least_load on regular workers looks at fullness first: a worker whose running batch is full
// takes new requests after one with a short prefill queue but room to decode.
func TestLeastLoadRegularLooksAtFullnessFirst(t *testing.T) {
	t.Parallel()
	r, clk := engineRouter(t, PolicyLeastLoad, nil)
	report(t, r, clk.Now(), map[string]EngineLoad{
		"http://a": {RunningReqs: 250, MaxRunningRequests: 256, WaitingUncachedTokens: 0, TokenUsage: 0.5},
		"http://b": {RunningReqs: 20, MaxRunningRequests: 256, WaitingUncachedTokens: 900, TokenUsage: 0.2},
		"http://c": {RunningReqs: 30, MaxRunningRequests: 256, WaitingUncachedTokens: 300, TokenUsage: 0.95},
	})
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL(), "a is full of running requests, c of KV: b's queue is the shorter wait")
}

// Decode targets rank by the requests they hold, not by waiting requests first: a decode
// engine's queue is short-lived (KV arriving, memory set aside), and a new request's first
// token waits on the whole batch it joins.
func TestDecodeRanksByRequestsHeld(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.DecodePolicy = PolicyPowerOfTwo // with two decode targets: compares both
	r := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p0:1", Role: Prefill}))
	for _, u := range []string{"http://d0:1", "http://d1:1"} {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Decode}))
	}
	now := epoch
	report(t, r, now, map[string]EngineLoad{
		"http://p0:1": {},
		"http://d0:1": {RunningReqs: 30, WaitingReqs: 0}, // a full batch, nothing queued
		"http://d1:1": {RunningReqs: 4, WaitingReqs: 2},  // a short batch, two arriving
	})
	d, err := r.Route(&Request{Text: "x"})
	require.NoError(t, err)
	assert.Equal(t, "http://d1:1", d.Decode.URL(), "6 requests held against 30")
	leg, _ := d.Leg(Decode)
	assert.Equal(t, SignalEngineLoad, leg.Signal)
	// What this router routed since the report counts: once 24 more went to d1 it holds as
	// many as d0, and d0, with fewer of this router's in flight, takes the next.
	for range 25 {
		d, err = r.Route(&Request{Text: "x"})
		require.NoError(t, err)
		if d.Decode.URL() != "http://d1:1" {
			break
		}
	}
	assert.Equal(t, "http://d0:1", d.Decode.URL(), "d1 as full as d0 after 24 more")
}

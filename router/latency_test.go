package router

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// linearModel is a cost model of round numbers: 10 ms + 1 µs a prefill token (cached ones free), 1 µs
// a queued token plus one step of the batch decoding on the rank, 1 ms + 1 µs a token of
// transfer, and a decode step of 10 ms + 1 ms a request + 1 µs a context token.
type linearModel struct{ maxRun, maxTok int }

func (linearModel) PrefillTime(uncached, _ int) time.Duration {
	return hostOverhead + time.Duration(uncached)*time.Microsecond
}

// hostOverhead is linearModel's fixed part of a prefill (the engine's tokenizer and HTTP path).
const hostOverhead = 10 * time.Millisecond

func (linearModel) QueueTime(tokens int, step time.Duration) time.Duration {
	return time.Duration(tokens)*time.Microsecond + step
}
func (linearModel) TransferTime(tokens int) time.Duration {
	return time.Millisecond + time.Duration(tokens)*time.Microsecond
}
func (linearModel) DecodeStepTime(batch, context int) time.Duration {
	return 10*time.Millisecond + time.Duration(batch)*time.Millisecond + time.Duration(context)*time.Microsecond
}
func (m linearModel) MaxRunningRequests() int { return m.maxRun }
func (m linearModel) MaxTotalTokens() int     { return m.maxTok }

var testModel = linearModel{maxRun: 64, maxTok: 1 << 20}

// latencyRouter is a router on a manual clock routed by predicted_latency with the linear
// model: regular workers a, b (pd false) or prefill p0, p1 and decode d0, d1 (pd true).
func latencyRouter(t *testing.T, pd bool, tweak func(*Config)) (*Router, *testutil.ManualClock) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = PolicyPredictedLatency
	cfg.PDDisaggregation = pd
	if tweak != nil {
		tweak(&cfg)
	}
	clk := testutil.NewManualClock(epoch)
	r, err := New(cfg, clk, NewRand(1))
	require.NoError(t, err)
	if pd {
		for _, w := range []WorkerSpec{{URL: "http://p0", Role: Prefill}, {URL: "http://p1", Role: Prefill}, {URL: "http://d0", Role: Decode}, {URL: "http://d1", Role: Decode}} {
			require.NoError(t, r.AddWorker(w))
		}
		require.NoError(t, r.UseLatencyModel(Prefill, testModel))
		require.NoError(t, r.UseLatencyModel(Decode, testModel))
	} else {
		for _, u := range []string{"http://a", "http://b"} {
			require.NoError(t, r.AddWorker(WorkerSpec{URL: u, Role: Regular}))
		}
		require.NoError(t, r.UseLatencyModel(Regular, testModel))
	}
	return r, clk
}

// text returns a prompt of n tokens as the router estimates them (four characters a token).
func text(prefix string, n int) string { return (prefix + strings.Repeat("x", 4*n))[:4*n] }

// The prediction is the model's, term by term: queue ahead (the engine's queued uncached
// tokens while its report is fresh, and the step of its running batch) plus the request's own
// prefill, then its decode step on the same worker; the lower predicted TTFT wins.
func TestPredictedLatencyPredictsFromTheModel(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, false, nil)
	report(t, r, clk.Now(), map[string]EngineLoad{
		"http://a": {WaitingUncachedTokens: 20000, RunningReqs: 2, UsedTokens: 3000},
		"http://b": {WaitingUncachedTokens: 1000, RunningReqs: 4, UsedTokens: 4000},
	})
	d, err := r.Route(&Request{Text: text("q", 1000)})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL(), "1000 queued tokens beat 20000")
	assert.Equal(t, ReasonPredictedLatency, d.Reason)
	p, ok := d.Prediction()
	require.True(t, ok)
	// TTFT: queue 1000 µs + a step of the 4 requests running (18 ms) + prefill 11 ms, whose
	// step gives the first token (a regular worker admits it into its batch with no step of
	// its own): 30 ms against a's 20 + 15 + 11 ms; TPOT: one decode step of 5 requests and
	// 5,000 context tokens.
	step := 10*time.Millisecond + 5*time.Millisecond + 5000*time.Microsecond
	assert.Equal(t, 30*time.Millisecond, p.TTFT)
	assert.Equal(t, step, p.TPOT)
	assert.Equal(t, 1.0, p.CorrectionTTFT)
	leg, _ := d.Leg(Regular)
	assert.Equal(t, SignalEngineLoad, leg.Signal)
}

// Without fresh reports the router's own view decides: the uncached tokens it sent a worker
// and has not seen prefilled yet. Its first token takes them out of the view.
func TestPredictedLatencyOwnViewAndCacheMatch(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, false, nil)
	long := text("system prompt ", 4000)
	d1, err := r.Route(&Request{Text: long})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d1.Regular.URL(), "a tie: the lowest index")
	d2, err := r.Route(&Request{Text: text("other ", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d2.Regular.URL(), "a still queues 4000 uncached tokens")
	assert.EqualValues(t, 4000, d1.Regular.latency.pending)

	clk.Advance(10 * time.Millisecond)
	d1.ObserveFirstToken(clk.Now())
	assert.Zero(t, d1.Regular.latency.pending, "prefilled")
	// The same prompt with a question appended: a caches its prefix, so its prefill is short.
	d3, err := r.Route(&Request{Text: long + text(" question", 200)})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d3.Regular.URL())
	assert.InDelta(t, 4000.0/4200, d3.MatchRate, 1e-9)

	for _, d := range []*Decision{d1, d2, d3} {
		d.Done(Regular, Success)
	}
	for _, tg := range r.targets[Regular] {
		assert.Zero(t, tg.latency.pending, tg.name)
		assert.Zero(t, tg.latency.context, tg.name)
	}
}

// A regular worker decoding a batch makes a new prompt wait for its step in flight (and, with
// the overlap scheduler, the next): the router counts the requests it sent there that are past
// their first token (or the engine's running batch, when its fresh report says more) and asks
// the model for their step. Requests still queued for prefill are the queue, not the batch.
func TestPredictedLatencyWaitsForTheRunningBatch(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, false, nil)
	d1, err := r.Route(&Request{Text: text("one ", 1000)})
	require.NoError(t, err)
	require.Equal(t, "http://a", d1.Regular.URL(), "a tie: the lowest index")
	p, _ := d1.Prediction()
	clk.Advance(p.TTFT)
	d1.ObserveFirstToken(clk.Now()) // as predicted (the correction stays 1): decoding on a now

	d2, err := r.Route(&Request{Text: text("two ", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d2.Regular.URL(), "a runs a decode step the prompt waits for")
	p, _ = d2.Prediction()
	assert.Equal(t, hostOverhead+100*time.Microsecond, p.TTFT, "b is idle: the prefill alone")

	// b has a prompt queued, not a batch: 100 µs queued + 10.1 ms prefill, below a's running
	// step of 1 request and 1,000 tokens (12 ms) + 10.1 ms.
	d3, err := r.Route(&Request{Text: text("six ", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d3.Regular.URL())
	p, _ = d3.Prediction()
	assert.Equal(t, hostOverhead+200*time.Microsecond, p.TTFT)

	// A fresh report of 8 requests running on b (other routers'): its step (26 ms) is waited
	// for now, and a's 22.1 ms wins.
	report(t, r, clk.Now(), map[string]EngineLoad{"http://a": {RunningReqs: 1, UsedTokens: 1000}, "http://b": {RunningReqs: 8, UsedTokens: 8000}})
	d4, err := r.Route(&Request{Text: text("ten ", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d4.Regular.URL())
	p, _ = d4.Prediction()
	assert.Equal(t, 12*time.Millisecond+hostOverhead+100*time.Microsecond, p.TTFT)
	for _, d := range []*Decision{d1, d2, d3, d4} {
		d.Done(Regular, Success)
	}
}

// In PD mode the pair is chosen together: the decode worker whose predicted TPOT breaks the
// TPOT SLO is passed over though its admission is as quick; with --slo-miss shed a request no
// pair can serve within its TTFT SLO is shed with Retry-After, naming the SLOs.
func TestPredictedLatencyPairWithinTPOTSLO(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, true, func(c *Config) { c.TPOTSLOMs = 40; c.SLOMiss = SLOMissShed })
	report(t, r, clk.Now(), map[string]EngineLoad{
		"http://p0": {WaitingUncachedTokens: 0},
		"http://p1": {WaitingUncachedTokens: 30000},
		"http://d0": {RunningReqs: 20, UsedTokens: 20000}, // step 10+21+21 ms: over 40
		"http://d1": {RunningReqs: 10, UsedTokens: 10000}, // 10+11+11 ms
	})
	d, err := r.Route(&Request{Text: text("a", 1000)})
	require.NoError(t, err)
	assert.Equal(t, "http://p0", d.Prefill.URL())
	assert.Equal(t, "http://d1", d.Decode.URL())
	p, _ := d.Prediction()
	assert.Equal(t, 32*time.Millisecond, p.TPOT)
	// prefill 11 ms + transfer 2 ms + admission one step.
	assert.Equal(t, 13*time.Millisecond+32*time.Millisecond, p.TTFT)

	_, err = r.Route(&Request{Text: text("b", 1000), TTFTSLO: 30 * time.Millisecond})
	var ov *OverloadError
	require.True(t, errors.As(err, &ov), "%v", err)
	assert.True(t, ov.SLO)
	assert.Equal(t, time.Second, ov.RetryAfter)
	assert.Contains(t, ov.Error(), "TTFT 30ms, TPOT 40ms")

	// best_effort routes it all the same.
	r2, clk2 := latencyRouter(t, true, func(c *Config) { c.TPOTSLOMs = 5 })
	report(t, r2, clk2.Now(), map[string]EngineLoad{"http://d0": {RunningReqs: 20}, "http://d1": {RunningReqs: 10}})
	d2, err := r2.Route(&Request{Text: text("c", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://d1", d2.Decode.URL(), "no decode meets 5 ms: the lowest TPOT")
}

// A worker that turns out slower than the model says is corrected for online: its observed ÷
// predicted TTFT pulls its correction up, it loses traffic, and without new observations the
// correction decays back towards the model as the half-life says.
func TestPredictedLatencyCorrectionLearnsAndForgets(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, false, func(c *Config) { c.LatencyCorrectionHalfLifeMs = 1000 })
	a := r.targets[Regular][0]
	// b queues 15 ms of prompts, so a keeps the traffic until its correction passes ~2.4.
	report(t, r, clk.Now(), map[string]EngineLoad{"http://b": {WaitingUncachedTokens: 15000}})
	for i := range 40 {
		d, err := r.Route(&Request{Text: text(fmt.Sprint(i), 1000)})
		require.NoError(t, err)
		p, _ := d.Prediction()
		clk.Advance(5 * time.Millisecond)
		start := clk.Now().Add(-5 * time.Millisecond)
		obs := p.TTFT // on time on b
		if d.Regular == a {
			obs = 3 * time.Duration(float64(p.TTFT)/p.CorrectionTTFT) // a is three times slower than the model
		}
		d.ObserveFirstToken(start.Add(obs))
		d.ObserveEnd(start.Add(obs+10*p.TPOT), 11)
		d.Done(Regular, Success)
	}
	now := clk.Now()
	ca := a.latency.ttft.value(now, time.Second)
	assert.Greater(t, ca, 2.0, "a's TTFT correction approaches 3")
	assert.Less(t, ca, 3.0)
	assert.InDelta(t, 1.0, r.targets[Regular][1].latency.ttft.value(now, time.Second), 1e-9)
	d, err := r.Route(&Request{Text: text("next", 1000)})
	require.NoError(t, err)
	assert.Equal(t, "http://b", d.Regular.URL(), "a is predicted slower now")
	// Ten half-lives later its observations weigh 2^-10 of what they did: back near the model.
	clk.Advance(10 * time.Second)
	assert.Less(t, a.latency.ttft.value(clk.Now(), time.Second), 1+(ca-1)/2)

	cs := r.LatencyCorrections()
	require.Len(t, cs, 2)
	assert.Equal(t, "http://a", cs[0].Name)
}

// The correction's arithmetic: each observation's log-ratio weighted 2^(−age/half-life),
// beside a prior of ratio 1 and weight 1; ratios are clamped to [1/8, 8].
func TestCorrectionHalfLife(t *testing.T) {
	t.Parallel()
	var c correction
	h := time.Second
	assert.Equal(t, 1.0, c.value(epoch, h))
	c.observe(epoch, 4, h)
	assert.InDelta(t, 2.0, c.value(epoch, h), 1e-9, "one observation of 4 beside the prior: exp(ln4/2)")
	// One half-life later the observation weighs 1/2: exp(ln4·½ / 1½).
	assert.InDelta(t, 1.5874, c.value(epoch.Add(h), h), 1e-4)
	c.observe(epoch.Add(h), 1000, h) // clamped to 8
	assert.InDelta(t, 8.0, maxRatio, 0)
	assert.InDelta(t, math.Exp((0.5*math.Log(4)+math.Log(8))/2.5), c.value(epoch.Add(h), h), 1e-9)
	c.observe(epoch, -1, h) // ignored
	c.observe(epoch, 0, h)
}

// predicted_latency picks both legs of a PD request, so it must route both roles.
func TestPredictedLatencyNeedsBothRoles(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.PrefillPolicy = PolicyPredictedLatency
	cfg.DecodePolicy = PolicyRoundRobin
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "give it to both roles")
	cfg = DefaultConfig()
	cfg.SLOMiss = "drop"
	assert.ErrorContains(t, cfg.Validate(), "--slo-miss")

	// Without a model it says which flag gives one.
	cfg = DefaultConfig()
	cfg.Policy = PolicyPredictedLatency
	r := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://a", Role: Regular}))
	_, err = r.Route(&Request{Text: "x"})
	assert.ErrorContains(t, err, "--latency-profile")
	assert.Error(t, r.UseLatencyModel(Regular, nil))
	assert.Error(t, regularRouter(t, PolicyRoundRobin, "http://a").UseLatencyModel(Regular, testModel))
}

// Predictions within an eighth of the best count as tied, and the tie goes to the target this
// router has the fewest requests in flight on: several router replicas reading one engine
// report do not all pile onto its one best target until the next report.
func TestPredictedLatencyNearTiesGoToTheLeastLoaded(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, false, nil)
	report(t, r, clk.Now(), map[string]EngineLoad{
		"http://a": {WaitingUncachedTokens: 0},
		"http://b": {WaitingUncachedTokens: 1000}, // 1 ms more of queue: within an eighth
	})
	var ds []*Decision
	for i := range 4 {
		d, err := r.Route(&Request{Text: text(fmt.Sprint(i), 100)})
		require.NoError(t, err)
		ds = append(ds, d)
	}
	assert.Equal(t, []string{"http://a", "http://b", "http://a", "http://b"},
		[]string{ds[0].Regular.URL(), ds[1].Regular.URL(), ds[2].Regular.URL(), ds[3].Regular.URL()})
	report(t, r, clk.Now(), map[string]EngineLoad{"http://b": {WaitingUncachedTokens: 100000}})
	d, err := r.Route(&Request{Text: text("x", 100)})
	require.NoError(t, err)
	assert.Equal(t, "http://a", d.Regular.URL(), "100 ms more of queue is no tie")
}

// A candidate's prefill of the request counts once per request queued there, besides its own
// TTFT: those requests wait on it. A prefill worker caching a long prompt's prefix keeps its
// follow-up behind a queue of two requests, and loses it to an idle one that must recompute
// the prefix behind a queue of 40 requests of as many tokens: the 40 ms of prefill it saves
// would delay them all by 2 ms each.
func TestPredictedLatencyPrefillCountsOncePerQueuedRequest(t *testing.T) {
	t.Parallel()
	r, clk := latencyRouter(t, true, nil)
	long := text("system prompt ", 40000)
	d, err := r.Route(&Request{Text: long})
	require.NoError(t, err)
	require.Equal(t, "http://p0", d.Prefill.URL(), "a tie: the lowest index")
	d.Done(Prefill, Success)
	d.Done(Decode, Success)

	// p0: 30 ms of queue, then 2 ms of prefill (40,000 tokens cached); p1: 42 ms of prefill.
	// Transfer (43 ms) and decode admission (53 ms) alike. Two requests queued at p0: 30 + 2 +
	// 2·3 + 96 = 134 ms against p1's 42 + 42 + 96 = 180 ms; 40: 30 + 2 + 2·41 + 96 = 210 ms
	// (counted once, 130 ms: p0 would keep it).
	for i, c := range []struct {
		queued int
		want   string
	}{{2, "http://p0"}, {40, "http://p1"}} {
		clk.Advance(time.Millisecond)
		report(t, r, clk.Now(), map[string]EngineLoad{
			"http://p0": {WaitingUncachedTokens: 30000, WaitingReqs: c.queued},
			"http://p1": {},
		})
		d, err := r.Route(&Request{Text: long + text(fmt.Sprintf(" question %d", i), 2000)})
		require.NoError(t, err)
		assert.Equal(t, c.want, d.Prefill.URL(), "%d requests queued at p0", c.queued)
		d.Done(Prefill, Success)
		d.Done(Decode, Success)
	}
	for _, tg := range r.targets[Prefill] {
		assert.Zero(t, tg.latency.pendingReqs, tg.name)
	}
}

package router

import (
	"fmt"
	"time"
)

// EngineLoad is what a worker's engine reported of its load: one DP rank's (an entry of
// SGLang's GET /v1/loads, or its Prometheus gauges), or a whole worker's summed over its ranks
// when the router does not address ranks. The counts are the engine's own, so they include
// every router replica's requests, and requests sent to the worker behind the router's back.
type EngineLoad struct {
	// RunningReqs and WaitingReqs are num_running_reqs and num_waiting_reqs (the gauges'
	// num_queue_reqs): requests in the running batch, and queued (under PD, the bootstrap,
	// prealloc and transfer queues too).
	RunningReqs, WaitingReqs int
	// WaitingUncachedTokens is num_waiting_uncached_tokens: prompt tokens queued for prefill
	// that its cache does not hold (0 on a decode worker); -1 when the engine does not report
	// it (SGLang's older Prometheus gauges).
	WaitingUncachedTokens int
	// UsedTokens and MaxTotalTokens are num_used_tokens and max_total_num_tokens (KV tokens).
	UsedTokens, MaxTotalTokens int
	// TokenUsage is token_usage: the KV pool's used share in [0,1].
	TokenUsage float64
	// GenThroughput is gen_throughput, tokens/s decoded.
	GenThroughput float64
	// MaxRunningRequests is max_running_requests (0: not reported).
	MaxRunningRequests int
}

// Add returns the sum of l and m, as a whole worker reports its ranks together: counts and
// capacities add, TokenUsage is the used share of the summed capacity (the larger of the two
// when capacities are not reported), and WaitingUncachedTokens stays unknown (-1) if either is.
func (l EngineLoad) Add(m EngineLoad) EngineLoad {
	s := EngineLoad{RunningReqs: l.RunningReqs + m.RunningReqs, WaitingReqs: l.WaitingReqs + m.WaitingReqs,
		UsedTokens: l.UsedTokens + m.UsedTokens, MaxTotalTokens: l.MaxTotalTokens + m.MaxTotalTokens,
		GenThroughput: l.GenThroughput + m.GenThroughput, MaxRunningRequests: l.MaxRunningRequests + m.MaxRunningRequests,
		WaitingUncachedTokens: l.WaitingUncachedTokens + m.WaitingUncachedTokens}
	if l.WaitingUncachedTokens < 0 || m.WaitingUncachedTokens < 0 {
		s.WaitingUncachedTokens = -1
	}
	s.TokenUsage = max(l.TokenUsage, m.TokenUsage)
	if s.MaxTotalTokens > 0 && s.UsedTokens > 0 {
		s.TokenUsage = float64(s.UsedTokens) / float64(s.MaxTotalTokens)
	}
	return s
}

// engineView is a target's latest engine report and what the router sent it since; guarded by
// the router's mutex.
type engineView struct {
	load EngineLoad
	at   time.Time // when the report was taken; zero: none
	gen  uint64    // counts the reports taken: a leg routed under one report knows it by this
	// sentReqs and sentTokens count the requests routed to the target since the report and
	// still in flight (and their uncached prompt tokens, estimated): what the report cannot
	// include yet. A request that also finished before the next report leaves both counts:
	// counted until then, every request routed since a report looked queued for the whole
	// interval, and at the 500 ms default a prefill worker's queue looked several times its
	// size.
	sentReqs, sentTokens int64
	// routedTokens is every uncached prompt token routed to the target since the report,
	// finished or not: what the prefill rate is learned from.
	routedTokens int64
	// rate is the target's prefill rate, uncached tokens/s, learned from its reports; 0:
	// not known yet.
	rate float64
}

// report takes a new engine report taken at at (an older one arriving late is dropped), and
// updates the prefill rate: the uncached tokens the engine worked off since the last report
// (what it had queued, plus what was routed to it since, minus what it has queued now) over
// the time between them, smoothed (prefillRateWeight).
func (e *engineView) report(l EngineLoad, at time.Time) {
	if at.Before(e.at) {
		return
	}
	if !e.at.IsZero() && l.WaitingUncachedTokens >= 0 && e.load.WaitingUncachedTokens >= 0 {
		if dt := at.Sub(e.at).Seconds(); dt > 0 {
			done := max(float64(int64(e.load.WaitingUncachedTokens)+e.routedTokens-int64(l.WaitingUncachedTokens))/dt, 0)
			switch {
			case done == 0 && l.WaitingUncachedTokens == 0: // idle: says nothing of its rate
			case e.rate == 0:
				e.rate = done
			default:
				e.rate += prefillRateWeight * (done - e.rate)
			}
		}
	}
	e.load, e.at, e.sentReqs, e.sentTokens, e.routedTokens = l, at, 0, 0, 0
	e.gen++
}

// prefillRateWeight is the weight of each new sample of a target's prefill rate (an
// exponential moving average over about five reports).
const prefillRateWeight = 0.2

// sent counts a request routed to the target since its report (one the caller has): one more
// request waiting, and its uncached prompt tokens (tokens) queued. It returns the report's
// generation (≥ 1), for finished.
func (e *engineView) sent(tokens int) uint64 {
	e.sentReqs++
	e.sentTokens += int64(tokens)
	e.routedTokens += int64(tokens)
	return e.gen
}

// finished takes a request counted by sent under report generation gen (with its tokens) out
// of the counts when it finishes before the next report: the engine no longer holds it, and
// the next report will not either. Once a newer report came, the request is the engine's to
// count (or not).
func (e *engineView) finished(gen uint64, tokens int) {
	if gen == 0 || gen != e.gen {
		return
	}
	e.sentReqs = max(e.sentReqs-1, 0)
	e.sentTokens = max(e.sentTokens-int64(tokens), 0)
}

// Signal says what a policy's choice among loads rested on (decision logs).
type Signal string

// Signals a Pick reports.
const (
	// SignalCacheMatch: the prefix match decided (cache_aware's hit).
	SignalCacheMatch Signal = "cache_match"
	// SignalEngineLoad: engine load reports, fresh for every candidate, decided.
	SignalEngineLoad Signal = "engine_load"
	// SignalInFlight: the router's own in-flight counts decided.
	SignalInFlight Signal = "in_flight"
	// SignalNone: the choice did not look at loads (round_robin, random, a lone target).
	SignalNone Signal = ""
)

// ReportLoad records an engine load report for the target named name ("url", or "url@rank"
// under --dp-aware), taken at at. Reports older than --load-report-max-age-ms count as
// absent. It fails when no such target is registered.
func (r *Router) ReportLoad(name string, l EngineLoad, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	url, _ := SplitTargetName(name)
	role, i, ok := r.findLocked(url)
	if !ok {
		return fmt.Errorf("router: load report for %s: not registered", name)
	}
	for _, t := range r.workers[role][i].targets {
		if t.name == name {
			t.engine.report(l, at)
			return nil
		}
	}
	return fmt.Errorf("router: load report for %s: the worker has no such target", name)
}

// loadCmp compares the loads of one Pick's candidates with the most precise signal they all
// have (SPEC §1.2, "loads"): when every candidate has a fresh engine report, prefill and
// regular targets by
//  1. queued uncached prompt tokens (the engine's, plus those routed to it since its report and
//     still in flight);
//  2. waiting requests (the engine's, plus those routed since and still in flight);
//  3. running requests (the engine's: a rank decoding for other clients is busier than an
//     idle one, though neither queues);
//  4. the router's in-flight requests;
//
// decode targets by the requests they hold (reqs, below), then in-flight requests: a decode
// engine queues a request only while its KV arrives and memory is set aside, and what delays
// its first token there is the whole batch it joins (ranking decode by waiting, then running,
// cost a PD cluster 4 % of mean TTFT on the hot-spot workload, 10 seeds, P99 the same); and
// otherwise by in-flight requests alone. The balance check's scalar (reqs) is, likewise, the
// engine's running and waiting requests plus those routed since and in flight (at least the
// in-flight requests), or in-flight requests; with engine reports, cache_aware's check also
// compares prefill and regular targets' queued uncached tokens (imbalancedBy).
type loadCmp struct {
	engine bool
	age    time.Duration // the oldest report's age, when engine
}

// newLoadCmp returns the comparison for ts at now, with reports fresh within maxAge (≤ 0:
// reports are never used).
func newLoadCmp(now time.Time, ts []*Target, maxAge time.Duration) loadCmp {
	if maxAge <= 0 {
		return loadCmp{}
	}
	var c loadCmp
	for _, t := range ts {
		if t.engine.at.IsZero() {
			return loadCmp{}
		}
		age := now.Sub(t.engine.at)
		if age > maxAge {
			return loadCmp{}
		}
		c.age = max(c.age, age)
	}
	c.engine = true
	return c
}

// signal is the Signal of a choice this comparison decided.
func (c loadCmp) signal() Signal {
	if c.engine {
		return SignalEngineLoad
	}
	return SignalInFlight
}

// less reports whether a is less loaded than b.
func (c loadCmp) less(a, b *Target) bool {
	if c.engine {
		if a.worker.role == Decode {
			if ra, rb := c.reqs(a), c.reqs(b); ra != rb {
				return ra < rb
			}
			return a.Load() < b.Load()
		}
		if ua, ub := a.uncached(), b.uncached(); ua != ub {
			return ua < ub
		}
		if wa, wb := a.waiting(), b.waiting(); wa != wb {
			return wa < wb
		}
		if ra, rb := a.engine.load.RunningReqs, b.engine.load.RunningReqs; ra != rb {
			return ra < rb
		}
	}
	return a.Load() < b.Load()
}

// reqs is t's load for the balance check: with engine reports, the engine's running and
// waiting requests plus those routed since its report and in flight, but never below this
// router's own in-flight count, a lower bound on what the worker holds (SGLang's prefill
// server reports no running requests, and a request in a prefill step counts as neither
// running nor waiting: on reports alone a prefill worker busy with this router's requests
// looked idle, and one router in front of a PD cluster balanced later than on in-flight
// counts).
func (c loadCmp) reqs(t *Target) int64 {
	if c.engine {
		e := &t.engine
		return max(int64(e.load.RunningReqs+e.load.WaitingReqs)+e.sentReqs, t.Load())
	}
	return t.Load()
}

// waiting is t's waiting requests: the engine's, plus those routed since its report and still
// in flight.
func (t *Target) waiting() int { return t.engine.load.WaitingReqs + int(t.engine.sentReqs) }

// uncached is t's queued uncached prompt tokens: the engine's (0 when it does not say) plus
// those routed since its report and still in flight.
func (t *Target) uncached() int64 {
	return int64(max(t.engine.load.WaitingUncachedTokens, 0)) + t.engine.sentTokens
}

// leastBy returns the index of the least loaded of ts by c, the lowest index on ties.
func leastBy(c loadCmp, ts []*Target) int {
	best := 0
	for i := 1; i < len(ts); i++ {
		if c.less(ts[i], ts[best]) {
			best = i
		}
	}
	return best
}

// imbalancedBy reports whether ts's loads by c are imbalanced: by requests (c.reqs),
// max−min > abs and max > min·rel; or, when c compares engine reports and ts are prefill or
// regular targets, by queued uncached prompt tokens (Target.uncached), max−min > absTokens
// (> 0) and max > min·rel. In-flight counts alone use the first rule alone: sgl-router's.
func imbalancedBy(c loadCmp, ts []*Target, abs, absTokens int64, rel float64) bool {
	if spread(ts, c.reqs, abs, rel) {
		return true
	}
	if !c.engine || absTokens <= 0 || ts[0].worker.role == Decode {
		return false
	}
	return spread(ts, (*Target).uncached, absTokens, rel)
}

// spread reports whether load's max−min over ts is above abs and its max above min·rel.
func spread(ts []*Target, load func(*Target) int64, abs int64, rel float64) bool {
	minL, maxL := load(ts[0]), load(ts[0])
	for _, t := range ts[1:] {
		l := load(t)
		minL, maxL = min(minL, l), max(maxL, l)
	}
	return maxL-minL > abs && float64(maxL) > float64(minL)*rel
}

// overloaded reports whether t's fresh engine report (fresh within maxAge at now) says it is
// over a bound: KV token usage at or above tokenUsage (> 0), or waitingReqs (> 0) or more
// requests waiting.
func (t *Target) overloaded(now time.Time, maxAge time.Duration, tokenUsage float64, waitingReqs int) bool {
	e := &t.engine
	if e.at.IsZero() || now.Sub(e.at) > maxAge {
		return false
	}
	return tokenUsage > 0 && e.load.TokenUsage >= tokenUsage ||
		waitingReqs > 0 && t.waiting() >= waitingReqs
}

// OverloadError is Route's error when every available target of a role is overloaded
// (--worker-overload-token-usage, --worker-overload-waiting-requests, --max-worker-requests):
// the request is shed, not queued. RetryAfter is how long a client should wait before trying again.
type OverloadError struct {
	Role       Role
	Targets    int // how many were available, all overloaded
	RetryAfter time.Duration
	// SLO is set when predicted_latency shed the request under --slo-miss shed: no target (pair)
	// was predicted to meet its SLOs. Then PredictedTTFT and PredictedTPOT are the best
	// candidate's, TTFTSLO and TPOTSLO the request's (0: none).
	SLO                          bool
	PredictedTTFT, PredictedTPOT time.Duration
	TTFTSLO, TPOTSLO             time.Duration
}

func (e *OverloadError) Error() string {
	if e.SLO {
		return fmt.Sprintf("router: no worker is predicted to meet the request's SLOs (TTFT %s, TPOT %s; best predicted TTFT %s, TPOT %s; --slo-miss shed): retry in %s",
			sloText(e.TTFTSLO), sloText(e.TPOTSLO), e.PredictedTTFT.Round(time.Millisecond/10), e.PredictedTPOT.Round(time.Microsecond*10), e.RetryAfter)
	}
	return fmt.Sprintf("router: all %d available %s workers are overloaded (engine KV usage or waiting requests over --worker-overload-*, or requests in flight at --max-worker-requests): retry in %s", e.Targets, e.Role, e.RetryAfter)
}

// sloText renders an SLO, "none" for 0.
func sloText(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

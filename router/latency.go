package router

import (
	"fmt"
	"math"
	"time"
)

// LatencyModel is the engine cost model predicted_latency asks: how long a worker's engine
// takes for a piece of work, on an idle rank, before any correction. cmd/router injects the
// simulator's engine model (sim/engine.CostModel, built from the same preset, profile file or
// --model-path/--gpu engine `router sim` runs) with [Router.UseLatencyModel]; the router never
// imports it. Implementations read no clock: every time is a duration of model time.
type LatencyModel interface {
	// PrefillTime is the time to prefill uncached prompt tokens after cached ones already in
	// the rank's cache, chunk by chunk (--chunked-prefill-size), alone on the rank.
	PrefillTime(uncached, cached int) time.Duration
	// QueueTime is the time a prompt waits behind tokens queued uncached prompt tokens of other
	// requests on a rank whose running decode batch takes step a step (0: none runs; an idle
	// rank, nothing queued or running, takes it at once): their chunks, and the step in flight
	// when it arrives (with the overlap scheduler the batch formed at its start too).
	QueueTime(tokens int, step time.Duration) time.Duration
	// TransferTime is the KV transfer of a prompt of tokens from a prefill to a decode rank,
	// its fixed costs (bootstrap, transfer setup) included.
	TransferTime(tokens int) time.Duration
	// DecodeStepTime is one decode step of batch requests whose contexts sum to context tokens.
	DecodeStepTime(batch, context int) time.Duration
	// MaxRunningRequests and MaxTotalTokens are a rank's decode batch and KV capacity (the
	// engine's, as its load reports would say them).
	MaxRunningRequests() int
	MaxTotalTokens() int
}

// UseLatencyModel gives role's predicted_latency policy the engine model of that role's
// workers (in PD mode: prefill workers' for Prefill, decode workers' for Decode; regular
// workers' for Regular). It fails when role's policy is not predicted_latency or m is nil.
func (r *Router) UseLatencyModel(role Role, m LatencyModel) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.Policy(role).(*PredictedLatency)
	if !ok {
		return fmt.Errorf("router: a latency model needs the predicted_latency policy for %s workers", role)
	}
	if m == nil {
		return fmt.Errorf("router: nil latency model for %s workers", role)
	}
	p.model = m
	if r.cfg.PDDisaggregation && role == Decode {
		if pre, ok := r.policies[Prefill].(*PredictedLatency); ok {
			pre.decodeModel = m
		}
	}
	if r.cfg.PDDisaggregation && role == Prefill {
		if dec, ok := r.policies[Decode].(*PredictedLatency); ok && dec.model != nil {
			p.decodeModel = dec.model
		}
	}
	return nil
}

// SLO miss handling (--slo-miss): what predicted_latency does with a request no target (pair)
// is predicted to serve within its SLOs.
const (
	// SLOMissBestEffort routes it anyway: the lowest predicted TTFT among the targets that
	// meet its TPOT SLO, else the lowest predicted TPOT.
	SLOMissBestEffort = "best_effort"
	// SLOMissShed sheds it: 503 with Retry-After ([OverloadError] with SLO set).
	SLOMissShed = "shed"
)

// PredictedLatencyConfig parameterises [PredictedLatency].
type PredictedLatencyConfig struct {
	// TTFTSLO and TPOTSLO are the SLOs of a request that names none (0: none).
	TTFTSLO, TPOTSLO time.Duration
	// SLOMiss is SLOMissBestEffort or SLOMissShed.
	SLOMiss string
	// HalfLife is the correction's half-life: an observation's weight halves every HalfLife
	// of the times passed in (virtual time in the simulator).
	HalfLife time.Duration
	// MaxAge: engine reports older than it are not used (the router's own view is).
	MaxAge time.Duration
}

// PredictedLatency routes each request to the target — in PD mode the (prefill, decode) pair
// — with the lowest predicted time to first token among those whose predicted time per output
// token meets the request's TPOT SLO (the TTFT ranked with the candidate's prefill of this
// request counted once more, prefillWorkWeight: the work it adds delays the requests behind
// it), predicting both with the engine's cost model ([LatencyModel]):
//
//	TTFT = c_P · (queue ahead on P + this request's uncached prefill) + KV transfer + D's admission
//	TPOT = c_D · decode step of D's batch with this request added
//
// The queue ahead on P is its engine-reported queued uncached tokens (plus those routed since
// the report) when the report is fresh, else the uncached tokens this router sent it that are
// not prefilled yet; in regular mode, also the decode steps of the batch running on the
// worker that the prompt waits for (LatencyModel.QueueTime): this router's requests there past
// their first token, or the engine's running batch when its fresh report says more. The
// uncached prefill is the prompt less the prefix the KV-event index (or, without one, the
// approximate tree) predicts the target caches. D's batch and context
// are its engine report's (running and waiting requests, KV tokens in use) when fresh, else
// this router's in-flight requests on it and their prompts. D's admission is one decode step,
// or, when its batch is full, the wait for a slot. In regular mode P and D are the same
// worker, the transfer is zero and so is the admission step (the first token comes out of
// the prefill step), but not the wait for a slot.
//
// c_P and c_D are per-target corrections learned online: the mean of log(observed ÷
// predicted) of the target's requests, each weighted 2^(−age/HalfLife), beside a prior of
// weight 1 at ratio 1 that does not decay (so a target that stopped getting requests drifts
// back towards the model). Observations come from the driver ([Decision.ObserveFirstToken],
// [Decision.ObserveEnd]): TTFT corrects the prefill (regular) target, TPOT the decode
// (regular) one.
//
// When no target meets the SLOs — the best predicted TTFT over the TTFT SLO, or no TPOT within
// the TPOT SLO — SLOMiss decides: route best-effort, or shed.
type PredictedLatency struct {
	cfg         PredictedLatencyConfig
	ca          *CacheAware   // the tree and KV index the uncached prefill is predicted from
	model       LatencyModel  // this role's workers' (prefill or regular)
	decodeModel LatencyModel  // PD: the decode workers' (set on the prefill role's instance)
	avgOutput   float64       // output tokens per finished request, smoothed (D's admission wait)
	transfer    time.Duration // the last PickPair's predicted KV transfer

	rates []float64 // scratch: per-target match rates
	pre   []prediction
	dec   []prediction
}

var _ Policy = (*PredictedLatency)(nil)

// prediction is one candidate's predicted parts.
type prediction struct {
	raw     time.Duration // P: queue + prefill, before c_P; D: decode step (TPOT) before c_D
	ttft    time.Duration // P: c_P · raw; D: admission (+ transfer in PD, added per pair)
	tpot    time.Duration // D: c_D · raw
	corr    float64       // c_P or c_D
	cached  int           // P: predicted cached tokens
	context int           // D: the request's context added (prompt tokens)
	engine  bool          // the engine report decided (fresh)
	work    time.Duration // P: the request's own prefill, corrected, times prefillWorkWeight and 1 + the requests queued
	running time.Duration // D in regular mode: a decode step of the batch running now (0: none)
}

// prefillWorkWeight is how much of a candidate's prefill of this request the choice adds to its
// predicted TTFT for each request it delays: the prefill delays the requests that will queue
// behind it, about as many as are queued on the candidate now (Little's law, in a steady
// queue), so the choice ranks by TTFT + c_P · prefill · prefillWorkWeight · (1 + queued
// requests), and a target that must recompute a prefix another caches pays for it once per
// request that waits on it. Queued requests: the engine's num_waiting_reqs and the requests
// routed since its fresh report, else this router's requests not yet prefilled there.
// Simulated, 2P+4D at 85 % of capacity, one replica (seed 1), counting the prefill once more
// without the queued requests: on cache-pressure TTFT mean 239 → 212 ms and P99 782 → 704 ms at
// 1 (207 and 682 ms at 2); on the hot-spot workload no change beyond noise (P99 963 → 943 ms
// at 1, 1004 ms at 2). Multiplying by 1 + the queued requests (issue 42), multiturn 2P+4D at
// 85 % with 4 replicas, whose prefill servers queue (a replica sees a quarter of each
// conversation's turns, so many look uncached to it): TTFT mean 481 → 340 ms, P99 1644 → 998
// ms (seeds 1–3; weighing the queued requests 0.5: 389 ms, 2: 299 ms, 4: 360 ms, 8: 305 ms —
// the point is chaotic), the other probed points' means within ±2 % (cache-pressure 2P+4D, one
// replica: 221 ms without the queued requests, 224 at 1, 255 at 8) but hot-spot 4P+4D at 85 %
// with 4 replicas (+6 %), whose P99 rose (458 → 587 ms with one replica, 474 → 592 ms with 4:
// more of a burst stays on the server caching its prefix).
const prefillWorkWeight = 1.0

// NewPredictedLatency returns the policy with an empty tree; it needs a model
// ([Router.UseLatencyModel]) before it routes.
func NewPredictedLatency(cfg PredictedLatencyConfig, ca CacheAwareConfig) *PredictedLatency {
	return &PredictedLatency{cfg: cfg, ca: NewCacheAware(ca)}
}

// Name returns "predicted_latency".
func (*PredictedLatency) Name() string { return PolicyPredictedLatency }

// The capabilities of the embedded tree.
func (p *PredictedLatency) AddTarget(t *Target)      { p.ca.AddTarget(t) }
func (p *PredictedLatency) RemoveTarget(name string) { p.ca.RemoveTarget(name) }
func (p *PredictedLatency) Evict()                   { p.ca.Evict() }
func (p *PredictedLatency) ResetTree()               { p.ca.ResetTree() }
func (p *PredictedLatency) TreeStats() TreeSize      { return p.ca.TreeStats() }

// Pick picks one regular target (see PredictedLatency): each worker is its own P and D.
func (p *PredictedLatency) Pick(now time.Time, req *Request, ts []*Target) (Pick, error) {
	if p.model == nil {
		return Pick{}, fmt.Errorf("no latency model (cmd/router wires the engine model in: --latency-profile, or the simulated cluster's)")
	}
	p.predictDecode(now, req, ts, p.model, true)
	p.predictPrefill(now, req, ts, true)
	ttftSLO, tpotSLO := p.slos(req)
	best, meets := p.choose(len(ts), 1, func(i, _ int) (time.Duration, time.Duration, time.Duration) {
		ttft := p.pre[i].ttft + p.dec[i].ttft
		return ttft + p.pre[i].work, ttft, p.dec[i].tpot
	}, func(i, _ int) int64 { return ts[i].Load() }, ttftSLO, tpotSLO)
	if !meets && p.cfg.SLOMiss == SLOMissShed {
		return Pick{}, p.shed(ts[0].worker.role, ttftSLO, tpotSLO, p.pre[best].ttft+p.dec[best].ttft, p.dec[best].tpot)
	}
	return p.commit(now, req, ts, best), nil
}

// PickPair picks a prefill and a decode target together (PD mode).
func (p *PredictedLatency) PickPair(now time.Time, req *Request, pre, dec []*Target, decLoads loadCmp) (Pick, Pick, error) {
	if p.model == nil || p.decodeModel == nil {
		return Pick{}, Pick{}, fmt.Errorf("no latency model for prefill and decode workers (cmd/router wires the engine model in: --latency-profile, or the simulated cluster's)")
	}
	preLoads := req.loads
	p.predictPrefill(now, req, pre, false)
	req.loads = decLoads
	p.predictDecode(now, req, dec, p.decodeModel, false)
	req.loads = preLoads
	transfer := p.decodeModel.TransferTime(req.promptTokens())
	p.transfer = transfer
	ttftSLO, tpotSLO := p.slos(req)
	ttft := func(i, j int) (time.Duration, time.Duration) {
		return p.pre[i].ttft + transfer + p.dec[j].ttft, p.dec[j].tpot
	}
	score := func(i, j int) (time.Duration, time.Duration, time.Duration) {
		t, tp := ttft(i, j)
		return t + p.pre[i].work, t, tp
	}
	best, meets := p.choose(len(pre), len(dec), score, func(i, j int) int64 { return pre[i].Load() + dec[j].Load() }, ttftSLO, tpotSLO)
	bi, bj := best/len(dec), best%len(dec)
	if !meets && p.cfg.SLOMiss == SLOMissShed {
		t, tp := ttft(bi, bj)
		return Pick{}, Pick{}, p.shed(Prefill, ttftSLO, tpotSLO, t, tp)
	}
	pk := p.commit(now, req, pre, bi)
	dk := Pick{Index: bj, Reason: ReasonPredictedLatency, Signal: p.signal(p.dec[bj].engine)}
	return pk, dk, nil
}

// shed is the error of a request no candidate serves within its SLOs.
func (p *PredictedLatency) shed(role Role, ttftSLO, tpotSLO, ttft, tpot time.Duration) error {
	return &OverloadError{Role: role, SLO: true, RetryAfter: shedRetryAfter, PredictedTTFT: ttft, PredictedTPOT: tpot, TTFTSLO: ttftSLO, TPOTSLO: tpotSLO}
}

// chosen returns the latency leg of candidate i (prefill or regular) and j (decode or regular)
// of the last Pick or PickPair, routed at now; transfer is the KV transfer predicted between them.
func (p *PredictedLatency) chosen(now time.Time, i, j int, transfer time.Duration) *latencyLeg {
	a, b := p.pre[i], p.dec[j]
	return &latencyLeg{routed: now, rawP: a.raw, fixed: transfer + b.ttft, rawTPOT: b.raw,
		ttft: a.ttft + transfer + b.ttft, tpot: b.tpot, corrTTFT: a.corr, corrTPOT: b.corr}
}

// slos returns the request's SLOs: its own, else the configured ones.
func (p *PredictedLatency) slos(req *Request) (ttft, tpot time.Duration) {
	ttft, tpot = req.TTFTSLO, req.TPOTSLO
	if ttft <= 0 {
		ttft = p.cfg.TTFTSLO
	}
	if tpot <= 0 {
		tpot = p.cfg.TPOTSLO
	}
	return ttft, tpot
}

// choose returns the candidate (i·nj + j) of lowest score (the predicted TTFT, plus the work
// term) among those whose TPOT meets tpotSLO, and whether it meets both SLOs. Candidates
// within an eighth of that score count as tied (near-ties are noise of the model and of
// reports up to their interval old, and several router replicas reading the same report would
// all pile onto its one best target until the next): among them the least loaded by this
// router's in-flight requests wins, then the lower score, then the lowest index. When none
// meets the TPOT SLO it returns the lowest TPOT (ties: lower score).
func (p *PredictedLatency) choose(ni, nj int, at func(i, j int) (score, ttft, tpot time.Duration), load func(i, j int) int64, ttftSLO, tpotSLO time.Duration) (int, bool) {
	best, bestScore, bestTPOT, bestOK := -1, time.Duration(0), time.Duration(0), false
	for i := range ni {
		for j := range nj {
			sc, _, tp := at(i, j)
			ok := tpotSLO <= 0 || tp <= tpotSLO
			better := best < 0 || ok && !bestOK
			if !better && ok == bestOK {
				if ok {
					better = sc < bestScore || sc == bestScore && tp < bestTPOT
				} else {
					better = tp < bestTPOT || tp == bestTPOT && sc < bestScore
				}
			}
			if better {
				best, bestScore, bestTPOT, bestOK = i*nj+j, sc, tp, ok
			}
		}
	}
	if bestOK {
		limit, chosen, chosenScore, chosenLoad := bestScore+bestScore/nearTie, best, bestScore, load(best/nj, best%nj)
		for i := range ni {
			for j := range nj {
				sc, _, tp := at(i, j)
				if sc > limit || tpotSLO > 0 && tp > tpotSLO {
					continue
				}
				if l := load(i, j); l < chosenLoad || l == chosenLoad && sc < chosenScore {
					chosen, chosenScore, chosenLoad = i*nj+j, sc, l
				}
			}
		}
		best = chosen
	}
	_, ttft, _ := at(best/nj, best%nj)
	return best, bestOK && (ttftSLO <= 0 || ttft <= ttftSLO)
}

// nearTie: scores within 1/nearTie of the best count as tied (choose).
const nearTie = 8

// commit records the chosen prefill (or regular) target's request in the tree and the index,
// and returns its Pick.
func (p *PredictedLatency) commit(now time.Time, req *Request, ts []*Target, i int) Pick {
	ca := p.ca
	if ca.kv != nil && len(req.Tokens) > 0 {
		ca.kv.addPending(ts[i].kvID, req, ca.page, now)
	}
	ca.insert(req, ts[i].name)
	pk := Pick{Index: i, Reason: ReasonPredictedLatency, MatchRate: p.rates[i], Signal: p.signal(p.pre[i].engine)}
	if ca.kv != nil && len(req.Tokens) > 0 && len(ca.matched) == len(ts) && ca.matched[i] >= 0 {
		pk.KVIndex, pk.PredictedCachedTokens = true, p.pre[i].cached
	}
	return pk
}

func (p *PredictedLatency) signal(engine bool) Signal {
	if engine {
		return SignalEngineLoad
	}
	return SignalInFlight
}

// fresh reports whether t's engine report is fresh at now.
func (p *PredictedLatency) fresh(now time.Time, t *Target) bool {
	return p.cfg.MaxAge > 0 && !t.engine.at.IsZero() && now.Sub(t.engine.at) <= p.cfg.MaxAge
}

// predictPrefill fills p.pre (and p.rates) for the prefill or regular candidates ts; regular:
// they decode too, and p.dec holds their running batches (predictDecode ran first).
func (p *PredictedLatency) predictPrefill(now time.Time, req *Request, ts []*Target, regular bool) {
	p.rates = p.ca.matchRates(now, req, ts, p.rates[:0])
	p.pre = p.pre[:0]
	prompt := req.promptTokens()
	for i, t := range ts {
		cached := min(int(p.rates[i]*float64(prompt)), prompt)
		engine := p.fresh(now, t)
		queued := t.latency.pending
		if engine {
			queued = int64(max(t.engine.load.WaitingUncachedTokens, 0)) + t.latency.sinceReport(t.engine.gen)
		}
		behind := t.latency.pendingReqs
		if engine {
			behind = int64(t.engine.load.WaitingReqs) + t.engine.sentReqs
		}
		own := p.model.PrefillTime(prompt-cached, cached)
		var step time.Duration
		if regular {
			step = p.dec[i].running
		}
		raw := p.model.QueueTime(int(queued), step) + own
		c := t.latency.ttft.value(now, p.cfg.HalfLife)
		p.pre = append(p.pre, prediction{raw: raw, ttft: scale(raw, c), work: scale(own, c*prefillWorkWeight*float64(1+max(behind, 0))),
			corr: c, cached: cached, engine: engine})
	}
}

// predictDecode fills p.dec for the decode or regular candidates ts under model m; regular:
// with the step of the batch running on each (prediction.running).
func (p *PredictedLatency) predictDecode(now time.Time, req *Request, ts []*Target, m LatencyModel, regular bool) {
	p.dec = p.dec[:0]
	prompt := req.promptTokens()
	maxRun, maxTok := m.MaxRunningRequests(), m.MaxTotalTokens()
	for _, t := range ts {
		batch, context := t.Load(), t.latency.context
		engine := p.fresh(now, t)
		if engine {
			e := &t.engine
			batch = max(int64(e.load.RunningReqs+e.load.WaitingReqs)+e.sentReqs, t.Load())
			context = int64(e.load.UsedTokens) + e.sentReqs*int64(prompt)
			if e.load.MaxRunningRequests > 0 {
				maxRun = e.load.MaxRunningRequests
			}
			if e.load.MaxTotalTokens > 0 {
				maxTok = e.load.MaxTotalTokens
			}
		}
		step := m.DecodeStepTime(int(batch)+1, int(context)+prompt)
		var running time.Duration
		if regular {
			// The requests decoding now: this router's past their prefill, or the engine's
			// running batch when its fresh report says more (other routers').
			n := t.Load() - t.latency.pendingReqs
			if engine {
				n = max(n, int64(t.engine.load.RunningReqs))
			}
			if n > 0 {
				running = m.DecodeStepTime(int(n), int(context))
			}
		}
		// A decode server admits the request into its batch with a decode step; a regular
		// worker's first token comes out of the prefill step itself.
		admit := step
		if regular {
			admit = 0
		}
		// A full batch (or KV) admits the request once enough running requests finish: a
		// request runs about avgOutput steps, so slots free at maxRun ÷ avgOutput per step.
		over := batch + 1 - int64(maxRun)
		if maxTok > 0 && context+int64(prompt) > int64(maxTok) && batch > 0 {
			over = max(over, (context+int64(prompt)-int64(maxTok))*batch/max(context, 1)+1)
		}
		if over > 0 && maxRun > 0 {
			admit += time.Duration(float64(over) * max(p.avgOutput, 1) / float64(maxRun) * float64(step))
		}
		c := t.latency.tpot.value(now, p.cfg.HalfLife)
		p.dec = append(p.dec, prediction{raw: step, ttft: admit, tpot: scale(step, c), corr: c, context: prompt, engine: engine, running: running})
	}
}

// scale returns d·c.
func scale(d time.Duration, c float64) time.Duration { return time.Duration(float64(d) * c) }

// matchRates appends to dst the predicted cached share of req's prompt on each of ts: on the
// KV event index for targets whose view there is not stale (with a request carrying tokens),
// else on the approximate tree (the match's share for the tenants on its stop node, 0 for the
// others).
func (p *CacheAware) matchRates(now time.Time, req *Request, ts []*Target, dst []float64) []float64 {
	kv := p.kv != nil && len(req.Tokens) > 0
	anyStale := !kv
	if kv {
		p.ids = p.ids[:0]
		for _, t := range ts {
			p.ids = append(p.ids, t.kvID)
		}
		p.match(req, p.ids, now)
		for _, m := range p.matched {
			anyStale = anyStale || m < 0
		}
	} else {
		p.matched = p.matched[:0]
	}
	for range ts {
		dst = append(dst, 0)
	}
	if anyStale {
		var stale []int // nil: every target on the tree
		if kv {
			stale = p.matched
		}
		p.treeRates(req, ts, dst[len(dst)-len(ts):], stale)
	}
	if kv {
		for i, m := range p.matched {
			if m >= 0 {
				dst[i] = min((float64(m)+p.cfg.HostTierWeight*float64(p.hostOf(i)))*float64(p.page)/float64(len(req.Tokens)), 1)
			}
		}
	}
	return dst
}

// latencyView is what predicted_latency keeps of a target, guarded by the router's mutex.
type latencyView struct {
	// pending is the uncached prompt tokens this router routed to the target that are not
	// prefilled yet (first token observed, or the leg ended): its own view of the queue.
	pending int64
	// pendingReqs counts the requests of pending.
	pendingReqs int64
	// since is the part of pending routed since the engine report of generation sinceGen: what
	// the report cannot hold yet. (Requests routed since and still in flight, as loadCmp counts
	// them, held a prefill server's queue several times too long in PD: a request stays in
	// flight there through its KV transfer, long after its prefill.)
	since    int64
	sinceGen uint64
	// context is the prompt tokens of the requests this router routed to the target (decode or
	// regular) and not finished: its own view of the KV the batch holds.
	context int64
	// ttft and tpot are the target's corrections.
	ttft, tpot correction
}

// addPending counts a request's tokens routed to the target under its engine report of
// generation gen.
func (v *latencyView) addPending(tokens int64, gen uint64) {
	v.pending += tokens
	v.pendingReqs++
	if v.sinceGen != gen {
		v.since, v.sinceGen = 0, gen
	}
	v.since += tokens
}

// dropPending takes a request's tokens counted by addPending under gen out: prefilled, or the
// leg ended.
func (v *latencyView) dropPending(tokens int64, gen uint64) {
	v.pending -= tokens
	v.pendingReqs--
	if gen == v.sinceGen {
		v.since = max(v.since-tokens, 0)
	}
}

// sinceReport is the pending tokens routed since the report of generation gen.
func (v *latencyView) sinceReport(gen uint64) int64 {
	if v.sinceGen != gen {
		return 0
	}
	return v.since
}

// correction is a multiplicative correction learned from observed ÷ predicted ratios: the
// exponential of the weighted mean of their logarithms, each weighted 2^(−age/half-life),
// beside a prior of ratio 1 and weight 1 that never decays.
type correction struct {
	sum, weight float64   // Σ w·ln(ratio) and Σ w, as of at
	at          time.Time // zero: no observation yet
}

// maxRatio bounds one observation's ratio (and its inverse): a wild outlier (a request stuck
// behind a retry, a clock step) moves the correction by at most this.
const maxRatio = 8

// value returns the correction at now.
func (c *correction) value(now time.Time, halfLife time.Duration) float64 {
	if c.at.IsZero() {
		return 1
	}
	d := c.decay(now, halfLife)
	return math.Exp(c.sum * d / (c.weight*d + 1))
}

// decay is the factor the weights lost from c.at to now.
func (c *correction) decay(now time.Time, halfLife time.Duration) float64 {
	dt := now.Sub(c.at)
	if dt <= 0 || halfLife <= 0 {
		return 1
	}
	return math.Exp2(-float64(dt) / float64(halfLife))
}

// observe adds one observed ÷ predicted ratio at now.
func (c *correction) observe(now time.Time, ratio float64, halfLife time.Duration) {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return
	}
	ratio = min(max(ratio, 1.0/maxRatio), maxRatio)
	if !c.at.IsZero() {
		d := c.decay(now, halfLife)
		c.sum, c.weight = c.sum*d, c.weight*d
	}
	if now.After(c.at) {
		c.at = now
	}
	c.sum += math.Log(ratio)
	c.weight++
}

// latencyLeg is what a leg routed by predicted_latency carries, guarded by the router's mutex
// except for on (fixed at Route).
type latencyLeg struct {
	routed time.Time // when Route chose (its clock)
	logID  string    // the driver's id of the request (SetLogID)
	// pending and context are what the leg added to its target's view, still there; gen is the
	// generation of the target's engine report then.
	pending, context int64
	gen              uint64
	queued           bool // pending is counted in the target's view (till dropLatencyPending)
	// The prediction: raw (before correction) and corrected, and what of the TTFT is the
	// prefill target's (queue + prefill, corrected by c_P) and what is fixed (transfer, admission).
	rawP, fixed, rawTPOT time.Duration
	ttft, tpot           time.Duration
	corrTTFT, corrTPOT   float64
	// Observed, when seen.
	first          time.Time
	obsTTFT        time.Duration
	obsTPOT        time.Duration
	observedTokens int
}

// Prediction is what predicted_latency predicted for a request, and what the driver observed.
type Prediction struct {
	TTFT, TPOT                     time.Duration // predicted, corrected
	CorrectionTTFT, CorrectionTPOT float64       // the corrections applied (prefill or regular target's, decode or regular target's)
	// ObservedTTFT and ObservedTPOT are the router-timed values once observed (0: not yet, or
	// fewer than two tokens for TPOT).
	ObservedTTFT, ObservedTPOT time.Duration
	// Prefill and Decode are the targets corrected (Regular mode: the same target twice).
	Prefill, Decode *Target
}

// Prediction returns what predicted_latency predicted for the request, and what has been
// observed of it; ok is false for a decision of another policy.
func (d *Decision) Prediction() (Prediction, bool) {
	if d.lat == nil {
		return Prediction{}, false
	}
	d.r.mu.Lock()
	defer d.r.mu.Unlock()
	l := d.lat
	pr := Prediction{TTFT: l.ttft, TPOT: l.tpot, CorrectionTTFT: l.corrTTFT, CorrectionTPOT: l.corrTPOT,
		ObservedTTFT: l.obsTTFT, ObservedTPOT: l.obsTPOT}
	pr.Prefill, pr.Decode = d.latencyTargets()
	return pr, true
}

// SetLogID records the driver's id of the request, for the logs of what OnObserved receives
// (the router never reads it); a no-op for another policy's decision, which is never observed.
func (d *Decision) SetLogID(id string) {
	if d.lat != nil {
		d.lat.logID = id
	}
}

// LogID is the id SetLogID recorded ("" for another policy's decision).
func (d *Decision) LogID() string {
	if d.lat == nil {
		return ""
	}
	return d.lat.logID
}

// latencyTargets returns the targets the TTFT and TPOT corrections belong to.
func (d *Decision) latencyTargets() (pre, dec *Target) {
	if d.Regular != nil {
		return d.Regular, d.Regular
	}
	return d.Prefill, d.Decode
}

// ObserveFirstToken reports the request's first token reaching the router at at (the driver's
// time, as Route's clock): its TTFT from Route feeds the prefill (regular) target's correction,
// and its prompt leaves the router's view of that target's queue. Only the first call counts;
// a no-op for another policy's decision.
func (d *Decision) ObserveFirstToken(at time.Time) {
	if d.lat == nil {
		return
	}
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	l := d.lat
	if !l.first.IsZero() {
		return
	}
	l.first = at
	l.obsTTFT = at.Sub(l.routed)
	pre, _ := d.latencyTargets()
	d.dropLatencyPending()
	if l.rawP > 0 {
		if p, ok := r.policies[pre.worker.role].(*PredictedLatency); ok {
			pre.latency.ttft.observe(at, float64(max(l.obsTTFT-l.fixed, l.rawP/maxRatio))/float64(l.rawP), p.cfg.HalfLife)
		}
	}
}

// ObserveEnd reports the request's last token reaching the router at at, after tokens output
// tokens: its TPOT since the first token feeds the decode (regular) target's correction.
// Call it after ObserveFirstToken; only the first call counts.
func (d *Decision) ObserveEnd(at time.Time, tokens int) {
	if d.lat == nil {
		return
	}
	r := d.r
	r.mu.Lock()
	l := d.lat
	if l.first.IsZero() || l.observedTokens > 0 || tokens < 1 {
		r.mu.Unlock()
		return
	}
	l.observedTokens = tokens
	pre, dec := d.latencyTargets()
	if p, ok := r.policies[dec.worker.role].(*PredictedLatency); ok {
		p.avgOutput += avgOutputWeight * (float64(tokens) - p.avgOutput)
		if pp, ok := r.policies[Prefill].(*PredictedLatency); ok && pp != p {
			pp.avgOutput = p.avgOutput
		}
		if tokens >= 2 && l.rawTPOT > 0 {
			l.obsTPOT = at.Sub(l.first) / time.Duration(tokens-1)
			dec.latency.tpot.observe(at, float64(l.obsTPOT)/float64(l.rawTPOT), p.cfg.HalfLife)
		}
	}
	fn := r.onObserved
	pr := Prediction{TTFT: l.ttft, TPOT: l.tpot, CorrectionTTFT: l.corrTTFT, CorrectionTPOT: l.corrTPOT,
		ObservedTTFT: l.obsTTFT, ObservedTPOT: l.obsTPOT, Prefill: pre, Decode: dec}
	r.mu.Unlock()
	if fn != nil {
		fn(d, pr)
	}
}

// avgOutputWeight is the weight of each finished request's output length in the smoothed mean
// D's admission wait is predicted with (about the last 20 requests).
const avgOutputWeight = 0.05

// OnObserved registers fn to receive, for every request routed by predicted_latency whose end
// was observed ([Decision.ObserveEnd]), its prediction beside the observation (decision logs,
// metrics). fn is called without the router's lock held, on the observing goroutine.
func (r *Router) OnObserved(fn func(*Decision, Prediction)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onObserved = fn
}

// latencyDone takes a finished leg's requests out of predicted_latency's views (r.mu held).
func (d *Decision) latencyDone(role Role) {
	l := d.lat
	t := d.legOf(role).target
	switch role {
	case Prefill:
		d.dropLatencyPending()
	case Decode:
		t.latency.context -= l.context
		l.context = 0
	case Regular:
		d.dropLatencyPending()
		t.latency.context -= l.context
		l.context = 0
	}
}

// dropLatencyPending takes the request out of its prefill (regular) target's view of the
// queue, once (r.mu held): prefilled, or the leg ended.
func (d *Decision) dropLatencyPending() {
	l := d.lat
	if !l.queued {
		return
	}
	pre, _ := d.latencyTargets()
	pre.latency.dropPending(l.pending, l.gen)
	l.pending, l.queued = 0, false
}

// TargetCorrection is one target's predicted_latency corrections (metrics).
type TargetCorrection struct {
	Name       string
	Role       Role
	TTFT, TPOT float64
}

// LatencyCorrections returns the corrections of every target of the roles routed by
// predicted_latency, at the router's now, in target order.
func (r *Router) LatencyCorrections() []TargetCorrection {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var out []TargetCorrection
	for role := range numRoles {
		p, ok := r.policies[role].(*PredictedLatency)
		if !ok {
			continue
		}
		for _, t := range r.targets[role] {
			out = append(out, TargetCorrection{Name: t.name, Role: role,
				TTFT: t.latency.ttft.value(now, p.cfg.HalfLife), TPOT: t.latency.tpot.value(now, p.cfg.HalfLife)})
		}
	}
	return out
}

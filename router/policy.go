package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// Pick is a policy's choice among the available targets it was given.
type Pick struct {
	Index     int     // into the targets slice passed to Pick
	Reason    Reason  // why
	MatchRate float64 // cache_aware: matched chars / text chars (with a KV index: see CacheAware.Pick); 0 for the other policies
	// KVIndex: the chosen target's cache was predicted from the KV event index (cache_aware
	// with an index and a request with tokens, the target's view not stale).
	KVIndex bool
	// Signal is what the choice rested on (see Leg.Signal).
	Signal Signal
	// PredictedCachedTokens: with KVIndex, the chosen target's matched blocks · page size.
	PredictedCachedTokens int
	// HitTier: with KVIndex and tiers weighed (CacheAwareConfig.HostTierWeight > 0), where the
	// chosen target's match lies: TierGPU when all on its GPU, TierHost when part of it must
	// be loaded back from host memory (PredictedHostTokens of the PredictedCachedTokens).
	HitTier             kvindex.Tier
	PredictedHostTokens int
}

// Policy chooses among available targets. Pick is called with at least one target, in target
// order, under the router's lock (implementations need no locking of their own and may keep
// state). It must not retain ts.
type Policy interface {
	// Name returns the --policy name.
	Name() string
	// Pick returns the chosen index into ts; ties are broken towards the lowest index.
	Pick(now time.Time, req *Request, ts []*Target) (Pick, error)
}

// Optional policy capabilities, discovered by the router.
type (
	targetAdder   interface{ AddTarget(t *Target) }
	targetRemover interface{ RemoveTarget(name string) }
	evicter       interface{ Evict() }
	treeResetter  interface{ ResetTree() }
	treeStatser   interface{ TreeStats() TreeSize }
)

// NewPolicy builds the named policy. Each call returns an independent instance (PD mode builds
// one per role, so cache-aware prefill and decode keep separate trees). rng is shared with the
// router and used under its lock.
func NewPolicy(name string, cfg Config, rng *rand.Rand) (Policy, error) {
	switch name {
	case PolicyRandom:
		return &Random{rng: rng}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyPowerOfTwo:
		return &PowerOfTwo{rng: rng}, nil
	case PolicyLeastLoad:
		return &LeastLoad{}, nil
	case PolicyConsistentHashing:
		return &ConsistentHashing{LoadFactor: cfg.HashLoadFactor, rng: rng}, nil
	case PolicyManual:
		return &Manual{MaxIdle: time.Duration(cfg.MaxIdleSecs) * time.Second, AssignMode: cfg.AssignmentMode, rng: rng}, nil
	case PolicyPredictedLatency:
		return NewPredictedLatency(cfg.PredictedLatency(), cfg.cacheAware()), nil
	case PolicyCacheAware:
		return NewCacheAware(cfg.cacheAware()), nil
	}
	return nil, fmt.Errorf("router: unknown policy %q (want %s)", name, strings.Join(PolicyNames, ", "))
}

// cacheAware returns cache_aware's settings (predicted_latency's tree shares them).
func (c Config) cacheAware() CacheAwareConfig {
	return CacheAwareConfig{
		CacheThreshold:                c.CacheThreshold,
		BalanceAbsThreshold:           int64(c.BalanceAbsThreshold),
		BalanceRelThreshold:           c.BalanceRelThreshold,
		BalanceUncachedTokenThreshold: int64(c.BalanceUncachedTokenThreshold),
		MaxTreeSize:                   c.MaxTreeSize,
		MaxTreeTotalChars:             c.MaxTreeTotalChars,
		WarmUp:                        time.Duration(c.CacheWarmupSecs) * time.Second,
		HostTierWeight:                c.KVHostTierWeight,
	}
}

// Random picks uniformly among the available targets.
type Random struct{ rng *rand.Rand }

var _ Policy = (*Random)(nil)

// Name returns "random".
func (*Random) Name() string { return PolicyRandom }

// Pick draws one index uniformly.
func (p *Random) Pick(_ time.Time, _ *Request, ts []*Target) (Pick, error) {
	return Pick{Index: p.rng.IntN(len(ts)), Reason: ReasonRandom}, nil
}

// RoundRobin cycles a counter over the available targets (the index is into the current
// available list, so the cycle shifts when availability changes, as in sgl-router).
type RoundRobin struct{ next uint64 }

var _ Policy = (*RoundRobin)(nil)

// Name returns "round_robin".
func (*RoundRobin) Name() string { return PolicyRoundRobin }

// Pick returns counter mod len(ts) and advances the counter.
func (p *RoundRobin) Pick(_ time.Time, _ *Request, ts []*Target) (Pick, error) {
	i := int(p.next % uint64(len(ts)))
	p.next++
	return Pick{Index: i, Reason: ReasonRoundRobin}, nil
}

// PowerOfTwo samples two distinct available targets and takes the less loaded (the first
// sample on a tie). With one target it takes it without drawing.
type PowerOfTwo struct{ rng *rand.Rand }

var _ Policy = (*PowerOfTwo)(nil)

// Name returns "power_of_two".
func (*PowerOfTwo) Name() string { return PolicyPowerOfTwo }

// Pick draws two distinct indices and keeps the lower load (engine reports when fresh for
// every candidate, else in-flight counts: see loadCmp).
func (p *PowerOfTwo) Pick(_ time.Time, req *Request, ts []*Target) (Pick, error) {
	if len(ts) == 1 {
		return Pick{Index: 0, Reason: ReasonOnlyTarget}, nil
	}
	a := p.rng.IntN(len(ts))
	b := p.rng.IntN(len(ts) - 1)
	if b >= a {
		b++
	}
	if req.loads.less(ts[b], ts[a]) {
		a = b
	}
	return Pick{Index: a, Reason: ReasonPowerOfTwo, Signal: req.loads.signal()}, nil
}

// LeastLoad picks the target with the least expected wait when every candidate has a fresh
// engine report (smg's least_load), and the least in-flight requests otherwise (lowest index
// on ties):
//   - prefill targets by expected prefill wait: queued uncached prompt tokens (the engine's,
//     plus those routed since its report and in flight) ÷ the target's prefill rate,
//     learned from its reports (uncached tokens worked off per second); while a candidate's
//     rate is unknown, by the tokens alone;
//   - decode targets by their fullness: the larger of requests (running, waiting and routed
//     since) ÷ max_running_requests, and KV token usage;
//   - regular targets, which do both, by fullness first once it reaches nearlyFull (in steps
//     of a tenth), then by expected prefill wait: a worker whose decode batch or KV is nearly
//     full takes new requests after the others though its prefill queue is short (SGLang
//     schedules prefills first, so its queue stays short while its running batch grows).
//
// Ties are broken as loadCmp compares.
type LeastLoad struct{}

var _ Policy = (*LeastLoad)(nil)

// Name returns "least_load".
func (*LeastLoad) Name() string { return PolicyLeastLoad }

// Pick returns the least loaded target as LeastLoad's doc says.
func (*LeastLoad) Pick(_ time.Time, req *Request, ts []*Target) (Pick, error) {
	if !req.loads.engine {
		return Pick{Index: leastBy(req.loads, ts), Reason: ReasonLeastLoad, Signal: SignalInFlight}, nil
	}
	role := ts[0].worker.role
	rates := role != Decode
	for _, t := range ts {
		rates = rates && t.engine.rate > 0
	}
	wait := func(t *Target) float64 {
		if rates {
			return float64(t.uncached()) / t.engine.rate
		}
		return float64(t.uncached())
	}
	// score is the key compared first, tie-break the one compared next.
	score := func(t *Target) (key, next float64) {
		switch role {
		case Decode:
			return fullness(t), 0
		case Regular:
			f := fullness(t)
			if f < nearlyFull {
				f = 0
			}
			return math.Floor(f * 10), wait(t)
		}
		return wait(t), 0
	}
	best := 0
	bk, bn := score(ts[0])
	for i := 1; i < len(ts); i++ {
		k, n := score(ts[i])
		if k < bk || k == bk && (n < bn || n == bn && req.loads.less(ts[i], ts[best])) {
			best, bk, bn = i, k, n
		}
	}
	return Pick{Index: best, Reason: ReasonLeastLoad, Signal: SignalEngineLoad}, nil
}

// nearlyFull is the fullness from which least_load ranks regular workers by it first. Below
// it the prefill queue decides (simulated hot-spot, 8 regular workers, 4 replicas at 80 % of
// capacity: TTFT P99 about 400 ms, against 590–930 ms ranking by fullness from 0; far past
// capacity it keeps 153 req/s where prefill wait alone fell to 58).
const nearlyFull = 0.8

// fullness is how full t's engine is: the larger of its requests (running, waiting and routed
// since its report) over max_running_requests, and its KV token usage.
func fullness(t *Target) float64 {
	e := &t.engine
	full := e.load.TokenUsage
	if e.load.MaxRunningRequests > 0 {
		full = max(full, float64(int64(e.load.RunningReqs+e.load.WaitingReqs)+e.sentReqs)/float64(e.load.MaxRunningRequests))
	}
	return full
}

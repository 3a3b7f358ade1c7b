package router

import (
	"time"

	"github.com/pdrouter/pdrouter/router/tree"
)

// CacheAwareConfig parameterises [CacheAware] (SPEC §1.2).
type CacheAwareConfig struct {
	// CacheThreshold: a match rate strictly above it routes to the matching target (0.3).
	CacheThreshold float64
	// BalanceAbsThreshold and BalanceRelThreshold: loads are imbalanced when
	// max−min > abs and max > min·rel, both strict (64 and 1.5).
	BalanceAbsThreshold int64
	BalanceRelThreshold float64
	// MaxTreeSize is the per-tenant character budget enforced by Evict (2^26).
	MaxTreeSize int
	// MaxTreeTotalChars is the whole tree's character budget enforced by Evict (2^30).
	MaxTreeTotalChars int
}

// CacheAware routes by longest prefix match in an approximate radix tree of the texts it has
// routed, unless the loads are imbalanced (SPEC §1.2). Its tree's tenants are target names.
// Not safe for concurrent use on its own: the router calls it under its lock.
type CacheAware struct {
	cfg     CacheAwareConfig
	tree    *tree.Tree
	tenants []string           // scratch for PrefixMatch
	byName  map[string]*Target // tenant name → registered target
	epoch   uint64             // stamps Target.pickEpoch for the Pick in progress
}

var _ Policy = (*CacheAware)(nil)

// NewCacheAware returns a cache-aware policy with an empty tree.
func NewCacheAware(cfg CacheAwareConfig) *CacheAware {
	return &CacheAware{cfg: cfg, tree: tree.New(), byName: map[string]*Target{}}
}

// Name returns "cache_aware".
func (*CacheAware) Name() string { return PolicyCacheAware }

// Pick implements the cache-aware rule:
//  1. imbalanced := max−min > abs && max > min·rel over ts;
//  2. imbalanced → the least-loaded target (ties: lowest index);
//  3. balanced → longest prefix match; rate = matched/len(text) in runes (0 for empty text);
//     rate > cache_threshold → the least-loaded of the available tenants on the match's stop
//     node; otherwise the least-loaded target.
//
// The text is inserted for the chosen target in every case.
func (p *CacheAware) Pick(_ time.Time, req *Request, ts []*Target) (Pick, error) {
	idx, reason, rate := p.choose(req, ts)
	p.tree.Insert(req.Text, ts[idx].name)
	return Pick{Index: idx, Reason: reason, MatchRate: rate}, nil
}

func (p *CacheAware) choose(req *Request, ts []*Target) (int, Reason, float64) {
	minL, maxL := ts[0].Load(), ts[0].Load()
	for _, t := range ts[1:] {
		l := t.Load()
		minL, maxL = min(minL, l), max(maxL, l)
	}
	if maxL-minL > p.cfg.BalanceAbsThreshold && float64(maxL) > float64(minL)*p.cfg.BalanceRelThreshold {
		return leastLoaded(ts), ReasonImbalance, 0
	}
	var matched int
	matched, p.tenants = p.tree.PrefixMatch(req.Text, p.tenants)
	rate := 0.0
	if n := req.textRunes(); n > 0 {
		rate = float64(matched) / float64(n)
	}
	if rate > p.cfg.CacheThreshold {
		if i := p.bestTenant(ts); i >= 0 {
			return i, ReasonCacheHit, rate
		}
	}
	return leastLoaded(ts), ReasonCacheMiss, rate
}

// bestTenant returns the index in ts of the least-loaded available target among the matched
// tenants (ties: lowest index), or -1 if none of them is available. Targets are stamped with
// their index for this Pick, so the cost is O(len(ts) + tenants), not their product.
func (p *CacheAware) bestTenant(ts []*Target) int {
	p.epoch++
	for i, t := range ts {
		t.pickEpoch, t.pickIndex = p.epoch, i
	}
	best := -1
	var bestLoad int64
	for _, name := range p.tenants {
		t := p.byName[name]
		if t == nil || t.pickEpoch != p.epoch {
			continue // not available now, or no longer registered
		}
		i, l := t.pickIndex, t.Load()
		if best < 0 || l < bestLoad || (l == bestLoad && i < best) {
			best, bestLoad = i, l
		}
	}
	return best
}

// AddTarget makes a newly registered target known under its tenant name.
func (p *CacheAware) AddTarget(t *Target) { p.byName[t.name] = t }

// RemoveTarget drops a removed target's tenant from the tree.
func (p *CacheAware) RemoveTarget(name string) {
	p.tree.RemoveTenant(name)
	delete(p.byName, name)
}

// ResetTree forgets every routed text (the workers' caches were flushed); registered targets
// stay known.
func (p *CacheAware) ResetTree() { p.tree = tree.New() }

// Evict applies the per-tenant and total character budgets (called from Router.Tick).
func (p *CacheAware) Evict() { p.tree.Evict(p.cfg.MaxTreeSize, p.cfg.MaxTreeTotalChars) }

// TreeStats returns the runes stored in the tree's edges and its node count.
func (p *CacheAware) TreeStats() (chars, nodes int) { return p.tree.TotalChars(), p.tree.Nodes() }

// Tree exposes the policy's tree for inspection in tests and metrics. Callers must hold no
// expectations of thread safety: use it only when the router is idle.
func (p *CacheAware) Tree() *tree.Tree { return p.tree }

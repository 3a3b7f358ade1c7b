package router

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/router/kvindex"
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
	// BalanceUncachedTokenThreshold: while every candidate has a fresh engine load report,
	// prefill and regular loads are also imbalanced when their queued uncached prompt tokens
	// (loadCmp's first key) differ by more than it and max > min·BalanceRelThreshold (65536;
	// 0: off). Request counts alone miss a queue of long prompts, and let a hot prefix queue
	// on one worker for a second or more before they differ by BalanceAbsThreshold.
	BalanceUncachedTokenThreshold int64
	// MaxTreeSize is the per-tenant character budget enforced by Evict (2^26).
	MaxTreeSize int
	// MaxTreeTotalChars is the whole tree's character budget enforced by Evict (2^30).
	MaxTreeTotalChars int
	// WarmUp is how long after a worker entered rotation a cache hit on another worker goes to
	// it instead while it carries less than the mean load (30 s; 0: never). Without it a worker
	// added (or back) under cache_aware gets only the requests nothing matches: when every
	// prompt shares a prefix cached elsewhere and the loads stay within the balance
	// thresholds, it serves nothing.
	WarmUp time.Duration
	// HostTierWeight is what a matched block only in a target's host memory (SGLang HiCache's
	// CPU_PINNED tier, [kvindex.TierHost]) counts for on the KV event index, beside 1 for a
	// block on its GPU: HiCache loads it back before prefilling the rest, which costs a fraction
	// of recomputing it (DefaultKVHostTierWeight). 0 matches GPU blocks only; in (0,1) a GPU hit
	// beats an equal host hit, which beats a miss; 1 weighs every tier alike.
	HostTierWeight float64
}

// CacheAware routes by longest prefix match in an approximate radix tree of the texts it has
// routed, unless the loads are imbalanced (SPEC §1.2). Its tree's tenants are target names.
// Not safe for concurrent use on its own: the router calls it under its lock.
type CacheAware struct {
	cfg     CacheAwareConfig
	tree    *tree.Tree         // nil once dropped (Router.DropTree)
	tenants []string           // scratch for PrefixMatch
	byName  map[string]*Target // tenant name → registered target
	epoch   uint64             // stamps Target.pickEpoch for the Pick in progress
	trims   int                // times insert found the tree over MaxTreeTotalChars
	retain  bool               // trees keep substrings of the routed texts (Router.RetainRoutedTexts)

	// The KV event index (nil: none) and the engine's page size. Targets whose view in it is
	// not stale are matched on it; the others on the tree.
	kv       kvMatcher
	page     int
	ids      []kvindex.TargetID  // scratch: the kv ids of the targets of a Pick
	matched  []int               // scratch: their matched blocks, -1 when stale
	tiers    []kvindex.TierMatch // scratch: their matches by tier
	treeRate []float64           // scratch: their tree match rates (stale targets only)
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
//
// With a KV event index ([Router.UseKVIndex]) and a request with Tokens, step 3 compares a
// rate per target instead: a target whose index view is not stale rates its matched blocks ·
// page / len(Tokens), a block on its GPU counting 1 and one only in its host memory
// HostTierWeight (0: host copies count for nothing); a stale one (no event feed) rates as the
// tree says (matched/len(text) in runes for the tenants on the match's stop node, 0 for the
// others). The highest rate wins if it is
// above cache_threshold (ties: least loaded, then lowest index), else the least loaded; the
// reported MatchRate is that highest rate. Then the chosen target gets the request's blocks as
// pending in the index and, as always, the text in the tree (so the fallback stays warm). This
// is SGLang's own router's arrangement (smg docs/getting-started/kv-events-cache-aware.md:
// per worker, the event-built index when it emits events, else the approximate tree).
func (p *CacheAware) Pick(now time.Time, req *Request, ts []*Target) (Pick, error) {
	if p.kv == nil || len(req.Tokens) == 0 {
		idx, reason, rate := p.choose(req, ts)
		if w := p.warming(now, req.loads, ts, idx, reason); w >= 0 {
			idx, reason = w, ReasonWarmUp
		}
		p.insert(req, ts[idx].name)
		return Pick{Index: idx, Reason: reason, MatchRate: rate, Signal: reasonSignal(reason, req.loads)}, nil
	}
	pk := p.chooseKV(now, req, ts)
	if w := p.warming(now, req.loads, ts, pk.Index, pk.Reason); w >= 0 {
		pk = p.kvPick(w, ReasonWarmUp, pk.MatchRate, p.matchedOf(w), p.hostOf(w))
	}
	pk.Signal = reasonSignal(pk.Reason, req.loads)
	p.kv.addPending(ts[pk.Index].kvID, req, p.page, now)
	p.insert(req, ts[pk.Index].name)
	return pk, nil
}

// insert puts the request's text in the tree for tenant (with its length in runes, when known)
// and trims the tree by size at once when it goes over MaxTreeTotalChars (down to 90 % of it,
// so the full walk an eviction costs comes once per tenth of the budget), not only at the next
// --eviction-interval-secs: the memory bound holds between evictions too.
func (p *CacheAware) insert(req *Request, tenant string) {
	if p.tree == nil {
		return
	}
	p.tree.InsertRunes(req.Text, req.knownRunes(), tenant)
	if m := p.cfg.MaxTreeTotalChars; m > 0 && p.tree.TotalChars() > m {
		p.trims++
		p.tree.Evict(p.cfg.MaxTreeSize, m-m/10)
	}
}

// imbalanced reports whether the loads of ts, compared as c says, are imbalanced
// (max−min > abs and max > min·rel, by requests or, on engine reports, by queued uncached
// prompt tokens).
func (p *CacheAware) imbalanced(c loadCmp, ts []*Target) bool {
	return imbalancedBy(c, ts, p.cfg.BalanceAbsThreshold, p.cfg.BalanceUncachedTokenThreshold, p.cfg.BalanceRelThreshold)
}

// chooseKV is choose with the KV event index (see Pick).
func (p *CacheAware) chooseKV(now time.Time, req *Request, ts []*Target) Pick {
	p.ids = p.ids[:0]
	for _, t := range ts {
		p.ids = append(p.ids, t.kvID)
	}
	if p.imbalanced(req.loads, ts) {
		i := leastBy(req.loads, ts)
		p.match(req, p.ids[i:i+1], now)
		return p.kvPick(i, ReasonImbalance, 0, p.matched[0], p.hostOf(0))
	}
	p.match(req, p.ids, now)
	p.treeRate = p.treeRate[:0]
	anyStale := false
	for _, m := range p.matched {
		p.treeRate = append(p.treeRate, 0)
		anyStale = anyStale || m < 0
	}
	if anyStale { // the tree speaks for the targets without an event feed
		p.treeRates(req, ts, p.treeRate, p.matched)
	}
	best, bestRate := -1, 0.0
	for i, t := range ts {
		rate := p.treeRate[i]
		if m := p.matched[i]; m >= 0 {
			rate = (float64(m) + p.cfg.HostTierWeight*float64(p.hostOf(i))) * float64(p.page) / float64(len(req.Tokens))
		}
		if best < 0 || rate > bestRate || (rate == bestRate && req.loads.less(t, ts[best])) {
			best, bestRate = i, rate
		}
	}
	if bestRate > p.cfg.CacheThreshold {
		return p.kvPick(best, ReasonCacheHit, bestRate, p.matched[best], p.hostOf(best))
	}
	i := leastBy(req.loads, ts)
	return p.kvPick(i, ReasonCacheMiss, bestRate, p.matched[i], p.hostOf(i))
}

// treeRates sets rates[i] to the approximate tree's match rate (matched/len(text) in runes)
// for each target ts[i] among the tenants on the match's stop node, of those whose matched[i] is
// negative (stale on the KV event index), or of all when matched is nil; the others keep theirs.
func (p *CacheAware) treeRates(req *Request, ts []*Target, rates []float64, matched []int) {
	p.needTree()
	var m int
	m, p.tenants = p.tree.PrefixMatch(req.Text, p.tenants)
	n := req.textRunes()
	if n <= 0 || m <= 0 {
		return
	}
	rate := float64(m) / float64(n)
	p.stamp(ts)
	for _, name := range p.tenants {
		if t := p.byName[name]; t != nil && t.pickEpoch == p.epoch && (matched == nil || matched[t.pickIndex] < 0) {
			rates[t.pickIndex] = rate
		}
	}
}

// match fills p.tiers with the matches of ids in the index by tier and p.matched with their GPU
// blocks (-1: stale).
func (p *CacheAware) match(req *Request, ids []kvindex.TargetID, now time.Time) {
	p.tiers = p.kv.matchTiers(p.tiers[:0], req, p.page, ids, now)
	p.matched = p.matched[:0]
	for _, m := range p.tiers {
		p.matched = append(p.matched, m.GPU)
	}
}

// hostOf returns the host-tier blocks (beyond its GPU match) target i of the last match
// matched: 0 when the host tier is not weighed (HostTierWeight 0), or i was not looked up.
func (p *CacheAware) hostOf(i int) int {
	if p.cfg.HostTierWeight <= 0 || i >= len(p.tiers) || p.tiers[i].GPU < 0 {
		return 0
	}
	return p.tiers[i].Host
}

// matchedOf returns the blocks target i of the last chooseKV matched in the index (-1: stale or
// not looked up: an imbalanced choice looks up the chosen target alone).
func (p *CacheAware) matchedOf(i int) int {
	if len(p.matched) != len(p.ids) {
		return -1
	}
	return p.matched[i]
}

// warming returns where a cache hit on ts[hit] goes instead: the least-loaded (by c) target
// whose worker entered rotation within WarmUp of now and carries less than the mean load of
// ts, when ts[hit]'s worker is not warming up itself and carries more; -1 otherwise (and for
// any choice but a hit). So a worker added or back takes matching requests until it carries
// its share, and builds its cache on them; established workers keep their affinity among
// themselves, and at start, when every worker joined together, nothing changes.
func (p *CacheAware) warming(now time.Time, c loadCmp, ts []*Target, hit int, reason Reason) int {
	if reason != ReasonCacheHit || p.cfg.WarmUp <= 0 || p.warmingUp(now, ts[hit]) {
		return -1
	}
	var sum int64
	for _, t := range ts {
		sum += c.reqs(t)
	}
	best := -1
	for i, t := range ts {
		if !p.warmingUp(now, t) || c.reqs(t)*int64(len(ts)) >= sum { // at or above the mean
			continue
		}
		if best < 0 || c.less(t, ts[best]) {
			best = i
		}
	}
	if best >= 0 && !c.less(ts[best], ts[hit]) {
		return -1
	}
	return best
}

// warmingUp reports whether t's worker entered rotation within WarmUp of now.
func (p *CacheAware) warmingUp(now time.Time, t *Target) bool {
	j := t.worker.joined
	return !j.IsZero() && now.Sub(j) < p.cfg.WarmUp
}

// kvPick builds a Pick whose chosen target matched m blocks on its GPU in the index (-1:
// stale) and host more in its host memory.
func (p *CacheAware) kvPick(i int, reason Reason, rate float64, m, host int) Pick {
	pk := Pick{Index: i, Reason: reason, MatchRate: rate}
	if m >= 0 {
		pk.KVIndex, pk.PredictedCachedTokens = true, (m+host)*p.page
		if host > 0 {
			pk.HitTier, pk.PredictedHostTokens = kvindex.TierHost, host*p.page
		}
	}
	return pk
}

// UseKVIndex makes role's cache_aware policy consult ix, whose blocks are pages of pageSize
// tokens, for the requests that carry Tokens: each of the role's targets is interned in ix under
// its Name() ("url" or "url@rank", the name the event subscriber uses), now and as it
// registers. A nil ix detaches the index (back to the tree alone). It fails when role has no
// cache_aware policy or pageSize < 1. Several roles may share one index.
func (r *Router) UseKVIndex(role Role, ix *kvindex.Index, pageSize int) error {
	var m kvMatcher
	if ix != nil {
		m = hashMatcher{ix}
	}
	return r.useKV(role, m, pageSize)
}

// TokenIndex is a KV event index that matches a request's prompt tokens themselves rather
// than their block hashes: [kvindex.PathIndex], which the simulator feeds. It must answer as a
// [kvindex.Index] fed the same changes answers the tokens' block-hash chain.
type TokenIndex interface {
	Target(name string) kvindex.TargetID
	MatchTiersOrStale(dst []kvindex.TierMatch, tokens []uint32, page int, salt string, ids []kvindex.TargetID, now time.Time) []kvindex.TierMatch
	AddPending(id kvindex.TargetID, tokens []uint32, page int, salt string, now time.Time)
}

var _ TokenIndex = (*kvindex.PathIndex)(nil)

// UseKVTokenIndex is [Router.UseKVIndex] for a [TokenIndex] (nil detaches the index).
func (r *Router) UseKVTokenIndex(role Role, ix TokenIndex, pageSize int) error {
	var m kvMatcher
	if ix != nil {
		m = tokenMatcher{ix}
	}
	return r.useKV(role, m, pageSize)
}

// treeOf returns the cache_aware whose tree and KV event index pol routes on: pol itself, or
// predicted_latency's (its match rates come from one); nil for any other policy.
func treeOf(pol Policy) *CacheAware {
	switch c := pol.(type) {
	case *CacheAware:
		return c
	case *PredictedLatency:
		return c.ca
	}
	return nil
}

func (r *Router) useKV(role Role, m kvMatcher, pageSize int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := treeOf(r.Policy(role))
	if p == nil {
		return fmt.Errorf("router: a KV event index needs the cache_aware or predicted_latency policy for %s workers", role)
	}
	if m != nil && pageSize < 1 {
		return fmt.Errorf("router: KV event index page size %d for %s workers must be ≥ 1", pageSize, role)
	}
	p.kv, p.page = m, pageSize
	if m != nil {
		for _, t := range r.targets[role] {
			t.kvID = m.target(t.name)
		}
	}
	return nil
}

// kvMatcher is what cache_aware asks of a KV event index, given the request.
type kvMatcher interface {
	target(name string) kvindex.TargetID
	matchTiers(dst []kvindex.TierMatch, q *Request, page int, ids []kvindex.TargetID, now time.Time) []kvindex.TierMatch
	addPending(id kvindex.TargetID, q *Request, page int, now time.Time)
}

// hashMatcher asks a kvindex.Index with the request's block hashes (computed once per Route).
type hashMatcher struct{ ix *kvindex.Index }

func (m hashMatcher) target(name string) kvindex.TargetID { return m.ix.Target(name) }

func (m hashMatcher) matchTiers(dst []kvindex.TierMatch, q *Request, page int, ids []kvindex.TargetID, now time.Time) []kvindex.TierMatch {
	return m.ix.MatchTiersOrStale(dst, q.blockHashes(page), ids, now)
}

func (m hashMatcher) addPending(id kvindex.TargetID, q *Request, page int, now time.Time) {
	m.ix.AddPending(id, q.blockHashes(page), now)
}

// tokenMatcher asks a TokenIndex with the request's tokens.
type tokenMatcher struct{ ix TokenIndex }

func (m tokenMatcher) target(name string) kvindex.TargetID { return m.ix.Target(name) }

func (m tokenMatcher) matchTiers(dst []kvindex.TierMatch, q *Request, page int, ids []kvindex.TargetID, now time.Time) []kvindex.TierMatch {
	return m.ix.MatchTiersOrStale(dst, q.Tokens, page, q.CacheSalt, ids, now)
}

func (m tokenMatcher) addPending(id kvindex.TargetID, q *Request, page int, now time.Time) {
	m.ix.AddPending(id, q.Tokens, page, q.CacheSalt, now)
}

func (p *CacheAware) choose(req *Request, ts []*Target) (int, Reason, float64) {
	if p.imbalanced(req.loads, ts) {
		return leastBy(req.loads, ts), ReasonImbalance, 0
	}
	p.needTree()
	var matched int
	matched, p.tenants = p.tree.PrefixMatch(req.Text, p.tenants)
	rate := 0.0
	if n := req.textRunes(); n > 0 {
		rate = float64(matched) / float64(n)
	}
	if rate > p.cfg.CacheThreshold {
		if i := p.bestTenant(req.loads, ts); i >= 0 {
			return i, ReasonCacheHit, rate
		}
	}
	return leastBy(req.loads, ts), ReasonCacheMiss, rate
}

// bestTenant returns the index in ts of the least-loaded (by c) available target among the
// matched tenants (ties: lowest index), or -1 if none of them is available. Targets are stamped
// with their index for this Pick, so the cost is O(len(ts) + tenants), not their product.
func (p *CacheAware) bestTenant(c loadCmp, ts []*Target) int {
	p.stamp(ts)
	best := -1
	for _, name := range p.tenants {
		t := p.byName[name]
		if t == nil || t.pickEpoch != p.epoch {
			continue // not available now, or no longer registered
		}
		i := t.pickIndex
		if best < 0 || c.less(t, ts[best]) || (!c.less(ts[best], t) && i < best) {
			best = i
		}
	}
	return best
}

// reasonSignal is the Signal of a cache_aware choice made for reason, loads compared by c: the
// match for a hit, the loads otherwise.
func reasonSignal(reason Reason, c loadCmp) Signal {
	if reason == ReasonCacheHit {
		return SignalCacheMatch
	}
	return c.signal()
}

// stamp marks ts with their index for the Pick in progress (a new epoch), so a tenant name
// resolves to its position in ts in O(1).
func (p *CacheAware) stamp(ts []*Target) {
	p.epoch++
	for i, t := range ts {
		t.pickEpoch, t.pickIndex = p.epoch, i
	}
}

// AddTarget makes a newly registered target known under its tenant name (and interns it in
// the KV event index, if any).
func (p *CacheAware) AddTarget(t *Target) {
	p.byName[t.name] = t
	if p.kv != nil {
		t.kvID = p.kv.target(t.name)
	}
}

// RemoveTarget drops a removed target's tenant from the tree.
func (p *CacheAware) RemoveTarget(name string) {
	if p.tree != nil {
		p.tree.RemoveTenant(name)
	}
	delete(p.byName, name)
}

// dropTree forgets the tree for good: see Router.DropTree.
func (p *CacheAware) dropTree() {
	p.tree = nil
}

// needTree panics when the tree was dropped: Router.DropTree's caller promised that no pick
// would consult it again, and a pick on a missing tree would route differently, silently.
func (p *CacheAware) needTree() {
	if p.tree == nil {
		panic("router: a cache_aware pick needs the tree that Router.DropTree dropped (a target without a fresh KV event view, or a request without Tokens)")
	}
}

// ResetTree forgets every routed text (the workers' caches were flushed); registered targets
// stay known.
func (p *CacheAware) ResetTree() {
	if p.tree == nil {
		return
	}
	p.tree = tree.New()
	if p.retain {
		p.tree.RetainTexts()
	}
}

// retainTexts makes the tree, and every tree after a reset, keep substrings of the routed texts.
func (p *CacheAware) retainTexts() {
	p.retain = true
	if p.tree != nil {
		p.tree.RetainTexts()
	}
}

// Evict applies the per-tenant and total character budgets (called from Router.Tick).
func (p *CacheAware) Evict() {
	if p.tree != nil {
		p.tree.Evict(p.cfg.MaxTreeSize, p.cfg.MaxTreeTotalChars)
	}
}

// TreeStats returns the runes stored in the tree's edges, its node count and how often it was
// trimmed by size.
func (p *CacheAware) TreeStats() TreeSize {
	if p.tree == nil {
		return TreeSize{Trims: p.trims}
	}
	return TreeSize{Chars: p.tree.TotalChars(), Nodes: p.tree.Nodes(), Bytes: p.tree.Bytes(), Trims: p.trims}
}

package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// Request is the routing view of one request: what the policies look at. It never holds an
// *http.Request, so the simulator can build one from a body alone. Route caches derived
// values in it (the text's rune count), so one Request must not be routed by two goroutines
// at once; reusing it for a retry is fine.
type Request struct {
	// Text is the routing text (SPEC §1.2), extracted by router/wire.
	Text string
	// Model is the requested model name (informational; one tree per policy instance).
	Model string
	// Avoid lists worker URLs to skip if any other target of the role is available: a retry
	// passes the workers that already failed this request, so it moves to another target.
	Avoid []string
	// TextRunes is len(Text) in runes when the caller already knows it (the simulator's
	// sessions count it as they grow); 0: Route counts it.
	TextRunes int
	// Tokens are the prompt's token ids as the worker will see them (after its chat template),
	// nil when the router has none. With them, a role whose cache_aware policy has a KV event
	// index ([Router.UseKVIndex]) matches SGLang's block hashes of these tokens. Route hashes
	// them at most once per page size; a policy's Pick called directly reuses those hashes, so
	// change Tokens only between Routes.
	Tokens []uint32
	// CacheSalt is the request's cache_salt ("" none): it seeds the block-hash chain.
	CacheSalt string
	// RoutingKey is the request's routing key ("" none): consistent_hashing sends every
	// request of a key to one target (serve takes it from --routing-key-headers, the simulator
	// from the session).
	RoutingKey string
	// TTFTSLO and TPOTSLO are the request's own SLOs for predicted_latency (serve reads them
	// from its headers); 0: the configured ones (--ttft-slo-ms, --tpot-slo-ms).
	TTFTSLO, TPOTSLO time.Duration

	runes    int            // len(Text) in runes, counted at most once per Route for every role's policy
	hashes   []kvindex.Hash // block hashes of Tokens for page size hashPage
	hashPage int            // 0: hashes not computed in this Route
	loads    loadCmp        // how the role being picked compares loads (set by Route)
}

// promptTokens is the request's prompt length in tokens: Tokens', or estimated from the text
// (four characters a token) when the router has no tokens.
func (q *Request) promptTokens() int {
	if len(q.Tokens) > 0 {
		return len(q.Tokens)
	}
	return (q.textRunes() + 3) / 4
}

// knownRunes returns the routing text's length in runes if it is known (given, or counted for
// this Route already), else -1.
func (q *Request) knownRunes() int {
	if q.runes <= 0 {
		return -1
	}
	return q.runes
}

// textRunes returns the routing text's length in runes, counting it at most once.
func (q *Request) textRunes() int {
	if q.runes <= 0 {
		q.runes = utf8.RuneCountInString(q.Text)
	}
	return q.runes
}

// blockHashes returns the block-hash chain of the request's tokens for page size page,
// computing it at most once per Route and page size (the backing array is reused across
// Routes).
func (q *Request) blockHashes(page int) []kvindex.Hash {
	if q.hashPage != page {
		q.hashes = kvindex.AppendBlockHashes(q.hashes[:0], q.Tokens, page, q.CacheSalt)
		q.hashPage = page
	}
	return q.hashes
}

// Router is the routing core shared by `serve` and `sim`. It is safe for concurrent use.
type Router struct {
	cfg   Config
	clock Clock
	retry RetryConfig // cfg.Retry(), every request's

	mu        sync.Mutex        // protects everything below; target loads are atomics
	onEvent   func(WorkerEvent) // OnWorkerEvent; nil: nobody listens
	rng       *rand.Rand
	inFlight  int                 // requests with a Retrier not yet Done (the retry budget's base)
	retrying  int                 // of those, the ones that retried
	workers   [numRoles][]*Worker // in registration order
	draining  []*Worker           // removed with requests in flight, in removal order (lifecycle.go)
	targets   [numRoles][]*Target // role's targets in target order (worker order, then rank)
	policies  [numRoles]Policy
	lastEvict time.Time
	avail     [numRoles][]*Target // scratch for Route, reused under mu
	// onObserved receives predicted_latency's predictions beside their observations (OnObserved).
	onObserved func(*Decision, Prediction)
}

// New builds a router for cfg (which must pass [Config.Validate]) reading time from clock and
// randomness from rng. Workers are added with [Router.AddWorker]: registration needs discovery
// (dp_size), which is the driver's business.
func New(cfg Config, clock Clock, rng *rand.Rand) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil || rng == nil {
		return nil, fmt.Errorf("router: New needs a clock and a random source")
	}
	r := &Router{cfg: cfg, retry: cfg.Retry(), clock: clock, rng: rng, lastEvict: clock.Now()}
	roles := []Role{Regular}
	if cfg.PDDisaggregation {
		roles = []Role{Prefill, Decode}
	}
	for _, role := range roles {
		p, err := NewPolicy(cfg.PolicyFor(role), cfg, rng)
		if err != nil {
			return nil, err
		}
		r.policies[role] = p
	}
	return r, nil
}

// PD reports whether the router runs in prefill/decode mode.
func (r *Router) PD() bool { return r.cfg.PDDisaggregation }

// Policy returns the policy instance of role (nil if the mode has no such role).
func (r *Router) Policy(role Role) Policy {
	if role >= numRoles {
		return nil
	}
	return r.policies[role]
}

func (r *Router) findLocked(url string) (Role, int, bool) {
	for role := range numRoles {
		for i, w := range r.workers[role] {
			if w.url == url {
				return role, i, true
			}
		}
	}
	return 0, 0, false
}

// rebuildLocked recomputes role's target order: workers in registration order, then rank.
// The slice is rebuilt, never edited in place, so snapshots handed out stay valid.
func (r *Router) rebuildLocked(role Role) {
	var ts []*Target
	for _, w := range r.workers[role] {
		ts = append(ts, w.targets...)
	}
	r.targets[role] = ts
}

// Route picks the target(s) for req and increments their loads: in PD mode a prefill and a
// decode target (the prefill policy runs first), otherwise one regular target. It fails with
// a *[NoTargetError] when a role has no available target; then nothing is incremented and no
// policy state changes.
func (r *Router) Route(req *Request) (*Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	roles := [2]Role{Regular}
	n := 1
	if r.cfg.PDDisaggregation {
		roles, n = [2]Role{Prefill, Decode}, 2
	}
	for _, role := range roles[:n] {
		r.avail[role] = r.availableLocked(role, now, r.avail[role][:0])
		if len(req.Avoid) > 0 {
			r.avail[role] = avoid(r.avail[role], req.Avoid)
		}
		if len(r.avail[role]) == 0 {
			return nil, r.noTargetLocked(role, now)
		}
		if r.cfg.WorkerOverloadTokenUsage > 0 || r.cfg.WorkerOverloadWaitingRequests > 0 || r.cfg.MaxWorkerRequests > 0 {
			var shed bool
			if r.avail[role], shed = r.notOverloaded(r.avail[role], now); shed {
				return nil, &OverloadError{Role: role, Targets: len(r.avail[role]), RetryAfter: shedRetryAfter}
			}
		}
	}
	d := &Decision{r: r}
	req.runes = req.TextRunes // 0: counted when a policy needs it (the text may have changed since a previous Route)
	req.hashPage = 0          // hashed when a policy needs it (the tokens may have changed too)
	var picks [2]Pick
	pl, pair := r.policies[roles[0]].(*PredictedLatency)
	if pair && n == 2 {
		req.loads = newLoadCmp(now, r.avail[Prefill], r.cfg.LoadReportMaxAge())
		var err error
		if picks[0], picks[1], err = pl.PickPair(now, req, r.avail[Prefill], r.avail[Decode], newLoadCmp(now, r.avail[Decode], r.cfg.LoadReportMaxAge())); err != nil {
			return nil, fmt.Errorf("router: policy %s: %w", pl.Name(), err)
		}
		d.lat = pl.chosen(now, picks[0].Index, picks[1].Index, pl.transfer)
	}
	for i, role := range roles[:n] {
		ts := r.avail[role]
		req.loads = newLoadCmp(now, ts, r.cfg.LoadReportMaxAge())
		if !pair || n == 1 {
			var err error
			if picks[i], err = r.policies[role].Pick(now, req, ts); err != nil {
				return nil, fmt.Errorf("router: %s policy %s: %w", role, r.policies[role].Name(), err)
			}
			if pair {
				d.lat = pl.chosen(now, picks[i].Index, picks[i].Index, 0)
			}
		}
		p := picks[i]
		if p.Index < 0 || p.Index >= len(ts) {
			panic(fmt.Sprintf("router: policy %s picked %d of %d targets", r.policies[role].Name(), p.Index, len(ts)))
		}
		t := ts[p.Index]
		d.legs[i] = leg{role: role, target: t, workerIndex: r.workerIndexLocked(t), reason: p.Reason, matchRate: p.MatchRate,
			kvIndex: p.KVIndex, predictedCached: p.PredictedCachedTokens, hitTier: p.HitTier, predictedHost: p.PredictedHostTokens, signal: p.Signal}
		if p.Signal == SignalEngineLoad {
			d.legs[i].loadAge = req.loads.age
		}
		if !t.engine.at.IsZero() { // the report does not hold this request yet
			l := &d.legs[i]
			uncached := int(float64(req.promptTokens()) * (1 - min(max(p.MatchRate, 0), 1)))
			l.uncached = int32(min(uncached, math.MaxInt32))
			l.engineGen = t.engine.sent(int(l.uncached))
		}
		if d.lat != nil {
			if role != Decode { // the prompt queues for prefill here
				d.lat.pending = int64(float64(req.promptTokens()) * (1 - min(max(p.MatchRate, 0), 1)))
				d.lat.gen = t.engine.gen
				t.latency.addPending(d.lat.pending, d.lat.gen)
				d.lat.queued = true
			}
			if role != Prefill { // and its KV joins this batch
				d.lat.context = int64(req.promptTokens())
				t.latency.context += d.lat.context
			}
		}
		if i == 0 {
			d.Reason, d.MatchRate = p.Reason, p.MatchRate
			d.KVIndex, d.PredictedCachedTokens = p.KVIndex, p.PredictedCachedTokens
		}
	}
	for i := range n {
		l := &d.legs[i]
		l.target.load.Add(1)
		l.spell, l.trial = l.target.worker.breaker.Admit(now)
	}
	if n == 1 {
		d.Regular = d.legs[0].target
	} else {
		d.Prefill, d.Decode = d.legs[0].target, d.legs[1].target
	}
	return d, nil
}

// shedRetryAfter is the Retry-After of a request shed because every worker was overloaded:
// about ten load reports later.
const shedRetryAfter = time.Second

// notOverloaded removes the overloaded targets from ts in place (fresh reports over
// --worker-overload-token-usage or --worker-overload-waiting-requests, or a worker at
// --max-worker-requests), unless that would leave none: then it returns ts whole and shed.
func (r *Router) notOverloaded(ts []*Target, now time.Time) (_ []*Target, shed bool) {
	maxAge, usage, waiting := r.cfg.LoadReportMaxAge(), r.cfg.WorkerOverloadTokenUsage, r.cfg.WorkerOverloadWaitingRequests
	over := func(t *Target) bool {
		return t.overloaded(now, maxAge, usage, waiting) || r.cfg.MaxWorkerRequests > 0 && t.worker.Load() >= int64(r.cfg.MaxWorkerRequests)
	}
	keep := 0
	for _, t := range ts {
		if !over(t) {
			keep++
		}
	}
	switch keep {
	case len(ts):
		return ts, false
	case 0:
		return ts, true
	}
	out := ts[:0]
	for _, t := range ts {
		if !over(t) {
			out = append(out, t)
		}
	}
	return out, false
}

// avoid removes targets of the avoided workers from ts in place, unless that would leave none.
func avoid(ts []*Target, urls []string) []*Target {
	keep := 0
	for _, t := range ts {
		if !contains(urls, t.worker.url) {
			keep++
		}
	}
	if keep == 0 {
		return ts
	}
	out := ts[:0]
	for _, t := range ts {
		if !contains(urls, t.worker.url) {
			out = append(out, t)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// availableLocked appends role's targets that may take a request at now to dst: healthy, and
// with a closed breaker or a half-open one with a probation slot free. Targets whose half-open
// breaker is full are offered only when nothing else is (probation limits a burst; it never
// turns requests away).
func (r *Router) availableLocked(role Role, now time.Time, dst []*Target) []*Target {
	start, full := len(dst), false
	for _, t := range r.targets[role] {
		if w := t.worker; w.health.Healthy() && w.breaker.Allow(now) {
			if w.breaker.Vacant(now) {
				dst = append(dst, t)
			} else {
				full = true
			}
		}
	}
	if len(dst) == start && full {
		for _, t := range r.targets[role] {
			if w := t.worker; w.health.Healthy() && w.breaker.Allow(now) {
				dst = append(dst, t)
			}
		}
	}
	return dst
}

// workerIndexLocked is t's worker's position within its role: the "index" of decision logs.
func (r *Router) workerIndexLocked(t *Target) int {
	for i, w := range r.workers[t.worker.role] {
		if w == t.worker {
			return i
		}
	}
	return -1 // removed since the snapshot; cannot happen under mu
}

// ObserveHealth feeds one probe result of the worker with url (at now) into its health
// machine — passed when probeErr is nil, else failed for that reason — and reports whether its
// verdict flipped.
func (r *Router) ObserveHealth(url string, probeErr error, now time.Time) (flipped bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	role, i, found := r.findLocked(url)
	if !found {
		return false, fmt.Errorf("router: health of %s: not registered", url)
	}
	w := r.workers[role][i]
	before := workerState(w, now)
	ok := probeErr == nil
	flipped = w.health.Observe(ok)
	reason := "health probe passed"
	if !ok {
		reason = "health probe failed: " + probeErr.Error()
	} else {
		w.breaker.ProbePassed(now) // the worker is back: traffic on probation at once
	}
	r.noteLocked(w, before, now, reason)
	return flipped, nil
}

// recordLocked feeds one request outcome into w's breaker (r.mu held).
func (r *Router) recordLocked(w *Worker, success bool) {
	now := r.clock.Now()
	before := workerState(w, now)
	probation := w.breaker.State(now) == BreakerHalfOpen
	w.breaker.Record(success, now)
	reason := "request succeeded"
	switch {
	case !success && probation:
		reason = "a request on probation failed (breaker half-open)"
	case !success:
		reason = fmt.Sprintf("%d failed requests in a row (--cb-failure-threshold)", r.cfg.CBFailureThreshold)
	}
	r.noteLocked(w, before, now, reason)
}

// Tick runs time-driven upkeep at now: cache-aware tree eviction once every
// --eviction-interval-secs. Drivers call it periodically (serve: a ticker; sim: virtual time).
func (r *Router) Tick(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.lastEvict) < r.cfg.EvictionInterval() {
		return
	}
	r.lastEvict = now
	for _, p := range r.policies {
		if e, ok := p.(evicter); ok {
			e.Evict()
		}
	}
}

// RetainRoutedTexts makes the cache-aware trees keep substrings of the routed texts instead of
// copies (tree.Tree.RetainTexts), from now on and after resets. It is for a driver whose request
// texts are never modified and are kept anyway, as the simulator's conversations are: it saves
// a copy per routed text and lets the same text, or a conversation's next turn, compare without
// being read again. Serve does not call it: a request's body must not outlive the request. Call
// it before the first Route.
func (r *Router) RetainRoutedTexts() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.policies {
		if c := treeOf(p); c != nil {
			c.retainTexts()
		}
	}
}

// DropTree makes role's cache_aware policy drop its approximate tree and stop keeping it, for
// a driver that knows no pick of the role will consult it again: with a KV event index
// (UseKVTokenIndex), every target of the role has a view that will stay fresh, and every
// request will carry Tokens. The simulator knows it once every subscription of the role is
// established on a feed that loses nothing (its event feed never gaps and its publishers never
// restart); the tree would then cost nearly a tenth of a million-request run's event loop and
// decide nothing. Serve never calls it: a live feed can always gap. A pick that would consult
// the dropped tree panics rather than route otherwise than the tree would have. Trims counted
// so far stay in TreeStats. It fails when role's policy is not cache_aware or
// predicted_latency, or has no KV event index.
func (r *Router) DropTree(role Role) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := treeOf(r.Policy(role))
	if p == nil || p.kv == nil {
		return fmt.Errorf("router: only a cache_aware or predicted_latency policy with a KV event index for %s workers can drop its tree", role)
	}
	p.dropTree()
	return nil
}

// ResetTrees empties every cache-aware tree, for when the workers' prefix caches were flushed
// (POST /flush_cache in serve, --flush-cache between levels in sim): the router's picture of
// the caches must not outlive them.
func (r *Router) ResetTrees() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.policies {
		if t, ok := p.(treeResetter); ok {
			t.ResetTree()
		}
	}
}

// Targets returns a snapshot of every target the views show: the registered workers' in
// target order (regular, prefill, decode; then registration order; then rank), then the
// draining workers' in removal order (not healthy: they take no new requests).
func (r *Router) Targets() []TargetInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var out []TargetInfo
	add := func(w *Worker) {
		healthy := workerState(w, now) == WorkerHealthy
		for _, t := range w.targets {
			out = append(out, TargetInfo{Name: t.name, URL: w.url, Role: w.role, Rank: t.rank, Load: t.Load(), Healthy: healthy})
		}
	}
	for role := range numRoles {
		for _, w := range r.workers[role] {
			add(w)
		}
	}
	for _, w := range r.draining {
		add(w)
	}
	return out
}

// Workers returns a snapshot of every worker the views show (/workers, /readiness,
// /get_loads, metrics): the registered ones in target order, then the draining ones in
// removal order.
func (r *Router) Workers() []WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	var out []WorkerInfo
	for role := range numRoles {
		for _, w := range r.workers[role] {
			out = append(out, infoLocked(w, now))
		}
	}
	for _, w := range r.draining {
		out = append(out, infoLocked(w, now))
	}
	return out
}

func infoLocked(w *Worker, now time.Time) WorkerInfo {
	st := workerState(w, now)
	return WorkerInfo{URL: w.url, Role: w.role, BootstrapPort: w.bootstrapPort, DPSize: w.dpSize,
		State: st, Healthy: st == WorkerHealthy, Breaker: w.breaker.State(now), Load: w.Load()}
}

// Ready reports whether requests can be routed: a healthy regular worker, or in PD mode a
// healthy prefill and a healthy decode worker.
func (r *Router) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	has := func(role Role) bool {
		for _, w := range r.workers[role] {
			if w.health.Healthy() && w.breaker.Allow(now) {
				return true
			}
		}
		return false
	}
	if r.cfg.PDDisaggregation {
		return has(Prefill) && has(Decode)
	}
	return has(Regular)
}

// TreeSize is the size of a cache-aware tree.
type TreeSize struct {
	Chars int // runes stored on its edges
	Nodes int
	Bytes int // the heap it holds, estimated (tree.Tree.Bytes)
	// Trims counts the routed texts that took the tree over MaxTreeTotalChars, each followed
	// by an LRU trim to 90 % of it (ResetTrees does not reset it).
	Trims int
}

// TreeStats returns the size of role's cache-aware tree; ok is false when the role's policy
// keeps no tree.
func (r *Router) TreeStats(role Role) (size TreeSize, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if role >= numRoles {
		return TreeSize{}, false
	}
	if s, isTree := r.policies[role].(treeStatser); isTree {
		return s.TreeStats(), true
	}
	return TreeSize{}, false
}

// NewRetrier returns the retries of one request that has just arrived (SPEC §1.6): it counts
// in flight, for the retry budget, until its Done.
func (r *Router) NewRetrier() *Retrier {
	r.arrived()
	return &Retrier{r: r, cfg: r.retry} // inlined: the Retrier stays on its caller's stack
}

// arrived counts one more request in flight for the retry budget.
func (r *Router) arrived() {
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
}

// RetryBudget reports the requests in flight (with a Retrier not Done) and those retrying.
func (r *Router) RetryBudget() (inFlight, retrying int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight, r.retrying
}

// leg is one role's part of a decision. (Its small fields are together at its end: it is
// allocated with every routed request, twice in PD mode.)
type leg struct {
	target      *Target
	workerIndex int
	reason      Reason
	matchRate   float64
	// predictedCached is Pick.PredictedCachedTokens.
	predictedCached int
	predictedHost   int // Pick.PredictedHostTokens
	signal          Signal
	loadAge         time.Duration
	// engineGen is the generation of the target's engine report the leg was counted under as
	// routed since (0: none), and uncached its uncached prompt tokens counted there.
	engineGen uint64
	uncached  int32 // (32 bits: a prompt's tokens fit, and a Decision fits the 288-byte class)
	done      atomic.Bool
	spell     uint32
	role      Role
	kvIndex   bool         // Pick.KVIndex
	hitTier   kvindex.Tier // Pick.HitTier
	// trial is set when the leg's worker was half-open at Route: the leg holds one of its
	// breaker's probation slots (of half-open spell spell) until Done.
	trial bool
}

// Leg describes one role's part of a [Decision].
type Leg struct {
	Target *Target
	// WorkerIndex is the worker's position within its role at routing time (decision logs).
	WorkerIndex int
	Reason      Reason
	MatchRate   float64
	// KVIndex is set when the chosen target's cache was predicted from the KV event index
	// (cache_aware with an index, a request with tokens, the target's view not stale); then
	// PredictedCachedTokens is its matched blocks · page size, to set against the cached
	// tokens the worker reports.
	KVIndex               bool
	PredictedCachedTokens int
	// HitTier is where that match lies: kvindex.TierHost when PredictedHostTokens of it are in
	// the worker's host memory (cache_aware weighing tiers, --kv-host-tier-weight > 0),
	// kvindex.TierGPU otherwise.
	HitTier             kvindex.Tier
	PredictedHostTokens int
	// Signal is what the choice rested on (cache match, engine load or in-flight counts;
	// SignalNone when loads were not looked at), and LoadAge, with SignalEngineLoad, the
	// oldest engine report's age then.
	Signal  Signal
	LoadAge time.Duration
}

// Tier names where the KV event index found the leg's predicted cached tokens for decision
// logs: "gpu", "host" (part of them in host memory), or "" when it predicted none.
func (l Leg) Tier() string {
	if !l.KVIndex || l.PredictedCachedTokens == 0 {
		return ""
	}
	return l.HitTier.String()
}

// Decision is what Route chose. Each leg's load stays incremented until [Decision.Done] is
// called for that role. A Decision is safe for concurrent use (the two legs of a PD request
// usually finish on different goroutines).
type Decision struct {
	// Prefill and Decode are set in PD mode, Regular otherwise.
	Prefill, Decode, Regular *Target
	// Reason and MatchRate are the first leg's (prefill in PD mode): the decision that decides
	// the prefix-cache hit. Per-leg values are in [Decision.Leg].
	Reason    Reason
	MatchRate float64
	// KVIndex and PredictedCachedTokens are the first leg's too (see [Leg]).
	KVIndex               bool
	PredictedCachedTokens int

	r    *Router
	legs [2]leg // the legs, in role order: one (regular) or two (prefill, decode); see legOf
	// lat is predicted_latency's prediction and observation; nil when another policy routed
	// (a pointer: the Decision of every other policy stays in its 288-byte size class).
	lat *latencyLeg
}

// legOf returns role's leg of d, nil when d has none. A decision has one leg (regular) or two
// (prefill, decode): legs holds them in that order.
func (d *Decision) legOf(role Role) *leg {
	i := 0
	if role == Decode {
		i = 1
	}
	if l := &d.legs[i]; l.target != nil && l.role == role {
		return l
	}
	return nil
}

// Leg returns role's part of the decision; ok is false if the decision has no such leg.
func (d *Decision) Leg(role Role) (Leg, bool) {
	l := d.legOf(role)
	if l == nil {
		return Leg{}, false
	}
	return Leg{Target: l.target, WorkerIndex: l.workerIndex, Reason: l.reason, MatchRate: l.matchRate,
		KVIndex: l.kvIndex, PredictedCachedTokens: l.predictedCached, HitTier: l.hitTier, PredictedHostTokens: l.predictedHost,
		Signal: l.signal, LoadAge: l.loadAge}, true
}

// Done reports that role's leg finished with outcome o: it decrements the leg's target load
// and feeds the worker's breaker (unless o is Cancelled). It acts exactly once per leg and
// returns true then; later calls, and calls for a role the decision does not have, are
// no-ops returning false.
func (d *Decision) Done(role Role, o Outcome) bool {
	l := d.legOf(role)
	if l == nil || !l.done.CompareAndSwap(false, true) {
		return false
	}
	t := l.target
	t.load.Add(-1)
	w := t.worker
	// A removed worker is checked after the decrement: RemoveWorker sets removed before it
	// reads the load, so one of the two sees the last request finish (lifecycle.go).
	quiet := o == Cancelled && !w.removed.Load() && !l.trial // nothing for the breaker to learn
	if quiet && l.engineGen == 0 && d.lat == nil {
		return true
	}
	r := d.r
	r.mu.Lock()
	defer r.mu.Unlock()
	t.engine.finished(l.engineGen, int(l.uncached))
	if d.lat != nil {
		d.latencyDone(role)
	}
	if quiet {
		return true
	}
	if l.trial {
		w.breaker.Finish(l.spell)
	}
	if o != Cancelled {
		r.recordLocked(w, o == Success)
	}
	r.drainedLocked(w)
	return true
}

// noTargetLocked describes role's workers when none is available at now (r.mu held).
func (r *Router) noTargetLocked(role Role, now time.Time) *NoTargetError {
	e := &NoTargetError{Role: role, Registered: len(r.targets[role])}
	for _, w := range r.workers[role] {
		e.Workers = append(e.Workers, UnavailableWorker{URL: RedactURL(w.url), State: workerState(w, now), Reason: RedactIn(w.reason, w.url)})
	}
	return e
}

package router

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mkTargets builds n free-standing targets named t0…t{n-1} with the given loads.
func mkTargets(loads ...int64) []*Target {
	ts := make([]*Target, len(loads))
	for i, l := range loads {
		w := &Worker{url: fmt.Sprintf("http://t%d:1", i)}
		ts[i] = &Target{name: w.url, worker: w, rank: -1}
		ts[i].load.Store(l)
	}
	return ts
}

func picks(t *testing.T, p Policy, ts []*Target, text string, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		pk, err := p.Pick(epoch, &Request{Text: text}, ts)
		require.NoError(t, err)
		out[i] = pk.Index
	}
	return out
}

func TestRandomExactSequence(t *testing.T) {
	t.Parallel()
	p := &Random{rng: rand.New(rand.NewPCG(42, 0))}
	got := picks(t, p, mkTargets(0, 0, 0, 0, 0), "", 12)
	// The policy is exactly one IntN(len) draw per pick.
	ref := rand.New(rand.NewPCG(42, 0))
	for i, g := range got {
		require.Equal(t, ref.IntN(5), g, "pick %d", i)
	}
	// And that sequence is pinned, so a change of draw order shows up here.
	require.Equal(t, []int{4, 4, 0, 0, 0, 4, 4, 1, 3, 4, 2, 3}, got)
}

func TestRoundRobinSequence(t *testing.T) {
	t.Parallel()
	p := &RoundRobin{}
	ts := mkTargets(0, 0, 0)
	require.Equal(t, []int{0, 1, 2, 0, 1, 2, 0}, picks(t, p, ts, "", 7))
	// The counter runs over the available list, so it shifts when availability changes.
	require.Equal(t, []int{1, 0, 1, 0}, picks(t, p, ts[:2], "", 4))
	pk, err := p.Pick(epoch, &Request{}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 2, Reason: ReasonRoundRobin}, pk)
}

func TestPowerOfTwoExactSequence(t *testing.T) {
	t.Parallel()
	ts := mkTargets(5, 1, 3, 1)
	p := &PowerOfTwo{rng: rand.New(rand.NewPCG(9, 9))}
	got := picks(t, p, ts, "", 10)
	// Reference: two distinct draws, the lower load wins, the first sample on a tie.
	ref := rand.New(rand.NewPCG(9, 9))
	for i, g := range got {
		a, b := ref.IntN(4), ref.IntN(3)
		if b >= a {
			b++
		}
		want := a
		if ts[b].Load() < ts[a].Load() {
			want = b
		}
		require.Equal(t, want, g, "pick %d", i)
		require.NotEqual(t, 0, g, "the busiest target never wins a pair")
	}
	require.Equal(t, []int{3, 2, 3, 3, 3, 2, 1, 1, 1, 1}, got)

	// Ties keep the first sample: with equal loads the pick is the first draw.
	eq := mkTargets(2, 2, 2)
	p2 := &PowerOfTwo{rng: rand.New(rand.NewPCG(5, 5))}
	ref2 := rand.New(rand.NewPCG(5, 5))
	for range 20 {
		first := ref2.IntN(3)
		ref2.IntN(2)
		pk, err := p2.Pick(epoch, &Request{}, eq)
		require.NoError(t, err)
		require.Equal(t, first, pk.Index)
	}
	// A single target is taken without drawing.
	pk, err := p2.Pick(epoch, &Request{}, mkTargets(9))
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonOnlyTarget}, pk)
}

// cacheAware returns a policy that knows ts (as the registry would have told it).
func cacheAware(threshold float64, abs int64, rel float64, ts ...[]*Target) *CacheAware {
	p := NewCacheAware(CacheAwareConfig{CacheThreshold: threshold, BalanceAbsThreshold: abs,
		BalanceRelThreshold: rel, MaxTreeSize: 1 << 26, MaxTreeTotalChars: 1 << 30})
	for _, set := range ts {
		for _, t := range set {
			p.AddTarget(t)
		}
	}
	return p
}

func TestCacheAwareImbalanceGoesToIdleTarget(t *testing.T) {
	t.Parallel()
	// sgl-router's case: loads 20 vs 0, abs 5, rel 2 → always the idle target.
	ts := mkTargets(20, 0)
	p := cacheAware(0.5, 5, 2, ts)
	// Even a perfect cache match on the busy target loses to the imbalance rule.
	p.tree.Insert("test", ts[0].name)
	for range 5 {
		pk, err := p.Pick(epoch, &Request{Text: "test"}, ts)
		require.NoError(t, err)
		require.Equal(t, 1, pk.Index)
		require.Equal(t, ReasonImbalance, pk.Reason)
	}
	// Both conditions are strict: diff 5 is not > 5.
	pk, err := p.Pick(epoch, &Request{Text: "test"}, mkTargets(5, 0))
	require.NoError(t, err)
	require.NotEqual(t, ReasonImbalance, pk.Reason)
	// max > min·rel must hold too: 30 vs 20 has diff 10 > 5 but 30 < 40.
	pk, err = p.Pick(epoch, &Request{Text: "zzz"}, mkTargets(30, 20))
	require.NoError(t, err)
	require.Equal(t, ReasonCacheMiss, pk.Reason)
	require.Equal(t, 1, pk.Index, "miss → least loaded")
	// Imbalance ties go to the lowest index.
	pk, err = p.Pick(epoch, &Request{Text: "test"}, mkTargets(20, 0, 7, 0))
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonImbalance, Signal: SignalInFlight}, pk)
}

func TestCacheAwareHitMissAndTies(t *testing.T) {
	t.Parallel()
	ts := mkTargets(0, 0, 0)
	p := cacheAware(0.3, 64, 1.5, ts)

	// Cold tree: a miss, tie → lowest index; the text is inserted for it.
	pk, err := p.Pick(epoch, &Request{Text: "hello world"}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheMiss, MatchRate: 0, Signal: SignalInFlight}, pk)

	// A hit above the threshold goes to the matching target even when it is busier (but
	// balanced), and "hello" follows "hello world".
	ts[0].load.Store(10)
	for _, text := range []string{"hello world", "hello", "hello world, again"} {
		pk, err = p.Pick(epoch, &Request{Text: text}, ts)
		require.NoError(t, err)
		require.Equal(t, 0, pk.Index, text)
		require.Equal(t, ReasonCacheHit, pk.Reason, text)
		require.Greater(t, pk.MatchRate, 0.3)
	}
	require.InDelta(t, 11.0/18.0, pk.MatchRate, 1e-9, "'hello world' of 'hello world, again'")

	// A miss goes to the least-loaded target, not to the target with the smallest tree.
	ts[1].load.Store(4)
	pk, err = p.Pick(epoch, &Request{Text: "completely different"}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 2, Reason: ReasonCacheMiss, MatchRate: 0, Signal: SignalInFlight}, pk)

	// The rate must be strictly above the threshold: 3 of 10 chars is a miss at 0.3.
	qs := mkTargets(0, 0)
	q := cacheAware(0.3, 64, 1.5, qs)
	q.tree.Insert("abc", qs[1].name)
	pk, err = q.Pick(epoch, &Request{Text: "abcdefghij"}, qs)
	require.NoError(t, err)
	require.Equal(t, ReasonCacheMiss, pk.Reason)
	require.InDelta(t, 0.3, pk.MatchRate, 1e-12)
	require.Equal(t, 0, pk.Index)
	q = cacheAware(0.3, 64, 1.5, qs)
	q.tree.Insert("abc", qs[1].name)
	pk, err = q.Pick(epoch, &Request{Text: "abcdefghi"}, qs) // 3/9 > 0.3
	require.NoError(t, err)
	require.Equal(t, ReasonCacheHit, pk.Reason)
	require.Equal(t, 1, pk.Index)

	// Empty text: rate 0, a miss.
	pk, err = q.Pick(epoch, &Request{Text: ""}, qs)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheMiss, Signal: SignalInFlight}, pk)
}

func TestCacheAwareTenantTiesFollowTargetOrder(t *testing.T) {
	t.Parallel()
	ts := mkTargets(3, 1, 1, 0)
	p := cacheAware(0.3, 64, 1.5, ts)
	// Tenants first seen in the order t2, t1, t0: the pick still follows target order.
	for _, i := range []int{2, 1, 0} {
		p.tree.Insert("shared prefix", ts[i].name)
	}
	pk, err := p.Pick(epoch, &Request{Text: "shared prefix"}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheHit, MatchRate: 1, Signal: SignalCacheMatch}, pk, "t1 and t2 tie at load 1; t3 is idle but has no match")

	// A matched tenant that is not available (not in ts) is skipped.
	pk, err = p.Pick(epoch, &Request{Text: "shared prefix"}, []*Target{ts[0], ts[3]})
	require.NoError(t, err)
	require.Equal(t, 0, pk.Index)
	require.Equal(t, ReasonCacheHit, pk.Reason)

	// If no matched tenant is available, it falls back to the least-loaded target.
	pk, err = p.Pick(epoch, &Request{Text: "shared prefix"}, []*Target{ts[3]})
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheMiss, MatchRate: 1, Signal: SignalInFlight}, pk)
	r := cacheAware(0.3, 64, 1.5, ts)
	r.tree.Insert("only here", "http://gone:1")
	pk, err = r.Pick(epoch, &Request{Text: "only here"}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 3, Reason: ReasonCacheMiss, MatchRate: 1, Signal: SignalInFlight}, pk)
}

func TestCacheAwareRouterPDSeparateTreesAndEviction(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.MaxTreeSize = 10
	cfg.EvictionIntervalSecs = 60
	clock := testutil.NewManualClock(epoch)
	r, err := New(cfg, clock, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	for i := range 2 {
		require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://p%d:1", i), Role: Prefill}))
		require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://d%d:1", i), Role: Decode}))
	}
	texts := []string{strings.Repeat("a", 30), strings.Repeat("b", 30), strings.Repeat("c", 30)}
	for _, text := range texts {
		d, err := r.Route(&Request{Text: text})
		require.NoError(t, err)
		d.Done(Prefill, Success)
		d.Done(Decode, Success)
	}
	ps, _ := r.TreeStats(Prefill)
	ds, _ := r.TreeStats(Decode)
	pc, dc := ps.Chars, ds.Chars
	require.Equal(t, 90, pc)
	require.Equal(t, 90, dc, "each role has its own tree")
	_, ok := r.TreeStats(Regular)
	require.False(t, ok)

	// Eviction runs only once the interval has passed in injected time.
	r.Tick(epoch.Add(59 * time.Second))
	ps, _ = r.TreeStats(Prefill)
	pc = ps.Chars
	require.Equal(t, 90, pc)
	r.Tick(epoch.Add(60 * time.Second))
	ps, _ = r.TreeStats(Prefill)
	pc = ps.Chars
	require.LessOrEqual(t, pc, 20, "each of the 2 tenants is cut to ≤ 10 chars")
	require.NoError(t, r.Policy(Prefill).(*CacheAware).tree.Check())

	// Removing a worker removes its tenant.
	_, err = r.RemoveWorker("http://d0:1", Removal{})
	require.NoError(t, err)
	counts := r.Policy(Decode).(*CacheAware).tree.TenantCounts()
	assert.NotContains(t, counts, "http://d0:1")
}

func TestNewPolicyNames(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range PolicyNames {
		p, err := NewPolicy(n, DefaultConfig(), rng)
		require.NoError(t, err)
		require.Equal(t, n, p.Name())
	}
	_, err := NewPolicy("bucket", DefaultConfig(), rng)
	require.EqualError(t, err, `router: unknown policy "bucket" (want cache_aware, round_robin, random, power_of_two, least_load, consistent_hashing, manual, predicted_latency)`)
}

func TestRouteDeterministicPerSeed(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []string {
		cfg := DefaultConfig()
		cfg.Policy = PolicyPowerOfTwo
		r, err := New(cfg, testutil.NewManualClock(epoch), rand.New(rand.NewPCG(seed, seed)))
		require.NoError(t, err)
		for i := range 8 {
			require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://w%d:1", i), Role: Regular}))
		}
		var out []string
		var live []*Decision
		for i := range 64 {
			d, err := r.Route(&Request{})
			require.NoError(t, err)
			out = append(out, d.Regular.Name())
			live = append(live, d)
			if i%3 == 0 {
				live[0].Done(Regular, Success)
				live = live[1:]
			}
		}
		return out
	}
	require.Equal(t, run(1), run(1))
	require.NotEqual(t, run(1), run(2))
}

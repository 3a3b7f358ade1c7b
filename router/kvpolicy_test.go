package router

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/stretchr/testify/require"
)

const testPage = 4

// toks returns n token ids starting at from.
func toks(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// kvPolicy returns a cache_aware policy (threshold 0.3, abs 5, rel 2) over ts with an index
// (pending TTL ttl) in which every target is interned and subscribed (not stale).
func kvPolicy(t *testing.T, ttl time.Duration, ts []*Target) (*CacheAware, *kvindex.Index) {
	t.Helper()
	ix := kvindex.New(kvindex.Config{PendingTTL: ttl})
	p := cacheAware(0.3, 5, 2)
	p.kv, p.page = hashMatcher{ix}, testPage
	for _, tg := range ts {
		p.AddTarget(tg)
		ix.SetStale(tg.kvID, false)
	}
	return p, ix
}

// store tells ix that tg holds the blocks of tokens (as its event feed would).
func store(ix *kvindex.Index, tg *Target, tokens []uint32) {
	hs := kvindex.AppendBlockHashes(nil, tokens, testPage, "")
	ix.Apply(tg.kvID, []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hs, BlockSize: testPage}}, epoch)
}

func TestCacheAwareKVIndexFindsWhatTheTreeCannot(t *testing.T) {
	t.Parallel()
	ts := mkTargets(0, 1, 0)
	p, ix := kvPolicy(t, 0, ts)
	prompt := toks(100, 40) // 10 blocks
	// Target 1 got this prefix from elsewhere (another router replica, a direct request): only
	// the index knows.
	store(ix, ts[1], prompt[:32])
	req := &Request{Text: "a prompt the tree never saw", Tokens: prompt}

	// The approximate policy alone: no match, least loaded.
	plain := cacheAware(0.3, 5, 2, ts)
	pk, err := plain.Pick(epoch, &Request{Text: req.Text, Tokens: prompt}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheMiss, Signal: SignalInFlight}, pk)

	pk, err = p.Pick(epoch, req, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheHit, MatchRate: 32.0 / 40, KVIndex: true, PredictedCachedTokens: 32, Signal: SignalCacheMatch}, pk)

	// A prefix below the threshold (8 of 40 tokens = 0.2) does not attract it.
	ts2 := mkTargets(0, 1)
	p2, ix2 := kvPolicy(t, 0, ts2)
	store(ix2, ts2[1], prompt[:8])
	pk, err = p2.Pick(epoch, &Request{Text: "x", Tokens: prompt}, ts2)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheMiss, MatchRate: 0.2, KVIndex: true, Signal: SignalInFlight}, pk)

	// Equal matches: the least loaded, then the lowest index.
	ts3 := mkTargets(3, 2, 2)
	p3, ix3 := kvPolicy(t, 0, ts3)
	for _, tg := range ts3 {
		store(ix3, tg, prompt)
	}
	pk, err = p3.Pick(epoch, &Request{Text: "x", Tokens: prompt}, ts3)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheHit, MatchRate: 1, KVIndex: true, PredictedCachedTokens: 40, Signal: SignalCacheMatch}, pk)
}

func TestCacheAwareKVIndexStaleTargetUsesTree(t *testing.T) {
	t.Parallel()
	ts := mkTargets(1, 0)
	p, ix := kvPolicy(t, 0, ts)
	ix.SetStale(ts[0].kvID, true) // no event feed (or a gap): the tree speaks for it
	text := "the shared system prompt, then a question"
	p.tree.Insert(text[:30], ts[0].name)
	req := &Request{Text: text, Tokens: toks(7, 40)}
	pk, err := p.Pick(epoch, req, ts)
	require.NoError(t, err)
	// Target 1 is fresh and holds nothing in the index (rate 0); target 0's tree rate wins.
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheHit, MatchRate: 30.0 / float64(len(text)), Signal: SignalCacheMatch}, pk)
	require.Zero(t, ix.Pending(ts[0].kvID), "a stale target takes no pending entries")

	// A better index match on a fresh target beats the stale one's tree match (32 of 38 runes).
	store(ix, ts[1], req.Tokens[:36])
	text2 := text[:30] + " another"
	pk, err = p.Pick(epoch, &Request{Text: text2, Tokens: req.Tokens}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheHit, MatchRate: 0.9, KVIndex: true, PredictedCachedTokens: 36, Signal: SignalCacheMatch}, pk)
	// The tree was kept warm for both picks: the fallback knows what each was sent.
	matched, tenants := p.tree.PrefixMatch(text2, nil)
	require.Equal(t, len(text2), matched)
	require.Equal(t, []string{ts[1].name}, tenants)

	// Without tokens the index is not consulted: today's rule, byte for byte.
	pk, err = p.Pick(epoch, &Request{Text: text}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheHit, MatchRate: 1, Signal: SignalCacheMatch}, pk)
}

func TestCacheAwareKVIndexImbalanceWins(t *testing.T) {
	t.Parallel()
	ts := mkTargets(20, 0)
	p, ix := kvPolicy(t, 0, ts)
	prompt := toks(1, 40)
	store(ix, ts[0], prompt)
	store(ix, ts[1], prompt[:12])
	pk, err := p.Pick(epoch, &Request{Text: "x", Tokens: prompt}, ts)
	require.NoError(t, err)
	require.Equal(t, Pick{Index: 1, Reason: ReasonImbalance, KVIndex: true, PredictedCachedTokens: 12, Signal: SignalInFlight}, pk)
}

// TestCacheAwareKVIndexPendingBurst routes a burst of siblings through a Router: the pending
// overlay makes them follow the first before any store is published; without it they spread.
func TestCacheAwareKVIndexPendingBurst(t *testing.T) {
	t.Parallel()
	shared := toks(1000, 64)
	sibling := func(i int) *Request {
		return &Request{Text: fmt.Sprintf("doc %d", i), Tokens: append(append([]uint32(nil), shared...), toks(5000+10*i, 8)...)}
	}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want []string
	}{
		{"pending", 5 * time.Second, []string{"http://w0:1", "http://w0:1", "http://w0:1", "http://w0:1"}},
		{"no pending", 0, []string{"http://w0:1", "http://w1:1", "http://w2:1", "http://w0:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := testutil.NewManualClock(epoch)
			r, err := New(DefaultConfig(), clock, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			ix := kvindex.New(kvindex.Config{PendingTTL: tc.ttl})
			require.NoError(t, r.UseKVIndex(Regular, ix, testPage))
			for i := range 3 {
				require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://w%d:1", i), Role: Regular}))
				ix.SetStale(ix.Target(fmt.Sprintf("http://w%d:1", i)), false)
			}
			var got []string
			for i := range tc.want {
				d, err := r.Route(sibling(i))
				require.NoError(t, err)
				got = append(got, d.Regular.Name())
				if i > 0 && tc.ttl > 0 {
					require.True(t, d.KVIndex)
					require.Equal(t, 64, d.PredictedCachedTokens, "the shared prefix, pending")
				}
			}
			require.Equal(t, tc.want, got)
			if tc.ttl == 0 {
				return
			}
			// Past the TTL with no store published, the pending entries no longer count.
			clock.Advance(tc.ttl)
			d, err := r.Route(sibling(9))
			require.NoError(t, err)
			require.Equal(t, "http://w1:1", d.Regular.Name())
			require.Equal(t, ReasonCacheMiss, d.Reason)
		})
	}
}

func TestUseKVIndex(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.DPAware = true
	cfg.DecodePolicy = PolicyRoundRobin
	r := newTestRouter(t, cfg)
	ix := kvindex.New(kvindex.Config{})
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p0:1", Role: Prefill, DPSize: 2}))
	require.NoError(t, r.UseKVIndex(Prefill, ix, 16))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://p1:1", Role: Prefill, DPSize: 1}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d0:1", Role: Decode, DPSize: 1}))
	// Targets registered before and after are interned under their url@rank names.
	for _, tg := range r.targets[Prefill] {
		require.Equal(t, tg.kvID, ix.Target(tg.Name()))
	}
	require.Equal(t, r.targets[Prefill][1].kvID, ix.Target("http://p0:1@1"))
	require.ErrorContains(t, r.UseKVIndex(Decode, ix, 16), "cache_aware")
	require.ErrorContains(t, r.UseKVIndex(Prefill, ix, 0), "page size 0")
	require.ErrorContains(t, r.UseKVIndex(Regular, ix, 16), "cache_aware", "no regular role in PD mode")

	// Route hashes a request's tokens once per Route, again when they change.
	for _, tg := range r.targets[Prefill] {
		ix.SetStale(tg.kvID, false)
	}
	store16 := func(tg *Target, tokens []uint32) {
		hs := kvindex.AppendBlockHashes(nil, tokens, 16, "")
		ix.Apply(tg.kvID, []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hs}}, epoch)
	}
	a, b := toks(0, 64), toks(900, 64)
	store16(r.targets[Prefill][2], b)
	req := &Request{Text: "q", Tokens: a}
	d, err := r.Route(req)
	require.NoError(t, err)
	require.Equal(t, ReasonCacheMiss, d.Reason)
	require.Equal(t, "http://p0:1@0", d.Prefill.Name())
	leg, ok := d.Leg(Prefill)
	require.True(t, ok)
	require.True(t, leg.KVIndex)
	dl, _ := d.Leg(Decode)
	require.False(t, dl.KVIndex, "round_robin decode")
	req.Tokens = b // a retry with other tokens must not reuse the cached hashes
	d, err = r.Route(req)
	require.NoError(t, err)
	require.Equal(t, "http://p1:1@0", d.Prefill.Name())
	require.Equal(t, 64, d.PredictedCachedTokens)

	// Salted requests live in their own chain: the unsalted blocks do not match.
	d, err = r.Route(&Request{Text: "q", Tokens: b, CacheSalt: "tenant"})
	require.NoError(t, err)
	require.Equal(t, ReasonCacheMiss, d.Reason)
	require.Zero(t, d.PredictedCachedTokens)

	require.NoError(t, r.UseKVIndex(Prefill, nil, 0), "detaching")
	d, err = r.Route(&Request{Text: "zzz", Tokens: b})
	require.NoError(t, err)
	require.False(t, d.KVIndex)
}

// TestDropTree checks Router.DropTree: only a cache_aware role with a KV event index drops its
// tree; picks on fresh views with tokens go on as before (the tree decided none of them), the
// tree is no longer kept, and a pick that would consult it panics instead of routing otherwise.
func TestDropTree(t *testing.T) {
	t.Parallel()
	cfg := pdConfig()
	cfg.DecodePolicy = PolicyRoundRobin
	kept, dropped := newTestRouter(t, cfg), newTestRouter(t, cfg)
	require.ErrorContains(t, dropped.DropTree(Prefill), "KV event index", "no index yet")
	var ixs []*kvindex.Index
	for _, r := range []*Router{kept, dropped} {
		ix := kvindex.New(kvindex.Config{PendingTTL: time.Minute})
		for i := range 3 {
			require.NoError(t, r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://p%d:1", i), Role: Prefill}))
		}
		require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://d0:1", Role: Decode}))
		require.NoError(t, r.UseKVIndex(Prefill, ix, testPage))
		for _, tg := range r.targets[Prefill] {
			ix.SetStale(tg.kvID, false)
		}
		ixs = append(ixs, ix)
	}
	require.ErrorContains(t, dropped.DropTree(Decode), "cache_aware", "round_robin keeps no tree")
	require.NoError(t, dropped.DropTree(Prefill))
	rng := rand.New(rand.NewPCG(3, 4))
	reasons := map[Reason]int{}
	for i := range 200 {
		prompt := toks(1000*rng.IntN(4), 8+4*rng.IntN(10)) // four shared prefixes
		text := fmt.Sprint(prompt)
		var picks []string
		for j, r := range []*Router{kept, dropped} {
			if i%7 == 0 { // an engine stores what it was sent
				tg := r.targets[Prefill][i%3]
				hs := kvindex.AppendBlockHashes(nil, prompt, testPage, "")
				ixs[j].Apply(tg.kvID, []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hs, BlockSize: testPage}}, epoch)
			}
			d, err := r.Route(&Request{Text: text, Tokens: prompt})
			require.NoError(t, err)
			leg, _ := d.Leg(Prefill)
			leg.Target = nil // each router's own
			picks = append(picks, fmt.Sprintf("%s %+v", d.Prefill.Name(), leg))
			reasons[d.Reason]++
			d.Done(Prefill, Success)
			d.Done(Decode, Success)
		}
		require.Equal(t, picks[0], picks[1], "request %d", i)
	}
	require.Positive(t, reasons[ReasonCacheHit])
	require.Positive(t, reasons[ReasonCacheMiss])
	size, ok := kept.TreeStats(Prefill)
	require.True(t, ok)
	require.Positive(t, size.Nodes)
	size, ok = dropped.TreeStats(Prefill)
	require.True(t, ok)
	require.Zero(t, size.Nodes, "the dropped tree is not kept")
	dropped.Tick(epoch.Add(time.Hour)) // eviction has nothing to trim
	dropped.ResetTrees()
	require.PanicsWithValue(t, "router: a cache_aware pick needs the tree that Router.DropTree dropped (a target without a fresh KV event view, or a request without Tokens)",
		func() { _, _ = dropped.Route(&Request{Text: "no tokens"}) })
	ixs[1].SetStale(dropped.targets[Prefill][0].kvID, true)
	require.Panics(t, func() { _, _ = dropped.Route(&Request{Text: "x", Tokens: toks(0, 8)}) }, "a stale target")
}

package router

import (
	"testing"

	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/stretchr/testify/require"
)

// storeOn tells ix that tg holds the blocks of tokens on medium's tier.
func storeOn(ix *kvindex.Index, tg *Target, medium string, tokens []uint32) {
	hs := kvindex.AppendBlockHashes(nil, tokens, testPage, "")
	ix.Apply(tg.kvID, []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hs, BlockSize: testPage, Medium: medium}}, epoch)
}

// tierPolicy is kvPolicy with the host tier weighed w.
func tierPolicy(t *testing.T, w float64, ts []*Target) (*CacheAware, *kvindex.Index) {
	t.Helper()
	p, ix := kvPolicy(t, 0, ts)
	p.cfg.HostTierWeight = w
	return p, ix
}

// A GPU hit beats an equal host hit, which beats a miss: target 2 (least loaded) holds nothing,
// target 1 the prompt in host memory (evicted from its GPU), target 0 on its GPU.
func TestCacheAwareWeighsTiers(t *testing.T) {
	t.Parallel()
	prompt := toks(100, 40) // 10 blocks
	setup := func(w float64) (*CacheAware, []*Target) {
		ts := mkTargets(2, 1, 0)
		p, ix := tierPolicy(t, w, ts)
		storeOn(ix, ts[0], "GPU", prompt)
		storeOn(ix, ts[1], "GPU", prompt)
		storeOn(ix, ts[1], "CPU_PINNED", prompt)
		hs := kvindex.AppendBlockHashes(nil, prompt, testPage, "")
		ix.Apply(ts[1].kvID, []kvindex.Event{{Kind: kvindex.BlockRemoved, Hashes: hs, Medium: "GPU"}}, epoch)
		return p, ts
	}
	pick := func(p *CacheAware, ts []*Target) Pick {
		pk, err := p.Pick(epoch, &Request{Text: "x", Tokens: prompt}, ts)
		require.NoError(t, err)
		return pk
	}

	p, ts := setup(0.9)
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheHit, MatchRate: 1, KVIndex: true, PredictedCachedTokens: 40,
		Signal: SignalCacheMatch}, pick(p, ts), "the GPU hit, though its worker is the busiest")
	require.Equal(t, Pick{Index: 0, Reason: ReasonCacheHit, MatchRate: 0.9, KVIndex: true, PredictedCachedTokens: 40,
		HitTier: kvindex.TierHost, PredictedHostTokens: 40, Signal: SignalCacheMatch}, pick(p, ts[1:]),
		"without it, the host hit beats the idle worker's miss")
	require.Equal(t, ReasonCacheMiss, pick(p, ts[2:]).Reason)

	// A longer host match beats a shorter GPU one when it is worth more: 4 GPU blocks (0.4)
	// against 2 GPU + 8 host (0.2 + 0.8·0.9 = 0.92).
	ts2 := mkTargets(0, 0)
	p2, ix2 := tierPolicy(t, 0.9, ts2)
	storeOn(ix2, ts2[0], "GPU", prompt[:16])
	storeOn(ix2, ts2[1], "GPU", prompt[:8])
	storeOn(ix2, ts2[1], "CPU_PINNED", prompt)
	pk := pick(p2, ts2)
	require.Equal(t, 1, pk.Index)
	require.InDelta(t, 0.2+0.8*0.9, pk.MatchRate, 1e-9)
	require.Equal(t, 40, pk.PredictedCachedTokens)
	require.Equal(t, 32, pk.PredictedHostTokens)

	// Weight 0: the host tier is not looked at (the index's device view only, as before tiers):
	// the host copy counts for nothing and the least loaded takes the miss.
	p, ts = setup(0)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheMiss, KVIndex: true, Signal: SignalInFlight}, pick(p, ts[1:]))
	// Weight 1: every tier alike; equal matches go to the least loaded, here the host one.
	p, ts = setup(1)
	require.Equal(t, Pick{Index: 1, Reason: ReasonCacheHit, MatchRate: 1, KVIndex: true, PredictedCachedTokens: 40,
		HitTier: kvindex.TierHost, PredictedHostTokens: 40, Signal: SignalCacheMatch}, pick(p, ts))
}

// The decision names the tier: Route carries the pick's tier to the leg, and the log names it.
func TestRouteReportsHitTier(t *testing.T) {
	t.Parallel()
	urls := []string{"http://a:1", "http://b:1"}
	r := regularRouter(t, PolicyCacheAware, urls...)
	ix := kvindex.New(kvindex.Config{})
	require.NoError(t, r.UseKVIndex(Regular, ix, testPage))
	prompt := toks(7, 40)
	hs := kvindex.AppendBlockHashes(nil, prompt, testPage, "")
	for i, u := range urls {
		id := ix.Target(u)
		ix.SetStale(id, false)
		medium := [...]string{"GPU", "CPU_PINNED"}[i]
		ix.Apply(id, []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: hs, BlockSize: testPage, Medium: medium}}, epoch)
	}
	d, err := r.Route(&Request{Text: "x", Tokens: prompt})
	require.NoError(t, err)
	l, ok := d.Leg(Regular)
	require.True(t, ok)
	require.Equal(t, "http://a:1", l.Target.URL())
	require.Equal(t, "gpu", l.Tier())
	d.Done(Regular, Success)

	ix.Apply(ix.Target("http://a:1"), []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}, epoch)
	d, err = r.Route(&Request{Text: "x", Tokens: prompt})
	require.NoError(t, err)
	l, _ = d.Leg(Regular)
	require.Equal(t, "http://b:1", l.Target.URL())
	require.Equal(t, "host", l.Tier())
	require.Equal(t, 40, l.PredictedHostTokens)
	d.Done(Regular, Success)
}

package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sibling returns a prompt of the 64-token shared prefix (tokens 0…63) and a 16-token suffix
// of its own.
func sibling(suffix uint32) []uint32 {
	return append(prompt(0, 64), prompt(suffix, 16)...)
}

// firstToken returns room's first token output.
func (c *cluster) firstToken(room uint64) Output {
	c.t.Helper()
	toks := c.of(room, KindToken)
	require.NotEmpty(c.t, toks, "room %d has no token", room)
	return toks[0]
}

func (c *cluster) finished(room uint64) Output {
	c.t.Helper()
	fin := c.of(room, KindFinished)
	require.Len(c.t, fin, 1, "room %d", room)
	return fin[0]
}

// Two siblings arrive together with an uncached shared prefix. lpm (SGLang's default) sorts the
// second last (in-batch prefix sharing, schedule_policy.py _compute_prefix_matches); under a
// tight token budget (80: the first sibling alone) it waits while the first computes the
// prefix, and once the batch's prompts are matchable — after the overlap lag — it hits the
// cache. Under a large budget it still joins the first batch, as in SGLang, and both miss.
// fcfs puts both in the batch and both miss.
func TestInBatchPrefixSharing(t *testing.T) {
	t.Parallel()
	p := testProfile()
	for _, tc := range []struct {
		name     string
		policy   string
		budget   int
		cachedB  int
		oneBatch bool
	}{
		{"lpm-tight", PolicyLPM, 80, 64, false},
		{"lpm-large", PolicyLPM, 0, 0, true},
		{"fcfs", PolicyFCFS, 0, 0, true},
	} {
		s := newServer(t, Config{Role: RoleUnified, Profile: p, SchedulePolicy: tc.policy, ChunkedPrefillSize: tc.budget})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: sibling(1000), MaxNew: 1})
		s.Submit(at(0), Req{Room: 2, Rank: -1, Prompt: sibling(2000), MaxNew: 1})
		c.runAll()
		a, b := c.finished(1), c.finished(2)
		assert.Equal(t, 0, a.Usage.CachedTokens, tc.name)
		assert.Equal(t, tc.cachedB, b.Usage.CachedTokens, tc.name)
		step1 := p.PrefillTime(80, 80*40)
		if tc.oneBatch {
			both := p.PrefillTime(160, 2*80*40)
			assert.Equal(t, at(both), c.firstToken(1).At, tc.name)
			assert.Equal(t, at(both), c.firstToken(2).At, tc.name)
			continue
		}
		assert.Equal(t, at(step1), c.firstToken(1).At, "the first sibling alone in the first batch")
		// The second computes only its 16-token suffix, after the 64 cached tokens.
		assert.Equal(t, at(step1+p.PrefillTime(16, 16*(64+8))), c.firstToken(2).At)
	}
}

// The overlap scheduler's lag: a batch's prompts become matchable only after the next batch
// has been formed. With room 0 decoding throughout, room 1 arrives during one decode step and
// room 2 during the next: under the overlap scheduler each waits a batch (Server.enqueue), so
// room 2's batch is formed as room 1's prefill ends and (fcfs: nothing holds it back) misses
// room 1's prompt; with --disable-overlap-schedule room 1 is prefilled at once and room 2 hits.
func TestOverlapInsertionLag(t *testing.T) {
	t.Parallel()
	p := testProfile()
	p0, step := p.PrefillTime(10, 50), p.DecodeTime(1, 11)
	for _, disable := range []bool{false, true} {
		s := newServer(t, Config{Role: RoleUnified, Profile: p, SchedulePolicy: PolicyFCFS, DisableOverlap: disable})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 0, Rank: -1, Prompt: prompt(1_000_000, 10), MaxNew: 100})
		c.runUntil(at(p0 + step/2))
		s.Submit(c.now, Req{Room: 1, Rank: -1, Prompt: sibling(1000), MaxNew: 2}) // keeps running after its prefill
		c.runUntil(at(p0 + 3*step/2))
		s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: sibling(2000), MaxNew: 1})
		c.runAll()
		want := 0
		if disable {
			want = 64
		}
		assert.Equal(t, want, c.finished(2).Usage.CachedTokens, "disable-overlap %v", disable)
	}
}

// The overlap scheduler forms the next batch while a step runs, from what it has received
// when the step starts: a prompt that arrives while a decode step runs misses the batch formed
// for the step after it and is prefilled one decode step later than without the overlap
// scheduler (whose steps are longer by the scheduler's per-request CPU time); on an idle rank
// it is not held back.
func TestOverlapSchedulerHoldsArrivalsForABatch(t *testing.T) {
	t.Parallel()
	p := testProfile()
	first := func(disable, busy bool, arrive time.Duration) (prefilled time.Time, step time.Duration) {
		s := newServer(t, Config{Role: RoleUnified, Profile: p, DisableOverlap: disable})
		c := &cluster{t: t, single: s, check: true}
		if busy {
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 10), MaxNew: 50}) // decodes throughout
		}
		c.runUntil(at(arrive))
		s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: prompt(1_000_000, 100), MaxNew: 1})
		c.runAll()
		if toks := c.of(1, KindToken); len(toks) > 2 {
			step = toks[2].At.Sub(toks[1].At)
		}
		return c.firstToken(2).At, step
	}
	mid := p.PrefillTime(10, 50) + p.DecodeTime(1, 11)/2 // inside room 1's first decode step
	with, step := first(false, true, mid)
	without, _ := first(true, true, mid)
	assert.InDelta(t, float64(step), float64(with.Sub(without)), float64(NoOverlapHostPerRequest*float64(time.Second)),
		"one decode step later under the overlap scheduler")
	with, _ = first(false, false, mid)
	without, _ = first(true, false, mid)
	assert.Equal(t, without, with, "an idle rank takes it at once")
}

// lpm admits the longest cached prefix first; past LPMQueueLimit waiting requests it falls
// back to arrival order, as SGLang's _determine_active_policy does.
func TestLPMOrderAndFCFSFallback(t *testing.T) {
	t.Parallel()
	p := testProfile()
	for _, tc := range []struct {
		waiting   int // requests in the queue when the batch forms, the warm one included
		warmFirst bool
	}{
		{LPMQueueLimit, true},
		{LPMQueueLimit + 1, false},
	} {
		// A budget of 100 tokens: one cold 100-token request fills a step.
		s := newServer(t, Config{Role: RoleUnified, Profile: p, ChunkedPrefillSize: 100})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(500_000, 100), MaxNew: 1}) // warms the cache
		c.runAll()
		now := c.now
		for i := range tc.waiting - 1 {
			s.Submit(now, Req{Room: uint64(10 + i), Rank: -1, Prompt: prompt(uint32(1000*(i+1)), 100), MaxNew: 1})
		}
		warm := append(prompt(500_000, 99), 7, 8, 9) // 99 tokens cached, 3 new
		s.Submit(now, Req{Room: 2, Rank: -1, Prompt: warm, MaxNew: 1})
		c.runUntil(now)
		_, q, _ := s.roomState(2)
		if tc.warmFirst {
			assert.Equal(t, QueueRunning, q, "%d waiting: lpm admits the longest match first", tc.waiting)
		} else {
			assert.Equal(t, QueueWaiting, q, "%d waiting: fcfs, the warm request waits its turn", tc.waiting)
		}
		c.runAll()
		assert.Equal(t, 99, c.finished(2).Usage.CachedTokens)
	}
}

func splitProfile() Profile {
	p := testProfile()
	p.DPAttn = &DPAttnSplit{GPUs: 8, AttnA1: 1e-7, AttnM0: 0.002, AttnC1: 1e-5, FFNM0: 0.003, FFNC1: 1e-6, CommFixed: 0.001, CommPerToken: 1e-7}
	return p
}

// A DP-attention server with one loaded rank and seven idle ones steps at the loaded rank's
// attention cost plus the shared MoE cost on its tokens; a second loaded rank adds its tokens
// to the shared part, not a second attention part.
func TestDPAttentionOneLoadedRank(t *testing.T) {
	t.Parallel()
	p := splitProfile()
	for _, ranks := range [][]int{{3}, {3, 5}} {
		s := newServer(t, Config{Role: RoleUnified, DPSize: 8, DPAttention: true, Profile: p})
		c := &cluster{t: t, single: s, check: true}
		for i, rk := range ranks {
			s.Submit(at(0), Req{Room: uint64(i + 1), Rank: rk, Prompt: prompt(uint32(1000*i), 100), MaxNew: 2})
		}
		c.runAll()
		n := len(ranks)
		first := p.AttnPrefillTime(100, 100*50) + p.SharedTime(100*n)
		second := first + p.AttnDecodeTime(1, 101) + p.SharedTime(n)
		toks := c.of(1, KindToken)
		require.Len(t, toks, 2)
		assert.Equal(t, at(first), toks[0].At, "ranks %v", ranks)
		assert.Equal(t, at(second), toks[1].At, "ranks %v", ranks)
	}
	// Without the split (a profile without DPAttn) the old lockstep holds: the whole step.
	s := newServer(t, Config{Role: RoleUnified, DPSize: 8, DPAttention: true, Profile: testProfile()})
	c := &cluster{t: t, single: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: 3, Prompt: prompt(0, 100), MaxNew: 1})
	c.runAll()
	assert.Equal(t, at(testProfile().PrefillTime(100, 100*50)), c.firstToken(1).At)
}

// The PD overhead of a profile shows once per request in TTFT: the first token reaches the
// decode server exactly PDOverhead later, whatever the prompt.
func TestPDOverheadOncePerRequest(t *testing.T) {
	t.Parallel()
	first := func(overhead float64, n int) Output {
		p := testProfile()
		p.PDOverhead = overhead
		c := &cluster{t: t, check: true,
			prefill: newServer(t, Config{Role: RolePrefill, Profile: p}),
			decode:  newServer(t, Config{Role: RoleDecode, Profile: p})}
		c.decode.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, n), MaxNew: 3})
		c.prefill.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, n), MaxNew: 3})
		c.runAll()
		toks := c.of(1, KindToken)
		require.Len(t, toks, 3)
		assert.Equal(t, toks[2].At.Sub(toks[1].At), p.DecodeTime(1, n+2), "decode steps do not carry it")
		return toks[0]
	}
	for _, n := range []int{100, 5000} {
		assert.Equal(t, 50*time.Millisecond, first(0.05, n).At.Sub(first(0, n).At), "prompt %d", n)
	}
}

// SGLang's logged hit rate counts, per prefill batch, the tokens before each chunk as cached:
// a 20,000-token prompt in three chunks with nothing cached is a 0 % hit by cached/prompt and
// (8,192 + 16,384) / (that + 20,000) by SGLang's log.
func TestSGLangCacheHitRateCountsChunkContinuations(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), ChunkedPrefillSize: 8192})
	c := &cluster{t: t, single: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 20000), MaxNew: 1})
	c.runAll()
	l := s.Loads(time.Time{})[0]
	assert.Zero(t, l.CacheHitRate)
	assert.Equal(t, int64(8192+16384), l.BatchHitTokens)
	assert.Equal(t, int64(20000), l.BatchNewTokens)
	assert.InDelta(t, 24576.0/44576, l.SGLangCacheHitRate, 1e-12)
}

// The decode radix cache: a decode server that served a prompt keeps it, so a later room with
// that prompt reserves KV only for the rest, tells the prefill server its hit, and only the
// missing KV crosses the link.
func TestDecodeRadixCacheShrinksTheTransfer(t *testing.T) {
	t.Parallel()
	p := testProfile()
	for _, on := range []bool{false, true} {
		c := &cluster{t: t, check: true,
			prefill: newServer(t, Config{Role: RolePrefill, Profile: p, LinkBandwidth: 1e9}),
			decode:  newServer(t, Config{Role: RoleDecode, Profile: p, DecodeRadixCache: on})}
		for room := uint64(1); room <= 2; room++ {
			c.decode.Submit(c.now, Req{Room: room, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 2})
			c.prefill.Submit(c.now, Req{Room: room, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 2})
			c.runAll()
		}
		pre := c.of(2, KindPreallocated)
		require.Len(t, pre, 1)
		done := c.of(2, KindTransferDone)
		require.Len(t, done, 1)
		transfer := done[0].At.Sub(done[0].FirstToken)
		if !on {
			assert.Zero(t, pre[0].CachedTokens)
			assert.Equal(t, p.transferTime(1000, 1e9), transfer, "the whole prompt's KV: 100 ms")
			continue
		}
		assert.Equal(t, 999, pre[0].CachedTokens, "all but the last prompt token are cached on decode")
		assert.Equal(t, p.transferTime(1, 1e9), transfer, "only the missing token's KV")
		fins := c.of(2, KindFinished) // prefill's, then decode's
		require.Len(t, fins, 2)
		assert.Equal(t, 999, fins[1].Usage.CachedTokens, "the prefill side's own hit is still reported")
	}
}

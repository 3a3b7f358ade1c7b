package engine

import (
	"testing"

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

// Two siblings arrive together with an uncached shared prefix. lpm (SGLang's default) puts
// only the first in the batch; the second is held back while the first computes the prefix,
// and once the batch's prompts are matchable — after the overlap lag — it hits the cache.
// fcfs puts both in the batch and both miss.
func TestInBatchPrefixSharing(t *testing.T) {
	t.Parallel()
	p := testProfile()
	for _, tc := range []struct {
		policy   string
		cachedB  int
		oneBatch bool
	}{
		{PolicyLPM, 64, false},
		{PolicyFCFS, 0, true},
	} {
		s := newServer(t, Config{Role: RoleUnified, Profile: p, SchedulePolicy: tc.policy})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: sibling(1000), MaxNew: 1})
		s.Submit(at(0), Req{Room: 2, Rank: -1, Prompt: sibling(2000), MaxNew: 1})
		c.runAll()
		a, b := c.finished(1), c.finished(2)
		assert.Equal(t, 0, a.Usage.CachedTokens, tc.policy)
		assert.Equal(t, tc.cachedB, b.Usage.CachedTokens, tc.policy)
		step1 := p.PrefillTime(80, 80*40)
		if tc.oneBatch {
			both := p.PrefillTime(160, 2*80*40)
			assert.Equal(t, at(both), c.firstToken(1).At)
			assert.Equal(t, at(both), c.firstToken(2).At)
			continue
		}
		assert.Equal(t, at(step1), c.firstToken(1).At, "the first sibling alone in the first batch")
		// The second computes only its 16-token suffix, after the 64 cached tokens.
		assert.Equal(t, at(step1+p.PrefillTime(16, 16*(64+8))), c.firstToken(2).At)
	}
}

// The overlap scheduler's lag: a batch's prompts become matchable only after the next batch
// has been formed. A request arriving while its prefix is being computed joins the next batch
// and (fcfs: nothing holds it back) misses; with --disable-overlap-schedule it hits.
func TestOverlapInsertionLag(t *testing.T) {
	t.Parallel()
	p := testProfile()
	for _, disable := range []bool{false, true} {
		s := newServer(t, Config{Role: RoleUnified, Profile: p, SchedulePolicy: PolicyFCFS, DisableOverlap: disable})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: sibling(1000), MaxNew: 2}) // keeps running after its prefill
		c.runUntil(at(p.PrefillTime(80, 80*40) / 2))
		s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: sibling(2000), MaxNew: 1})
		c.runAll()
		want := 0
		if disable {
			want = 64
		}
		assert.Equal(t, want, c.finished(2).Usage.CachedTokens, "disable-overlap %v", disable)
	}
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
		_, q, _ := s.Room(2)
		if tc.warmFirst {
			assert.Equal(t, QueueRunning, q, "%d waiting: lpm admits the longest match first", tc.waiting)
		} else {
			assert.Equal(t, QueueWaiting, q, "%d waiting: fcfs, the warm request waits its turn", tc.waiting)
		}
		c.runAll()
		assert.Equal(t, 99, c.finished(2).Usage.CachedTokens)
	}
}

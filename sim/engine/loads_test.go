package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodedSince is GenThroughput recomputed from the outputs: tokens after each room's first
// (those of decode steps) from the start of the window ending at now, per second.
func decodedSince(outs []Output, now time.Time) float64 {
	lo := time.Unix(0, (genSlotOf(now)-GenWindowSlots+1)*int64(GenWindowSlot))
	n := 0
	for _, o := range outs {
		if o.Kind == KindToken && o.Index > 0 && !o.At.Before(lo) && !o.At.After(now) {
			n++
		}
	}
	return float64(n) / now.Sub(lo).Seconds()
}

// TestLoadsPrefill: a prefill server's report with a chunked request, a waiting queue ordered
// by lpm (two requests with a 150-token prefix hit, one without) and a room in bootstrap.
func TestLoadsPrefill(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RolePrefill, Profile: testProfile(), MaxTotalTokens: 10_000, ChunkedPrefillSize: 40, MaxRunningRequests: 7})
	c := &cluster{t: t, prefill: s, check: true}
	base := prompt(1000, 200)
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: base})
	s.Handshake(at(0), 1)
	c.runAll()
	require.Len(t, c.of(1, KindFinished), 1)

	l := s.Loads(c.now)[0]
	assert.Equal(t, 200, l.KVTokens, "the prompt stays cached")
	assert.Zero(t, l.UsedTokens, "an unreferenced cache is evictable: not used, as SGLang counts it")
	assert.Zero(t, l.TokenUsage)

	t1 := c.now.Add(time.Second)
	hit := func(tail uint32) []uint32 { return append(slices.Clone(base[:150]), prompt(tail, 50)...) }
	s.Submit(t1, Req{Room: 2, Rank: -1, Prompt: hit(5000)})
	s.Submit(t1, Req{Room: 3, Rank: -1, Prompt: hit(6000)})
	s.Submit(t1, Req{Room: 4, Rank: -1, Prompt: prompt(7000, 200)})
	s.Submit(t1, Req{Room: 5, Rank: -1, Prompt: prompt(8000, 120)})
	for _, room := range []uint64{2, 3, 4} {
		s.Handshake(t1, room)
	}
	s.Advance(t1)
	require.NoError(t, s.checkInvariants())
	_, q, _ := s.roomState(2)
	require.Equal(t, QueueRunning, q, "lpm orders the hits first; room 2's 50 uncached tokens are chunked at 40")

	l = s.Loads(t1)[0]
	// Chunked room 2: 200 − 150 prefilled (its hit) − 40 (the chunk in flight, as SGLang's
	// prefix_indices include it when the load is reported); waiting room 3: 200 − 150
	// matched; room 4: 200 unmatched; bootstrap room 5: 120.
	assert.Equal(t, 10+50+200+120, l.WaitingUncachedTokens)
	assert.Equal(t, 3, l.WaitingReqs, "rooms 3 and 4 waiting, 5 in bootstrap")
	assert.Equal(t, l.Queued, l.WaitingReqs)
	assert.Equal(t, 1, l.Running, "room 2 is being prefilled")
	assert.Zero(t, l.RunningReqs, "a prefill server has no running batch")
	assert.Equal(t, 1, l.ByQueue[QueueBootstrap])
	assert.Equal(t, 2, l.ByQueue[QueueWaiting])
	// Room 2 locks the 150 shared tokens and holds 50 private; the cache's other 50 are
	// evictable.
	assert.Equal(t, 250, l.KVTokens)
	assert.Equal(t, 200, l.UsedTokens)
	assert.Equal(t, 200+200+200+120, l.TotalTokens, "used plus the waiting and bootstrap prompts, undiscounted")
	assert.Equal(t, 10_000, l.MaxTotalTokens)
	assert.Equal(t, l.KVCapacity, l.MaxTotalTokens)
	assert.Equal(t, 7, l.MaxRunningRequests)
	assert.InDelta(t, 0.02, l.TokenUsage, 1e-12)
	assert.Zero(t, l.GenThroughput, "prefill decodes nothing")

	s.Handshake(t1, 5)
	c.runAll()
	l = s.Loads(c.now)[0]
	assert.Zero(t, l.WaitingUncachedTokens)
	assert.Zero(t, l.WaitingReqs)
	assert.Zero(t, l.UsedTokens)
	assert.Equal(t, l.UsedTokens, l.TotalTokens)
}

// TestLoadsFCFSUnmatched: without lpm nothing measures the waiting requests' prefixes, so
// their whole prompts count as uncached (SGLang: num_matched_prefix_tokens stays 0).
func TestLoadsFCFSUnmatched(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), ChunkedPrefillSize: 40, SchedulePolicy: PolicyFCFS})
	c := &cluster{t: t, single: s, check: true}
	base := prompt(1000, 200)
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: base, MaxNew: 1})
	c.runAll()
	t1 := c.now.Add(time.Second)
	s.Submit(t1, Req{Room: 2, Rank: -1, Prompt: prompt(7000, 100), MaxNew: 1})
	s.Submit(t1, Req{Room: 3, Rank: -1, Prompt: append(slices.Clone(base[:150]), 1, 2), MaxNew: 1})
	s.Advance(t1)
	l := s.Loads(t1)[0]
	assert.Equal(t, 60+152, l.WaitingUncachedTokens, "room 2 chunked (40 of 100 in flight), room 3 unmatched")
}

// TestLoadsDecode: a decode server reports its running batch, its PD queues and the tokens
// its decode steps produce; no prefill work.
func TestLoadsDecode(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 10_000, MaxRunningRequests: 2})
	c := &cluster{t: t, decode: s, check: true}
	for room := uint64(1); room <= 3; room++ {
		s.Submit(at(0), Req{Room: room, Rank: -1, Prompt: prompt(uint32(room)*1000, 100), MaxNew: 400})
	}
	c.step(at(0))
	require.Len(t, c.outs, 3, "three rooms preallocated")
	s.KVArrived(at(0), 1, 0)
	s.KVArrived(at(0), 2, 0)
	s.Submit(at(0), Req{Room: 4, Rank: -1, Prompt: prompt(9000, 9500), MaxNew: 10})
	c.step(at(0))

	l := s.Loads(at(0))[0]
	assert.Equal(t, 2, l.RunningReqs, "rooms 1 and 2 joined the batch")
	assert.Equal(t, 2, l.Running)
	assert.Equal(t, 2, l.WaitingReqs, "room 3 waits for its KV, room 4 for memory")
	assert.Equal(t, 1, l.ByQueue[QueueTransfer])
	assert.Equal(t, 1, l.ByQueue[QueuePrealloc])
	assert.Zero(t, l.WaitingUncachedTokens, "a decode server prefills nothing")
	// Three prompts preallocated, plus the KV of the first token of the two running rooms.
	assert.Equal(t, 302, l.UsedTokens)
	assert.Equal(t, l.KVTokens, l.UsedTokens, "no cache: all KV is the requests'")
	assert.Equal(t, 302+9500, l.TotalTokens, "the prealloc queue's prompts are pending")
	assert.InDelta(t, 0.0302, l.TokenUsage, 1e-12)
	assert.Equal(t, 2, l.MaxRunningRequests)
	assert.Zero(t, l.GenThroughput)

	now := at(1550 * time.Millisecond)
	c.runUntil(now)
	l = s.Loads(now)[0]
	assert.Positive(t, l.GenThroughput)
	assert.InDelta(t, decodedSince(c.outs, now), l.GenThroughput, 1e-9)
	assert.InDelta(t, 2/testProfile().DecodeTime(2, 2*400).Seconds(), l.GenThroughput, 10, "two tokens per ~5 ms step")

	c.runAll()
	later := c.now.Add(1100 * time.Millisecond)
	l = s.Loads(later)[0]
	assert.Zero(t, l.GenThroughput, "idle for a whole window")
	assert.Zero(t, l.RunningReqs)
	assert.Zero(t, l.UsedTokens)
	assert.Equal(t, s.Loads(time.Time{})[0].GenThroughput, decodedSince(c.outs, c.now), "a zero now is the latest time seen")
}

// TestLoadsUnified: the running batch excludes requests being prefilled; finished requests'
// cached KV is evictable, so not used; the decode rate follows the outputs.
func TestLoadsUnified(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), MaxTotalTokens: 10_000})
	c := &cluster{t: t, single: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 300})
	c.step(at(0))
	l := s.Loads(at(0))[0]
	assert.Equal(t, 1, l.Running)
	assert.Zero(t, l.RunningReqs, "being prefilled: not in the running batch yet")
	assert.Zero(t, l.WaitingReqs)
	assert.Zero(t, l.WaitingUncachedTokens, "its prefill is scheduled, not waiting")
	assert.Equal(t, 100, l.UsedTokens)

	now := at(1234 * time.Millisecond)
	c.runUntil(now)
	l = s.Loads(now)[0]
	assert.Equal(t, 1, l.RunningReqs)
	assert.InDelta(t, decodedSince(c.outs, now), l.GenThroughput, 1e-9)
	assert.Greater(t, l.GenThroughput, 150.0, "one token per ~5 ms step")

	c.runAll()
	l = s.Loads(c.now)[0]
	assert.Zero(t, l.RunningReqs)
	assert.Equal(t, 100, l.KVTokens, "the prompt stays cached")
	assert.Zero(t, l.UsedTokens)
	assert.Zero(t, l.TokenUsage)
}

// TestLoadsPerRank: a request pinned to one DP rank shows on that rank only.
func TestLoadsPerRank(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, DPSize: 2, Profile: testProfile(), ChunkedPrefillSize: 64})
	s.Submit(at(0), Req{Room: 1, Rank: 1, Prompt: prompt(0, 100), MaxNew: 10})
	s.Submit(at(0), Req{Room: 2, Rank: 1, Prompt: prompt(500, 100), MaxNew: 10})
	s.Advance(at(0))
	ls := s.Loads(at(0))
	require.Len(t, ls, 2)
	assert.Equal(t, RankLoad{Rank: 0, KVCapacity: 100_000, MaxTotalTokens: 100_000, MaxRunningRequests: DefaultMaxRunningRequests}, ls[0])
	assert.Equal(t, 1, ls[1].Rank)
	assert.Equal(t, 1, ls[1].WaitingReqs)
	assert.Equal(t, 36+100, ls[1].WaitingUncachedTokens, "room 1 chunked (64 of 100 in flight), room 2 waiting")
	assert.Equal(t, 100, ls[1].UsedTokens, "room 1's KV is reserved whole at admission")
}

// TestLoadsConstant: an infinitely parallel server counts its live requests as running and
// every token after the first as decoded; it holds no request KV.
func TestLoadsConstant(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: ConstantProfile(100*time.Millisecond, 10*time.Millisecond)})
	c := &cluster{t: t, single: s}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 500})
	s.Submit(at(0), Req{Room: 2, Rank: -1, Prompt: prompt(500, 100), MaxNew: 500})
	now := at(1550 * time.Millisecond)
	c.runUntil(now)
	l := s.Loads(now)[0]
	assert.Equal(t, 2, l.RunningReqs)
	assert.Zero(t, l.UsedTokens)
	assert.InDelta(t, 200, l.GenThroughput, 5, "two rooms, a token each per 10 ms")
	assert.InDelta(t, decodedSince(c.outs, now), l.GenThroughput, 1e-9)
}

func TestGenWindow(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Time { return at(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name string
		adds []int // token counts, one per 100 ms from t=0 (slot 0, 1, …)
		now  time.Time
		want float64
	}{
		{"empty", nil, ms(500), 0},
		{"within the first slot", []int{10}, ms(50), 10 / 0.95}, // the window starts 900 ms before slot 0
		{"whole window", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, ms(999), 10 / 0.999},
		{"oldest slot drops out", []int{100, 1, 1, 1, 1, 1, 1, 1, 1, 1}, ms(1000), 9 / 0.9},
		{"idle for a window", []int{5, 5}, ms(1200), 0},
		{"idle for long", []int{5, 5}, ms(60_000), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var g genWindow
			for i, n := range tc.adds {
				g.add(ms(100*i+10), n)
			}
			assert.InDelta(t, tc.want, g.rate(tc.now), 1e-9)
		})
	}
}

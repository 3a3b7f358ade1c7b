package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the SGLang scheduler and memory rules (host overhead, new-token-ratio admission,
// retraction, CUDA-graph padding, KV streaming with link contention, in-batch sharing), each
// on a case small enough to check by hand.

// A lone request's TTFT grows by exactly Profile.HostOverhead, on a unified server and on a
// prefill server (whose Handshake comes at once).
func TestHostOverheadDelaysTTFT(t *testing.T) {
	t.Parallel()
	const host = 0.0125 // s
	for _, role := range []Role{RoleUnified, RolePrefill} {
		first := func(h float64) time.Time {
			p := testProfile()
			p.HostOverhead = h
			s := newServer(t, Config{Role: role, Profile: p})
			c := &cluster{t: t, check: true}
			if role == RoleUnified {
				c.single = s
			} else {
				c.prefill = s
			}
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 4})
			if role == RolePrefill {
				s.Handshake(at(0), 1)
			}
			c.runAll()
			if role == RolePrefill {
				return c.of(1, KindTransferDone)[0].FirstToken
			}
			return c.firstToken(1).At
		}
		base, delayed := first(0), first(host)
		assert.Equal(t, seconds(host), delayed.Sub(base), role.String())
		assert.Equal(t, at(testProfile().PrefillTime(100, 100*50)), base, "zero keeps today's timing")
	}
}

// PaddedBatch follows SGLang's captured sizes: 1 replays the graph of 1, 9 the graph of 12,
// 257 runs eagerly above --cuda-graph-max-bs 256; a max that is not itself a captured size
// (100) caps the graphs at the largest captured size below it (96).
func TestPaddedBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b, max, want int
		graph        bool
	}{
		{1, 256, 1, true},
		{9, 256, 12, true},
		{257, 256, 257, false},
		{256, 256, 256, true},
		{13, 256, 16, true},
		{300, 512, 304, true},
		{500, 512, 512, true},
		{96, 100, 96, true},
		{97, 100, 97, false},
		{9, 0, 9, false}, // no CUDA-graph modelling
	} {
		got, graph := PaddedBatch(tc.b, tc.max)
		assert.Equal(t, tc.want, got, "b=%d max=%d", tc.b, tc.max)
		assert.Equal(t, tc.graph, graph, "b=%d max=%d", tc.b, tc.max)
	}
}

// firstDecodeStep runs n rooms (10-token prompts) on a decode server and returns the length of
// their first decode step: from the first token (emitted as they join) to the second.
func firstDecodeStep(t *testing.T, cfg Config, n int) time.Duration {
	t.Helper()
	cfg.Role = RoleDecode
	s := newServer(t, cfg)
	for i := range n {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*100, 10), MaxNew: 3})
	}
	var toks []Output
	for i := 0; i < 1000 && s.Live() > 0; i++ {
		next, ok := s.NextEvent()
		require.True(t, ok)
		for _, o := range s.Advance(next) {
			switch o.Kind {
			case KindPreallocated:
				s.KVArrived(next, o.Room, 0)
			case KindToken:
				if o.Room == 0 {
					toks = append(toks, o)
				}
			}
		}
	}
	require.Len(t, toks, 3)
	return toks[1].At.Sub(toks[0].At)
}

// A decode step of 9 requests with --cuda-graph-max-bs 256 is timed as a batch of 12 over the
// real context; with a max of 8 it runs eagerly: 9 rows plus EagerOverhead. Without the knob
// it is today's step.
func TestCUDAGraphStepTime(t *testing.T) {
	t.Parallel()
	p := testProfile()
	p.EagerOverhead = 0.002
	ctx := 9 * (10 + 1) // each room: 10 prompt tokens + its first token
	assert.Equal(t, p.DecodeTime(9, ctx), firstDecodeStep(t, Config{Profile: p}, 9))
	assert.Equal(t, p.DecodeTime(12, ctx), firstDecodeStep(t, Config{Profile: p, CUDAGraphMaxBS: 256}, 9))
	assert.Equal(t, p.DecodeTime(9, ctx)+seconds(0.002), firstDecodeStep(t, Config{Profile: p, CUDAGraphMaxBS: 8}, 9))
}

// Admission by new-token ratio, by hand: KV 1200; room 0 (100-token prompt, 1001 max new) has
// been prefilled and decodes with 1000 outputs to go; the ratio is 0.7 × 0.5 = 0.35 (no decode
// step yet). Ten rooms of 50 prompt tokens and 50 max new arrive: rem_total_tokens is
// free 1100 − 0.35 × 1000 = 750, and each admitted room takes 50 of KV and charges 50 more, so
// the k-th (from 0) is admitted while 100 < 750 − 100k: seven of them. The others wait (with
// prompt-only admission all ten would have fitted).
func TestAdmissionByNewTokenRatio(t *testing.T) {
	t.Parallel()
	p := testProfile()
	s := newServer(t, Config{Role: RoleUnified, Profile: p, MaxTotalTokens: 1200, ScheduleConservativeness: 0.5})
	require.InDelta(t, 0.35, s.ranks[0].ratio, 1e-12)
	s.Submit(at(0), Req{Room: 0, Rank: -1, Prompt: prompt(0, 100), MaxNew: 1001})
	t1 := at(p.PrefillTime(100, 100*50))
	require.Empty(t, s.Advance(t1.Add(-1)))
	for i := 1; i <= 10; i++ {
		s.Submit(t1, Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*1000, 50), MaxNew: 50})
	}
	s.Advance(t1)
	require.NoError(t, s.checkInvariants())
	require.Equal(t, int64(1000), s.ranks[0].runRemain, "room 0 decodes, 1000 outputs to go")
	var admitted []uint64
	for i := 1; i <= 10; i++ {
		if _, q, _ := s.roomState(uint64(i)); q == QueueRunning {
			admitted = append(admitted, uint64(i))
		}
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7}, admitted)
	assert.True(t, s.ranks[0].full, "admission stopped for memory: batch_is_full until the running batch shrinks")
}

// The new-token ratio decays linearly over 600 decode steps to 0.14 of its start, and an
// idle rank goes back to the start.
func TestNewTokenRatioDecay(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile()})
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 10), MaxNew: 700})
	rk := s.ranks[0]
	steps := 0
	for i := 0; i < 10_000 && s.Live() > 0; i++ {
		next, ok := s.NextEvent()
		require.True(t, ok)
		for _, o := range s.Advance(next) {
			if o.Kind == KindPreallocated {
				s.KVArrived(next, o.Room, 0)
			}
		}
		if rk.stepKind == stepDecode {
			steps++
			switch steps {
			case 1:
				assert.InDelta(t, 0.7-0.7*0.86/600, rk.ratio, 1e-12)
			case 300:
				assert.InDelta(t, 0.7-0.7*0.86/2, rk.ratio, 1e-9)
			case 650:
				assert.InDelta(t, 0.7*0.14, rk.ratio, 1e-12, "the floor")
			}
		}
	}
	assert.Equal(t, 699, steps)
	assert.InDelta(t, 0.7, rk.ratio, 1e-12, "idle: back to the start")
}

// hand builds a running request on s's rank 0 with prompt tokens of KV (decode role: all of it
// private) and generated outputs, all but the newest with KV.
func hand(s *Server, room uint64, promptLen, generated, maxNew int) *request {
	rk := s.ranks[0]
	r := &request{room: room, rk: rk, prompt: prompt(uint32(room)*1000, promptLen), generated: generated, maxNew: maxNew,
		target: promptLen, state: StateSuccess, admitted: true}
	r.alloc = promptLen + generated - 1
	rk.private += r.alloc
	s.rooms[room] = r
	r.prev, r.next = s.live.prev, &s.live
	s.live.prev.next = r
	s.live.prev = r
	s.setQueue(r, QueueRunning)
	s.joinRun(rk, r)
	return r
}

// Retraction order, by hand (schedule_batch.py retract_decode): four decoding rooms each need
// one more token of KV and none is free. Sorted by outputs (most first), then prompt (shortest
// first), they are D (9 outputs), A (5), C (1 output, 1-token prompt), B (1, 2): B goes first,
// freeing 2 tokens, too few for the 3 the others need, then C; A and D run on. The ratio
// becomes (5 + 9 + 20·2) / (100 + 100 + 1).
func TestRetractionOrder(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 14 + 2 + 1 + 18})
	a := hand(s, 1, 10, 5, 100)
	b := hand(s, 2, 2, 1, 100)
	c := hand(s, 3, 1, 1, 100)
	d := hand(s, 4, 10, 9, 100)
	rk := s.ranks[0]
	require.Equal(t, 0, rk.free())
	_, ok := s.formDecode(rk, at(0))
	require.True(t, ok)
	require.NoError(t, s.checkInvariants())
	assert.Equal(t, []*request{a, d}, rk.running, "A and D keep decoding, in admission order")
	assert.Equal(t, 2, rk.retractions)
	assert.Equal(t, b, rk.retracted.items[rk.retracted.head], "B was retracted first")
	assert.Equal(t, c, rk.retracted.items[rk.retracted.head+1])
	assert.False(t, b.inRun || c.inRun)
	assert.InDelta(t, 54.0/201, rk.ratio, 1e-12)
	assert.Equal(t, int64(95+91), rk.runRemain, "the survivors' remaining outputs")
}

// A retracted unified request is prefilled again: its prompt comes from the cache, its 7
// generated tokens are computed again and counted.
func TestRetractionRecompute(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), MaxTotalTokens: 1000})
	rk := s.ranks[0]
	p := prompt(0, 100)
	rk.cache.insert(p)
	r := &request{room: 1, rk: rk, prompt: p, generated: 7, maxNew: 20, target: 107, admitted: true}
	require.True(t, s.admit(rk, r, at(0), 0))
	assert.Equal(t, 100, r.prefilled, "the whole prompt is a hit")
	assert.Equal(t, 7, r.alloc)
	assert.Equal(t, int64(7), rk.recomputed)
	assert.Equal(t, int64(7), s.Loads(time.Time{})[0].RecomputedTokens)
}

// transfers runs rooms of 1000-token prompts submitted at once to a prefill server (link
// 1 GB/s, 1e5 bytes of KV per token, no fixed transfer cost) and returns, per room, the time
// from its first token (the end of its last chunk) to its TransferDone.
func transfers(t *testing.T, rooms int, chunk int) (map[uint64]time.Duration, map[uint64]time.Time) {
	t.Helper()
	p := testProfile()
	p.T0, p.PDOverhead = 0, 0
	s := newServer(t, Config{Role: RolePrefill, Profile: p, LinkBandwidth: 1e9, ChunkedPrefillSize: chunk})
	c := &cluster{t: t, prefill: s, check: true}
	for i := range rooms {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*5000, 1000), MaxNew: 1})
		s.Handshake(at(0), uint64(i))
	}
	c.runAll()
	d, done := map[uint64]time.Duration{}, map[uint64]time.Time{}
	for i := range rooms {
		o := c.of(uint64(i), KindTransferDone)
		require.Len(t, o, 1)
		d[uint64(i)], done[uint64(i)] = o[0].At.Sub(o[0].FirstToken), o[0].At
	}
	return d, done
}

// Two transfers that start together on one link take twice as long as one alone (processor
// sharing): 1e8 bytes at 1 GB/s is 100 ms alone, 200 ms each when shared.
func TestTransfersShareTheLink(t *testing.T) {
	t.Parallel()
	alone, _ := transfers(t, 1, 0)
	assert.Equal(t, 100*time.Millisecond, alone[0])
	two, _ := transfers(t, 2, 0)
	assert.Equal(t, 200*time.Millisecond, two[0])
	assert.Equal(t, 200*time.Millisecond, two[1])
}

// KV is sent per chunk: with 500-token chunks the first half travels while the second is
// computed, so the transfer ends 50 ms (the last chunk's bytes) after the first token when the
// link has drained the first half by then, and the decode side's TTFT shrinks accordingly.
func TestTransferStreamsChunks(t *testing.T) {
	t.Parallel()
	p := testProfile()
	// Make the second chunk's compute longer than the first chunk's transfer (50 ms).
	p.A1 = 1e-4 // 500 tokens: 50 ms + A0
	s := newServer(t, Config{Role: RolePrefill, Profile: p, LinkBandwidth: 1e9, ChunkedPrefillSize: 500})
	c := &cluster{t: t, prefill: s, check: true}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 1000), MaxNew: 1})
	s.Handshake(at(0), 1)
	c.runAll()
	o := c.of(1, KindTransferDone)[0]
	chunk1 := p.PrefillTime(500, 500*250)
	chunk2 := p.PrefillTime(500, 500*750)
	require.Greater(t, chunk2, 50*time.Millisecond)
	assert.Equal(t, at(chunk1+chunk2), o.FirstToken)
	assert.Equal(t, 50*time.Millisecond+seconds(p.T0+p.PDOverhead), o.At.Sub(o.FirstToken))
}

// Decode-side admission as DecodePreallocQueue: KV 1000, 100 tokens reserved per room; five
// rooms of 200 prompt tokens arrive. Each needs max(200 + 100, 200 + 50 max new) = 300 of the
// allocatable 1000, so three are preallocated (only their prompts' 600 tokens allocated);
// then allocatable = free 400 − 100 × 3 rooms in transfer = 100: the other two wait.
func TestDecodePreallocReserve(t *testing.T) {
	t.Parallel()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), MaxTotalTokens: 1000, ReservedDecodeTokens: 100})
	for i := range 5 {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*1000, 200), MaxNew: 50})
	}
	outs := s.Advance(at(0))
	require.NoError(t, s.checkInvariants())
	assert.Equal(t, []Kind{KindPreallocated, KindPreallocated, KindPreallocated}, kinds(outs))
	l := s.Loads(time.Time{})[0]
	assert.Equal(t, 600, l.KVTokens)
	assert.Equal(t, 5, l.Queued, "three in transfer, two in prealloc")
	_, q, _ := s.roomState(3)
	assert.Equal(t, QueuePrealloc, q)
}

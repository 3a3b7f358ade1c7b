package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func preset(t testing.TB, name string) Profile {
	p, err := LookupProfile(name)
	require.NoError(t, err)
	return p
}

// decodeStepGap submits batch rooms of promptLen-token prompts, maxNew (≥ 3) tokens each, to a
// decode server of cfg, lets their KV arrive at once, and returns the gap between room 0's
// second and third tokens: one decode step of the whole batch.
func decodeStepGap(t *testing.T, cfg Config, batch, promptLen, maxNew int) time.Duration {
	t.Helper()
	cfg.Role = RoleDecode
	s := newServer(t, cfg)
	for i := range batch {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, promptLen), MaxNew: maxNew})
	}
	for _, o := range s.Advance(at(0)) {
		require.Equal(t, KindPreallocated, o.Kind)
		s.KVArrived(at(0), o.Room, 0)
	}
	c := &cluster{t: t, decode: s, check: true}
	c.runAll()
	toks := c.of(0, KindToken)
	require.Len(t, toks, maxNew)
	return toks[2].At.Sub(toks[1].At)
}

// decodeITL is one decode step of batch rooms of promptLen tokens on the llama3-8b-h100 preset.
func decodeITL(t *testing.T, batch, promptLen int) time.Duration {
	return decodeStepGap(t, Config{Profile: preset(t, "llama3-8b-h100")}, batch, promptLen, 10)
}

func TestDecodeStepGrowsWithBatchAndContext(t *testing.T) {
	t.Parallel()
	base := decodeITL(t, 1, 1000)
	bigBatch := decodeITL(t, 128, 1000)
	longCtx := decodeITL(t, 1, 30000)
	t.Logf("ITL batch=1 ctx=1k %s, batch=128 ctx=1k %s, batch=1 ctx=30k %s", base, bigBatch, longCtx)
	assert.Greater(t, bigBatch, base)
	assert.Greater(t, longCtx, base)
	p := preset(t, "llama3-8b-h100")
	assert.Equal(t, p.DecodeTime(128, 128*1002), bigBatch)
}

func TestPrefillChunkGrowsWithContext(t *testing.T) {
	t.Parallel()
	p := preset(t, "llama3-8b-h100")
	p.HostOverhead = 0 // the request is in the scheduler at once: every event is a chunk's end
	s := newServer(t, Config{Role: RoleUnified, Profile: p})
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 3*8192), MaxNew: 1})
	s.Advance(at(0))
	var ends []time.Time
	for {
		next, ok := s.NextEvent()
		if !ok {
			break
		}
		s.Advance(next)
		ends = append(ends, next)
	}
	require.Len(t, ends, 3, "three chunks of 8192")
	d1, d2, d3 := ends[0].Sub(at(0)), ends[1].Sub(ends[0]), ends[2].Sub(ends[1])
	t.Logf("chunk times %s %s %s", d1, d2, d3)
	assert.Less(t, d1, d2)
	assert.Less(t, d2, d3)
}

// TestLockstep: rank 0 prefills a long prompt while rank 1 decodes; under DP attention rank 1's
// decode steps last as long as rank 0's prefill chunks.
func TestLockstep(t *testing.T) {
	t.Parallel()
	maxGap := func(lockstep bool) time.Duration {
		s := newServer(t, Config{Role: RoleUnified, DPSize: 2, DPAttention: lockstep, Profile: preset(t, "llama3-8b-h100")})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: 1, Prompt: prompt(0, 100), MaxNew: 40})
		c.runUntil(at(50 * time.Millisecond))
		s.Submit(c.now, Req{Room: 2, Rank: 0, Prompt: prompt(1000, 4*8192), MaxNew: 1})
		c.runAll()
		toks := c.of(1, KindToken)
		require.Len(t, toks, 40)
		var gap time.Duration
		for i := 1; i < len(toks); i++ {
			gap = max(gap, toks[i].At.Sub(toks[i-1].At))
		}
		return gap
	}
	free, locked := maxGap(false), maxGap(true)
	chunk := preset(t, "llama3-8b-h100").PrefillTime(8192, 8192*4096)
	t.Logf("rank 1 max ITL: independent %s, lockstep %s (one prefill chunk %s)", free, locked, chunk)
	assert.Less(t, free, chunk, "independent ranks do not wait for each other")
	assert.GreaterOrEqual(t, locked, chunk, "lockstep: the busy rank sets every rank's step")
}

// TestDecodePressureHoldsPrefillInBootstrap wires a PD pair: the decode server has KV for two
// rooms, so the other rooms never get a Handshake and stay in the prefill bootstrap queue until
// decode memory frees up.
func TestDecodePressureHoldsPrefillInBootstrap(t *testing.T) {
	t.Parallel()
	p := testProfile()
	pre := newServer(t, Config{Role: RolePrefill, Profile: p})
	dec := newServer(t, Config{Role: RoleDecode, Profile: p, MaxTotalTokens: 2*(1000+20) + 10, ReservedDecodeTokens: 20})
	c := &cluster{t: t, prefill: pre, decode: dec, check: true}
	for i := range 5 {
		r := Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*5000, 1000), MaxNew: 20}
		pre.Submit(at(0), r)
		dec.Submit(at(0), r)
	}
	c.runUntil(at(0))
	assert.Equal(t, 3, pre.Loads(time.Time{})[0].Queued, "three rooms wait in bootstrap")
	for i := 2; i < 5; i++ {
		_, q, _ := pre.roomState(uint64(i))
		assert.Equal(t, QueueBootstrap, q, "room %d", i)
		_, q, _ = dec.roomState(uint64(i))
		assert.Equal(t, QueuePrealloc, q, "room %d", i)
	}
	c.runAll()
	firstDecodeDone := c.of(0, KindFinished)[0].At
	for i := range 5 {
		fin := c.of(uint64(i), KindFinished)
		require.Len(t, fin, 2, "room %d finishes on both servers", i)
		if i >= 2 {
			assert.False(t, c.of(uint64(i), KindTransferDone)[0].FirstToken.Before(firstDecodeDone),
				"room %d was prefilled only after decode memory freed", i)
		}
	}
}

func TestConstantAndInstantAreLoadIndependent(t *testing.T) {
	t.Parallel()
	const ttft, itl = 100 * time.Millisecond, 20 * time.Millisecond
	for _, prof := range []Profile{ConstantProfile(ttft, itl), Instant()} {
		for _, batch := range []int{1, 256} {
			t.Run(prof.Name+"/batch="+strconv.Itoa(batch), func(t *testing.T) {
				wantTTFT, wantITL := prof.TTFT, prof.ITL
				// Unified.
				s := newServer(t, Config{Role: RoleUnified, DPSize: 2, Profile: prof})
				c := &cluster{t: t, single: s, check: batch == 1}
				for i := range batch {
					s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, 2000), MaxNew: 16})
				}
				c.runAll()
				checkTimings(t, c, batch, at(0), wantTTFT, wantITL)
				// PD with zero network latency: the decode side's first token comes TTFT after submit.
				pre := newServer(t, Config{Role: RolePrefill, Profile: prof})
				dec := newServer(t, Config{Role: RoleDecode, Profile: prof})
				c = &cluster{t: t, prefill: pre, decode: dec, check: batch == 1}
				for i := range batch {
					r := Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, 2000), MaxNew: 16}
					pre.Submit(at(0), r)
					dec.Submit(at(0), r)
				}
				c.runAll()
				c.prefill, c.single = nil, nil
				var decOuts []Output
				for _, o := range c.outs {
					if o.Kind == KindToken || (o.Kind == KindFinished && o.Usage.CompletionTokens > 1) {
						decOuts = append(decOuts, o)
					}
				}
				c.outs = decOuts
				checkTimings(t, c, batch, at(0), wantTTFT, wantITL)
			})
		}
	}
}

func checkTimings(t *testing.T, c *cluster, batch int, start time.Time, ttft, itl time.Duration) {
	t.Helper()
	for i := range batch {
		toks := c.of(uint64(i), KindToken)
		require.Len(t, toks, 16)
		require.Equal(t, ttft, toks[0].At.Sub(start), "room %d TTFT", i)
		for k := 1; k < len(toks); k++ {
			require.Equal(t, itl, toks[k].At.Sub(toks[k-1].At), "room %d ITL %d", i, k)
		}
		require.Len(t, c.of(uint64(i), KindFinished), 1)
	}
}

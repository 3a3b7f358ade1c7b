package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kvBatch is one published batch, its paths copied.
type kvBatch struct {
	at   time.Time
	rank int
	evs  []KVEvent
}

// kvRecorder keeps the batches published; a path that is a view of a prompt (PromptView) is
// kept in views too, uncopied, and recorded as any other.
type kvRecorder struct {
	batches []kvBatch
	views   [][]uint32
}

func (r *kvRecorder) hook(at time.Time, rank int, evs []KVEvent) {
	b := kvBatch{at: at, rank: rank}
	for _, e := range evs {
		if e.PromptView {
			r.views = append(r.views, e.Path)
			e.PromptView = false
		}
		e.Path = slices.Clone(e.Path)
		b.evs = append(b.evs, e)
	}
	r.batches = append(r.batches, b)
}

func stored(path []uint32, n int) KVEvent  { return KVEvent{Kind: KVStored, Path: path, New: n} }
func removed(path []uint32, n int) KVEvent { return KVEvent{Kind: KVRemoved, Path: path, New: n} }

var cleared = KVEvent{Kind: KVCleared}

// After a prefill, the prompt's whole pages are stored: a second prompt sharing a page stores
// only its own run, with the shared page in its path.
func TestKVEventsStoredAfterPrefill(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch, check: true}
	a := prompt(100, 10)
	s.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: a, MaxNew: 1})
	c.runAll()
	fin := c.of(1, KindFinished)
	require.Len(t, fin, 1)
	require.Len(t, rec.batches, 2)
	// SGLang's RadixCache records AllBlocksCleared from its constructor; the first publish
	// point is the first prefill batch.
	assert.Equal(t, kvBatch{at: epoch, rank: 0, evs: []KVEvent{cleared}}, rec.batches[0])
	// The prompt's two whole pages (the partial third is not cached), published when the
	// rank goes idle after the step.
	assert.Equal(t, kvBatch{at: fin[0].At, rank: 0, evs: []KVEvent{stored(a[:8], 8)}}, rec.batches[1])

	b := append(slices.Clone(a[:4]), prompt(500, 9)...) // shares the first page only
	s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: b, MaxNew: 1})
	c.runAll()
	require.Len(t, rec.batches, 3)
	assert.Equal(t, []KVEvent{stored(b[:12], 8)}, rec.batches[2].evs, "the new run of 2 pages, its path from the root")
	// Both paths are views of the prompts themselves, which the engine never copied for them,
	// capped at their ends so that no consumer appends into a prompt.
	require.Len(t, rec.views, 2)
	for i, p := range [][]uint32{a[:8], b[:12]} {
		assert.Same(t, &p[0], &rec.views[i][0])
		assert.Equal(t, len(p), cap(rec.views[i]))
	}
}

// Evicting a leaf publishes its removal (with the batch whose admission evicted it), and
// FlushCache publishes a clear at once.
func TestKVEventsRemovedOnEvictionClearedOnFlush(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, MaxTotalTokens: 40, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch, check: true}
	a := prompt(100, 16)
	s.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: a, MaxNew: 1})
	c.runAll()
	require.Len(t, rec.batches, 2)
	assert.Equal(t, []KVEvent{stored(a, 16)}, rec.batches[1].evs)

	b := prompt(900, 28) // needs 28 of 40 tokens with 16 cached: a is evicted
	start := c.now
	s.Submit(start, Req{Room: 2, Rank: -1, Prompt: b, MaxNew: 1})
	c.runAll()
	require.Len(t, rec.batches, 4)
	assert.Equal(t, kvBatch{at: start, rank: 0, evs: []KVEvent{removed(a, 16)}}, rec.batches[2], "published with the batch that evicted it")
	assert.Equal(t, []KVEvent{stored(b, 28)}, rec.batches[3].evs)

	require.True(t, s.FlushCache())
	require.Len(t, rec.batches, 5)
	assert.Equal(t, kvBatch{at: c.now, rank: 0, evs: []KVEvent{cleared}}, rec.batches[4])
}

// In a decode-only phase the stores wait for the next log_decode_stats, every
// DecodeLogInterval decode steps, not every step; the finished request's outputs are stored
// and published when the rank goes idle.
func TestKVEventsDecodeCadence(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch, check: true}
	p, out := prompt(100, 8), prompt(5000, 100)
	s.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: p, MaxNew: 100, Output: out})
	c.runAll()
	toks := c.of(1, KindToken)
	require.Len(t, toks, 100)
	fin := c.of(1, KindFinished)
	require.Len(t, fin, 1)
	require.Len(t, rec.batches, 3, "cleared at the prefill batch, the prompt at decode step 40, the outputs when idle")
	assert.Equal(t, []KVEvent{cleared}, rec.batches[0].evs)
	// The overlap scheduler inserts the prompt after forming the next batch (the first decode
	// step); decode step k produces token k, so the 40th step ends with token 40.
	assert.Equal(t, kvBatch{at: toks[DecodeLogInterval].At, rank: 0, evs: []KVEvent{stored(p, 8)}}, rec.batches[1])
	seq := append(slices.Clone(p), out[:96]...) // prompt + the 98 outputs with KV, page-aligned
	assert.Equal(t, kvBatch{at: fin[0].At, rank: 0, evs: []KVEvent{stored(seq, 96)}}, rec.batches[2])
}

// A PD prefill server publishes when it polls its transfer queue: the prompt's store goes out
// at the instant its prefill step ends, on the room's rank.
func TestKVEventsPrefillServerPublishesOnTransferPoll(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	pf := newServer(t, Config{Role: RolePrefill, Profile: testProfile(), PageSize: 4, DPSize: 2, KVEvents: rec.hook})
	dc := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), PageSize: 4, DPSize: 2})
	c := &cluster{t: t, prefill: pf, decode: dc, now: epoch, check: true}
	p := prompt(100, 12)
	pf.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: p, MaxNew: 4})
	dc.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: p, MaxNew: 4})
	c.runAll()
	require.Len(t, c.of(1, KindFinished), 2)
	var rank1 []kvBatch
	for _, b := range rec.batches {
		if b.rank == 1 {
			rank1 = append(rank1, b)
		}
	}
	require.Len(t, rank1, 2, "room 1 runs on rank 1 (room %% dp size): %+v", rec.batches)
	assert.Equal(t, []KVEvent{cleared}, rank1[0].evs)
	assert.Equal(t, []KVEvent{stored(p, 12)}, rank1[1].evs)
	first := pf.Advance(c.now) // nothing left
	assert.Empty(t, first)
	var prefilled time.Time
	for _, o := range c.of(1, KindTransferDone) {
		prefilled = o.FirstToken
	}
	assert.Equal(t, prefilled, rank1[1].at, "published when the prefill step ended and the room entered the transfer queue")
}

// Without a hook nothing is recorded; the same run with and without one behaves the same.
func TestKVEventsOffRecordsNothing(t *testing.T) {
	t.Parallel()
	run := func(hook func(time.Time, int, []KVEvent)) []Output {
		s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, MaxTotalTokens: 64, KVEvents: hook})
		c := &cluster{t: t, single: s, now: epoch}
		for i := range 20 {
			s.Submit(c.now, Req{Room: uint64(i + 1), Rank: -1, Prompt: prompt(uint32(i%3)*1000, 20+i), MaxNew: 5})
			c.runUntil(c.now.Add(3 * time.Millisecond))
		}
		c.runAll()
		if hook == nil {
			for _, rk := range s.ranks {
				assert.Nil(t, rk.cache.log)
			}
		}
		return c.outs
	}
	rec := &kvRecorder{}
	with := run(rec.hook)
	assert.Equal(t, run(nil), with)
	var stores, removes int
	for _, b := range rec.batches {
		for _, e := range b.evs {
			switch e.Kind {
			case KVStored:
				stores++
				assert.Zero(t, len(e.Path)%4)
				assert.Zero(t, e.New%4)
			case KVRemoved:
				removes++
			}
		}
	}
	assert.Positive(t, stores)
	assert.Positive(t, removes, "the 64-token pool must evict")
}

// Kill drops unpublished events; Restart publishes the new process's clear at once.
func TestKVEventsKillRestart(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, DPSize: 2, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch}
	s.Submit(epoch, Req{Room: 1, Rank: 0, Prompt: prompt(1, 8), MaxNew: 1})
	c.runAll()
	n := len(rec.batches)
	s.Kill(c.now.Add(time.Second))
	assert.Len(t, rec.batches, n, "a dead server publishes nothing")
	s.restart(c.now.Add(2 * time.Second))
	require.Len(t, rec.batches, n+2)
	for i, b := range rec.batches[n:] {
		assert.Equal(t, kvBatch{at: c.now.Add(2 * time.Second), rank: i, evs: []KVEvent{cleared}}, b)
	}
}

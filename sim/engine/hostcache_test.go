package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func storedOn(medium string, path []uint32, n int) KVEvent {
	return KVEvent{Kind: KVStored, Path: path, New: n, Medium: medium}
}
func removedFrom(medium string, path []uint32, n int) KVEvent {
	return KVEvent{Kind: KVRemoved, Path: path, New: n, Medium: medium}
}

// A prompt the GPU cache evicts moves to the host tier (events: removed from the GPU, stored
// on the host); its next request finds it there and loads it back: the tokens count as cached,
// and the prefill step takes the load-back time on top of computing the rest.
func TestHostTierEvictsToHostAndLoadsBack(t *testing.T) {
	t.Parallel()
	run := func(hostTokens int) (*Server, *kvRecorder, *cluster) {
		rec := &kvRecorder{}
		s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, MaxTotalTokens: 40,
			HostCacheTokens: hostTokens, KVEvents: rec.hook})
		return s, rec, &cluster{t: t, single: s, now: epoch, check: true}
	}
	a, b := prompt(100, 16), prompt(900, 28)
	a2 := append(slices.Clone(a), prompt(300, 4)...) // a's next turn

	s, rec, c := run(64)
	s.Submit(epoch, Req{Room: 1, Rank: -1, Prompt: a, MaxNew: 1})
	c.runAll()
	assert.Equal(t, []KVEvent{storedOn("GPU", a, 16)}, rec.batches[1].evs, "with a host tier the GPU's events name their medium")

	s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: b, MaxNew: 1}) // needs 28 of 40: a leaves the GPU
	c.runAll()
	assert.Equal(t, []KVEvent{removedFrom("GPU", a, 16), storedOn("CPU_PINNED", a, 16)}, rec.batches[2].evs)

	start := c.now
	s.Submit(start, Req{Room: 3, Rank: -1, Prompt: a2, MaxNew: 1}) // evicts b to the host; a comes back
	c.runAll()
	fin := c.of(3, KindFinished)
	require.Len(t, fin, 1)
	assert.Equal(t, 16, fin[0].Usage.CachedTokens, "the host hit counts as cached")
	l := s.Loads(c.now)[0]
	assert.Equal(t, int64(16), l.HostCachedTokens)
	assert.Equal(t, 44, l.HostTokens, "a and b on the host")
	assert.Equal(t, 64, l.HostCapacity)
	load := time.Duration(16 * testProfile().KVBytesPerToken / DefaultHostCacheBandwidth * 1e9)
	step := load + testProfile().PrefillTime(4, 4*(16+2))
	assert.Equal(t, start.Add(step), fin[0].At, "load-back, then the 4 new tokens")
	assert.Equal(t, []KVEvent{storedOn("GPU", b, 28)}, rec.batches[3].evs)
	var last []KVEvent
	for _, bt := range rec.batches[4:] {
		last = append(last, bt.evs...)
	}
	assert.Equal(t, []KVEvent{removedFrom("GPU", b, 28), storedOn("CPU_PINNED", b, 28), storedOn("GPU", a2[:20], 20)}, last,
		"b leaves the GPU for the host; a, loaded back and extended, is on the GPU again")

	// Without the host tier the same request is a miss: all 20 tokens computed.
	s0, _, c0 := run(0)
	for i, p := range [][]uint32{a, b, a2} {
		s0.Submit(c0.now, Req{Room: uint64(i + 1), Rank: -1, Prompt: p, MaxNew: 1})
		c0.runAll()
	}
	fin0 := c0.of(3, KindFinished)
	require.Len(t, fin0, 1)
	assert.Equal(t, 0, fin0[0].Usage.CachedTokens)
	assert.Zero(t, s0.Loads(c0.now)[0].HostCapacity)
}

// tierModel is what a consumer of the events knows: the pages each tier holds, by path.
type tierModel map[string]map[string]bool

func (m tierModel) apply(t *testing.T, page int, evs []KVEvent) {
	for _, ev := range evs {
		if ev.Kind == KVCleared {
			clear(m)
			continue
		}
		require.Zero(t, ev.New%page)
		require.Zero(t, len(ev.Path)%page)
		tier := m[ev.Medium]
		if tier == nil {
			tier = map[string]bool{}
			m[ev.Medium] = tier
		}
		for end := len(ev.Path) - ev.New + page; end <= len(ev.Path); end += page {
			k := fmt.Sprint(ev.Path[:end])
			if ev.Kind == KVStored {
				require.False(t, tier[k], "%s page stored twice", ev.Medium)
				tier[k] = true
			} else {
				require.True(t, tier[k], "%s page removed but not held", ev.Medium)
				delete(tier, k)
			}
		}
	}
}

// Conservation under pressure: multi-turn conversations whose working set is several times the
// GPU pool. The host tier never exceeds its size, the engine's invariants hold at every step,
// and the pages the published events leave on each tier are exactly what each tree holds.
func TestHostTierConservation(t *testing.T) {
	t.Parallel()
	const page, gpu, host = 4, 400, 1200
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: page, MaxTotalTokens: gpu,
		HostCacheTokens: host, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch, check: true}
	rng := rand.New(rand.NewPCG(7, 11))
	convs := make([][]uint32, 12)
	for i := range convs {
		convs[i] = prompt(uint32(10_000*(i+1)), 24)
	}
	room := uint64(0)
	for range 150 {
		i := rng.IntN(len(convs))
		convs[i] = append(convs[i], prompt(uint32(rng.IntN(1<<20)), 4+rng.IntN(20))...)
		if len(convs[i]) > 160 { // a new conversation in its place
			convs[i] = prompt(uint32(rng.IntN(1<<20)), 24)
		}
		room++
		s.Submit(c.now, Req{Room: room, Rank: -1, Prompt: slices.Clone(convs[i]), MaxNew: 3})
		c.runUntil(c.now.Add(time.Duration(rng.IntN(20)) * time.Millisecond))
		h := s.ranks[0].host()
		require.LessOrEqual(t, h.tree.size, h.capacity)
	}
	c.runAll()
	l := s.Loads(c.now)[0]
	assert.Greater(t, l.HostCachedTokens, int64(500), "the host tier served hits")
	assert.Less(t, l.HostCachedTokens, l.CachedTokens, "and the GPU some")

	m := tierModel{}
	for _, b := range rec.batches {
		m.apply(t, page, b.evs)
	}
	h := s.ranks[0].host().tree
	assert.Len(t, m["GPU"], s.ranks[0].cache.size/page, "GPU pages the events leave = the GPU cache")
	assert.Len(t, m["CPU_PINNED"], h.size/page, "host pages the events leave = the host pool")
	assert.Len(t, m, 2, "no other medium")
	// Every page the events say the host holds, it holds (its path matches in the pool).
	var paths [][]uint32
	collect(h.root, nil, &paths)
	held := map[string]bool{}
	for _, p := range paths {
		for end := page; end <= len(p); end += page {
			held[fmt.Sprint(p[:end])] = true
		}
	}
	assert.Equal(t, held, m["CPU_PINNED"])
}

// collect appends the path of every node below x (prefix: x's path).
func collect(x *node, prefix []uint32, out *[][]uint32) {
	for _, k := range x.children {
		p := append(slices.Clone(prefix), k.n.key...)
		*out = append(*out, p)
		collect(k.n, p, out)
	}
}

// A flush empties both tiers with one AllBlocksCleared; the config refuses bad values.
func TestHostTierFlushAndConfig(t *testing.T) {
	t.Parallel()
	rec := &kvRecorder{}
	s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), PageSize: 4, MaxTotalTokens: 40,
		HostCacheTokens: 64, KVEvents: rec.hook})
	c := &cluster{t: t, single: s, now: epoch, check: true}
	for i, p := range [][]uint32{prompt(100, 16), prompt(900, 28)} {
		s.Submit(c.now, Req{Room: uint64(i + 1), Rank: -1, Prompt: p, MaxNew: 1})
		c.runAll()
	}
	require.Equal(t, 16, s.ranks[0].host().tree.size)
	n := len(rec.batches)
	require.True(t, s.FlushCache())
	assert.Zero(t, s.ranks[0].host().tree.size)
	assert.Equal(t, []KVEvent{cleared}, rec.batches[n].evs)

	for _, bad := range []Config{{HostCacheTokens: -1}, {HostCacheBandwidth: -1}} {
		bad.Role, bad.Profile = RoleUnified, testProfile()
		_, err := New(bad)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "host cache")
	}
	a := ServerArgs{HiCacheRatio: 2, HiCacheBandwidth: 25}
	cfg := a.Apply(Config{Profile: testProfile()})
	assert.Equal(t, 200_000, cfg.HostCacheTokens, "--hicache-ratio times the device pool")
	assert.Equal(t, 25e9, cfg.HostCacheBandwidth)
	require.ErrorContains(t, ServerArgs{HiCacheRatio: -1}.Validate(), "--hicache-ratio")
}

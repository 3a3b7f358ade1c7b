package kvindex

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func stored(hs ...Hash) Event  { return Event{Kind: BlockStored, Hashes: hs, BlockSize: 16} }
func removed(hs ...Hash) Event { return Event{Kind: BlockRemoved, Hashes: hs} }

// fresh returns an index with targets a and b, both subscribed (not stale).
func fresh(ttl time.Duration) (*Index, TargetID, TargetID) {
	x := New(Config{PendingTTL: ttl})
	a, b := x.Target("http://a:1@0"), x.Target("http://a:1@1")
	x.SetStale(a, false)
	x.SetStale(b, false)
	return x, a, b
}

func TestTargetInterning(t *testing.T) {
	t.Parallel()
	x := New(Config{})
	a := x.Target("a")
	require.Equal(t, a, x.Target("a"))
	b := x.Target("b")
	require.NotEqual(t, a, b)
	require.Equal(t, "b", x.name(b))
	require.True(t, x.stale(a), "a new target has no view yet")
	require.True(t, x.stale(TargetID(99)), "unknown targets are stale")
	require.Equal(t, Stats{Stale: true}, x.Stats(TargetID(99)))
	x.RemoveTarget(a)
	require.Equal(t, a, x.Target("a"), "a name keeps its id")
}

func TestApplyMatch(t *testing.T) {
	t.Parallel()
	x, a, b := fresh(0)
	chain := []Hash{1, 2, 3, 4}
	x.Apply(a, []Event{stored(1, 2), stored(3)}, t0)
	x.Apply(b, []Event{stored(1), stored(3, 4)}, t0) // b lacks block 2: only 1 counts
	require.Equal(t, []int{3, 1}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0))
	// Order and duplicates of ids are kept; dst is appended to.
	require.Equal(t, []int{7, 1, 3, 1}, x.matchOrZero([]int{7}, chain, []TargetID{b, a, b}, t0))
	require.Equal(t, []int{0}, x.matchOrZero(nil, []Hash{9, 1}, []TargetID{a}, t0), "the chain's first block is missing")
	require.Equal(t, []int{0, 0}, x.matchOrZero(nil, nil, []TargetID{a, b}, t0))

	st := x.Stats(a)
	require.Equal(t, Stats{Blocks: 3, Events: 2, BlocksStored: 3}, st)

	// Storing again is idempotent for the block count.
	x.Apply(a, []Event{stored(1)}, t0)
	require.Equal(t, 3, x.Stats(a).Blocks)

	// Remove: a loses block 2, so its match stops after block 1; b unaffected.
	x.Apply(a, []Event{removed(2, 77)}, t0)
	require.Equal(t, []int{1, 1}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0))
	require.False(t, x.holds(a, 2))
	require.True(t, x.holds(a, 3))
	require.Equal(t, Stats{Blocks: 2, Events: 4, BlocksStored: 4, BlocksRemoved: 2}, x.Stats(a))
	require.True(t, x.holds(b, 1), "b's copy of a shared block survives a's removal")

	// Another medium (the host tier) is not a device hit.
	x.Apply(a, []Event{{Kind: BlockStored, Hashes: []Hash{2}, Medium: "CPU_PINNED"}}, t0)
	require.False(t, x.holds(a, 2))
	require.True(t, x.holdsOn(TierHost, a, 2))
	x.Apply(a, []Event{{Kind: BlockStored, Hashes: []Hash{2}, Medium: "GPU"}}, t0)
	require.Equal(t, []int{3}, x.matchOrZero(nil, chain, []TargetID{a}, t0), "block 4 was never a's")
}

func TestClearAndStale(t *testing.T) {
	t.Parallel()
	x, a, b := fresh(0)
	chain := []Hash{1, 2}
	x.Apply(a, []Event{stored(1, 2)}, t0)
	x.Apply(b, []Event{stored(1, 2)}, t0)

	x.SetStale(a, true)
	require.True(t, x.Stats(a).Stale)
	require.Equal(t, []int{0, 2}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0), "a stale target matches 0")
	x.Apply(a, []Event{stored(3)}, t0) // still applied while stale
	require.True(t, x.holds(a, 3))

	x.Apply(a, []Event{{Kind: AllBlocksCleared}}, t0)
	require.False(t, x.stale(a), "a clear rebuilds the view")
	require.Equal(t, []int{0, 2}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0))
	require.Equal(t, 0, x.Stats(a).Blocks)
	require.Equal(t, uint64(1), x.Stats(a).Clears)
	require.True(t, x.holds(b, 1), "a clear is one target's")
	x.Apply(a, []Event{stored(1)}, t0)
	require.Equal(t, []int{1, 2}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0))

	x.RemoveTarget(b)
	require.True(t, x.stale(b))
	require.Equal(t, Stats{Stale: true}, x.Stats(b))
	require.False(t, x.holds(b, 1))
	require.True(t, x.holds(a, 1))
}

func TestPending(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	x, a, b := fresh(ttl)
	chain := []Hash{1, 2, 3}
	x.Apply(a, []Event{stored(1)}, t0)

	x.AddPending(a, chain, t0)
	require.Equal(t, 2, x.Pending(a), "held blocks are not made pending")
	require.Equal(t, []int{3, 0}, x.matchOrZero(nil, chain, []TargetID{a, b}, t0))
	require.Equal(t, []int{3}, x.matchOrZero(nil, chain, []TargetID{a}, t0.Add(ttl-time.Nanosecond)))
	require.Equal(t, []int{1}, x.matchOrZero(nil, chain, []TargetID{a}, t0.Add(ttl)), "expired at now+TTL")

	// The store resolves the pending entry: after it, the block is held, not pending.
	x.AddPending(b, chain, t0)
	x.Apply(b, []Event{stored(1, 2)}, t0.Add(time.Second))
	require.Equal(t, 1, x.Pending(b))
	require.Equal(t, []int{3}, x.matchOrZero(nil, chain, []TargetID{b}, t0.Add(time.Second)))
	// Past the TTL the stored blocks still count, the unstored one no longer does.
	require.Equal(t, []int{2}, x.matchOrZero(nil, chain, []TargetID{b}, t0.Add(time.Hour)))
	// A removal after a dropped pending entry is an ordinary removal.
	x.Apply(b, []Event{removed(2)}, t0.Add(time.Hour))
	require.Equal(t, []int{1}, x.matchOrZero(nil, chain, []TargetID{b}, t0.Add(time.Hour)))
	require.Zero(t, x.Pending(b), "the apply swept the expired entry")

	// Stale targets take no pending entries and match 0 even with some.
	x.AddPending(a, []Hash{8}, t0)
	x.SetStale(a, true)
	require.Equal(t, []int{0}, x.matchOrZero(nil, []Hash{8}, []TargetID{a}, t0))
	x.AddPending(a, []Hash{9}, t0)
	x.SetStale(a, false)
	require.Equal(t, []int{0}, x.matchOrZero(nil, []Hash{9}, []TargetID{a}, t0))
	require.Equal(t, []int{1}, x.matchOrZero(nil, []Hash{8}, []TargetID{a}, t0))

	// TTL 0: no overlay.
	y, c, _ := fresh(0)
	y.AddPending(c, chain, t0)
	require.Zero(t, y.Pending(c))
	require.Equal(t, []int{0}, y.matchOrZero(nil, chain, []TargetID{c}, t0))
}

// TestManyTargets crosses the 64-target word boundary.
func TestManyTargets(t *testing.T) {
	t.Parallel()
	x := New(Config{PendingTTL: time.Second})
	var ids []TargetID
	for i := range 200 {
		id := x.Target(fmt.Sprintf("t%d", i))
		x.SetStale(id, false)
		ids = append(ids, id)
	}
	chain := []Hash{10, 11, 12, 13, 14}
	want := make([]int, len(ids))
	for i, id := range ids {
		n := i % 6 // target i holds the first n blocks
		if n > 0 {
			x.Apply(id, []Event{stored(chain[:n]...)}, t0)
		}
		want[i] = n
	}
	x.AddPending(ids[130], chain, t0)
	want[130] = 5
	require.Equal(t, want, x.matchOrZero(nil, chain, ids, t0))
	x.Apply(ids[199], []Event{{Kind: AllBlocksCleared}}, t0)
	want[199] = 0
	require.Equal(t, want, x.matchOrZero(nil, chain, ids, t0))
	require.Equal(t, 5, x.Stats(ids[197]).Blocks)
}

// TestConcurrent runs appliers and matchers at once (for -race).
func TestConcurrent(t *testing.T) {
	t.Parallel()
	x := New(Config{PendingTTL: time.Second})
	chain := AppendBlockHashes(nil, make([]uint32, 64*16), 16, "")
	ids := []TargetID{x.Target("a"), x.Target("b"), x.Target("c")}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.SetStale(id, false)
			for i := range chain {
				x.Apply(id, []Event{stored(chain[i]), storedOn("CPU_PINNED", chain[i])}, t0)
				if i%8 == 0 {
					x.Apply(id, []Event{removed(chain[i])}, t0) // no medium: every tier
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var dst []int
		var tiers []TierMatch
		for range 200 {
			dst = x.matchOrZero(dst[:0], chain, ids, t0)
			tiers = x.MatchTiersOrStale(tiers[:0], chain, ids, t0)
			x.AddPending(ids[0], chain[:4], t0)
			_ = x.Stats(ids[1])
		}
	}()
	wg.Wait()
	require.Equal(t, []int{0, 0, 0}, x.matchOrZero(nil, chain, ids, t0.Add(time.Hour)), "block 0 was removed everywhere")
	require.Equal(t, len(chain)-len(chain)/8, x.Stats(ids[2]).Blocks)
	require.Equal(t, len(chain)-len(chain)/8, x.Stats(ids[2]).HostBlocks)
	require.Equal(t, []TierMatch{{}, {}, {}}, x.MatchTiersOrStale(nil, chain, ids, t0.Add(time.Hour)))
}

func TestMatchOrStale(t *testing.T) {
	t.Parallel()
	x, a, b := fresh(0)
	x.Apply(a, []Event{stored(1, 2)}, t0)
	x.SetStale(b, true)
	require.Equal(t, []int{2, -1, -1}, x.MatchOrStale(nil, []Hash{1, 2}, []TargetID{a, b, TargetID(50)}, t0))
	require.Equal(t, []int{2, 0, 0}, x.matchOrZero(nil, []Hash{1, 2}, []TargetID{a, b, TargetID(50)}, t0))
}

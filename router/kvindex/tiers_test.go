package kvindex

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func storedOn(medium string, hs ...Hash) Event {
	return Event{Kind: BlockStored, Hashes: hs, BlockSize: 16, Medium: medium}
}
func removedFrom(medium string, hs ...Hash) Event {
	return Event{Kind: BlockRemoved, Hashes: hs, Medium: medium}
}

// HiCache's life of a block: stored on the GPU, backed up to the host, evicted from the GPU
// (the host copy stays: a host hit), loaded back (a GPU hit again), then gone from both.
func TestTiersFollowHiCache(t *testing.T) {
	t.Parallel()
	x, a, b := fresh(0)
	chain := []Hash{1, 2, 3, 4}
	tiers := func() []TierMatch { return x.MatchTiersOrStale(nil, chain, []TargetID{a, b}, t0) }

	x.Apply(a, []Event{storedOn("GPU", 1, 2, 3, 4)}, t0)
	x.Apply(a, []Event{storedOn("CPU_PINNED", 1, 2, 3, 4)}, t0) // write-through backup
	require.Equal(t, []TierMatch{{GPU: 4}, {}}, tiers())
	require.Equal(t, Stats{Blocks: 4, HostBlocks: 4, Events: 2, BlocksStored: 8}, x.Stats(a))

	x.Apply(a, []Event{removedFrom("GPU", 4, 3)}, t0) // device eviction, leaf first
	require.Equal(t, []TierMatch{{GPU: 2, Host: 2}, {}}, tiers(), "the evicted blocks are host hits")
	require.Equal(t, []int{2, 0}, x.MatchOrStale(nil, chain, []TargetID{a, b}, t0), "the device match ignores the host")
	require.True(t, x.holdsOn(TierHost, a, 3))
	require.False(t, x.holds(a, 3))

	x.Apply(a, []Event{storedOn("GPU", 3)}, t0) // load-back of one block
	require.Equal(t, []TierMatch{{GPU: 3, Host: 1}, {}}, tiers())

	x.Apply(a, []Event{removedFrom("CPU_PINNED", 4)}, t0) // host eviction
	require.Equal(t, []TierMatch{{GPU: 3}, {}}, tiers())
	require.Equal(t, 3, x.Stats(a).HostBlocks)

	// b under write-back: the device removal arrives before the host store; both orders
	// converge.
	x.Apply(b, []Event{storedOn("", 1, 2), removedFrom("GPU", 2), storedOn("CPU_PINNED", 2)}, t0)
	require.Equal(t, TierMatch{GPU: 1, Host: 1}, tiers()[1])

	x.Apply(a, []Event{{Kind: AllBlocksCleared}}, t0)
	require.Equal(t, TierMatch{}, tiers()[0])
	st := x.Stats(a)
	require.Zero(t, st.Blocks+st.HostBlocks+st.StorageBlocks, "a clear drops every tier")
}

func TestTierMedia(t *testing.T) {
	t.Parallel()
	x, a, _ := fresh(0)
	chain := []Hash{1, 2}
	m := func() TierMatch { return x.MatchTiersOrStale(nil, chain, []TargetID{a}, t0)[0] }

	x.Apply(a, []Event{storedOn("CPU", 1), storedOn("cpu_pinned", 2)}, t0) // older builds' "CPU"; any case
	require.Equal(t, TierMatch{Host: 2}, m())

	x.Apply(a, []Event{storedOn("DISK", 1, 2), storedOn("EXTERNAL", 1)}, t0)
	require.Equal(t, 3, x.Stats(a).StorageBlocks, "storage tiers are kept")
	require.Equal(t, TierMatch{Host: 2}, m(), "but not matched")

	x.Apply(a, []Event{storedOn("NVRAM", 1)}, t0)
	require.Equal(t, Stats{HostBlocks: 2, StorageBlocks: 3, Events: 5, BlocksStored: 5}, x.Stats(a),
		"a store on a medium this build does not know is dropped")

	x.Apply(a, []Event{removedFrom("DISK", 1)}, t0)
	require.Equal(t, 2, x.Stats(a).StorageBlocks, "a removal clears its own tier only")
	require.Equal(t, TierMatch{Host: 2}, m())

	x.Apply(a, []Event{removedFrom("", 1)}, t0)
	require.Equal(t, TierMatch{}, m(), "a removal without a medium clears every tier")
	require.Equal(t, Stats{HostBlocks: 1, StorageBlocks: 1, Events: 7, BlocksStored: 5, BlocksRemoved: 2}, x.Stats(a))

	x.Apply(a, []Event{removedFrom("NVRAM", 2)}, t0)
	require.Equal(t, 0, x.Stats(a).HostBlocks+x.Stats(a).StorageBlocks, "so does one on an unknown medium")
}

func TestTierMatchPendingAndStale(t *testing.T) {
	t.Parallel()
	x, a, b := fresh(time.Second)
	chain := []Hash{1, 2, 3}
	x.Apply(a, []Event{storedOn("CPU_PINNED", 1, 2, 3)}, t0)
	x.AddPending(a, chain[:1], t0)
	require.Equal(t, []TierMatch{{GPU: 1, Host: 2}}, x.MatchTiersOrStale(nil, chain, []TargetID{a}, t0),
		"a pending block counts as on the GPU")
	x.SetStale(b, true)
	require.Equal(t, []TierMatch{{GPU: 1, Host: 2}, {GPU: -1}, {GPU: -1}},
		x.MatchTiersOrStale(nil, chain, []TargetID{a, b, TargetID(42)}, t0), "stale and unknown targets")
}

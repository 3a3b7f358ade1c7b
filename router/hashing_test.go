package router

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func consistentHashing(factor float64) *ConsistentHashing {
	return &ConsistentHashing{LoadFactor: factor, rng: rand.New(rand.NewPCG(1, 2))}
}

// keyPick returns the name of the target key goes to.
func keyPick(t *testing.T, p *ConsistentHashing, ts []*Target, key string) (string, Reason) {
	t.Helper()
	pk, err := p.Pick(epoch, &Request{RoutingKey: key}, ts)
	require.NoError(t, err)
	return ts[pk.Index].Name(), pk.Reason
}

// Every request of a key goes to one target, the same for two policy instances (two router
// replicas, whatever order they were given the targets in), and the keys spread over all
// targets.
func TestConsistentHashingSameTargetAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b := consistentHashing(0), consistentHashing(0)
	ts := mkTargets(0, 0, 0, 0)
	// The other replica registered the workers in another order.
	other := []*Target{ts[2], ts[0], ts[3], ts[1]}
	perTarget := map[string]int{}
	for k := range 400 {
		key := fmt.Sprintf("conversation-%d", k)
		na, ra := keyPick(t, a, ts, key)
		nb, _ := keyPick(t, b, other, key)
		require.Equal(t, na, nb, "key %s", key)
		again, _ := keyPick(t, a, ts, key)
		require.Equal(t, na, again, "key %s", key)
		assert.Equal(t, ReasonRoutingKey, ra)
		perTarget[na]++
	}
	require.Len(t, perTarget, 4)
	for name, n := range perTarget {
		assert.InDelta(t, 100, n, 40, "%s holds %d of 400 keys", name, n)
	}
}

// Removing one of four workers moves only its own keys (about a quarter), none to it; a
// worker unavailable for a while (breaker, health) gets its keys back when it returns.
func TestConsistentHashingRemapsOnlyTheMovedShare(t *testing.T) {
	t.Parallel()
	p := consistentHashing(0)
	ts := mkTargets(0, 0, 0, 0)
	const keys = 2000
	before := make([]string, keys)
	for k := range keys {
		before[k], _ = keyPick(t, p, ts, fmt.Sprint("user-", k))
	}
	gone := ts[1].Name()
	p.RemoveTarget(gone)
	rest := []*Target{ts[0], ts[2], ts[3]}
	moved := 0
	for k := range keys {
		now, _ := keyPick(t, p, rest, fmt.Sprint("user-", k))
		require.NotEqual(t, gone, now)
		if before[k] != gone {
			require.Equal(t, before[k], now, "a key of a worker that stayed moved")
		} else {
			moved++
		}
	}
	assert.InDelta(t, 0.25, float64(moved)/keys, 0.05, "share of keys remapped")

	// Unavailable (not removed): its keys go elsewhere meanwhile and come back.
	q := consistentHashing(0)
	for k := range keys {
		before[k], _ = keyPick(t, q, ts, fmt.Sprint("user-", k))
	}
	for k := range keys {
		now, _ := keyPick(t, q, rest, fmt.Sprint("user-", k))
		require.NotEqual(t, gone, now)
	}
	for k := range keys {
		now, _ := keyPick(t, q, ts, fmt.Sprint("user-", k))
		require.Equal(t, before[k], now)
	}
}

// A hot key spills to the next worker on the ring once its own is at the bound (load factor ×
// mean load, plus one), and comes back when the load falls; with no bound it never spills.
func TestConsistentHashingBoundedLoadSpills(t *testing.T) {
	t.Parallel()
	ts := mkTargets(0, 0, 0, 0)
	p := consistentHashing(1.25)
	home, reason := keyPick(t, p, ts, "hot")
	require.Equal(t, ReasonRoutingKey, reason)
	var h *Target
	for _, x := range ts {
		if x.Name() == home {
			h = x
		}
	}
	// Bound with loads (L, 0, 0, 0): ceil(1.25·(L+1)/4). At L=1 the bound is 1: spill.
	h.load.Store(1)
	spilled, reason := keyPick(t, p, ts, "hot")
	assert.NotEqual(t, home, spilled)
	assert.Equal(t, ReasonKeySpilled, reason)
	// The spill target is the same every time (the next on the ring), not a random one.
	again, _ := keyPick(t, p, ts, "hot")
	assert.Equal(t, spilled, again)
	// Loads (4, 3, 3, 3): bound ceil(1.25·14/4) = 5 > 4: home again.
	for _, x := range ts {
		x.load.Store(3)
	}
	h.load.Store(4)
	back, reason := keyPick(t, p, ts, "hot")
	assert.Equal(t, home, back)
	assert.Equal(t, ReasonRoutingKey, reason)

	unbounded := consistentHashing(0)
	h.load.Store(1000)
	stays, _ := keyPick(t, unbounded, ts, "hot")
	assert.Equal(t, home, stays)
}

// Without a key, a request goes to a random target (smg's rule), and says so.
func TestConsistentHashingWithoutKeyIsRandom(t *testing.T) {
	t.Parallel()
	p := consistentHashing(1.25)
	ts := mkTargets(0, 0, 0)
	seen := map[int]bool{}
	for range 60 {
		pk, err := p.Pick(epoch, &Request{Text: "no key"}, ts)
		require.NoError(t, err)
		assert.Equal(t, ReasonNoRoutingKey, pk.Reason)
		seen[pk.Index] = true
	}
	assert.Len(t, seen, 3)
}

func TestHashLoadFactorValidated(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.HashLoadFactor = 0.5
	require.ErrorContains(t, c.Validate(), "--hash-load-factor 0.5 must be 0 (no bound) or ≥ 1")
	c.HashLoadFactor = 0
	require.NoError(t, c.Validate())
}

package router

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func manual(mode string, idle time.Duration) *Manual {
	return &Manual{MaxIdle: idle, AssignMode: mode, rng: rand.New(rand.NewPCG(3, 4))}
}

func manualPick(t *testing.T, p *Manual, now time.Time, ts []*Target, key string) (*Target, Reason) {
	t.Helper()
	pk, err := p.Pick(now, &Request{RoutingKey: key}, ts)
	require.NoError(t, err)
	return ts[pk.Index], pk.Reason
}

// except returns ts without x.
func except(ts []*Target, x *Target) []*Target {
	var out []*Target
	for _, t := range ts {
		if t != x {
			out = append(out, t)
		}
	}
	return out
}

// A key sticks to the target it was assigned; when that target leaves rotation the key moves
// (to a new target), and back to its previous one when the new one leaves in turn.
func TestManualStickyMovesAndComesBack(t *testing.T) {
	t.Parallel()
	p := manual(AssignRandom, time.Hour)
	ts := mkTargets(0, 0, 0)
	first, reason := manualPick(t, p, epoch, ts, "k")
	assert.Equal(t, ReasonKeyAssigned, reason)
	for range 10 {
		again, reason := manualPick(t, p, epoch, ts, "k")
		require.Same(t, first, again)
		require.Equal(t, ReasonRoutingKey, reason)
	}
	second, reason := manualPick(t, p, epoch, except(ts, first), "k")
	assert.NotSame(t, first, second)
	assert.Equal(t, ReasonKeyMoved, reason)
	// Back in rotation: the key stays on its new target (it moves only when it must)...
	stay, _ := manualPick(t, p, epoch, ts, "k")
	assert.Same(t, second, stay)
	// ...and when that one leaves, it returns to the one before.
	back, reason := manualPick(t, p, epoch, except(ts, second), "k")
	assert.Same(t, first, back)
	assert.Equal(t, ReasonKeyMoved, reason)
}

// A key idle for --max-idle-secs is forgotten, on its next request and by Evict.
func TestManualForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	p := manual(AssignMinGroup, time.Minute)
	ts := mkTargets(0, 0)
	a, _ := manualPick(t, p, epoch, ts, "a")
	b, _ := manualPick(t, p, epoch, ts, "b")
	require.NotSame(t, a, b, "min_group spreads the keys")
	_, reason := manualPick(t, p, epoch.Add(59*time.Second), ts, "a")
	assert.Equal(t, ReasonRoutingKey, reason)
	_, reason = manualPick(t, p, epoch.Add(121*time.Second), ts, "a")
	assert.Equal(t, ReasonKeyAssigned, reason, "idle 62 s > 60 s: assigned anew")
	p.Evict()
	assert.Len(t, p.keys, 1, "b, idle 121 s, evicted; a just used")
	assert.Equal(t, 1, p.groups[a]+p.groups[b], "the group counts follow")
}

// min_group gives new keys to the target with the fewest; min_load to the least loaded.
func TestManualAssignmentModes(t *testing.T) {
	t.Parallel()
	ts := mkTargets(0, 0, 0, 0)
	p := manual(AssignMinGroup, 0)
	count := map[*Target]int{}
	for k := range 40 {
		x, _ := manualPick(t, p, epoch, ts, fmt.Sprint("key-", k))
		count[x]++
	}
	for _, x := range ts {
		assert.Equal(t, 10, count[x])
	}
	loaded := mkTargets(5, 3, 0, 4)
	q := manual(AssignMinLoad, 0)
	x, _ := manualPick(t, q, epoch, loaded, "new")
	assert.Same(t, loaded[2], x)
}

// A removed worker's keys go to their previous target, or are assigned anew.
func TestManualRemoveTarget(t *testing.T) {
	t.Parallel()
	p := manual(AssignMinGroup, 0)
	ts := mkTargets(0, 0)
	a, _ := manualPick(t, p, epoch, ts, "k")
	p.RemoveTarget(a.Name())
	x, reason := manualPick(t, p, epoch, except(ts, a), "k")
	assert.NotSame(t, a, x)
	assert.Equal(t, ReasonKeyAssigned, reason)
}

func TestManualSettingsValidated(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.AssignmentMode = "round_robin"
	require.ErrorContains(t, c.Validate(), `--assignment-mode "round_robin" is not random, min_load or min_group`)
	c.AssignmentMode, c.MaxIdleSecs = AssignMinLoad, -1
	require.ErrorContains(t, c.Validate(), "--max-idle-secs -1 must be ≥ 0")
}

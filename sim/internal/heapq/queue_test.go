package heapq

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Queue pops in the order one Heap of the same pushes does, whether PushLate's times come
// in order or not, and with Clear between rounds.
func TestQueuePopsInHeapOrder(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 2))
		var q Queue[int]
		var ref Heap[int]
		now, n := int64(0), 0
		for round := range 3 {
			for range 2000 {
				if q.Len() > 0 && rng.IntN(3) == 0 {
					require.Equal(t, ref.Min().V, q.Min().V, "seed %d round %d: min", seed, round)
					e, r := q.Pop(), ref.Pop()
					require.Equal(t, r.At, e.At, "seed %d round %d", seed, round)
					require.Equal(t, r.V, e.V, "seed %d round %d", seed, round)
					now = e.At
					continue
				}
				n++
				if rng.IntN(2) == 0 {
					at := now + rng.Int64N(8)
					q.Push(at, n)
					ref.Push(at, n)
				} else { // mostly in order, sometimes before the last one
					at := now + 4 - rng.Int64N(2)*rng.Int64N(3)
					q.PushLate(at, n)
					ref.Push(at, n)
				}
				require.Equal(t, ref.Len(), q.Len())
			}
			for q.Len() > 0 {
				e, r := q.Pop(), ref.Pop()
				require.Equal(t, r.V, e.V, "seed %d round %d: drain", seed, round)
			}
			assert.Zero(t, ref.Len())
			q.Push(now, -1)
			q.PushLate(now, -2)
			q.Clear()
			assert.Zero(t, q.Len(), "cleared")
		}
	}
}

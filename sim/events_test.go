package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim/internal/heapq"
)

// The event queue pops in the order one heap of every event would: by time, then push order,
// whichever of its lines (heap, hop FIFO, wake-ups) an event went to — hops pushed out of time
// order and wake-ups at the times of other events included.
func TestQueuePopsInHeapOrder(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var q queue
		var ref heapq.Heap[int] // the push number, in one heap
		type pushed struct {
			kind evKind
			srv  int32
		}
		var all []pushed
		now, popped := int64(0), 0
		for step := 0; step < 3000; step++ {
			if q.Len() > 0 && rng.IntN(3) == 0 { // pop one
				e := q.Pop()
				r := ref.Pop()
				require.Equal(t, r.At, e.At, "seed %d pop %d: time", seed, popped)
				p := all[r.V]
				require.Equal(t, p.kind, e.V.kind, "seed %d pop %d: event", seed, popped)
				require.Equal(t, p.srv, e.V.srv, "seed %d pop %d: event", seed, popped)
				now = e.At
				popped++
				continue
			}
			n := len(all)
			switch rng.IntN(3) {
			case 0: // any time from now on, few distinct ones (ties)
				at := now + rng.Int64N(8)
				q.Push(at, event{kind: evSend, srv: int32(n)})
				ref.Push(at, n)
				all = append(all, pushed{evSend, int32(n)})
			case 1: // a wake-up
				at := now + rng.Int64N(8)
				q.Push(at, event{kind: evWake, srv: int32(n)})
				ref.Push(at, n)
				all = append(all, pushed{evWake, int32(n)})
			default: // a hop: mostly in time order, sometimes before the last one
				at := now + 3 - rng.Int64N(2)*rng.Int64N(3)
				q.pushHop(at, event{kind: evLegEnd, srv: int32(n)})
				ref.Push(at, n)
				all = append(all, pushed{evLegEnd, int32(n)})
			}
		}
		for q.Len() > 0 {
			e, r := q.Pop(), ref.Pop()
			require.Equal(t, r.At, e.At)
			require.Equal(t, all[r.V].srv, e.V.srv)
		}
		assert.Zero(t, ref.Len())
	}
}

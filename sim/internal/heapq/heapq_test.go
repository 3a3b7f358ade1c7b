package heapq

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPushPopOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		at   []int64
		want []string // values in pop order
	}{
		{"empty", nil, nil},
		{"one", []int64{5}, []string{"a"}},
		{"by time", []int64{3, 1, 2}, []string{"b", "c", "a"}},
		{"equal times in push order", []int64{7, 7, 7}, []string{"a", "b", "c"}},
		{"ties after earlier", []int64{2, 1, 2, 1}, []string{"b", "d", "a", "c"}},
		{"negative times first", []int64{0, -4, 9}, []string{"b", "a", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h Heap[string]
			for i, at := range tc.at {
				h.Push(at, string(rune('a'+i)))
			}
			var got []string
			for h.Len() > 0 {
				got = append(got, h.Pop().V)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPushSeqOrdersTiesByCallerSeq(t *testing.T) {
	t.Parallel()
	var h Heap[string]
	h.PushSeq(1, 9, "late")
	h.PushSeq(1, 2, "early")
	h.PushSeq(0, 50, "first")
	assert.Equal(t, "first", h.Pop().V)
	assert.Equal(t, "early", h.Pop().V)
	assert.Equal(t, "late", h.Pop().V)
}

type item struct {
	id  int
	idx int
}

// TestRandomAgainstSort mixes Push, Pop, Remove and Fix with index tracking through Moved and
// checks every pop against a sorted model of the same keys.
func TestRandomAgainstSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	h := Heap[*item]{Moved: func(v *item, i int) { v.idx = i }}
	type key struct {
		at  int64
		seq uint64
	}
	model := map[*item]key{}
	nextSeq := uint64(0)
	earliest := func() *item {
		var best *item
		for it, k := range model {
			if b := model[best]; best == nil || k.at < b.at || k.at == b.at && k.seq < b.seq {
				best = it
			}
		}
		return best
	}
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(model) == 0:
			it := &item{id: step}
			at := int64(rng.IntN(50))
			if rng.IntN(2) == 0 {
				h.Push(at, it)
				nextSeq++
				model[it] = key{at, nextSeq}
			} else {
				seq := 1<<32 + uint64(step) // distinct from Push's
				h.PushSeq(at, seq, it)
				model[it] = key{at, seq}
			}
		case op < 7:
			want := earliest()
			e := h.Pop()
			require.Same(t, want, e.V, "step %d", step)
			require.Equal(t, model[want].at, e.At)
			require.Equal(t, -1, e.V.idx)
			delete(model, want)
		case op < 8:
			for it := range model {
				e := h.Remove(it.idx)
				require.Same(t, it, e.V)
				require.Equal(t, -1, it.idx)
				delete(model, it)
				break
			}
		default:
			for it, k := range model {
				k.at = int64(rng.IntN(50))
				h.Fix(it.idx, k.at)
				model[it] = k
				break
			}
		}
		require.Equal(t, len(model), h.Len())
		for i := range h.Len() {
			if h.Entry(i).V.idx != i {
				t.Fatalf("step %d: Moved left index %d at slot %d", step, h.Entry(i).V.idx, i)
			}
			if i > 0 && h.Less(i, (i-1)/2) {
				t.Fatalf("step %d: heap order broken at %d", step, i)
			}
		}
	}
}

func TestClearKeepsSequence(t *testing.T) {
	t.Parallel()
	var h Heap[int]
	h.Push(1, 1)
	h.Push(1, 2)
	h.Clear()
	assert.Equal(t, 0, h.Len())
	h.Push(1, 3)
	assert.Equal(t, uint64(3), h.Min().Seq, "a cleared heap does not reuse sequence numbers")
}

// BenchmarkPushPop is the event queue's pattern: a steady population, each pop followed by a
// push a little later in time.
func BenchmarkPushPop(b *testing.B) {
	// ev is sized like the simulator's event (a kind and three pointers): only its size matters
	// here, so its fields are blank.
	type ev struct {
		_       uint8
		_, _, _ *int
	}
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run("size="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			rng := rand.New(rand.NewPCG(1, 1))
			var h Heap[ev]
			for range n {
				h.Push(int64(rng.IntN(1_000_000)), ev{})
			}
			for b.Loop() {
				e := h.Pop()
				h.Push(e.At+int64(rng.IntN(1_000_000)), e.V)
			}
		})
	}
}

package heapq

// Entry is one element of a Heap: a value under its key (At, Seq).
type Entry[T any] struct {
	At  int64  // primary key: virtual nanoseconds, an access counter…
	Seq uint64 // tie-break: push order (Push) or the caller's (PushSeq)
	V   T
}

// before orders entries by (At, Seq).
func (e *Entry[T]) before(f *Entry[T]) bool {
	return e.At < f.At || e.At == f.At && e.Seq < f.Seq
}

// Heap is a binary min-heap of entries ordered by (At, Seq). The zero value is an empty heap.
// Not safe for concurrent use.
type Heap[T any] struct {
	// Moved, when set, is called with a value and its new index each time the value moves in
	// the heap (Push included), and with -1 when it leaves: it lets a caller that Removes or
	// Fixes by index know where its values are. Nil: nobody tracks them.
	Moved func(v T, i int)
	s     []Entry[T]
	seq   uint64 // the last Seq Push stamped
}

// Len is the number of entries.
func (h *Heap[T]) Len() int { return len(h.s) }

// Min returns the earliest entry, valid until the heap changes; the heap must not be empty.
func (h *Heap[T]) Min() *Entry[T] { return &h.s[0] }

// Entry returns the entry at index i (0 ≤ i < Len), valid until the heap changes. Only tests
// call Entry and Less: sim/engine's, which check the heap positions its radix cache keeps.
func (h *Heap[T]) Entry(i int) *Entry[T] { return &h.s[i] }

// Less reports whether the entry at i comes before the one at j.
func (h *Heap[T]) Less(i, j int) bool { return h.s[i].before(&h.s[j]) }

// Push adds v at time at; its Seq is one more than the previous Push's, so entries with equal
// At come out in push order.
func (h *Heap[T]) Push(at int64, v T) {
	h.seq++
	h.PushSeq(at, h.seq, v)
}

// PushSeq adds v under the key (at, seq) the caller chose; keys should be unique for the
// order of equal ones to be defined.
func (h *Heap[T]) PushSeq(at int64, seq uint64, v T) {
	h.s = append(h.s, Entry[T]{At: at, Seq: seq, V: v})
	h.up(len(h.s)-1, h.s[len(h.s)-1])
}

// Pop removes and returns the earliest entry; the heap must not be empty.
func (h *Heap[T]) Pop() Entry[T] { return h.Remove(0) }

// Remove removes and returns the entry at index i (0 ≤ i < Len).
func (h *Heap[T]) Remove(i int) Entry[T] {
	out := h.s[i]
	n := len(h.s) - 1
	last := h.s[n]
	h.s[n] = Entry[T]{} // drop pointers for the GC
	h.s = h.s[:n]
	if h.Moved != nil {
		h.Moved(out.V, -1)
	}
	if i < n {
		h.fix(i, last)
	}
	return out
}

// Fix gives the entry at index i the time at and restores the order.
func (h *Heap[T]) Fix(i int, at int64) {
	e := h.s[i]
	e.At = at
	h.fix(i, e)
}

// Clear removes every entry, keeping the capacity; Push's sequence goes on from where it was.
// Moved is not called.
func (h *Heap[T]) Clear() {
	clear(h.s)
	h.s = h.s[:0]
}

// fix places e, whose slot is i, moving it down or up as its key requires.
func (h *Heap[T]) fix(i int, e Entry[T]) {
	if !h.down(i, e) {
		h.up(i, e)
	}
}

// up moves e, whose slot is i, towards the root until its parent comes before it: parents
// move down into the hole instead of swapping, one write per level.
func (h *Heap[T]) up(i int, e Entry[T]) {
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(&h.s[p]) {
			break
		}
		h.set(i, h.s[p])
		i = p
	}
	h.set(i, e)
}

// down moves e, whose slot is i, towards the leaves until no child comes before it, and
// reports whether it moved.
func (h *Heap[T]) down(i int, e Entry[T]) bool {
	start, n := i, len(h.s)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.s[r].before(&h.s[l]) {
			m = r
		}
		if !h.s[m].before(&e) {
			break
		}
		h.set(i, h.s[m])
		i = m
	}
	h.set(i, e)
	return i > start
}

func (h *Heap[T]) set(i int, e Entry[T]) {
	h.s[i] = e
	if h.Moved != nil {
		h.Moved(e.V, i)
	}
}

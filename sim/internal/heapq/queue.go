package heapq

// Queue is a Heap with a FIFO beside it for the entries a caller pushes in order (PushLate):
// an event a fixed delay after now, pushed as the clock goes, comes no earlier than the one
// pushed before it, so the FIFO holds them in (At, Seq) order without a sift, and Pop takes
// the earlier of the two heads. Push and PushLate stamp one sequence, so the order is the one
// a single Heap of every entry would give. The zero value is empty. Not safe for concurrent
// use.
type Queue[T any] struct {
	h    Heap[T]
	fifo []Entry[T] // in (At, Seq) order from head on
	head int
	seq  uint64 // the last Seq stamped
}

// Next stamps and returns the next Seq, for a caller that keeps entries of the same order
// elsewhere (a heap of its own).
func (q *Queue[T]) Next() uint64 {
	q.seq++
	return q.seq
}

// Push adds v at at.
func (q *Queue[T]) Push(at int64, v T) { q.h.PushSeq(at, q.Next(), v) }

// PushLate adds v at at, which should be no earlier than the At of the last entry PushLate
// queued and still holds (else v goes to the heap, as Push).
func (q *Queue[T]) PushLate(at int64, v T) {
	if n := len(q.fifo); n > q.head && at < q.fifo[n-1].At {
		q.Push(at, v)
		return
	}
	if q.head == len(q.fifo) {
		q.fifo, q.head = q.fifo[:0], 0
	} else if q.head >= 1024 && 2*q.head >= len(q.fifo) { // move the live part down
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo, q.head = q.fifo[:n], 0
	}
	q.fifo = append(q.fifo, Entry[T]{At: at, Seq: q.Next(), V: v})
}

// Len is the number of entries.
func (q *Queue[T]) Len() int { return q.h.Len() + len(q.fifo) - q.head }

// Min returns the earliest entry, valid until the queue changes; the queue must not be
// empty.
func (q *Queue[T]) Min() *Entry[T] {
	if q.fifoFirst() {
		return &q.fifo[q.head]
	}
	return q.h.Min()
}

// Pop removes and returns the earliest entry; the queue must not be empty.
func (q *Queue[T]) Pop() Entry[T] {
	if q.fifoFirst() {
		e := q.fifo[q.head]
		q.fifo[q.head] = Entry[T]{} // drop pointers for the GC
		q.head++
		return e
	}
	return q.h.Pop()
}

// fifoFirst reports whether the earliest entry is the FIFO's head (else the heap's).
func (q *Queue[T]) fifoFirst() bool {
	return q.head < len(q.fifo) && (q.h.Len() == 0 || q.fifo[q.head].before(q.h.Min()))
}

// Clear removes every entry, keeping the capacity; the sequence goes on.
func (q *Queue[T]) Clear() {
	q.h.Clear()
	clear(q.fifo)
	q.fifo, q.head = q.fifo[:0], 0
}

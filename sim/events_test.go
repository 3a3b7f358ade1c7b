package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The event queue's wake-ups, in a heap of their own, come out among the other events by time,
// then push order, as one heap of every event would give them: before a later-pushed event at
// their time, after an earlier-pushed one, and a hop pushed out of time order still in place.
func TestQueueOrdersWakeUpsAmongEvents(t *testing.T) {
	t.Parallel()
	var q queue
	q.Push(10, event{kind: evSend, srv: 1})
	q.Push(10, event{kind: evWake, srv: 2})
	q.pushHop(10, event{kind: evLegEnd, srv: 3})
	q.Push(5, event{kind: evWake, srv: 4})
	q.pushHop(12, event{kind: evLegEnd, srv: 5})
	q.pushHop(7, event{kind: evLegEnd, srv: 6}) // before the last hop: the heap takes it
	q.Push(12, event{kind: evWake, srv: 7})
	q.Push(10, event{kind: evWake, srv: 8})
	assert.Equal(t, 8, q.Len())
	var got []int32
	var at []int64
	for q.Len() > 0 {
		e := q.Pop()
		got = append(got, e.V.srv)
		at = append(at, e.At)
		if e.V.srv == 2 || e.V.srv == 4 || e.V.srv == 7 || e.V.srv == 8 {
			assert.Equal(t, evWake, e.V.kind, "server %d", e.V.srv)
		}
	}
	assert.Equal(t, []int32{4, 6, 1, 2, 3, 8, 5, 7}, got)
	assert.Equal(t, []int64{5, 7, 10, 10, 10, 10, 12, 12}, at)
}

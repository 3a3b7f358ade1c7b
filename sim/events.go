package sim

import (
	"unsafe"

	"github.com/pdrouter/pdrouter/sim/internal/heapq"
)

// evKind says what an event does when it fires.
type evKind uint8

const (
	evWake         evKind = iota + 1 // server srv's next engine event is due: Advance it
	evSend                           // conversation conv sends its pending turn (client side)
	evArrive                         // request req reaches the router: first attempt
	evRetry                          // request req is routed again after a failed attempt
	evSubmit                         // attempt att reaches its worker(s): Submit
	evHandshake                      // the decode side of att registered: Handshake to the prefill server
	evKVArrived                      // att's KV and first token reach the decode server: KVArrived
	evLegEnd                         // the router sees leg role of att end (ok or failed)
	evClientEnd                      // the client receives the end of req's response
	evArrival                        // open loop: the next arrival of the level
	evTick                           // Router.Tick, every second of virtual time
	evProbe                          // health probes of every worker
	evKill                           // server srv dies
	evRestart                        // server srv, killed, restarts with empty caches
	evKVBatch                        // KV-event batch kv reaches router replica srv
	evLoadPoll                       // router replica srv polls every server's engine load
	evLoadReport                     // the answer of load poll slot srv reaches its replica
	evDirect                         // direct load srv (Config.Direct) reaches its worker
	evQueueTimeout                   // request req's --queue-timeout-secs ends, if it still waits for admission
)

// event is what happens at one instant of the event queue (heapq.Heap[event]: the time is
// the entry's At, virtual nanoseconds since the epoch).
type event struct {
	kind evKind
	ok   bool  // evLegEnd: the leg succeeded
	role uint8 // evLegEnd: router.Role of the leg
	srv  int32 // evWake, evKill, evRestart: server index; evKVBatch, evLoadPoll: replica index; evLoadReport: poll slot; evDirect: Config.Direct index
	// p is what the event is about, one pointer whose type the kind says (conv, kv, req and
	// att read it): four typed pointer fields made an entry of the event queue 56 bytes, where
	// a heap operation copies entries at every level, and an interface 40; a bare pointer
	// makes it 32 (half a cache line) and spares the type check of every read.
	p unsafe.Pointer
}

// conv is the conversation of an evSend.
func (e *event) conv() *conv { return (*conv)(e.p) }

// kv is the batch of an evKVBatch.
func (e *event) kv() *kvBatch { return (*kvBatch)(e.p) }

// req is the request of an evArrive, evRetry, evClientEnd or evQueueTimeout.
func (e *event) req() *request { return (*request)(e.p) }

// att is the attempt of an evSubmit, evHandshake, evKVArrived or evLegEnd.
func (e *event) att() *attempt { return (*attempt)(e.p) }

// queue is the event queue, by (time, push order). Beside the heap of events at any time it
// keeps two cheaper lines, for the two kinds that are most of a run's events: a FIFO for the
// events a network hop away (pushHop: now + the fixed latency, pushed in time order, so they
// need no sift: heapq.Queue), a third of all events; and a heap of their own for the servers'
// wake-ups (Push of an evWake, which carries only its server), over half, with entries a
// server index wide: a small heap, which stays in the cache, where the main heap holds every
// conversation's next turn. All share one push counter, and Pop takes the earlier of the two
// heads, so the order is the single heap's (a 1M-request run's event loop spent about 2 s
// pushing and popping the single heap, and about 1 s in the queue).
type queue struct {
	q     heapq.Queue[event]
	wakes heapq.Heap[int32] // evWake events by server index, under q's sequence
}

// Push schedules e at at.
func (q *queue) Push(at int64, e event) {
	if e.kind == evWake {
		q.wakes.PushSeq(at, q.q.Next(), e.srv)
		return
	}
	q.q.Push(at, e)
}

// pushHop schedules e at at, which is usually no earlier than the last event pushHop queued
// (else it goes to the heap).
func (q *queue) pushHop(at int64, e event) { q.q.PushLate(at, e) }

// Len is the number of events queued.
func (q *queue) Len() int { return q.q.Len() + q.wakes.Len() }

// Pop removes and returns the earliest event (by time, then push order). The queue must not be
// empty.
func (q *queue) Pop() heapq.Entry[event] {
	if q.wakes.Len() > 0 && (q.q.Len() == 0 || wakeFirst(q.wakes.Min(), q.q.Min())) {
		w := q.wakes.Pop()
		return heapq.Entry[event]{At: w.At, Seq: w.Seq, V: event{kind: evWake, srv: w.V}}
	}
	return q.q.Pop()
}

// wakeFirst reports whether wake-up w comes before event e.
func wakeFirst(w *heapq.Entry[int32], e *heapq.Entry[event]) bool {
	return w.At < e.At || w.At == e.At && w.Seq < e.Seq
}

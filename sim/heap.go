package sim

// evKind says what an event does when it fires.
type evKind uint8

const (
	evWake      evKind = iota + 1 // server srv's next engine event is due: Advance it
	evSend                        // conversation conv sends its pending turn (client side)
	evArrive                      // request req reaches the router: first attempt
	evRetry                       // request req is routed again after a failed attempt
	evSubmit                      // attempt att reaches its worker(s): Submit
	evHandshake                   // the decode side of att registered: Handshake to the prefill server
	evKVArrived                   // att's KV and first token reach the decode server: KVArrived
	evLegEnd                      // the router sees leg role of att end (ok or failed)
	evClientEnd                   // the client receives the end of req's response
	evArrival                     // open loop: the next arrival of the level
	evTick                        // Router.Tick, every second of virtual time
	evProbe                       // health probes of every worker
	evKill                        // server srv dies
)

// event is one entry of the heap. Times are virtual nanoseconds since the epoch.
type event struct {
	at   int64
	seq  uint64
	kind evKind
	ok   bool  // evLegEnd: the leg succeeded
	role uint8 // evLegEnd: router.Role of the leg
	srv  int32 // evWake, evKill: server index
	conv *conv
	req  *request
	att  *attempt
}

// eventHeap is a binary min-heap of events ordered by (at, seq): a typed heap, because
// container/heap boxes every element into an interface.
type eventHeap struct {
	h   []event
	seq uint64
}

func (q *eventHeap) len() int { return len(q.h) }

func (q *eventHeap) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// push adds e, stamping its sequence number.
func (q *eventHeap) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// pop removes and returns the earliest event; the heap must not be empty.
func (q *eventHeap) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = event{} // drop pointers for the GC
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

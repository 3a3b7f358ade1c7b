package sim

import "unsafe"

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

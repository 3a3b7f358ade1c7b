package engine

import (
	"time"

	"github.com/pdrouter/pdrouter/sim/internal/heapq"
)

// rank is one DP rank: its KV pool, prefix cache and scheduler queues.
type rank struct {
	id       int
	capacity int    // max_total_num_tokens
	cache    *radix // nil on decode servers (their KV comes from the prefill side)
	dcache   *radix // decode servers with DecodeRadixCache: the prompts served, for later rooms
	private  int    // KV tokens held by requests outside the tree: invariant cache.size + private ≤ capacity

	waiting   fifo       // prefill queue (prefill, unified) or admission queue (decode)
	staged    fifo       // prefill queue: reached the scheduler during the step in flight (Server.enqueue)
	prealloc  fifo       // decode: waiting for a KV reservation
	retracted fifo       // decode: retracted from the running batch, waiting for KV again (FIFO)
	running   []*request // decode batch (decode, unified), in admission order
	chunked   *request   // the request whose prefill continues in the next step
	batch     []chunk    // the prefill step in progress
	stepKind  uint8
	stepEnd   time.Time

	n [QueueInflight + 1]int // live requests per queue

	// The load report's running sums (RankLoad).
	nRun    int       // requests in the running sums (inRun): SGLang's running batch
	bootTok int       // Σ prompt tokens of the bootstrap queue (prefill)
	preTok  int       // Σ prompt tokens of the prealloc queue (decode)
	gen     genWindow // decoded tokens over the last second

	promptTokens, cachedTokens int64 // prefix-hit accounting of admitted requests
	hostHit                    int64 // of cachedTokens, those loaded back from the host tier
	batchHit, batchNew         int64 // SGLang's per-batch hit accounting (formPrefillBatch)
	retractions                int

	pendingInsert []*request // prefilled, prompt not yet matchable (overlap lag)
	inBatch       [][]uint32 // orderWaiting's scratch: leading tokens of picked prompts
	stepTokens    int        // the step in progress: new tokens (prefill) or batch size (decode)
	mixed         []*request // the running requests decoding inside the prefill step in progress (Config.MixedChunk)

	// SGLang's admission state (scheduler.py, schedule_policy.py PrefillAdder).
	ratio      float64    // new_token_ratio: the share of their remaining outputs running requests are charged
	runRemain  int64      // Σ over rk.running of min(max new − generated, ClipMaxNewTokens)
	runSeq     int64      // Σ over rk.running of prompt + generated (the decode side's retractable tokens)
	full       bool       // batch_is_full: admission stopped for memory or count; retried when the running batch shrinks
	recomputed int64      // tokens prefilled again after a retraction
	order      []*request // formDecode's scratch: the retraction order
	link       link       // prefill: the rank's KV link

	// KV events (kvevents.go).
	decodeSteps int  // decode steps run (SGLang's forward_ct_decode), for the publish cadence
	polled      bool // prefill: a room left the inflight queue since the last publish

	// Decode-side admission (decode.go preallocate).
	runMax        int   // largest prompt + min(max new, clip) in the running batch (stale: recompute)
	runMaxN       int   // running rooms holding runMax
	runMaxStale   bool  // runMax's last holder left
	nRetracted    int   // rooms in retracted (their queue counts as waiting)
	retractedNeed int64 // Σ over them of prompt + generated + ReservedDecodeTokens
}

// chunk is one request's share of a prefill step.
type chunk struct {
	r *request
	n int
}

const (
	stepNone uint8 = iota
	stepPrefill
	stepDecode
)

// tree is the rank's prefix cache sharing its KV pool: the prefill/unified cache, or the
// decode radix cache; nil when it has none.
func (rk *rank) tree() *radix {
	if rk.cache != nil {
		return rk.cache
	}
	return rk.dcache
}

// evictable is the KV held by unreferenced cache nodes (0 without a tree).
func (rk *rank) evictable() int {
	if t := rk.tree(); t != nil {
		return t.evictable
	}
	return 0
}

// free is the KV the rank could hand out without evicting.
func (rk *rank) free() int {
	f := rk.capacity - rk.private
	if t := rk.tree(); t != nil {
		f -= t.size
	}
	return f
}

// reserve takes need tokens of KV for a request, evicting unreferenced cache leaves if needed.
func (rk *rank) reserve(need int) bool {
	f := rk.free()
	if t := rk.tree(); f < need && t != nil && f+t.evictable >= need {
		t.evict(need - f)
		f = rk.free()
	}
	if f < need {
		return false
	}
	rk.private += need
	return true
}

// fifo is a queue of requests with lazy deletion: entries of ended requests are skipped.
type fifo struct {
	items []*request
	head  int
}

func (q *fifo) push(r *request) { q.items = append(q.items, r) }

// peek returns the first live request, dropping ended ones.
func (q *fifo) peek() *request {
	for q.head < len(q.items) {
		if r := q.items[q.head]; !r.done {
			return r
		}
		q.pop()
	}
	return nil
}

// remove takes out the item at index i (≥ head), keeping the order of the others, and
// returns the index of the item that followed it (pop may compact the slice).
func (q *fifo) remove(i int) int {
	if i == q.head {
		q.pop()
		return q.head
	}
	copy(q.items[i:], q.items[i+1:])
	q.items[len(q.items)-1] = nil
	q.items = q.items[:len(q.items)-1]
	return i
}

func (q *fifo) pop() {
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// Timers: a min-heap by (at, seq); entries are validated when they fire (lazy cancellation).
const (
	tTimeout  uint8 = iota + 1 // bootstrap timeout (prefill: no Handshake since Submit; decode: no KVArrived since preallocation)
	tTransfer                  // prefill: KV transfer of the room completes
	tStuck                     // prefill with NeverSignalKV: the transfer gives up
	tToken                     // Constant profile: the room's next token is due
	tEarly                     // an early Handshake is forgotten
	tArrive                    // Profile.HostOverhead: the request reaches the scheduler
)

type timer struct {
	at   time.Time
	kind uint8
	r    *request
	room uint64
}

// timerHeap orders timers by time, then by push order, so equal times fire deterministically.
// The key is the time in Unix nanoseconds: the order of Before for the engine's times
// (1678–2262), on the wall clock when a real-time driver's times carry a monotonic reading.
// The deadlines BootstrapTimeout after now (pushDeadline: one or two a request, nearly all
// dropped unfired when they come up) arrive in time order and queue without a sift
// (heapq.Queue).
type timerHeap struct{ heapq.Queue[timer] }

func (h *timerHeap) push(t timer) { h.Push(t.at.UnixNano(), t) }

// pushDeadline is push of a timer BootstrapTimeout after the server's current time.
func (h *timerHeap) pushDeadline(t timer) { h.PushLate(t.at.UnixNano(), t) }

func (h *timerHeap) pop() timer { return h.Pop().V }

// genWindow counts a rank's decoded tokens per GenWindowSlot of server time over the last
// GenWindowSlots slots (RankLoad.GenThroughput). Slots are aligned on Unix time, so the
// count does not depend on when the driver calls.
type genWindow struct {
	tok  [GenWindowSlots]int64 // tokens per slot, ring-indexed by slot number
	last int64                 // slot number of the newest count
}

func genSlotOf(t time.Time) int64 {
	ns, w := t.UnixNano(), int64(GenWindowSlot)
	k := ns / w
	if ns%w < 0 {
		k--
	}
	return k
}

func genRing(k int64) int { return int((k%GenWindowSlots + GenWindowSlots) % GenWindowSlots) }

// add counts n tokens produced at t (times do not decrease).
func (g *genWindow) add(t time.Time, n int) {
	k := genSlotOf(t)
	if k > g.last {
		if k-g.last >= GenWindowSlots {
			clear(g.tok[:])
		} else {
			for j := g.last + 1; j <= k; j++ {
				g.tok[genRing(j)] = 0
			}
		}
		g.last = k
	}
	g.tok[genRing(g.last)] += int64(n)
}

// rate is the tokens per second from the start of the slot GenWindowSlots−1 before now's to
// now.
func (g *genWindow) rate(now time.Time) float64 {
	k := genSlotOf(now)
	lo := k - GenWindowSlots + 1
	var n int64
	for j := max(lo, g.last-GenWindowSlots+1); j <= min(k, g.last); j++ {
		n += g.tok[genRing(j)]
	}
	if n == 0 {
		return 0
	}
	return float64(n) / now.Sub(time.Unix(0, lo*int64(GenWindowSlot))).Seconds()
}

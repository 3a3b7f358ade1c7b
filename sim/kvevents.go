package sim

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"time"
	"unsafe"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// KV-event delivery (Routing.KVEvents on). Each server whose role routes with cache_aware
// publishes its ranks' radix-cache changes at SGLang's cadence (engine.Config.KVEvents); the
// simulator hashes each batch once, as SGLang does (kvindex's block-hash chain at the server's
// page size), and hands it to every router replica after that replica's own draw of
// Routing.KVEventsDelay, through the event queue: a replica's subscription is one ZeroMQ SUB per
// (worker, rank), so its batches of one rank arrive in order (a later draw never overtakes an
// earlier batch). Each replica applies what it receives to its own index exactly as the live
// subscriber does (router/kvevents/subscriber.go stream.handle):
//   - the first batch of a subscription clears the target and makes it fresh;
//   - a batch whose sequence number skips one (a batch lost with Routing.KVEventsLoss) is a gap:
//     without a replay endpoint the target goes stale (cache_aware routes it on the tree) and
//     the batch is applied; an AllBlocksCleared in a later batch makes it fresh again.
// Not modelled: the replay endpoint (a gap is never recovered), publisher restarts (simulated
// servers are killed, never restarted) and SGLang's LoadStat topic.

// kvPendingTTL is how long a routed request counts as cached on its target before the target's
// own events say so: serve's value (router/server/kvrouting.go kvPendingTTL).
const kvPendingTTL = 2 * time.Second

// kvStream is one (server, rank) publisher and every replica's subscription to it.
type kvStream struct {
	name string // the router target it feeds: url@rank (DP-aware) or url
	seq  int64  // the next batch's sequence number
	subs []kvSub
}

// kvSub is one replica's subscription to a stream.
type kvSub struct {
	id          kvindex.TargetID
	established bool  // a batch arrived since the subscription started
	next        int64 // the sequence number expected next
	lastAt      int64 // delivery time of the latest batch scheduled (FIFO per stream)
}

// kvBatch is one published batch, hashed: delivered to every replica that does not lose it.
type kvBatch struct {
	st      *kvStream
	seq     int64
	events  []kvindex.Event
	cleared bool // an AllBlocksCleared is among the events
}

// KVStats count the KV-event traffic of a run (Routing.KVEvents on), summed over replicas.
type KVStats struct {
	Batches   uint64 // batches published by the engines
	Events    uint64 // events in them (a store or removal of one radix node's pages, or a clear)
	Delivered uint64 // batch deliveries applied (one per replica that received it)
	Lost      uint64 // batch deliveries lost (Routing.KVEventsLoss)
	Gaps      uint64 // sequence gaps seen by the replicas (each makes a target stale)
	// StaleTargets counts (replica, rank stream) pairs whose index view was stale at the end
	// after a gap; Silent those that never received a batch (a decode server without
	// --decode-radix-cache publishes nothing: its targets route on the tree throughout).
	StaleTargets, Silent int
}

// kvFeed is the simulator's side of the KV events: streams, the hashers and the clear event.
type kvFeed struct {
	streams [][]*kvStream     // by server index, then rank (nil: the server does not publish)
	hashers map[int]*kvHasher // by page size
	page    map[int32]int     // server index → page size
	clear   []kvindex.Event   // one AllBlocksCleared
}

// replica is one router replica.
type replica struct {
	rt  *router.Router
	ix  *kvindex.Index // nil without KV events
	rng *rand.Rand     // the replica's delay and loss draws
}

// publish is engine.Config.KVEvents of server sv: hash the batch and schedule its delivery to
// every replica.
func (x *sim) publish(sv *server, at time.Time, rank int, evs []engine.KVEvent) {
	f := x.kv
	st := f.streams[sv.idx][rank]
	b := &kvBatch{st: st, seq: st.seq, events: make([]kvindex.Event, 0, len(evs))}
	st.seq++
	h := f.hashers[f.page[sv.idx]]
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case engine.KVStored, engine.KVRemoved:
			kind := kvindex.BlockStored
			if ev.Kind == engine.KVRemoved {
				kind = kvindex.BlockRemoved
			}
			b.events = append(b.events, kvindex.Event{Kind: kind, Hashes: h.hashes(ev.Path, ev.New), BlockSize: h.page})
		case engine.KVCleared:
			b.events = append(b.events, kvindex.Event{Kind: kvindex.AllBlocksCleared})
			b.cleared = true
		}
	}
	x.stats.KV.Batches++
	x.stats.KV.Events += uint64(len(evs))
	now := x.clock.now
	pub := ns(at)
	loss := x.cfg.Routing.KVEventsLoss
	delay := x.cfg.Routing.KVEventsDelay
	for r, rep := range x.reps {
		lost := loss > 0 && rep.rng.Float64() < loss
		d := delay.draw(rep.rng)
		if lost {
			x.stats.KV.Lost++
			continue
		}
		sub := &st.subs[r]
		deliver := max(pub+d, now, sub.lastAt)
		sub.lastAt = deliver
		x.push(deliver, event{kind: evKVBatch, srv: int32(r), kv: b})
	}
}

// deliverKV applies batch b to replica r's index, as the live subscriber handles a batch.
func (x *sim) deliverKV(b *kvBatch, r int) {
	ix := x.reps[r].ix
	sub := &b.st.subs[r]
	now := x.t()
	switch {
	case !sub.established:
		sub.established = true
		ix.Apply(sub.id, x.kv.clear, now)
		ix.SetStale(sub.id, false)
	case b.seq > sub.next:
		x.stats.KV.Gaps++
		ix.SetStale(sub.id, true)
	}
	ix.Apply(sub.id, b.events, now)
	if b.cleared {
		ix.SetStale(sub.id, false)
	}
	sub.next = b.seq + 1
	x.stats.KV.Delivered++
}

// kvHasher hashes the engines' event paths into SGLang's block-hash chain at one page size. A
// radix node's pages chain from its ancestors' last digest, so the hasher remembers the digest
// at the end of every path it hashed (keyed by the path's content: the chain is a function of
// the tokens alone) and hashes only a node's own pages when its ancestors were seen before.
type kvHasher struct {
	page  int
	seed  maphash.Seed
	memo  map[pathKey][32]byte
	buf   []kvindex.Hash // backing store of the hashes handed out (a batch's events share it)
	one   [1]kvindex.Hash
	evBuf kvindex.Event
}

// pathKey identifies a token path by its length and a 64-bit hash of its content. A collision
// (two different paths of equal length with equal hashes, ~2⁻⁶⁴ per pair) would hand out a
// wrong chain; at the memo's size that is below 10⁻⁸ per run.
type pathKey struct {
	h uint64
	n int
}

// maxMemo bounds the hasher's memo; past it the memo starts over (only speed depends on it).
const maxMemo = 1 << 18

func newKVHasher(page int) *kvHasher {
	return &kvHasher{page: page, seed: maphash.MakeSeed(), memo: map[pathKey][32]byte{}}
}

func (h *kvHasher) key(path []uint32) pathKey {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(path))), 4*len(path))
	return pathKey{h: maphash.Bytes(h.seed, b), n: len(path)}
}

// next returns the digest of one page of tokens chained after prev (nil: the chain's first).
func (h *kvHasher) next(prev *[32]byte, tokens []uint32) [32]byte {
	h.evBuf = kvindex.Event{Hashes: h.one[:], Tokens: tokens, BlockSize: h.page}
	_, d := kvindex.VerifyStored(prev, h.evBuf)
	return d
}

// hashes returns the block hashes of the last n tokens of path (whole pages), chained from the
// tokens before them.
func (h *kvHasher) hashes(path []uint32, n int) []kvindex.Hash {
	anc := path[:len(path)-n]
	var prev *[32]byte
	var d [32]byte
	if len(anc) > 0 {
		k := h.key(anc)
		var ok bool
		if d, ok = h.memo[k]; !ok {
			var p *[32]byte
			for off := 0; off+h.page <= len(anc); off += h.page {
				d = h.next(p, anc[off:off+h.page])
				p = &d
			}
			h.remember(k, d)
		}
		prev = &d
	}
	if cap(h.buf)-len(h.buf) < n/h.page {
		h.buf = make([]kvindex.Hash, 0, max(4096, n/h.page))
	}
	start := len(h.buf)
	for off := len(anc); off+h.page <= len(path); off += h.page {
		d = h.next(prev, path[off:off+h.page])
		prev = &d
		h.buf = append(h.buf, kvindex.Truncate(d))
	}
	if prev != nil {
		h.remember(h.key(path), d)
	}
	return h.buf[start:len(h.buf):len(h.buf)]
}

func (h *kvHasher) remember(k pathKey, d [32]byte) {
	if len(h.memo) >= maxMemo {
		clear(h.memo)
	}
	h.memo[k] = d
}

// Seeds of the replicas: replica i's router draws from seed + i·replicaSeedStride, and its
// delay and loss draws from PCG(seed, i ^ kvSeedDomain).
const (
	replicaSeedStride = 0x5851F42D4C957F2D
	kvSeedDomain      = 0x6b766576656e7473 // "kvevents"
)

// kvRoles returns the roles whose servers publish KV events: with Routing.KVEvents on, those
// whose policy is cache_aware (serve follows exactly those: router/server/kvrouting.go).
func (x *sim) kvRoles(cfg Config) []router.Role {
	if !cfg.Routing.PreciseOn() {
		return nil
	}
	roles := []router.Role{router.Regular}
	if x.pd {
		roles = []router.Role{router.Prefill, router.Decode}
	}
	var out []router.Role
	for _, role := range roles {
		if p := x.reps[0].rt.Policy(role); p != nil && p.Name() == router.PolicyCacheAware {
			out = append(out, role)
		}
	}
	return out
}

// setupKV builds the streams of every publishing server and attaches each replica's index to
// the roles that route on it, at the page size of the role's servers.
func (x *sim) setupKV(roles []router.Role) error {
	f := x.kv
	f.streams = make([][]*kvStream, len(x.servers))
	dpAware := map[string]bool{}
	for _, t := range x.reps[0].rt.Targets() {
		if t.Rank >= 0 {
			dpAware[t.URL] = true
		}
	}
	page := map[router.Role]int{}
	for _, sv := range x.servers {
		if !slices.Contains(roles, sv.role) {
			continue
		}
		if _, ok := page[sv.role]; !ok {
			page[sv.role] = sv.cfg.PageSize
		}
		f.page[sv.idx] = sv.cfg.PageSize
		if f.hashers[sv.cfg.PageSize] == nil {
			f.hashers[sv.cfg.PageSize] = newKVHasher(sv.cfg.PageSize)
		}
		for rank := range sv.cfg.DPSize {
			name := sv.url
			if dpAware[sv.url] {
				name = router.TargetName(sv.url, rank)
			}
			st := &kvStream{name: name, subs: make([]kvSub, len(x.reps))}
			for r, rep := range x.reps {
				st.subs[r] = kvSub{id: rep.ix.Target(name), next: 0}
			}
			f.streams[sv.idx] = append(f.streams[sv.idx], st)
		}
	}
	for _, rep := range x.reps {
		for _, role := range roles {
			if err := rep.rt.UseKVIndex(role, rep.ix, page[role]); err != nil {
				return fmt.Errorf("sim: --kv-events: %w", err)
			}
		}
	}
	return nil
}

// count fills the end-of-run view counts of st.
func (f *kvFeed) count(st *KVStats, reps []*replica) {
	for _, ts := range f.streams {
		for _, s := range ts {
			for r, sub := range s.subs {
				switch {
				case !sub.established:
					st.Silent++
				case reps[r].ix.Stale(sub.id):
					st.StaleTargets++
				}
			}
		}
	}
}

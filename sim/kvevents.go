package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
	"unsafe"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/kvindex"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// KV-event delivery (Routing.KVEvents on). Each server whose role routes with cache_aware
// publishes its ranks' radix-cache changes at SGLang's cadence (engine.Config.KVEvents), and the
// simulator hands each batch to every router replica after that replica's own draw of
// Routing.KVEventsDelay, through the event queue: a replica's subscription is one ZeroMQ SUB per
// (worker, rank), so its batches of one rank arrive in order (a later draw never overtakes an
// earlier batch). Each replica applies what it receives to its own index as the live
// subscriber does, through the same sequence tracker (kvindex.SeqTracker, which
// router/kvevents' stream.handle drives too), without a replay endpoint:
//   - the first batch of a subscription clears the target and makes it fresh;
//   - a batch whose sequence number skips one (a batch lost with Routing.KVEventsLoss) is a gap:
//     the target goes stale (cache_aware routes it on the tree) and the batch is applied; an
//     AllBlocksCleared in a later batch makes it fresh again.
// The index is a kvindex.PathIndex: it keeps the token paths the engines report rather than
// their SGLang block hashes (which serve's kvindex.Index keeps) and answers every match as
// that index would answer the hashes of the same tokens, without a SHA-256 and a map entry per
// page (kvindex's TestPathIndexAnswersAsTheHashIndex holds the two to it).
// Not modelled: the replay endpoint (a gap is never recovered), publisher restarts (simulated
// servers are killed, never restarted) and SGLang's LoadStat topic.

// kvPendingTTL is how long a routed request counts as cached on its target before the target's
// own events say so: serve's value (router/server/kvrouting.go kvPendingTTL).
const kvPendingTTL = 2 * time.Second

// kvStream is one (server, rank) publisher and every replica's subscription to it.
type kvStream struct {
	name string      // the router target it feeds: url@rank (DP-aware) or url
	role router.Role // the server's
	page int         // the server's page size
	seq  int64       // the next batch's sequence number
	subs []kvSub
}

// kvSub is one replica's subscription to a stream.
type kvSub struct {
	id     kvindex.TargetID
	seq    kvindex.SeqTracker // no replay endpoint
	lastAt int64              // delivery time of the latest batch scheduled (FIFO per stream)
}

// kvBatch is one published batch: delivered to every replica that does not lose it.
type kvBatch struct {
	st      *kvStream
	seq     int64
	events  []kvindex.PathEvent // paths in buf
	buf     []uint32
	cleared bool // an AllBlocksCleared is among the events
	left    int  // deliveries still to apply; at 0 the batch goes back to the feed's pool
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

// kvFeed is the simulator's side of the KV events: the streams, the clear event and the
// batches free for reuse.
type kvFeed struct {
	streams [][]*kvStream       // by server index, then rank (nil: the server does not publish)
	clear   []kvindex.PathEvent // one AllBlocksCleared
	free    []*kvBatch
	// unheard counts, by replica and role, the role's subscriptions that have not received a
	// batch yet (nil with Routing.KVEventsLoss: a loss makes a view stale again). When a
	// role's reach 0 the replica's router drops the role's tree (router.Router.DropTree): on a
	// feed that loses nothing an established view never goes stale, so no later pick consults
	// the tree, whose upkeep was nearly a tenth of a million-request run's event loop.
	unheard []map[router.Role]int
}

// replica is one router replica.
type replica struct {
	rt  *router.Router
	ix  *kvindex.PathIndex // nil without KV events
	rng *rand.Rand         // the replica's delay and loss draws
}

// newKVFeed returns the feed of a run with KV events, and gives every replica its index.
func newKVFeed(reps []*replica) *kvFeed {
	for _, rep := range reps {
		rep.ix = kvindex.NewPathIndex(kvindex.Config{PendingTTL: kvPendingTTL})
		rep.ix.KeepTokens() // prompts (turn.PromptIDs) never change once built
	}
	return &kvFeed{clear: []kvindex.PathEvent{{Kind: kvindex.AllBlocksCleared}}}
}

// publish is engine.Config.KVEvents of server sv: copy the batch (the engine's paths are only
// valid during the call, but for views of a prompt, which never changes: those are kept, and
// an index compares its own views of the prompt with them at once) and schedule its delivery
// to every replica.
func (x *sim) publish(sv *server, at time.Time, rank int, evs []engine.KVEvent) {
	f := x.kv
	st := f.streams[sv.idx][rank]
	var b *kvBatch
	if n := len(f.free); n > 0 {
		b, f.free = f.free[n-1], f.free[:n-1]
	} else {
		b = &kvBatch{}
	}
	b.st, b.seq, b.cleared, b.left = st, st.seq, false, 0
	st.seq++
	b.buf, b.events = b.buf[:0], b.events[:0]
	for i := range evs {
		if !evs[i].PromptView {
			b.buf = append(b.buf, evs[i].Path...)
		}
	}
	off := 0
	for i := range evs {
		ev := &evs[i]
		pe := kvindex.PathEvent{New: ev.New, Medium: ev.Medium}
		switch ev.Kind {
		case engine.KVStored:
			pe.Kind = kvindex.BlockStored
		case engine.KVRemoved:
			pe.Kind = kvindex.BlockRemoved
		case engine.KVCleared:
			pe.Kind = kvindex.AllBlocksCleared
			b.cleared = true
		}
		if ev.PromptView {
			pe.Path = ev.Path
		} else {
			pe.Path = b.buf[off : off+len(ev.Path) : off+len(ev.Path)]
			off += len(ev.Path)
		}
		b.events = append(b.events, pe)
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
		b.left++
		x.push(deliver, event{kind: evKVBatch, srv: int32(r), p: unsafe.Pointer(b)})
	}
	if b.left == 0 {
		clear(b.events)
		f.free = append(f.free, b)
	}
}

// deliverKV applies batch b to replica r's index, as the live subscriber handles a batch.
func (x *sim) deliverKV(b *kvBatch, r int) {
	sub := &b.st.subs[r]
	heard := sub.seq.Established()
	sub.deliver(x.reps[r].ix, b, x.kv.clear, x.t(), &x.stats.KV)
	if u := x.kv.unheard; u != nil && !heard {
		if u[r][b.st.role]--; u[r][b.st.role] == 0 {
			if err := x.reps[r].rt.DropTree(b.st.role); err != nil {
				panic(err) // setupKV attached an index to every role it streams
			}
		}
	}
	if b.left--; b.left == 0 {
		b.st = nil
		clear(b.events) // the prompts viewed
		x.kv.free = append(x.kv.free, b)
	}
}

// deliver applies b to ix as its sequence tracker decides; clear is one AllBlocksCleared.
func (sub *kvSub) deliver(ix *kvindex.PathIndex, b *kvBatch, clear []kvindex.PathEvent, now time.Time, stats *KVStats) {
	d := sub.seq.Live(b.seq, b.cleared)
	if d.Gap {
		stats.Gaps++
	}
	if d.Clear {
		ix.Apply(sub.id, b.st.page, clear, now)
		ix.SetStale(sub.id, false)
	}
	if d.Stale {
		ix.SetStale(sub.id, true)
	}
	switch d.Op {
	case kvindex.SeqApply:
		ix.Apply(sub.id, b.st.page, b.events, now)
		if d.Fresh {
			ix.SetStale(sub.id, false)
		}
		stats.Delivered++
	case kvindex.SeqReplay:
		panic("sim: a KV-event subscription without a replay endpoint was asked to replay")
	}
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
		if p := x.reps[0].rt.Policy(role); p != nil && (p.Name() == router.PolicyCacheAware || p.Name() == router.PolicyPredictedLatency && role != router.Decode) {
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
	if x.cfg.Routing.KVEventsLoss == 0 {
		f.unheard = make([]map[router.Role]int, len(x.reps))
		for r := range f.unheard {
			f.unheard[r] = map[router.Role]int{}
		}
	}
	for _, sv := range x.servers {
		if !slices.Contains(roles, sv.role) {
			continue
		}
		if _, ok := page[sv.role]; !ok {
			page[sv.role] = sv.cfg.PageSize
		}
		for rank := range sv.cfg.DPSize {
			name := sv.url
			if dpAware[sv.url] {
				name = router.TargetName(sv.url, rank)
			}
			st := &kvStream{name: name, role: sv.role, page: sv.cfg.PageSize, subs: make([]kvSub, len(x.reps))}
			for r, rep := range x.reps {
				st.subs[r] = kvSub{id: rep.ix.Target(name)}
				if f.unheard != nil {
					f.unheard[r][sv.role]++
				}
			}
			f.streams[sv.idx] = append(f.streams[sv.idx], st)
		}
	}
	for _, rep := range x.reps {
		for _, role := range roles {
			if err := rep.rt.UseKVTokenIndex(role, rep.ix, page[role]); err != nil {
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
				case !sub.seq.Established():
					st.Silent++
				case reps[r].ix.Stale(sub.id):
					st.StaleTargets++
				}
			}
		}
	}
}

package kvindex

import (
	"math/bits"
	"strings"
	"sync"
	"time"
)

// Index layout: the blocks held are one map per 64 targets (a "word"), from block hash to a
// bitset of the word's targets holding it, so a block shared by many targets costs one entry
// and a match walks the chain once for all the targets asked about: one map lookup per block
// and word, then bit operations. Pending entries live per target (hash → expiry) and are only
// looked at for a target at a block it does not hold: that either extends its match or ends it.

// Index is the precise prefix index. It is safe for concurrent use: subscribers apply events
// from their own goroutines while the router matches under its lock. Target ids are never
// reused: a name keeps its id for the index's life, across RemoveTarget.
type Index struct {
	cfg Config

	mu      sync.RWMutex // protects everything below
	names   map[string]TargetID
	targets []target          // by TargetID
	held    []map[Hash]uint64 // by word (id/64): hash → bit id%64 set when target id holds it
}

// target is one target's state in the index.
type target struct {
	name      string
	stale     bool
	pending   map[Hash]int64 // hash → expiry (Unix ns); nil when none
	lastSweep int64          // Unix ns of the last sweep of expired pending entries
	stats     Stats          // Stale is filled in on read
}

// New returns an empty index.
func New(cfg Config) *Index { return &Index{cfg: cfg, names: map[string]TargetID{}} }

// Target returns name's handle, interning it on first use. A new target is stale (it has no
// view yet): the subscriber marks it fresh with SetStale(id, false) once its feed is
// subscribed, or an AllBlocksCleared event does.
func (x *Index) Target(name string) TargetID {
	x.mu.RLock()
	id, ok := x.names[name]
	x.mu.RUnlock()
	if ok {
		return id
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if id, ok := x.names[name]; ok {
		return id
	}
	id = TargetID(len(x.targets))
	x.names[name] = id
	x.targets = append(x.targets, target{name: name, stale: true})
	for len(x.held) <= int(id)>>6 {
		x.held = append(x.held, map[Hash]uint64{})
	}
	return id
}

func (x *Index) lookup(id TargetID) *target {
	if id < 0 || int(id) >= len(x.targets) {
		return nil
	}
	return &x.targets[id]
}

// RemoveTarget forgets a target and every block it held: its counters restart from zero and it
// is stale until a fresh view arrives. Its name keeps its id.
func (x *Index) RemoveTarget(id TargetID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.lookup(id)
	if t == nil {
		return
	}
	x.clearLocked(id)
	t.stats = Stats{}
	t.stale = true
}

// clearLocked drops every block and pending entry of id (x.mu held for writing).
func (x *Index) clearLocked(id TargetID) {
	t := &x.targets[id]
	m, bit := x.held[id>>6], uint64(1)<<(id&63)
	if t.stats.Blocks > 0 {
		for h, set := range m {
			if set&bit == 0 {
				continue
			}
			if set &^= bit; set == 0 {
				delete(m, h)
			} else {
				m[h] = set
			}
		}
	}
	t.stats.Blocks = 0
	t.pending = nil
}

// gpuMedium reports whether an event's medium is the device cache the index models. Host-tier
// copies (HiCache's "CPU", sglang mem_cache/hiradix_cache.py storing with StorageMedium.CPU)
// are ignored: a block only on the host is not a device hit.
func gpuMedium(m string) bool { return m == "" || strings.EqualFold(m, "GPU") }

// Apply applies a batch's events to a target, in order: BlockStored adds every hash in Hashes
// (and resolves the target's pending entries for them), BlockRemoved drops them,
// AllBlocksCleared drops all the target's blocks and pending entries and makes it fresh
// (not stale). Events of another medium than the GPU's are counted and otherwise ignored.
// Unknown ids are ignored. now drives the sweep of expired pending entries.
func (x *Index) Apply(id TargetID, evs []Event, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.lookup(id)
	if t == nil {
		return
	}
	m, bit := x.held[id>>6], uint64(1)<<(id&63)
	for i := range evs {
		ev := &evs[i]
		t.stats.Events++
		switch ev.Kind {
		case BlockStored:
			if !gpuMedium(ev.Medium) {
				continue
			}
			t.stats.BlocksStored += uint64(len(ev.Hashes))
			for _, h := range ev.Hashes {
				if set := m[h]; set&bit == 0 {
					m[h] = set | bit
					t.stats.Blocks++
				}
				if len(t.pending) > 0 {
					delete(t.pending, h) // the store arrived: the pending entry has served
				}
			}
		case BlockRemoved:
			if !gpuMedium(ev.Medium) {
				continue
			}
			t.stats.BlocksRemoved += uint64(len(ev.Hashes))
			for _, h := range ev.Hashes {
				set, ok := m[h]
				if !ok || set&bit == 0 {
					continue
				}
				if set &^= bit; set == 0 {
					delete(m, h)
				} else {
					m[h] = set
				}
				t.stats.Blocks--
			}
		case AllBlocksCleared:
			x.clearLocked(id)
			t.stats.Clears++
			t.stale = false
		}
	}
	x.sweepLocked(t, now.UnixNano())
}

// SetStale marks a target's view untrustworthy (a sequence gap without replay, a lost
// subscription) or trustworthy again. A stale target matches 0 blocks until it is rebuilt: an
// AllBlocksCleared event, or a fresh subscription (SetStale(id, false) after clearing it).
func (x *Index) SetStale(id TargetID, stale bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t := x.lookup(id); t != nil {
		t.stale = stale
	}
}

// MatchOrStale appends to dst, for each target in ids (in order), the number of leading blocks
// of hashes that target holds consecutively (pending entries not expired at now included) and
// returns dst. Stale and unknown targets report -1, found in the same pass and under the same
// lock, so that a caller can fall back for exactly those.
func (x *Index) MatchOrStale(dst []int, hashes []Hash, ids []TargetID, now time.Time) []int {
	return x.match(dst, hashes, ids, now, -1)
}

// match is MatchOrStale with stale and unknown targets reported as staleVal.
func (x *Index) match(dst []int, hashes []Hash, ids []TargetID, now time.Time, staleVal int) []int {
	base := len(dst)
	for range ids {
		dst = append(dst, 0)
	}
	out := dst[base:]
	x.mu.RLock()
	defer x.mu.RUnlock()

	// alive[w]: the word-w targets still matching. Small clusters fit the stack array.
	var aliveArr [4]uint64
	alive := aliveArr[:0]
	if len(x.held) > len(aliveArr) {
		alive = make([]uint64, 0, len(x.held))
	}
	alive = alive[:len(x.held)]
	live := false
	for j, id := range ids {
		if t := x.lookup(id); t != nil && !t.stale {
			alive[id>>6] |= uint64(1) << (id & 63)
			out[j] = len(hashes) // until it stops matching
			live = true
		} else {
			out[j] = staleVal
		}
	}
	usePending := x.cfg.PendingTTL > 0
	nowNs := now.UnixNano()
	for i, h := range hashes {
		if !live {
			break
		}
		live = false
		for w, a := range alive {
			if a == 0 {
				continue
			}
			miss := a &^ x.held[w][h]
			if miss != 0 && usePending {
				for rest := miss; rest != 0; rest &= rest - 1 {
					b := bits.TrailingZeros64(rest)
					if exp, ok := x.targets[w<<6|b].pending[h]; ok && exp > nowNs {
						miss &^= uint64(1) << b
					}
				}
			}
			if miss != 0 {
				a &^= miss
				alive[w] = a
				for j, id := range ids {
					if int(id)>>6 == w && miss&(uint64(1)<<(id&63)) != 0 {
						out[j] = i
					}
				}
			}
			live = live || a != 0
		}
	}
	return dst
}

// AddPending records that a request with this hash chain was routed to id at now: until the
// target's stores for those blocks arrive or PendingTTL passes, Match counts them as held.
// Blocks the target already holds are skipped; stale and unknown targets are ignored, and so is
// every call when PendingTTL is 0.
func (x *Index) AddPending(id TargetID, hashes []Hash, now time.Time) {
	if x.cfg.PendingTTL <= 0 || len(hashes) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.lookup(id)
	if t == nil || t.stale {
		return
	}
	nowNs := now.UnixNano()
	x.sweepLocked(t, nowNs)
	exp := nowNs + int64(x.cfg.PendingTTL)
	m, bit := x.held[id>>6], uint64(1)<<(id&63)
	for _, h := range hashes {
		if m[h]&bit != 0 {
			continue
		}
		if t.pending == nil {
			t.pending = make(map[Hash]int64, len(hashes))
		}
		t.pending[h] = exp
	}
}

// sweepLocked drops t's expired pending entries, at most once per PendingTTL, so that entries
// whose store never came cost memory for at most two TTLs.
func (x *Index) sweepLocked(t *target, nowNs int64) {
	ttl := int64(x.cfg.PendingTTL)
	if len(t.pending) == 0 || nowNs-t.lastSweep < ttl {
		return
	}
	t.lastSweep = nowNs
	for h, exp := range t.pending {
		if exp <= nowNs {
			delete(t.pending, h)
		}
	}
}

// Pending returns the number of pending entries id has (expired ones not yet swept included).
// Only tests call it; it is exported for router's, which check that a stale target takes no
// pending entries.
func (x *Index) Pending(id TargetID) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if t := x.lookup(id); t != nil {
		return len(t.pending)
	}
	return 0
}

// Stats returns a target's counters (an unknown target: zero counters, stale).
func (x *Index) Stats(id TargetID) Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.lookup(id)
	if t == nil {
		return Stats{Stale: true}
	}
	s := t.stats
	s.Stale = t.stale
	return s
}

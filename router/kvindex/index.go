package kvindex

import (
	"math/bits"
	"sync"
	"time"
)

// Index layout: the blocks held on a tier are one map per 64 targets (a "word"), from block
// hash to a bitset of the word's targets holding it, so a block shared by many targets costs
// one entry and a match walks the chain once for all the targets asked about: one map lookup
// per block, word and tier matched, then bit operations. Each tier (GPU, host, …; see [Tier])
// has its own maps, created when a copy first lands there. Pending entries live per target (hash → expiry) and are only
// looked at for a target at a block it does not hold: that either extends its match or ends it.

// Index is the precise prefix index. It is safe for concurrent use: subscribers apply events
// from their own goroutines while the router matches under its lock. Target ids are never
// reused: a name keeps its id for the index's life, across RemoveTarget.
type Index struct {
	cfg Config

	mu      sync.RWMutex // protects everything below
	names   map[string]TargetID
	targets []target                    // by TargetID
	held    [NumTiers][]map[Hash]uint64 // by tier, then word (id/64): hash → bit id%64 set when target id holds it there
}

// target is one target's state in the index.
type target struct {
	name      string
	stale     bool
	pending   map[Hash]int64 // hash → expiry (Unix ns); nil when none
	lastSweep int64          // Unix ns of the last sweep of expired pending entries
	stats     Stats          // Stale and the tiers' block counts are filled in on read
	blocks    [NumTiers]int  // blocks held per tier
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
	for len(x.held[TierGPU]) <= int(id)>>6 {
		x.held[TierGPU] = append(x.held[TierGPU], map[Hash]uint64{})
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

// clearLocked drops every block (on every tier) and pending entry of id (x.mu held for writing).
func (x *Index) clearLocked(id TargetID) {
	t := &x.targets[id]
	w, bit := int(id)>>6, uint64(1)<<(id&63)
	for tier := range x.held {
		if t.blocks[tier] == 0 || w >= len(x.held[tier]) {
			t.blocks[tier] = 0
			continue
		}
		m := x.held[tier][w]
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
		t.blocks[tier] = 0
	}
	t.pending = nil
}

// tierMap returns the map of tier for target word w, creating the tier's maps up to w.
func (x *Index) tierMap(tier Tier, w int) map[Hash]uint64 {
	for len(x.held[tier]) <= w {
		x.held[tier] = append(x.held[tier], map[Hash]uint64{})
	}
	return x.held[tier][w]
}

// Apply applies a batch's events to a target, in order, each on the tier its medium names
// (see [Tier]): BlockStored adds every hash in Hashes there (and, on the GPU, resolves the
// target's pending entries for them), BlockRemoved drops them from its tier (from every tier
// when the event names no medium, or one this build does not know), AllBlocksCleared drops all
// the target's blocks and pending entries and makes it fresh (not stale). A store of an
// unknown medium is counted and otherwise ignored. Unknown ids are ignored. now drives the
// sweep of expired pending entries.
func (x *Index) Apply(id TargetID, evs []Event, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.lookup(id)
	if t == nil {
		return
	}
	w, bit := int(id)>>6, uint64(1)<<(id&63)
	for i := range evs {
		ev := &evs[i]
		t.stats.Events++
		switch ev.Kind {
		case BlockStored:
			tier, ok := storeTier(ev.Medium)
			if !ok {
				continue
			}
			t.stats.BlocksStored += uint64(len(ev.Hashes))
			m := x.tierMap(tier, w)
			for _, h := range ev.Hashes {
				if set := m[h]; set&bit == 0 {
					m[h] = set | bit
					t.blocks[tier]++
				}
				if tier == TierGPU && len(t.pending) > 0 {
					delete(t.pending, h) // the store arrived: the pending entry has served
				}
			}
		case BlockRemoved:
			t.stats.BlocksRemoved += uint64(len(ev.Hashes))
			tiers := removeTiers(ev.Medium)
			for tier := range x.held {
				if tiers&(1<<tier) == 0 || w >= len(x.held[tier]) {
					continue
				}
				m := x.held[tier][w]
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
					t.blocks[tier]--
				}
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
// of hashes that target holds consecutively on the GPU (pending entries not expired at now
// included) and returns dst. Stale and unknown targets report -1, found in the same pass and
// under the same lock, so that a caller can fall back for exactly those.
func (x *Index) MatchOrStale(dst []int, hashes []Hash, ids []TargetID, now time.Time) []int {
	base := len(dst)
	for range ids {
		dst = append(dst, 0)
	}
	x.match(matchOut{out: dst[base:]}, hashes, ids, now, -1)
	return dst
}

// MatchTiersOrStale appends to dst, for each target in ids (in order), its [TierMatch] of
// hashes: the leading blocks it holds on the GPU (pending entries included), then how many
// more it holds on the GPU or in host memory. Stale and unknown targets report GPU −1.
func (x *Index) MatchTiersOrStale(dst []TierMatch, hashes []Hash, ids []TargetID, now time.Time) []TierMatch {
	base := len(dst)
	for range ids {
		dst = append(dst, TierMatch{})
	}
	x.match(matchOut{tiers: dst[base:]}, hashes, ids, now, -1)
	return dst
}

// match writes, for each target in ids, its leading blocks held on the GPU (and, with
// out.tiers, on the GPU or the host) to out; stale and unknown targets get staleVal (as GPU).
func (x *Index) match(out matchOut, hashes []Hash, ids []TargetID, now time.Time, staleVal int) {
	withTiers := out.tiers != nil
	x.mu.RLock()
	defer x.mu.RUnlock()

	// alive[w]: the word-w targets still matching on the GPU; aliveAny[w]: on the GPU or the
	// host (a superset; with tiers only). Small clusters fit the stack arrays.
	gpuHeld, hostHeld := x.held[TierGPU], x.held[TierHost]
	words := len(gpuHeld)
	var aliveArr, anyArr [4]uint64
	alive, aliveAny := aliveArr[:0], anyArr[:0]
	if words > len(aliveArr) {
		alive, aliveAny = make([]uint64, 0, words), make([]uint64, 0, words)
	}
	alive, aliveAny = alive[:words], aliveAny[:words]
	live := false
	for j, id := range ids {
		t := x.lookup(id)
		stale := t == nil || t.stale
		out.start(j, len(hashes), stale, staleVal) // until it stops matching
		if !stale {
			alive[id>>6] |= uint64(1) << (id & 63)
			if withTiers {
				aliveAny[id>>6] |= uint64(1) << (id & 63)
			}
			live = true
		}
	}
	usePending := x.cfg.PendingTTL > 0
	nowNs := now.UnixNano()
	for i, h := range hashes {
		if !live {
			break
		}
		live = false
		for w := range alive {
			a, aa := alive[w], aliveAny[w]
			if a|aa == 0 {
				continue
			}
			set := gpuHeld[w][h]
			if miss := (a | aa) &^ set; miss != 0 && usePending {
				for rest := miss; rest != 0; rest &= rest - 1 {
					b := bits.TrailingZeros64(rest)
					if exp, ok := x.targets[w<<6|b].pending[h]; ok && exp > nowNs {
						set |= uint64(1) << b
					}
				}
			}
			if m := a &^ set; m != 0 {
				a &^= m
				alive[w] = a
				out.stop(ids, m, w, i, true)
			}
			if aa != 0 {
				if w < len(hostHeld) {
					set |= hostHeld[w][h]
				}
				if m := aa &^ set; m != 0 {
					aa &^= m
					aliveAny[w] = aa
					out.stop(ids, m, w, i, false)
				}
			}
			live = live || a|aa != 0
		}
	}
	out.finish()
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
	m, bit := x.held[TierGPU][id>>6], uint64(1)<<(id&63)
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
	s.Blocks, s.HostBlocks = t.blocks[TierGPU], t.blocks[TierHost]
	s.StorageBlocks = t.blocks[TierDisk] + t.blocks[TierExternal]
	return s
}

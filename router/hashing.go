package router

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// hashVNodes is how many points each target has on a consistent_hashing ring (as vLLM's
// router): enough that removing one of a few targets moves close to its own share of keys.
const hashVNodes = 160

// ConsistentHashing routes a request with a routing key ([Request.RoutingKey]) to the target
// its key hashes to on a ring of the available targets, so that every request of a key — a
// conversation, a user — lands on one target, the same in every router replica (the ring
// depends on nothing but the targets' names) without shared state. Adding or removing a
// target moves only the keys of its share of the ring, and no key goes to a target that is
// not available.
//
// Its load is bounded (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam,
// 2018): a target takes a key's request only while its load is below LoadFactor times the mean
// load over the targets plus one; otherwise the request goes clockwise to the next target on
// the ring below it, so one hot key cannot pile onto one worker. Loads are compared as the
// other policies compare them (engine reports when fresh for every candidate, else in-flight
// counts). LoadFactor 0 never spills.
//
// A request without a key goes to a random target, as smg's consistent_hashing does.
type ConsistentHashing struct {
	LoadFactor float64
	rng        *rand.Rand

	// The ring holds every target Pick has been given until it is removed (RemoveTarget): a
	// target that is unavailable for a while keeps its points, so its keys come back to it.
	ring  []ringPoint // sorted by hash
	known map[*Target]bool
	epoch uint64 // stamps Target.pickEpoch for the Pick in progress: the targets available now
}

type ringPoint struct {
	hash uint64
	t    *Target
}

var _ Policy = (*ConsistentHashing)(nil)

// Name returns "consistent_hashing".
func (*ConsistentHashing) Name() string { return PolicyConsistentHashing }

// Pick returns the target req's key hashes to, or the next one clockwise under the load bound.
func (p *ConsistentHashing) Pick(_ time.Time, req *Request, ts []*Target) (Pick, error) {
	if req.RoutingKey == "" {
		return Pick{Index: p.rng.IntN(len(ts)), Reason: ReasonNoRoutingKey}, nil
	}
	p.epoch++
	var total int64
	for i, t := range ts {
		if !p.known[t] {
			p.add(t)
		}
		t.pickEpoch, t.pickIndex = p.epoch, i
		if p.LoadFactor > 0 {
			total += req.loads.reqs(t)
		}
	}
	bound := int64(math.MaxInt64)
	if p.LoadFactor > 0 {
		bound = int64(math.Ceil(p.LoadFactor * float64(total+1) / float64(len(ts))))
	}
	h := hashString(req.RoutingKey)
	start, _ := slices.BinarySearchFunc(p.ring, h, func(pt ringPoint, h uint64) int { return cmp.Compare(pt.hash, h) })
	first := -1
	for i := range p.ring {
		t := p.ring[(start+i)%len(p.ring)].t
		if t.pickEpoch != p.epoch { // not available now
			continue
		}
		if first < 0 {
			first = t.pickIndex
		}
		if req.loads.reqs(t) < bound {
			reason := ReasonRoutingKey
			if t.pickIndex != first {
				reason = ReasonKeySpilled
			}
			return Pick{Index: t.pickIndex, Reason: reason, Signal: req.loads.signal()}, nil
		}
	}
	// Every available target is at the bound (possible only with LoadFactor < 1): the key's own.
	return Pick{Index: first, Reason: ReasonRoutingKey, Signal: req.loads.signal()}, nil
}

// add puts t's points on the ring.
func (p *ConsistentHashing) add(t *Target) {
	if p.known == nil {
		p.known = map[*Target]bool{}
	}
	p.known[t] = true
	for v := range hashVNodes {
		p.ring = append(p.ring, ringPoint{hash: hashString(t.Name() + "#" + strconv.Itoa(v)), t: t})
	}
	// Equal hashes (a 64-bit collision) fall to the name, so that every replica orders them alike.
	slices.SortFunc(p.ring, func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return strings.Compare(a.t.Name(), b.t.Name())
	})
}

// RemoveTarget takes the named target's points off the ring: its keys move to the targets
// after them on the ring, and only those.
func (p *ConsistentHashing) RemoveTarget(name string) {
	p.ring = slices.DeleteFunc(p.ring, func(pt ringPoint) bool { return pt.t.Name() == name })
	for t := range p.known {
		if t.Name() == name {
			delete(p.known, t)
		}
	}
}

// hashString is 64-bit FNV-1a of s, finished with SplitMix64's mixer so that names differing
// in their last bytes spread over the whole ring. The same in every process and version: the
// ring must not change with a restart or across replicas.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

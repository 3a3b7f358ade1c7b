package router

import (
	"math/rand/v2"
	"time"
)

// Assignment modes of the manual policy (--assignment-mode): how a new routing key gets its
// worker.
const (
	AssignRandom   = "random"    // a random available target
	AssignMinLoad  = "min_load"  // the least loaded available target (as the other policies compare loads)
	AssignMinGroup = "min_group" // the available target holding the fewest keys
)

// Manual is smg's manual policy: a table from routing key ([Request.RoutingKey]) to the target
// it was assigned. A key's requests go to its target while that target is available; a key
// keeps two candidates, its target and the one before, so a worker that leaves rotation for a
// while hands its keys to their previous target when that one is available (else to a newly
// assigned one, AssignMode), and gets them back if the key moves again. A key idle for MaxIdle
// is forgotten. Unlike consistent_hashing, the table is this router's own: router replicas
// assign a new key each their own way (with AssignMinGroup or AssignMinLoad, to different
// targets).
//
// A request without a key goes to a random target.
type Manual struct {
	MaxIdle    time.Duration
	AssignMode string // AssignRandom ("" too), AssignMinLoad or AssignMinGroup
	rng        *rand.Rand

	keys   map[string]*manualKey
	groups map[*Target]int // keys whose target it is, for AssignMinGroup
	epoch  uint64          // stamps Target.pickEpoch for the Pick in progress
	now    time.Time       // the latest Pick's, for Evict
}

type manualKey struct {
	cand [2]*Target // the key's target, then the one before it (nil: none)
	last time.Time  // its latest request
}

var _ Policy = (*Manual)(nil)

// Name returns "manual".
func (*Manual) Name() string { return PolicyManual }

// Pick returns the key's target, moving or assigning it as Manual's doc says.
func (p *Manual) Pick(now time.Time, req *Request, ts []*Target) (Pick, error) {
	if req.RoutingKey == "" {
		return Pick{Index: p.rng.IntN(len(ts)), Reason: ReasonNoRoutingKey}, nil
	}
	p.now = now
	p.epoch++
	for i, t := range ts {
		t.pickEpoch, t.pickIndex = p.epoch, i
	}
	if p.keys == nil {
		p.keys, p.groups = map[string]*manualKey{}, map[*Target]int{}
	}
	k := p.keys[req.RoutingKey]
	if k != nil && p.MaxIdle > 0 && now.Sub(k.last) > p.MaxIdle {
		p.forget(req.RoutingKey, k)
		k = nil
	}
	if k == nil {
		k = &manualKey{}
		p.keys[req.RoutingKey] = k
	}
	k.last = now
	available := func(t *Target) bool { return t != nil && t.pickEpoch == p.epoch }
	switch {
	case available(k.cand[0]):
		return Pick{Index: k.cand[0].pickIndex, Reason: ReasonRoutingKey, Signal: req.loads.signal()}, nil
	case available(k.cand[1]):
		p.setTarget(k, k.cand[1], k.cand[0])
		return Pick{Index: k.cand[0].pickIndex, Reason: ReasonKeyMoved, Signal: req.loads.signal()}, nil
	}
	i := p.assign(req, ts)
	reason := ReasonKeyAssigned
	if k.cand[0] != nil {
		reason = ReasonKeyMoved
	}
	p.setTarget(k, ts[i], k.cand[0])
	return Pick{Index: i, Reason: reason, Signal: req.loads.signal()}, nil
}

// assign returns the index in ts of a new key's target.
func (p *Manual) assign(req *Request, ts []*Target) int {
	switch p.AssignMode {
	case AssignMinLoad:
		return leastBy(req.loads, ts)
	case AssignMinGroup:
		best := 0
		for i := 1; i < len(ts); i++ {
			if g, b := p.groups[ts[i]], p.groups[ts[best]]; g < b || g == b && req.loads.less(ts[i], ts[best]) {
				best = i
			}
		}
		return best
	}
	return p.rng.IntN(len(ts))
}

// setTarget makes t key k's target and prev the one before it.
func (p *Manual) setTarget(k *manualKey, t, prev *Target) {
	if k.cand[0] != nil {
		p.groups[k.cand[0]]--
	}
	k.cand[0], k.cand[1] = t, prev
	if t != nil {
		p.groups[t]++
	}
}

// forget drops key k from the table.
func (p *Manual) forget(key string, k *manualKey) {
	p.setTarget(k, nil, nil)
	delete(p.keys, key)
}

// Evict forgets the keys idle for MaxIdle at the latest Pick's time (the router calls it every
// --eviction-interval-secs).
func (p *Manual) Evict() {
	if p.MaxIdle <= 0 {
		return
	}
	for key, k := range p.keys {
		if p.now.Sub(k.last) > p.MaxIdle {
			p.forget(key, k)
		}
	}
}

// RemoveTarget takes the named target out of every key's candidates: their next request moves
// to the other candidate or is assigned anew.
func (p *Manual) RemoveTarget(name string) {
	gone := func(t *Target) bool { return t != nil && t.Name() == name }
	for _, k := range p.keys {
		switch {
		case gone(k.cand[0]):
			p.setTarget(k, k.cand[1], nil)
		case gone(k.cand[1]):
			k.cand[1] = nil
		}
	}
	for t := range p.groups {
		if t.Name() == name {
			delete(p.groups, t)
		}
	}
}

package kvindex

import "time"

// Queries of an Index that only tests make (serve asks MatchOrStale and Stats).

// name returns the name id was interned from ("" for an unknown id).
func (x *Index) name(id TargetID) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if t := x.lookup(id); t != nil {
		return t.name
	}
	return ""
}

// stale reports whether the target is stale (unknown targets are stale).
func (x *Index) stale(id TargetID) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := x.lookup(id)
	return t == nil || t.stale
}

// holds reports whether id holds block h on the GPU (pending entries not included).
func (x *Index) holds(id TargetID, h Hash) bool { return x.holdsOn(TierGPU, id, h) }

// holdsOn reports whether id holds block h on tier.
func (x *Index) holdsOn(tier Tier, id TargetID, h Hash) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.lookup(id) == nil || int(id)>>6 >= len(x.held[tier]) {
		return false
	}
	return x.held[tier][id>>6][h]&(uint64(1)<<(id&63)) != 0
}

// matchOrZero is MatchOrStale with stale and unknown targets matching 0.
func (x *Index) matchOrZero(dst []int, hashes []Hash, ids []TargetID, now time.Time) []int {
	base := len(dst)
	for range ids {
		dst = append(dst, 0)
	}
	x.match(matchOut{out: dst[base:]}, hashes, ids, now, 0)
	return dst
}

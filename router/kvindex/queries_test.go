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

// holds reports whether id holds block h (pending entries not included).
func (x *Index) holds(id TargetID, h Hash) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.lookup(id) == nil {
		return false
	}
	return x.held[id>>6][h]&(uint64(1)<<(id&63)) != 0
}

// matchOrZero is MatchOrStale with stale and unknown targets matching 0.
func (x *Index) matchOrZero(dst []int, hashes []Hash, ids []TargetID, now time.Time) []int {
	return x.match(dst, hashes, ids, now, 0)
}

package engine

import (
	"slices"
	"unsafe"

	"github.com/pdrouter/pdrouter/sim/internal/heapq"
)

// The radix KV cache of one rank: SGLang's RadixCache over token ids. Keys are page-aligned;
// each node holds the KV of its key's tokens. Nodes referenced by a running request are locked
// (lock > 0) along their whole path to the root; unlocked leaves are evictable, least recently
// used first (ties: oldest node). Access order is a counter, not a clock, so the cache is
// deterministic whatever the driver's time resolution.

// node is one edge of the tree with the tokens on it.
type node struct {
	key      []uint32
	parent   *node
	children []kid  // sorted by key (childKey of the first page); nil when empty
	lock     int32  // running requests referencing this node or a descendant
	pre      int32  // ≥ 0: key is a view of a prompt (insertPrompt), after pre tokens that spell the path above it; -1: the tree's own copy
	last     uint64 // access counter at the last match or insert through this node
	id       uint64 // creation order, for deterministic ties
	heapIdx  int    // position in radix.heap, -1 when not an evictable leaf (kept by heap.Moved)
}

// kid is a child under the key of its first page. A sorted slice rather than a map: a lookup
// is a binary search in one array (map lookups were 4 % of a large run), and a node with a
// child or two costs 16 bytes each, not a map.
type kid struct {
	key uint64
	n   *node
}

// find is the index of the child with key, or where it would be inserted.
func (x *node) find(key uint64) (int, bool) {
	lo, hi := 0, len(x.children)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.children[m].key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(x.children) && x.children[lo].key == key
}

// child is the child with key, or nil.
func (x *node) child(key uint64) *node {
	if i, ok := x.find(key); ok {
		return x.children[i].n
	}
	return nil
}

// radix is one rank's prefix cache. Not safe for concurrent use.
type radix struct {
	root      *node
	page      int    // tokens per page (≥ 1); keys and matches are multiples of it
	size      int    // tokens held in the tree
	gen       uint64 // bumped on every change of shape (insert, evict, reset): a match is valid while it stays
	evictable int    // tokens in unlocked nodes
	tick      uint64 // access counter
	nextID    uint64
	nodes     int
	heap      heapq.Heap[*node] // evictable leaves by (last, id)
	log       *kvLog            // KV event queue; nil when Config.KVEvents is off (nothing recorded)
	medium    string            // the events' medium: "" without a host tier, else mediumGPU or mediumHost
	spill     *hostCache        // the host tier evicted leaves move to (hostcache.go); nil: none
	pathBuf   []uint32          // path's scratch
}

func newRadix(page int) *radix {
	if page < 1 {
		page = 1
	}
	c := &radix{page: page}
	c.heap.Moved = func(x *node, i int) { x.heapIdx = i }
	c.reset()
	return c
}

// reset empties the cache (flush_cache, or a server restart).
func (c *radix) reset() {
	c.gen++
	c.root = &node{heapIdx: -1, pre: -1}
	c.size, c.evictable, c.nodes = 0, 0, 0
	c.heap.Clear()
	if c.log != nil {
		c.log.cleared()
	}
	if c.spill != nil {
		c.spill.reset()
	}
}

// childKey identifies a child by its first page: the token itself for page size 1, an FNV-1a
// hash of the page otherwise (a collision only costs a missed match: keys are compared).
func (c *radix) childKey(tok []uint32) uint64 {
	if c.page == 1 {
		return uint64(tok[0])
	}
	h := uint64(14695981039346656037)
	for _, t := range tok[:c.page] {
		h ^= uint64(t)
		h *= 1099511628211
	}
	return h
}

// commonPrefix returns the length of the common prefix of a and b, rounded down to a page.
func (c *radix) commonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	i := mismatch(a[:n], b[:n])
	return i - i%c.page
}

// mismatch returns the index of the first token where a and b (of equal length) differ, or
// their length. A prompt's path through the cache is mostly whole edges equal to it, and a
// token loop over them cost 5 % of a large run: the whole slices, then blocks of 64 tokens, are
// compared as bytes first (the runtime's vectorised memequal).
func mismatch(a, b []uint32) int {
	if len(a) == 0 || bytesOf(a) == bytesOf(b) {
		return len(a)
	}
	const block = 64
	i := 0
	for i+block <= len(a) && bytesOf(a[i:i+block]) == bytesOf(b[i:i+block]) {
		i += block
	}
	for a[i] == b[i] {
		i++
	}
	return i
}

// bytesOf views a non-empty token slice as a string of its bytes, for comparisons only.
func bytesOf(t []uint32) string {
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(t))), len(t)*4)
}

// match finds the longest cached prefix of tok (whole pages only), marks the path as accessed
// and returns its length and the node ending exactly there (a node is split if needed, so the
// caller can lock precisely the matched prefix).
func (c *radix) match(tok []uint32) (int, *node) {
	c.tick++
	x, n := c.root, 0
	for len(tok)-n >= c.page && len(x.children) > 0 {
		ch := x.child(c.childKey(tok[n:]))
		if ch == nil {
			break
		}
		l := c.commonPrefix(ch.key, tok[n:])
		if l == 0 {
			break
		}
		c.touch(ch)
		if l < len(ch.key) {
			ch = c.split(ch, l)
		}
		n += l
		x = ch
	}
	return n, x
}

// insert adds tok (its whole pages) to the cache and returns the node ending at its last whole
// page and the number of tokens newly added.
func (c *radix) insert(tok []uint32) (*node, int) { return c.insertBelow(tok, nil) }

// insertBelow is insert of tok when the path to from (nil: the root) spells tok's first tokens,
// as the node a request locked when its prompt was matched does until the prompt is cached: it
// touches that path as insert would and compares only what lies below it. A from not in the
// tree any more (reset since), or deeper than tok, is ignored.
func (c *radix) insertBelow(tok []uint32, from *node) (*node, int) {
	return c.insertFrom(tok, from, false)
}

// insertPrompt is insertBelow of a request's prompt (Req.Prompt, which never changes): the
// leaf it adds keeps a view of the prompt as its key instead of a copy (a copy per prefill
// was 3 GB of a million-request run's allocations), and the events of its run, the store and
// a later removal, have a view of the prompt as their path (KVEvent.PromptView) instead of a
// copy built from the run's ancestors.
func (c *radix) insertPrompt(prompt []uint32, from *node) (*node, int) {
	return c.insertFrom(prompt, from, true)
}

func (c *radix) insertFrom(tok []uint32, from *node, view bool) (*node, int) {
	c.gen++
	tok = tok[:len(tok)-len(tok)%c.page]
	c.tick++
	x, n := c.root, 0
	if from != nil {
		d, y := 0, from
		for ; y != nil && y != c.root; y = y.parent {
			d += len(y.key)
		}
		if y == c.root && d <= len(tok) {
			for y := from; y != c.root; y = y.parent {
				c.touch(y)
			}
			x, n = from, d
		}
	}
	for n < len(tok) {
		var ch *node
		if len(x.children) > 0 {
			ch = x.child(c.childKey(tok[n:]))
		}
		l := 0
		if ch != nil {
			l = c.commonPrefix(ch.key, tok[n:])
		}
		if l == 0 {
			if ch != nil { // hash collision on the first page: keep the old node, do not cache
				return x, 0
			}
			var path []uint32 // the leaf's path from the root, when tok may be viewed
			if view {
				path = tok[:len(tok):len(tok)]
			}
			leaf := c.newLeaf(x, tok[n:], path)
			return leaf, len(tok) - n
		}
		c.touch(ch)
		if l < len(ch.key) {
			ch = c.split(ch, l)
		}
		n += l
		x = ch
	}
	return x, 0
}

// newLeaf adds a leaf of key below parent; path, if not nil, is its path from the root in a
// prompt that never changes, ending with key: the leaf keeps key as a view (see insertPrompt).
func (c *radix) newLeaf(parent *node, key, path []uint32) *node {
	c.nextID++
	c.nodes++
	leaf := &node{parent: parent, last: c.tick, id: c.nextID, heapIdx: -1, pre: -1}
	if path != nil {
		leaf.key, leaf.pre = key[:len(key):len(key)], int32(len(path)-len(key))
	} else {
		leaf.key = append([]uint32(nil), key...)
	}
	k := c.childKey(key)
	i, _ := parent.find(k)
	parent.children = slices.Insert(parent.children, i, kid{k, leaf})
	if parent.heapIdx >= 0 {
		c.heapRemove(parent)
	}
	c.size += len(key)
	c.evictable += len(key)
	c.heapPush(leaf)
	if c.log != nil {
		if path != nil {
			c.log.recordView(KVStored, leaf, path, c.medium)
		} else {
			c.log.record(KVStored, leaf, c.medium)
		}
	}
	return leaf
}

// split cuts ch after l tokens and returns the new upper node (which takes ch's place).
func (c *radix) split(ch *node, l int) *node {
	c.nextID++
	c.nodes++
	up := &node{key: ch.key[:l:l], parent: ch.parent, lock: ch.lock, pre: ch.pre, last: ch.last, id: c.nextID, heapIdx: -1}
	if ch.pre >= 0 {
		ch.pre += int32(l)
	}
	i, _ := ch.parent.find(c.childKey(ch.key))
	ch.parent.children[i].n = up // same first page, same key
	ch.key = ch.key[l:]
	ch.parent = up
	up.children = []kid{{c.childKey(ch.key), ch}}
	return up
}

// touch marks x as just accessed.
func (c *radix) touch(x *node) {
	x.last = c.tick
	if x.heapIdx >= 0 {
		c.heap.Fix(x.heapIdx, int64(x.last))
	}
}

// lockPath makes x and its ancestors unevictable.
func (c *radix) lockPath(x *node) {
	for ; x != c.root && x != nil; x = x.parent {
		x.lock++
		if x.lock == 1 {
			c.evictable -= len(x.key)
			if x.heapIdx >= 0 {
				c.heapRemove(x)
			}
		}
	}
}

// unlockPath undoes lockPath.
func (c *radix) unlockPath(x *node) {
	for ; x != c.root && x != nil; x = x.parent {
		x.lock--
		if x.lock == 0 {
			c.evictable += len(x.key)
			if len(x.children) == 0 {
				c.heapPush(x)
			}
		}
	}
}

// evict removes least recently used unlocked leaves until at least need tokens are freed or
// nothing is evictable; it returns the tokens freed.
func (c *radix) evict(need int) int {
	c.gen++
	freed := 0
	for freed < need && c.heap.Len() > 0 {
		x := c.heap.Pop().V
		if c.log != nil {
			if x.pre >= 0 {
				c.log.recordView(KVRemoved, x, x.promptPath(), c.medium)
			} else {
				c.log.record(KVRemoved, x, c.medium)
			}
		}
		if c.spill != nil {
			c.spill.put(c.path(x))
		}
		p := x.parent
		i, _ := p.find(c.childKey(x.key))
		p.children = slices.Delete(p.children, i, i+1)
		if len(p.children) == 0 {
			p.children = nil
		}
		c.size -= len(x.key)
		c.evictable -= len(x.key)
		c.nodes--
		freed += len(x.key)
		x.parent = nil
		if p != c.root && p.lock == 0 && len(p.children) == 0 {
			c.heapPush(p)
		}
	}
	return freed
}

// path returns the tokens from the root to the end of x (scratch: valid until the next call).
func (c *radix) path(x *node) []uint32 {
	n := 0
	for y := x; y != nil; y = y.parent {
		n += len(y.key)
	}
	if cap(c.pathBuf) < n {
		c.pathBuf = make([]uint32, n)
	}
	p := c.pathBuf[:n]
	for y := x; y != nil; y = y.parent {
		n -= len(y.key)
		copy(p[n:], y.key)
	}
	return p
}

// promptPath is the path from the root to the end of x, whose key is a view of a prompt
// (x.pre ≥ 0): the view of that prompt's first pre+len(key) tokens. The prompt's array starts
// pre tokens before key's, so stepping back stays inside the one allocation key keeps alive;
// keeping the prompt's slice header on every node instead would cost 24 bytes a node where pre
// costs 4 (and a field the splits would have to carry too).
func (x *node) promptPath() []uint32 {
	n := int(x.pre) + len(x.key)
	return unsafe.Slice((*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(x.key)), -4*int(x.pre))), n)[:n:n]
}

// heapPush makes x an evictable leaf, ordered by (last, id): least recently used first, the
// older node on a tie.
func (c *radix) heapPush(x *node) { c.heap.PushSeq(int64(x.last), x.id, x) }

func (c *radix) heapRemove(x *node) { c.heap.Remove(x.heapIdx) }

package tree

import (
	"slices"
)

// Invariant the removal code relies on: a child's tenants are a subset of its parent's (Insert
// stamps whole paths, a split copies the child's marks, removals only strip a tenant from nodes
// where no child carries it). Hence a non-root node without tenants has no children.

// RemoveTenant removes tenant from every node, unlinks the nodes left without tenants and
// forgets its count. Removing an unknown tenant does nothing. A tenant inserted again later
// keeps its original place in the first-seen order.
func (t *Tree) RemoveTenant(tenant string) {
	id, ok := t.lookup(tenant)
	if !ok {
		return
	}
	t.changed()
	t.strip(t.root, id)
	t.live[id] = false
	t.chars[id] = 0
}

// strip removes id from n's subtree (n carries id), children first.
func (t *Tree) strip(n *node, id uint32) {
	for i := len(n.children) - 1; i >= 0; i-- {
		if c := n.children[i].n; c.has(id) {
			t.strip(c, id)
		}
	}
	t.unmark(n, id)
}

// unmark removes id's mark from n (which carries it and has no child carrying it) and unlinks n
// if no tenant is left on it.
func (t *Tree) unmark(n *node, id uint32) {
	i, _ := n.mark(id)
	n.marks = slices.Delete(n.marks, i, i+1)
	t.chars[id] -= int(n.runes)
	if len(n.marks) == 0 && n != t.root {
		n.marks = nil
		t.unlink(n)
	}
}

// unlink removes childless n from its parent.
func (t *Tree) unlink(n *node) {
	p := n.parent
	i := p.index(n)
	p.children = slices.Delete(p.children, i, i+1)
	if len(p.children) == 0 {
		p.children = nil
		if p != t.root {
			t.addLeaf(p)
		}
	}
	t.dropLeaf(n)
	n.parent = nil
	t.nodes--
	t.total -= int(n.runes)
	t.bytes -= len(n.edge)
}

// index is the position of child c among n's children: by pointer in a short array (not
// loading c's edge, which an eviction would otherwise read only for its key), by key otherwise.
func (n *node) index(c *node) int {
	if len(n.children) <= 16 {
		for i := range n.children {
			if n.children[i].n == c {
				return i
			}
		}
	}
	i, _ := n.find(firstKey(c.edge))
	return i
}

// childCarries reports whether any child of n carries id.
func (n *node) childCarries(id uint32) bool {
	for _, c := range n.children {
		if c.n.has(id) {
			return true
		}
	}
	return false
}

// Evict removes least-recently-used leaves of each tenant while that tenant owns more than
// maxPerTenant runes, then least-recently-used leaves of the whole tree (with all their
// tenants) while the edges hold more than maxTotal runes. A bound <= 0 is disabled. It returns
// the number of edge runes freed (the drop of TotalChars).
//
// Per tenant, a leaf is a node carrying the tenant where no child does; evicting it removes the
// tenant from the node (subtracting the edge from the tenant's count), unlinks the node if no
// tenant is left, and may make the parent a leaf for that tenant. Overall, a leaf is a node
// without children, aged by the newest stamp on it. The root is never removed, so tenants stay
// registered. Ties cannot happen between stamps of different inserts; equal stamps (a split
// copies them) are taken in depth-first order of keys.
func (t *Tree) Evict(maxPerTenant, maxTotal int) int {
	t.changed()
	before := t.total
	if maxPerTenant > 0 {
		t.evictPerTenant(maxPerTenant)
	}
	if maxTotal > 0 && t.total > maxTotal {
		t.evictTotal(maxTotal)
	}
	return before - t.total
}

func (t *Tree) evictPerTenant(limit int) {
	over := make([]bool, len(t.chars))
	some := false
	for id, c := range t.chars {
		if c > limit {
			over[id], some = true, true
		}
	}
	if !some {
		return
	}
	h := &lruHeap{}
	t.walk(func(n *node) {
		for _, m := range n.marks {
			if over[m.id] && !n.childCarries(m.id) {
				h.push(m.at, m.id, n)
			}
		}
	})
	h.init()
	for h.Len() > 0 {
		e := h.pop()
		if t.chars[e.id] <= limit {
			continue
		}
		p := e.n.parent
		t.unmark(e.n, e.id)
		if p != t.root && !p.childCarries(e.id) {
			i, _ := p.mark(e.id)
			h.add(p.marks[i].at, e.id, p)
		}
	}
}

func (t *Tree) evictTotal(limit int) {
	// Leaves never share their newest stamp (a stamp marks the nodes of one Insert's path, of
	// which one at most is a leaf), so the order of the registry does not matter.
	h := &lruHeap{entries: make([]lruEntry, 0, len(t.leaves))}
	for _, n := range t.leaves {
		h.push(newest(n), 0, n)
	}
	h.init()
	for t.total > limit && h.Len() > 0 {
		n := h.pop().n
		p := n.parent
		for _, m := range n.marks {
			t.chars[m.id] -= int(n.runes)
		}
		n.marks = nil
		t.unlink(n)
		if p != t.root && len(p.children) == 0 {
			h.add(newest(p), 0, p)
		}
	}
}

// newest is the newest stamp on n.
func newest(n *node) uint64 {
	var at uint64
	for _, m := range n.marks {
		at = max(at, m.at)
	}
	return at
}

// walk calls f on every node but the root, depth first in key order.
func (t *Tree) walk(f func(*node)) {
	var rec func(*node)
	rec = func(n *node) {
		for _, c := range n.children {
			f(c.n)
			rec(c.n)
		}
	}
	rec(t.root)
}

// lruEntry is a candidate leaf: for tenant id (per-tenant eviction) or whole (id 0).
type lruEntry struct {
	at  uint64
	seq uint64 // push order, for deterministic ties
	id  uint32
	n   *node
}

// lruHeap is a min-heap of leaves by (at, seq).
type lruHeap struct {
	entries []lruEntry
	seq     uint64
}

// push appends without restoring the heap order (callers init or add).
func (h *lruHeap) push(at uint64, id uint32, n *node) {
	h.entries = append(h.entries, lruEntry{at: at, seq: h.seq, id: id, n: n})
	h.seq++
}

// The typed heap the evictions run on: container/heap would box every popped entry and call
// Less through an interface (a third of a size trim's time in a large simulation). Keys are
// unique (seq), so any heap pops the same order. The methods below serve container/heap, which
// the tests' reference eviction uses.

// add pushes and restores the order.
func (h *lruHeap) add(at uint64, id uint32, n *node) {
	h.push(at, id, n)
	h.up(len(h.entries) - 1)
}

// init establishes the heap order.
func (h *lruHeap) init() {
	for i := len(h.entries)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// pop removes and returns the least entry.
func (h *lruHeap) pop() lruEntry {
	n := len(h.entries) - 1
	h.Swap(0, n)
	e := h.entries[n]
	h.entries = h.entries[:n]
	h.down(0)
	return e
}

func (h *lruHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.Less(i, p) {
			return
		}
		h.Swap(i, p)
		i = p
	}
}

func (h *lruHeap) down(i int) {
	n := len(h.entries)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.Less(r, l) {
			m = r
		}
		if !h.Less(m, i) {
			return
		}
		h.Swap(i, m)
		i = m
	}
}

func (h *lruHeap) Len() int { return len(h.entries) }
func (h *lruHeap) Less(i, j int) bool {
	a, b := &h.entries[i], &h.entries[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}
func (h *lruHeap) Swap(i, j int) { h.entries[i], h.entries[j] = h.entries[j], h.entries[i] }
func (h *lruHeap) Push(x any)    { h.entries = append(h.entries, x.(lruEntry)) }
func (h *lruHeap) Pop() any {
	e := h.entries[len(h.entries)-1]
	h.entries = h.entries[:len(h.entries)-1]
	return e
}

package tree

import (
	"slices"
	"strings"
)

// Tree is an approximate radix tree of routing texts, each node stamped with the tenants
// (target names) whose texts pass through it. Lengths and counts are in runes (see the package
// documentation for invalid UTF-8). The zero value is not usable; call New.
//
// Tree is not safe for concurrent use; the router guards it with its policy mutex.
type Tree struct {
	root  *node
	clock uint64 // logical LRU clock, bumped once per Insert

	ids   map[string]uint32 // tenant name → id; ids are never reused, so id order is first-seen order
	names []string          // id → tenant name
	live  []bool            // id → registered (inserted and not removed since)
	chars []int             // id → runes on edges of nodes carrying the tenant (maintained)

	total int // runes on all edges (maintained)
	bytes int // bytes of all edges (maintained)
	nodes int // nodes, root excluded (maintained)

	retain bool    // new edges are substrings of the inserted texts (RetainTexts)
	leaves []*node // every node but the root without children, in no order (node.leaf)
	gen    uint64  // bumped by every change of the tree: a cursor is valid while it stays
	cur    cursor  // the last PrefixMatch's walk, for the Insert of the same text after it
}

// cursor is where PrefixMatch stopped, so that an Insert of the same text (cache_aware matches,
// chooses a tenant, inserts) stamps the matched path instead of comparing it again.
type cursor struct {
	text string  // the text matched
	gen  uint64  // Tree.gen at the match
	path []*node // the fully matched nodes below the root, root to stop
	used int     // bytes of text their edges hold
}

// node is one edge of the tree. Children are sorted by key; marks by tenant id.
type node struct {
	edge     string // never empty except at the root; owned (cloned), not a caller's substring, unless RetainTexts
	parent   *node
	children []child
	marks    []mark
	runes    uint32 // runes in edge
	leaf     int32  // 1 + index in Tree.leaves; 0 when not there (the root, a node with children)
}

// child is a node under its key, firstKey(n.edge): a lookup reads the parent's array alone,
// not every node it passes on its way.
type child struct {
	key int32
	n   *node
}

// mark says that a tenant carries a node, and when (logical clock) it last inserted through it.
type mark struct {
	id uint32
	at uint64
}

// New returns an empty tree.
func New() *Tree {
	return &Tree{root: &node{}, ids: make(map[string]uint32)}
}

// RetainTexts makes the tree keep, for each new edge, the substring of the text Insert was given
// rather than a copy of it. It is for a caller whose texts are never modified and are held
// anyway, as the simulator's conversations are: an edge then keeps its whole text in memory
// (Bytes counts only the edges), and a later text that shares that memory (the conversation's
// next turn, the same text inserted in another tree) compares equal without reading it. The
// upper part of a split edge is still copied, so a branch point that outlives the text it was
// cut from does not hold that text. Call it before the first Insert; matches, counts and
// evictions are the same either way.
func (t *Tree) RetainTexts() { t.retain = true }

// own returns s as an edge: a copy, or s itself when the tree retains texts.
func (t *Tree) own(s string) string {
	if t.retain {
		return s
	}
	return strings.Clone(s)
}

// find is the index of the child with key, or where it would be inserted.
func (n *node) find(key int32) (int, bool) {
	lo, hi := 0, len(n.children)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.children[m].key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.children) && n.children[lo].key == key
}

// mark is the index of tenant id's mark on n, or where it would be inserted.
func (n *node) mark(id uint32) (int, bool) {
	lo, hi := 0, len(n.marks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.marks[m].id < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.marks) && n.marks[lo].id == id
}

func (n *node) has(id uint32) bool {
	_, ok := n.mark(id)
	return ok
}

// intern returns tenant's id, registering it.
func (t *Tree) intern(tenant string) uint32 {
	id, ok := t.ids[tenant]
	if !ok {
		id = uint32(len(t.names))
		tenant = strings.Clone(tenant)
		t.ids[tenant] = id
		t.names = append(t.names, tenant)
		t.live = append(t.live, false)
		t.chars = append(t.chars, 0)
	}
	t.live[id] = true
	return id
}

// lookup returns the id of a registered tenant.
func (t *Tree) lookup(tenant string) (uint32, bool) {
	id, ok := t.ids[tenant]
	return id, ok && t.live[id]
}

// Insert stamps every node on text's path, root included, with tenant and a fresh LRU stamp,
// adding the nodes and splitting the edge that text needs. Insert("", tenant) only registers
// tenant at the root.
func (t *Tree) Insert(text, tenant string) { t.InsertRunes(text, -1, tenant) }

// InsertRunes is Insert of a text whose length in runes the caller knows exactly (the count a
// range loop gives: utf8.RuneCountInString); runes < 0 is Insert. The new edge's length is then
// the rest of that count, not counted again over the text's new part.
func (t *Tree) InsertRunes(text string, runes int, tenant string) {
	id := t.intern(tenant)
	t.clock++
	now := t.clock
	n := t.root
	t.stamp(n, id, now)
	if c := &t.cur; c.gen == t.gen && c.text == text { // == is O(1) on the very same string
		for _, p := range c.path {
			t.stamp(p, id, now)
			n = p
			runes -= int(p.runes)
		}
		text = text[c.used:]
	}
	t.changed()
	for len(text) > 0 {
		key := firstKey(text)
		i, ok := n.find(key)
		if !ok {
			leaf := &node{
				edge:   t.own(text),
				parent: n,
				marks:  []mark{{id: id, at: now}},
			}
			if runes >= 0 {
				leaf.runes = uint32(runes)
			} else {
				leaf.runes = uint32(runeCount(text))
			}
			if len(n.children) == 0 && n != t.root {
				t.dropLeaf(n)
			}
			n.children = slices.Insert(n.children, i, child{key, leaf})
			t.addLeaf(leaf)
			t.nodes++
			t.total += int(leaf.runes)
			t.bytes += len(leaf.edge)
			t.chars[id] += int(leaf.runes)
			return
		}
		c := n.children[i].n
		j := commonPrefix(text, c.edge)
		if j < len(c.edge) {
			c = t.split(n, i, j)
		}
		t.stamp(c, id, now)
		text = text[j:]
		n = c
		runes -= int(c.runes)
	}
}

// changed invalidates the cursor: the tree is about to change.
func (t *Tree) changed() {
	t.gen++
	clear(t.cur.path)
	t.cur = cursor{path: t.cur.path[:0]}
}

// addLeaf registers n, which has just lost its last child or was just created, as a leaf.
func (t *Tree) addLeaf(n *node) {
	t.leaves = append(t.leaves, n)
	n.leaf = int32(len(t.leaves))
}

// dropLeaf unregisters leaf n (it is gaining a child or leaving the tree).
func (t *Tree) dropLeaf(n *node) {
	i, last := int(n.leaf)-1, len(t.leaves)-1
	m := t.leaves[last]
	t.leaves[i], m.leaf = m, int32(i+1)
	t.leaves[last] = nil
	t.leaves = t.leaves[:last]
	n.leaf = 0
}

// stamp adds or refreshes tenant id's mark on n.
func (t *Tree) stamp(n *node, id uint32, now uint64) {
	i, ok := n.mark(id)
	if ok {
		n.marks[i].at = now
		return
	}
	n.marks = slices.Insert(n.marks, i, mark{id: id, at: now})
	t.chars[id] += int(n.runes)
}

// split cuts parent.children[i]'s edge after j bytes (a rune boundary, 0 < j < len(edge)) and
// returns the new upper node, which inherits the child's tenants and stamps. Counts do not
// change: every tenant of the child carries both halves.
func (t *Tree) split(parent *node, i, j int) *node {
	c := parent.children[i].n
	mid := &node{
		edge:   strings.Clone(c.edge[:j]),
		parent: parent,
		marks:  slices.Clone(c.marks),
	}
	mid.runes = uint32(runeCount(mid.edge))
	c.edge = t.own(c.edge[j:])
	c.runes -= mid.runes
	c.parent = mid
	mid.children = []child{{firstKey(c.edge), c}}
	parent.children[i].n = mid
	t.nodes++
	return mid
}

// PrefixMatch descends from the root while edges match text; a partial edge match counts the
// shared runes and stops on that (partially matched) child. It returns the matched runes and
// the tenants carrying the stop node, appended to dst[:0] in the order the tree first saw them.
// An empty tree or empty text gives 0 and the root's tenants (every registered tenant).
// PrefixMatch does not refresh stamps and does not allocate when dst has room.
func (t *Tree) PrefixMatch(text string, dst []string) (matched int, tenants []string) {
	cur := &t.cur
	clear(cur.path)
	*cur = cursor{text: text, gen: t.gen, path: cur.path[:0]}
	n := t.root
	for len(text) > 0 {
		i, ok := n.find(firstKey(text))
		if !ok {
			break
		}
		c := n.children[i].n
		j := commonPrefix(text, c.edge)
		n = c
		if j < len(c.edge) {
			matched += runeCount(c.edge[:j])
			break
		}
		matched += int(c.runes)
		text = text[j:]
		cur.path = append(cur.path, c)
		cur.used += j
	}
	tenants = dst[:0]
	for _, m := range n.marks {
		tenants = append(tenants, t.names[m.id])
	}
	return matched, tenants
}

// TenantCounts returns, for every registered tenant (0 included), the number of runes it owns:
// the sum of the edge lengths of the nodes carrying it (shared nodes count for each tenant).
func (t *Tree) TenantCounts() map[string]int {
	m := make(map[string]int)
	for id, ok := range t.live {
		if ok {
			m[t.names[id]] = t.chars[id]
		}
	}
	return m
}

// TotalChars is the number of runes stored on all edges: shared nodes count once.
func (t *Tree) TotalChars() int { return t.total }

// Nodes is the number of nodes, root excluded.
func (t *Tree) Nodes() int { return t.nodes }

// nodeBytes is the heap a node costs beside its edge: the node itself (80 bytes), one mark
// (16), its entry in its parent's children (16) and, for a leaf, in the leaf registry (8).
const nodeBytes = 120

// Bytes estimates the heap the tree holds: its edges' bytes and nodeBytes per node (more
// tenants per node add 16 bytes each; allocation rounding is not counted).
// TestBytesEstimatesTheHeap measures it against the Go heap.
func (t *Tree) Bytes() int { return t.bytes + t.nodes*nodeBytes }

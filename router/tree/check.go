package tree

import (
	"errors"
	"fmt"
	"maps"
	"unicode/utf8"
)

// Recount walks the whole tree and recomputes what the maintained counters should be: the runes
// per registered tenant (as TenantCounts), the runes on all edges (as TotalChars) and the
// nodes (as Nodes). It costs a full walk; tests and Check use it.
func (t *Tree) Recount() (tenantChars map[string]int, totalChars, nodes int) {
	tenantChars = make(map[string]int)
	for _, m := range t.root.marks {
		tenantChars[t.names[m.id]] = 0
	}
	t.walk(func(n *node) {
		nodes++
		totalChars += runeCount(n.edge)
		for _, m := range n.marks {
			tenantChars[t.names[m.id]] += runeCount(n.edge)
		}
	})
	return tenantChars, totalChars, nodes
}

// Check returns nil iff the maintained counters equal Recount and the structure invariants
// hold: the leaf registry holds exactly the childless non-root nodes; non-root edges are non-empty and cut on rune boundaries with their cached length and
// key; children are sorted by distinct keys and point back to their parent; every non-root node
// carries a tenant, no tenant its parent lacks, with marks sorted by tenant id and stamps not in
// the future; the root carries exactly the registered tenants. It costs a full walk.
//
// Only tests call it; it stays exported (not in a _test.go file) because router's policy tests
// check the tree a cache-aware workload built.
func (t *Tree) Check() error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 10 {
			errs = append(errs, fmt.Errorf("tree: "+format, args...))
		}
	}
	if t.root.edge != "" || t.root.parent != nil {
		fail("root has edge %q or a parent", t.root.edge)
	}
	rootLive := make([]bool, len(t.live))
	for _, m := range t.root.marks {
		if int(m.id) >= len(t.live) || !t.live[m.id] {
			fail("root carries unregistered tenant id %d", m.id)
			continue
		}
		rootLive[m.id] = true
	}
	for id, ok := range t.live {
		if ok != rootLive[id] {
			fail("tenant %q registered=%v but on root=%v", t.names[id], ok, rootLive[id])
		}
		if !ok && t.chars[id] != 0 {
			fail("unregistered tenant %q has count %d", t.names[id], t.chars[id])
		}
	}
	// path holds the bytes from the root to n; cuts the byte offsets where its edges meet.
	var path []byte
	var cuts []int
	var rec func(n *node)
	leaves := 0
	rec = func(n *node) {
		if len(n.children) == 0 && n != t.root && !cutsOnRunes(string(path), cuts) {
			fail("an edge on the path %q is cut inside a rune", path)
		}
		switch isLeaf := len(n.children) == 0 && n != t.root; {
		case isLeaf && (n.leaf < 1 || int(n.leaf) > len(t.leaves) || t.leaves[n.leaf-1] != n):
			fail("leaf %q is not registered at %d", n.edge, n.leaf)
		case !isLeaf && n.leaf != 0:
			fail("node %q with %d children is registered as a leaf", n.edge, len(n.children))
		case isLeaf:
			leaves++
		}
		for i, m := range n.marks {
			if i > 0 && n.marks[i-1].id >= m.id {
				fail("marks of %q not sorted by tenant id", n.edge)
			}
			if m.at > t.clock {
				fail("stamp %d on %q is after the clock %d", m.at, n.edge, t.clock)
			}
		}
		for i, ch := range n.children {
			c := ch.n
			switch {
			case c.parent != n:
				fail("child %q does not point to its parent %q", c.edge, n.edge)
			case c.edge == "":
				fail("empty edge below %q", n.edge)
			case ch.key != firstKey(c.edge):
				fail("child %q has key %d, want %d", c.edge, ch.key, firstKey(c.edge))
			case int(c.runes) != runeCount(c.edge):
				fail("child %q caches %d runes, has %d", c.edge, c.runes, runeCount(c.edge))
			case i > 0 && n.children[i-1].key >= ch.key:
				fail("children of %q not sorted by distinct keys at %q", n.edge, c.edge)
			case len(c.marks) == 0:
				fail("node %q carries no tenant", c.edge)
			}
			for _, m := range c.marks {
				if !n.has(m.id) {
					fail("%q carries tenant %q but its parent %q does not", c.edge, t.names[m.id], n.edge)
				}
			}
			path = append(path, c.edge...)
			cuts = append(cuts, len(path))
			rec(c)
			path = path[:len(path)-len(c.edge)]
			cuts = cuts[:len(cuts)-1]
		}
	}
	rec(t.root)
	if leaves != len(t.leaves) {
		fail("%d leaves registered, %d in the tree", len(t.leaves), leaves)
	}

	want, total, nodes := t.Recount()
	if got := t.TenantCounts(); !maps.Equal(got, want) {
		fail("maintained tenant counts %v, recount %v", got, want)
	}
	if t.total != total {
		fail("maintained total %d runes, recount %d", t.total, total)
	}
	if t.nodes != nodes {
		fail("maintained %d nodes, recount %d", t.nodes, nodes)
	}
	edgeBytes := 0
	t.walk(func(n *node) { edgeBytes += len(n.edge) })
	if t.bytes != edgeBytes {
		fail("maintained %d edge bytes, recount %d", t.bytes, edgeBytes)
	}
	return errors.Join(errs...)
}

// cutsOnRunes reports whether every offset in cuts (ascending) is a rune boundary of s.
func cutsOnRunes(s string, cuts []int) bool {
	i := 0
	for _, c := range cuts {
		for i < c {
			_, w := utf8.DecodeRuneInString(s[i:])
			i += w
		}
		if i != c {
			return false
		}
	}
	return true
}

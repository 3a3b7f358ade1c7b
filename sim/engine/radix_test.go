package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkRadix recounts size, evictable tokens, nodes and heap membership.
func checkRadix(c *radix) error {
	size, evictable, nodes := 0, 0, 0
	var walk func(x *node) error
	walk = func(x *node) error {
		for i, kc := range x.children {
			k, ch := kc.key, kc.n
			if c.childKey(ch.key) != k || ch.parent != x {
				return fmt.Errorf("bad child link")
			}
			if i > 0 && x.children[i-1].key >= k {
				return fmt.Errorf("children not sorted by distinct keys")
			}
			if len(ch.key) == 0 || len(ch.key)%c.page != 0 {
				return fmt.Errorf("key of %d tokens, page %d", len(ch.key), c.page)
			}
			if ch.lock < 0 || (x != c.root && ch.lock > x.lock) {
				return fmt.Errorf("lock %d under parent lock %d", ch.lock, x.lock)
			}
			nodes++
			size += len(ch.key)
			if ch.lock == 0 {
				evictable += len(ch.key)
			}
			if ch.pre >= 0 && !slices.Equal(ch.promptPath(), c.path(ch)) {
				return fmt.Errorf("a node's prompt path is not its path from the root")
			}
			if want := ch.lock == 0 && len(ch.children) == 0; (ch.heapIdx >= 0) != want {
				return fmt.Errorf("heap membership %v, want %v", ch.heapIdx >= 0, want)
			}
			if err := walk(ch); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(c.root); err != nil {
		return err
	}
	if size != c.size || evictable != c.evictable || nodes != c.nodes {
		return fmt.Errorf("size/evictable/nodes %d/%d/%d, recount %d/%d/%d", c.size, c.evictable, c.nodes, size, evictable, nodes)
	}
	for i := range c.heap.Len() {
		if e := c.heap.Entry(i); e.At != int64(e.V.last) || e.Seq != e.V.id || e.V.heapIdx != i {
			return fmt.Errorf("heap entry %d keyed (%d, %d) at index %d, node has (%d, %d)", i, e.At, e.Seq, e.V.heapIdx, e.V.last, e.V.id)
		}
		if i > 0 && c.heap.Less(i, (i-1)/2) {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	return nil
}

func TestRadixMatchInsert(t *testing.T) {
	t.Parallel()
	c := newRadix(1)
	_, added := c.insert([]uint32{1, 2, 3, 4, 5})
	assert.Equal(t, 5, added)
	_, added = c.insert([]uint32{1, 2, 3, 9, 9, 9})
	assert.Equal(t, 3, added, "shares 1 2 3, splits the edge")
	_, added = c.insert([]uint32{1, 2})
	assert.Equal(t, 0, added, "a prefix of what is cached")
	require.NoError(t, checkRadix(c))
	assert.Equal(t, 8, c.size)
	tests := []struct {
		q    []uint32
		want int
	}{
		{[]uint32{1, 2, 3, 4, 5, 6}, 5},
		{[]uint32{1, 2, 3, 9}, 4},
		{[]uint32{1, 7}, 1},
		{[]uint32{2}, 0},
		{nil, 0},
	}
	for _, tc := range tests {
		n, _ := c.match(tc.q)
		assert.Equal(t, tc.want, n, "match %v", tc.q)
	}
	require.NoError(t, checkRadix(c))
}

func TestRadixPages(t *testing.T) {
	t.Parallel()
	c := newRadix(4)
	_, added := c.insert(prompt(0, 10))
	assert.Equal(t, 8, added, "only whole pages are cached")
	n, _ := c.match(prompt(0, 10))
	assert.Equal(t, 8, n)
	q := prompt(0, 10)
	q[5] = 999 // diverges inside the second page
	n, _ = c.match(q)
	assert.Equal(t, 4, n)
	require.NoError(t, checkRadix(c))
}

func TestRadixLRU(t *testing.T) {
	t.Parallel()
	c := newRadix(1)
	c.insert(prompt(100, 10)) // A
	c.insert(prompt(200, 10)) // B
	c.insert(prompt(300, 10)) // C
	c.match(prompt(100, 3))   // touch A (splits it: A = 3 + 7)
	freed := c.evict(1)
	assert.Equal(t, 10, freed, "whole least recently used leaf: B")
	n, _ := c.match(prompt(200, 10))
	assert.Zero(t, n)
	n, _ = c.match(prompt(100, 10))
	assert.Equal(t, 10, n, "A survives")
	c.evict(1)
	n, _ = c.match(prompt(300, 10))
	assert.Zero(t, n, "C went next")
	require.NoError(t, checkRadix(c))
}

func TestRadixLockPreventsEviction(t *testing.T) {
	t.Parallel()
	c := newRadix(1)
	nd, _ := c.insert(prompt(0, 10))
	c.insert(prompt(0, 5))
	c.lockPath(nd)
	assert.Zero(t, c.evictable)
	assert.Zero(t, c.evict(100))
	c.insert(prompt(500, 4))
	assert.Equal(t, 4, c.evict(100), "only the unlocked leaf")
	c.unlockPath(nd)
	assert.Equal(t, 10, c.evict(100))
	assert.Zero(t, c.size)
	require.NoError(t, checkRadix(c))
}

// FuzzRadix runs random inserts, matches, locks, unlocks and evictions over a small alphabet and
// checks the bookkeeping after each, and that without eviction a match equals the longest common
// page-aligned prefix with any inserted sequence (brute force).
func FuzzRadix(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint8(1))
	f.Add([]byte{3, 3, 3, 1, 0, 200, 100, 7, 7, 2, 9, 41, 1, 2, 3}, uint8(2))
	f.Fuzz(func(t *testing.T, ops []byte, page uint8) {
		pg := int(page%3) + 1
		c := newRadix(pg)
		var inserted [][]uint32
		var locked []*node
		evicted := false
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%5, ops[i+1]
			seq := make([]uint32, int(arg%13))
			for j := range seq {
				seq[j] = uint32((int(arg) + j*int(op+1)) % 3) // small alphabet: many shared prefixes
			}
			switch op {
			case 0, 1:
				c.insert(seq)
				inserted = append(inserted, seq)
			case 2:
				n, nd := c.match(seq)
				if !evicted {
					best := 0
					for _, s := range inserted {
						l := 0
						for l < len(s) && l < len(seq) && s[l] == seq[l] {
							l++
						}
						l = min(l-l%pg, len(s)-len(s)%pg)
						best = max(best, l)
					}
					require.Equal(t, best, n, "match %v in %v", seq, inserted)
				}
				if arg%2 == 0 {
					c.lockPath(nd)
					locked = append(locked, nd)
				}
			case 3:
				if len(locked) > 0 {
					c.unlockPath(locked[0])
					locked = locked[1:]
				}
			case 4:
				if c.evict(int(arg%7)) > 0 {
					evicted = true
				}
			}
			require.NoError(t, checkRadix(c))
		}
	})
}

// mismatch finds the first differing token as a token loop does, at every position and length
// around its block size (empty, whole blocks, tails, no difference).
func TestMismatch(t *testing.T) {
	t.Parallel()
	naive := func(a, b []uint32) int {
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		return i
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 200; n++ {
		a := make([]uint32, n)
		for i := range a {
			a[i] = rng.Uint32N(4)
		}
		for diff := 0; diff <= n; diff++ { // diff == n: equal
			b := slices.Clone(a)
			if diff < n {
				b[diff] ^= 1 << (rng.UintN(4) * 8) // any one byte of the token
			}
			require.Equal(t, naive(a, b), mismatch(a, b), "n=%d diff=%d", n, diff)
			require.Equal(t, diff, mismatch(a, b))
		}
	}
}

// radixDump lists every node depth first (children by key): its key, access stamp, id and lock.
func radixDump(c *radix) string {
	var sb strings.Builder
	var rec func(x *node, depth int)
	rec = func(x *node, depth int) {
		for _, kc := range x.children {
			ch := kc.n
			fmt.Fprintf(&sb, "%d %v last=%d id=%d lock=%d\n", depth, ch.key, ch.last, ch.id, ch.lock)
			rec(ch, depth+1)
		}
	}
	rec(c.root, 0)
	return sb.String()
}

// insertBelow from the node a prompt's match locked leaves the cache exactly as insert from the
// root does, through random matches, inserts and evictions of prompts sharing prefixes, at page
// sizes 1 and 4, and so does a stale from (after a reset).
// logged returns the events l recorded, their paths copied, and forgets them.
func logged(l *kvLog) []KVEvent {
	var evs []KVEvent
	for _, r := range l.recs {
		ev := KVEvent{Kind: r.kind, New: r.new, Medium: r.medium}
		if r.view != nil {
			ev.Path = slices.Clone(r.view)
		} else if r.kind != KVCleared {
			ev.Path = slices.Clone(l.buf[r.start:r.end])
		}
		evs = append(evs, ev)
	}
	l.drop()
	return evs
}

// insertPrompt (the node a prompt's run gets is a view of it, and so are the paths of its
// events, stores and removals) and insertBelow (copies) keep the same tree and record the same
// events; the views stay views of the paths from the root through splits and evictions.
func TestInsertBelowTheMatchedNodeAsInsert(t *testing.T) {
	t.Parallel()
	for _, page := range []int{1, 4} {
		rng := rand.New(rand.NewPCG(uint64(page), 43))
		prompt := func() []uint32 {
			p := make([]uint32, 0, 64)
			for range 1 + rng.IntN(6) {
				start := uint32(rng.IntN(4) * 10)
				for j := range 1 + rng.IntN(10) {
					p = append(p, start+uint32(j))
				}
			}
			return p
		}
		a, b := newRadix(page), newRadix(page)
		a.log, b.log = &kvLog{}, &kvLog{}
		type held struct {
			p      []uint32
			na, nb *node
		}
		var locked []held
		for step := range 3000 {
			switch op := rng.IntN(10); {
			case op < 4: // match and lock, as admission does
				p := prompt()
				ma, na := a.match(p)
				mb, nb := b.match(p)
				require.Equal(t, ma, mb)
				a.lockPath(na)
				b.lockPath(nb)
				locked = append(locked, held{p, na, nb})
			case op < 7 && len(locked) > 0: // cache a locked prompt, as cachePrompt does
				i := rng.IntN(len(locked))
				h := locked[i]
				locked = slices.Delete(locked, i, i+1)
				nda, adda := a.insertPrompt(h.p, h.na)
				ndb, addb := b.insert(h.p)
				require.Equal(t, addb, adda)
				if adda > 0 {
					require.Same(t, &h.p[len(h.p)/page*page-adda], &nda.key[0], "the new leaf is a view of the prompt")
				}
				a.unlockPath(h.na)
				b.unlockPath(h.nb)
				a.lockPath(nda)
				b.lockPath(ndb)
				a.unlockPath(nda)
				b.unlockPath(ndb)
			case op < 8:
				p := prompt()
				_, adda := a.insert(p)
				_, addb := b.insert(p)
				require.Equal(t, addb, adda)
			case op < 9:
				need := rng.IntN(40)
				require.Equal(t, b.evict(need), a.evict(need))
			default:
				if rng.IntN(20) == 0 && len(locked) > 0 { // a stale from: insertBelow ignores it
					a.reset()
					b.reset()
					h := locked[0]
					_, adda := a.insertBelow(h.p, h.na)
					_, addb := b.insert(h.p)
					require.Equal(t, addb, adda)
					locked = nil
				}
			}
			require.NoError(t, checkRadix(a), "step %d", step)
			require.Equal(t, radixDump(b), radixDump(a), "page %d step %d", page, step)
			require.Equal(t, logged(b.log), logged(a.log), "page %d step %d", page, step)
		}
		var order []string
		for a.heap.Len() > 0 {
			x, y := a.heap.Pop().V, b.heap.Pop().V
			require.Equal(t, y.id, x.id, "eviction order")
			order = append(order, fmt.Sprint(x.id))
		}
		require.NotEmpty(t, order)
	}
}

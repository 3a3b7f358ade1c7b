package kvindex

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPathIndexAnswersAsTheHashIndex feeds random changes (stores, removals, clears, stale
// marks, pending routes, with much shared and diverging prefixes) to a PathIndex as token paths
// and to an Index as SGLang's block hashes of the same paths, and checks that every match
// agrees.
func TestPathIndexAnswersAsTheHashIndex(t *testing.T) {
	t.Parallel()
	for _, page := range []int{1, 3} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("page=%d/seed=%d", page, seed), func(t *testing.T) {
				t.Parallel()
				comparePathIndex(t, page, seed)
			})
		}
	}
}

func comparePathIndex(t *testing.T, page int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	ttl := time.Second
	hx := New(Config{PendingTTL: ttl})
	px := NewPathIndex(Config{PendingTTL: ttl})
	if seed%2 == 1 {
		px.KeepTokens() // the paths below are never changed once made
	}
	const nt = 70 // more than one word of targets
	var hid, pid []TargetID
	for i := range nt {
		name := fmt.Sprintf("t%d", i)
		hid, pid = append(hid, hx.Target(name)), append(pid, px.Target(name))
		require.Equal(t, hid[i], pid[i])
	}
	// Paths draw from a small alphabet so that they share prefixes and diverge mid-run; half
	// extend a path seen before.
	var seen [][]uint32
	path := func() []uint32 {
		var p []uint32
		if len(seen) > 0 && rng.IntN(2) == 0 {
			q := seen[rng.IntN(len(seen))]
			p = append(p, q[:rng.IntN(len(q)+1)]...)
		}
		for range rng.IntN(6) * page {
			p = append(p, uint32(rng.IntN(2+min(page, 2)%2))) // 3 tokens at page 1, 2 beyond
		}
		p = p[:len(p)/page*page]
		if len(p) > 0 {
			seen = append(seen, p)
		}
		return p
	}
	salt := func() string {
		if rng.IntN(8) == 0 {
			return "s"
		}
		return ""
	}
	now := t0
	ids := []TargetID{0, 1, 2, 64, 65, 3, 1, 99}
	deep := 0     // matches of two pages or more: the comparison is not between empty answers
	deepHost := 0 // likewise for host-tier matches beyond the GPU's
	// Paths given to AddPending, whole pages, unsalted: a change of the very same memory (as the
	// simulator's engines report the prompts routed to them) is found from where the path ends
	// under KeepTokens; routedHits counts the changes that were.
	var routed [][]uint32
	routedHits := 0
	addPending := func(id TargetID, p []uint32, s string) {
		hx.AddPending(id, AppendBlockHashes(nil, p, page, s), now)
		px.AddPending(id, p, page, s, now)
		if s == "" && len(p) >= page {
			routed = append(routed, p[:len(p)/page*page])
		}
	}
	for step := range 3000 {
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		id := TargetID(rng.IntN(4))
		if rng.IntN(3) == 0 {
			id = TargetID(64 + rng.IntN(2))
		}
		switch op := rng.IntN(20); {
		case op < 8: // store or remove the tail of a path
			p := path()
			if len(routed) > 0 && rng.IntN(2) == 0 {
				p = routed[len(routed)-1-rng.IntN(min(len(routed), 3))] // a recent one: still pending
				if _, ok := px.routed[routedKey{&p[0], len(p)}]; ok {
					routedHits++
				}
			}
			if len(p) == 0 {
				continue
			}
			n := (1 + rng.IntN(len(p)/page)) * page
			kind := BlockStored
			if op >= 5 {
				kind = BlockRemoved
			}
			// Tiers: mostly the GPU (or no medium), often the host, sometimes a tier the
			// path index does not keep.
			medium := [...]string{"", "GPU", "GPU", "CPU_PINNED", "CPU_PINNED", "DISK"}[rng.IntN(6)]
			hs := AppendBlockHashes(nil, p, page, "")
			hx.Apply(id, []Event{{Kind: kind, Hashes: hs[len(hs)-n/page:], BlockSize: page, Medium: medium}}, now)
			px.Apply(id, page, []PathEvent{{Kind: kind, Path: p, New: n, Medium: medium}}, now)
		case op < 9:
			hx.Apply(id, []Event{{Kind: AllBlocksCleared}}, now)
			px.Apply(id, page, []PathEvent{{Kind: AllBlocksCleared}}, now)
		case op < 10:
			st := rng.IntN(3) == 0
			hx.SetStale(id, st)
			px.SetStale(id, st)
		case op < 13:
			addPending(id, path(), salt())
		default:
			p, s := path(), salt()
			p = append(p, 7) // a partial last page counts for nothing
			want := hx.MatchOrStale([]int{-5}, AppendBlockHashes(nil, p, page, s), ids, now)
			got := px.MatchOrStale([]int{-5}, p, page, s, ids, now)
			require.Equal(t, want, got, "step %d: match %v salt %q", step, p, s)
			for _, m := range got {
				if m >= 2 {
					deep++
				}
			}
			wantT := hx.MatchTiersOrStale(nil, AppendBlockHashes(nil, p, page, s), ids, now)
			gotT := px.MatchTiersOrStale(nil, p, page, s, ids, now)
			require.Equal(t, wantT, gotT, "step %d: tier match %v salt %q", step, p, s)
			for j, m := range gotT {
				require.Equal(t, got[j+1], m.GPU, "the GPU part of a tier match is the device match")
				if m.Host >= 2 {
					deepHost++
				}
			}
			if rng.IntN(2) == 0 { // the router's order: match, then pending for the chosen target
				addPending(id, p, s)
			}
		}
		if step%500 == 499 {
			for _, id := range hid {
				require.Equal(t, hx.Stats(id).Blocks, px.Blocks(id), "step %d: blocks of %d", step, id)
				require.Equal(t, hx.Stats(id).HostBlocks, px.HostBlocks(id), "step %d: host blocks of %d", step, id)
				require.Equal(t, hx.stale(id), px.Stale(id))
			}
		}
	}
	require.Greater(t, deep, 25)
	require.Greater(t, deepHost, 5)
	if px.keep {
		require.Greater(t, routedHits, 50, "changes found from a routed path's end")
	}
}

func TestPathIndexSplitsAndPrunes(t *testing.T) {
	t.Parallel()
	x := NewPathIndex(Config{})
	a, b := x.Target("a"), x.Target("b")
	x.SetStale(a, false)
	x.SetStale(b, false)
	long := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	x.Apply(a, 2, []PathEvent{{Kind: BlockStored, Path: long, New: 8}}, t0)
	// b stores a branch off the middle of a's run, after the first two pages.
	branch := []uint32{1, 2, 3, 4, 9, 9}
	x.Apply(b, 2, []PathEvent{{Kind: BlockStored, Path: branch, New: 6}}, t0)
	ids := []TargetID{a, b}
	require.Equal(t, []int{4, 2}, x.MatchOrStale(nil, long, 2, "", ids, t0))
	require.Equal(t, []int{2, 3}, x.MatchOrStale(nil, branch, 2, "", ids, t0))
	require.Equal(t, []int{1, 1}, x.MatchOrStale(nil, []uint32{1, 2, 3}, 2, "", ids, t0), "a partial page does not count")
	require.Equal(t, []int{0, 0}, x.MatchOrStale(nil, long, 1, "", ids, t0), "another page size is another tree")
	// a evicts its last two pages; b evicts its branch page: the pruned tree still answers.
	x.Apply(a, 2, []PathEvent{{Kind: BlockRemoved, Path: long, New: 4}}, t0)
	x.Apply(b, 2, []PathEvent{{Kind: BlockRemoved, Path: branch, New: 2}}, t0)
	require.Equal(t, []int{2, 2}, x.MatchOrStale(nil, long, 2, "", ids, t0))
	require.Equal(t, 2, x.Blocks(a))
	require.Equal(t, 2, x.Blocks(b))
	x.Apply(a, 2, []PathEvent{{Kind: AllBlocksCleared}}, t0)
	x.Apply(b, 2, []PathEvent{{Kind: BlockRemoved, Path: branch[:4], New: 4}}, t0)
	require.Zero(t, x.roots[pathRoot{2, ""}].children.len(), "nothing held: every node pruned")
}

// TestPathNodeChildrenSharingAKey checks the chain of children whose first pages have one
// firstPage value (a 64-bit collision of different pages, forced here): lookup, split,
// replacement and removal each find the right one.
func TestPathNodeChildrenSharingAKey(t *testing.T) {
	t.Parallel()
	const k = 7
	root := &pathNode{}
	a := &pathNode{key: []uint32{1, 2, 3, 4}}
	b := &pathNode{key: []uint32{5, 6, 7, 8}}
	c := &pathNode{key: []uint32{9, 9}}
	for _, nd := range []*pathNode{a, b, c} {
		root.addChild(nd, k)
	}
	require.Same(t, c, root.children.get(k), "the last added heads the chain")
	for _, nd := range []*pathNode{a, b, c} {
		for p := root.children.get(k); ; p = p.next {
			require.NotNil(t, p, "every child is on the chain")
			if p == nd {
				break
			}
		}
	}
	// A split of a child in the middle of the chain puts its head in its place.
	h := b.split(2, 2)
	require.Equal(t, []uint32{5, 6}, h.key)
	require.Same(t, root, h.parent)
	require.Same(t, h, c.next)
	require.Same(t, a, h.next)
	require.Same(t, b, h.children.get(firstPage([]uint32{7, 8})))
	// Removing the head, a middle and the last of the chain.
	root.removeChild(c)
	require.Same(t, h, root.children.get(k))
	root.addChild(c, k)
	root.removeChild(h)
	require.Same(t, c, root.children.get(k))
	require.Same(t, a, c.next)
	root.removeChild(a)
	require.Nil(t, c.next)
	root.removeChild(c)
	require.Zero(t, root.children.len())
}

func TestCommonCountsWholePages(t *testing.T) {
	t.Parallel()
	a := make([]uint32, 300)
	for i := range a {
		a[i] = uint32(i)
	}
	for _, at := range []int{0, 1, 63, 64, 65, 128, 200, 299} {
		b := append([]uint32(nil), a...)
		b[at] = 7777
		require.Equal(t, at, common(a, b, 1), "differ at %d", at)
		require.Equal(t, at/4*4, common(a, b, 4), "differ at %d, page 4", at)
	}
	require.Equal(t, 300, common(a, a[:], 1))
	require.Equal(t, 120, common(a, a[:122], 4), "the shorter one's whole pages")
}

// TestPathKidsFewAndMany checks a node's children across the move from the slice to the map:
// each is found under its key before and after, a removal drops only its key, and pruneTree's
// filter keeps exactly the chains it is told to.
func TestPathKidsFewAndMany(t *testing.T) {
	t.Parallel()
	for _, n := range []int{maxFewKids, maxFewKids + 5} {
		root := &pathNode{}
		kids := make([]*pathNode, n)
		for i := range kids {
			kids[i] = &pathNode{key: []uint32{uint32(100 + i)}}
			root.addChild(kids[i], uint64(100+i))
		}
		require.Equal(t, n > maxFewKids, root.children.many != nil, "%d children", n)
		require.Equal(t, n, root.children.len())
		for i, c := range kids {
			require.Same(t, c, root.child([]uint32{uint32(100 + i)}))
		}
		require.Nil(t, root.child([]uint32{99}))
		root.removeChild(kids[2])
		require.Nil(t, root.child([]uint32{102}))
		require.Same(t, kids[3], root.child([]uint32{103}), "the others stay")
		require.Equal(t, n-1, root.children.len())
		root.children.filter(func(c *pathNode) *pathNode {
			if c.key[0]%2 == 0 {
				return nil
			}
			return c
		})
		seen := 0
		for k, c := range root.children.all() {
			require.Equal(t, uint64(c.key[0]), k)
			require.Equal(t, uint32(1), c.key[0]%2, "only the odd keys kept")
			seen++
		}
		require.Equal(t, n/2, seen, "%d children", n)
	}
}

// The expiry FIFO gives its entries back in order, only once they are due, and drops the
// taken front once it outweighs the rest: after a thousand entries pushed and taken in
// bursts, what it holds is what is still live.
func TestExpiryQueueTakesTheDueFrontInOrder(t *testing.T) {
	var q expiryQueue[int]
	next := 0 // the next entry pop must give
	for burst := range 100 {
		for i := range 10 {
			v := 10*burst + i
			q.push(v, int64(v))
		}
		// Everything up to the middle of this burst is due.
		now := int64(10*burst + 5)
		for {
			v, exp, ok := q.pop(now)
			if !ok {
				break
			}
			require.Equal(t, next, v)
			require.Equal(t, int64(v), exp)
			next++
		}
		require.Equal(t, 10*burst+6, next, "burst %d: the due entries, no more", burst)
		require.LessOrEqual(t, len(q.items), 2*(len(q.items)-q.head)+1, "burst %d: the taken front does not outweigh the live rest", burst)
	}
	require.Len(t, q.items[q.head:], 4)
}

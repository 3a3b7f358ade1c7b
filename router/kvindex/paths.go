package kvindex

import (
	"iter"
	"slices"
	"time"
	"unsafe"
)

// PathIndex is the precise prefix index for a feed that knows the token path of every change,
// not just its block hashes: the simulator, whose engines report each stored or evicted radix
// node with the tokens from the root. It answers exactly what an [Index] fed the same changes
// as SGLang's block hashes answers (a block is a page of tokens together with every token
// before it, which is what a chain hash identifies), without computing a hash or touching a
// map per block: it is a radix tree of token runs, each node a run of whole pages with one
// holder set and one pending expiry per target, split where a change's boundary falls inside
// it. A match walks the request's tokens down the tree (a map lookup per node, then a
// comparison per token); a change walks its path the same way.
//
// It is not safe for concurrent use. Pages of different sizes, and chains started from
// different salts, live in separate trees (their hashes never meet in an [Index] either).
type PathIndex struct {
	cfg      Config
	names    map[string]TargetID
	stale    []bool // by TargetID
	roots    map[pathRoot]*pathNode
	nodes    []*pathNode             // scratch: the nodes a walk covered
	expiries expiryQueue[*pathNode]  // nodes given a pending entry, in the order they expire
	gen      uint64                  // counts changes of the tree (a remembered walk is valid within one)
	last     lastWalk                // where the latest MatchOrStale's walk ended
	keep     bool                    // KeepTokens
	routed   map[routedKey]routedEnd // KeepTokens: the node where each routed path ends, while pending
	routedQ  expiryQueue[routedKey]  // routed's entries in the order they expire
}

// routedKey is a routed request's path under KeepTokens (tokens that never change): its
// memory and length.
type routedKey struct {
	data *uint32
	n    int
}

// routedEnd is the node an AddPending walk of a path ended at, the root of its tree, and when
// its pending entries expire.
type routedEnd struct {
	nd, root *pathNode
	exp      int64
}

// expiryQueue is a FIFO of entries in the order they expire: every pending entry lives the
// same TTL, so they are pushed in the order of their expiry and taken from the front.
type expiryQueue[T any] struct {
	items []expiring[T]
	head  int // items[:head] are taken
}

type expiring[T any] struct {
	v   T
	exp int64
}

func (q *expiryQueue[T]) push(v T, exp int64) { q.items = append(q.items, expiring[T]{v, exp}) }

// pop takes the front entry if it expires at or before now (ok false: none does). The taken
// front is dropped once it outweighs the rest, so the queue's memory follows what is live.
func (q *expiryQueue[T]) pop(now int64) (v T, exp int64, ok bool) {
	if q.head == len(q.items) || q.items[q.head].exp > now {
		return v, 0, false
	}
	e := q.items[q.head]
	q.items[q.head] = expiring[T]{}
	q.head++
	if q.head > len(q.items)/2 {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return e.v, e.exp, true
}

// lastWalk is where MatchOrStale's walk of a request ended, so that the AddPending of the same
// request (the router calls them one after the other) goes on from there: nodes cover the
// first i tokens and end at nd.
type lastWalk struct {
	gen   uint64
	data  *uint32
	n     int
	root  *pathNode
	nodes []*pathNode
	nd    *pathNode
	i     int
}

// pathRoot identifies one tree: the page size and the salt its chains start from.
type pathRoot struct {
	page int
	salt string
}

// pathNode is a run of whole pages below its parent, held by the same targets throughout.
type pathNode struct {
	key      []uint32
	parent   *pathNode
	children pathKids      // by firstPage of the child's key (collisions chained by next)
	next     *pathNode     // the next child of parent with the same firstPage value
	fk       uint64        // firstPage of key: its key among parent's children
	held     []uint64      // bit id%64 of word id/64 set: target id holds every page on the GPU
	host     []uint64      // the same for the host tier (HiCache's CPU_PINNED)
	pending  []pathPending // targets with a pending entry on every page (not holding it)
}

// pathKids are a node's children, each chain of children under one firstPage value by the
// value. Nearly every node has one to three (a 100k-request simulation added 89 % of its
// children to a node's first slot, 7 % to its second), and a few have thousands (the roots, the
// node of a system prompt every conversation shares): up to maxFewKids sit in a slice scanned
// in order, which a walk reads from one small array instead of a map (a map lookup per node
// was 6 % of a 1M-request run with KV events on); more move to a map.
type pathKids struct {
	few  []pathKid
	many map[uint64]*pathNode
}

type pathKid struct {
	k uint64
	c *pathNode
}

const maxFewKids = 8

// get returns the head of the chain under k, or nil.
func (s *pathKids) get(k uint64) *pathNode {
	if s.many != nil {
		return s.many[k]
	}
	for _, e := range s.few {
		if e.k == k {
			return e.c
		}
	}
	return nil
}

// set makes c the head of the chain under k; nil drops k.
func (s *pathKids) set(k uint64, c *pathNode) {
	if s.many != nil {
		if c == nil {
			delete(s.many, k)
		} else {
			s.many[k] = c
		}
		return
	}
	for i := range s.few {
		if s.few[i].k != k {
			continue
		}
		if c != nil {
			s.few[i].c = c
			return
		}
		last := len(s.few) - 1
		s.few[i] = s.few[last] // the order means nothing: keys are unique
		s.few[last] = pathKid{}
		s.few = s.few[:last]
		return
	}
	switch {
	case c == nil:
	case len(s.few) < maxFewKids:
		s.few = append(s.few, pathKid{k, c})
	default:
		s.many = make(map[uint64]*pathNode, 2*maxFewKids)
		for _, e := range s.few {
			s.many[e.k] = e.c
		}
		s.many[k] = c
		s.few = nil
	}
}

// len is the number of chains.
func (s *pathKids) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

// all yields each chain's key and head.
func (s *pathKids) all() iter.Seq2[uint64, *pathNode] {
	return func(yield func(uint64, *pathNode) bool) {
		if s.many != nil {
			for k, c := range s.many {
				if !yield(k, c) {
					return
				}
			}
			return
		}
		for _, e := range s.few {
			if !yield(e.k, e.c) {
				return
			}
		}
	}
}

// filter replaces each chain's head by f of it (nil drops the chain).
func (s *pathKids) filter(f func(c *pathNode) *pathNode) {
	if s.many != nil {
		for k, c := range s.many {
			if h := f(c); h == nil {
				delete(s.many, k)
			} else {
				s.many[k] = h
			}
		}
		return
	}
	out := s.few[:0]
	for _, e := range s.few {
		if h := f(e.c); h != nil {
			out = append(out, pathKid{e.k, h})
		}
	}
	clear(s.few[len(out):])
	s.few = out
}

type pathPending struct {
	id  TargetID
	exp int64 // Unix ns
}

// PathEvent is one change of a rank's radix cache, as the simulator's engines report it.
type PathEvent struct {
	Kind Kind // BlockStored, BlockRemoved or AllBlocksCleared
	// Path is the token path from the root to the end of the stored or removed run, a whole
	// number of pages; the run is its last New tokens (whole pages).
	Path []uint32
	New  int
	// Medium is the tier the change is on, as [Event.Medium]: "" or "GPU", "CPU_PINNED" (the
	// host); a removal naming none clears every tier. Disk and external tiers are not kept.
	Medium string
}

// KeepTokens makes AddPending keep the tokens it is given (the nodes it adds share their
// memory) instead of copying them. Only for a caller whose token slices never change once
// routed (the simulator's prompts): it saves a copy per request, and a later match of tokens
// in the same memory (a conversation's next turn, which extends the same array) compares those
// runs in one step. The index keeps each array alive while a node views it (the simulator's
// engines keep views of the same prompts in their caches as long). And while a routed path's
// entries are pending, a store whose path is that very memory (the engine's view of the prompt
// it cached) finds the nodes of its run from the node the path ends at, up, instead of walking
// down from the root and comparing the prompt with the runs other prompts left there (the
// shared system prompt's, above all): those walks were a tenth of the event loop of a
// million-request simulation.
func (x *PathIndex) KeepTokens() {
	x.keep = true
	x.routed = map[routedKey]routedEnd{}
}

// NewPathIndex returns an empty path index (cfg.PendingTTL as for [New]).
func NewPathIndex(cfg Config) *PathIndex {
	return &PathIndex{cfg: cfg, names: map[string]TargetID{}, roots: map[pathRoot]*pathNode{}}
}

// Target returns name's handle, interning it on first use; a new target is stale, as in
// [Index.Target].
func (x *PathIndex) Target(name string) TargetID {
	if id, ok := x.names[name]; ok {
		return id
	}
	id := TargetID(len(x.stale))
	x.names[name] = id
	x.stale = append(x.stale, true)
	return id
}

func (x *PathIndex) known(id TargetID) bool { return id >= 0 && int(id) < len(x.stale) }

// SetStale marks a target's view untrustworthy or trustworthy again ([Index.SetStale]).
func (x *PathIndex) SetStale(id TargetID, stale bool) {
	if x.known(id) {
		x.stale[id] = stale
	}
}

// Stale reports whether the target is stale (unknown targets are stale).
func (x *PathIndex) Stale(id TargetID) bool { return !x.known(id) || x.stale[id] }

// Apply applies a batch of one target's changes in order, as [Index.Apply] applies the same
// changes as block hashes of page size page, each on its medium's tier: a store adds the run's
// pages (and, on the GPU, resolves the target's pending entries on them), a removal drops those
// the target holds there, a clear drops all its pages and pending entries and makes it fresh. The changes' chains start unsalted (an
// engine's cache keeps no salt). Unknown ids are ignored.
func (x *PathIndex) Apply(id TargetID, page int, evs []PathEvent, now time.Time) {
	if !x.known(id) || page < 1 {
		return
	}
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case BlockStored, BlockRemoved:
			n := len(ev.Path) / page * page
			from := n - ev.New/page*page
			if from < 0 || from >= n {
				continue
			}
			var tiers uint8
			if ev.Kind == BlockStored {
				tier, ok := storeTier(ev.Medium)
				if !ok || tier > TierHost {
					continue
				}
				tiers = 1 << tier
			} else {
				tiers = removeTiers(ev.Medium)
			}
			x.change(id, ev.Kind == BlockStored, tiers, x.root(page, "", ev.Kind == BlockStored), ev.Path[:n], from, page)
		case AllBlocksCleared:
			x.clear(id)
			x.stale[id] = false
		}
	}
	x.expire(now.UnixNano())
}

// change stores (or removes) target id's pages path[from:] under root, on the tiers set in
// tiers (bit t for tier t; a store names one).
func (x *PathIndex) change(id TargetID, store bool, tiers uint8, root *pathNode, path []uint32, from, page int) {
	if root == nil {
		return
	}
	x.gen++
	var nodes []*pathNode
	off := from // where nodes start
	if store {
		nodes = x.routedWalk(root, path, from, page)
	}
	if nodes == nil {
		nodes, _ = x.walk(root, path, from, page, store)
		off = 0
	}
	w, bit := int(id)>>6, uint64(1)<<(id&63)
	for _, nd := range nodes {
		at := off
		off += len(nd.key)
		if at < from {
			continue
		}
		switch {
		case store && tiers&(1<<TierHost) != 0:
			for len(nd.host) <= w {
				nd.host = append(nd.host, 0)
			}
			nd.host[w] |= bit
		case store:
			for len(nd.held) <= w {
				nd.held = append(nd.held, 0)
			}
			nd.held[w] |= bit
			nd.dropPending(id)
		default:
			if tiers&(1<<TierGPU) != 0 && w < len(nd.held) {
				nd.held[w] &^= bit
			}
			if tiers&(1<<TierHost) != 0 && w < len(nd.host) {
				nd.host[w] &^= bit
			}
		}
	}
	if !store {
		for i := len(nodes) - 1; i >= 0; i-- {
			x.prune(nodes[i])
		}
	}
}

// root returns the tree of (page, salt), creating it when create.
func (x *PathIndex) root(page int, salt string, create bool) *pathNode {
	k := pathRoot{page, salt}
	r := x.roots[k]
	if r == nil && create {
		r = &pathNode{}
		x.roots[k] = r
	}
	return r
}

// firstPage is the child key of a run starting with page p: the token itself for one-token
// pages, a mix of the page's tokens otherwise (equal values of different pages are chained).
func firstPage(p []uint32) uint64 {
	if len(p) == 1 {
		return uint64(p[0])
	}
	h := uint64(len(p))
	for _, t := range p {
		h = (h ^ uint64(t)) * 0x9E3779B97F4A7C15
		h ^= h >> 29
	}
	return h
}

// child returns nd's child whose key starts with page p, or nil.
func (nd *pathNode) child(p []uint32) *pathNode {
	if len(p) == 1 {
		return nd.children.get(uint64(p[0])) // the key is the page: no two children share it
	}
	for c := nd.children.get(firstPage(p)); c != nil; c = c.next {
		if equalTokens(c.key[:len(p)], p) {
			return c
		}
	}
	return nil
}

func equalTokens(a, b []uint32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// common returns how many leading tokens of a and b are equal, in whole pages. When all of
// the shorter one is, it compares them as bytes (the runtime's vectorised comparison): a walk
// mostly follows a node to its end.
func common(a, b []uint32, page int) int {
	n := min(len(a), len(b))
	if string(tokenBytes(a[:n])) == string(tokenBytes(b[:n])) {
		return n / page * page
	}
	const chunk = 64 // find the differing chunk as bytes too, then the token in it
	i := 0
	for i+chunk <= n && string(tokenBytes(a[i:i+chunk])) == string(tokenBytes(b[i:i+chunk])) {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i / page * page
}

// tokenBytes views tokens as bytes (no copy).
func tokenBytes(t []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 4*len(t))
}

func (nd *pathNode) addChild(c *pathNode, k uint64) {
	c.parent, c.fk = nd, k
	c.next = nd.children.get(k)
	nd.children.set(k, c)
}

func (nd *pathNode) removeChild(c *pathNode) {
	k := c.fk
	p := nd.children.get(k)
	if p == c {
		nd.children.set(k, c.next)
		return
	}
	for ; p != nil; p = p.next {
		if p.next == c {
			p.next = c.next
			return
		}
	}
}

// replaceChild puts nc where c was among nd's children (same first page).
func (nd *pathNode) replaceChild(c, nc *pathNode) {
	k := c.fk
	nc.parent, nc.next, nc.fk = nd, c.next, k
	p := nd.children.get(k)
	if p == c {
		nd.children.set(k, nc)
		return
	}
	for ; p != nil; p = p.next {
		if p.next == c {
			p.next = nc
			return
		}
	}
}

// split cuts nd after its first k tokens (whole pages, 0 < k < len(nd.key)) and returns the
// new head, which takes nd's place below its parent and has nd (the rest) as its only child.
func (nd *pathNode) split(k, page int) *pathNode {
	h := &pathNode{key: nd.key[:k:k], held: append([]uint64(nil), nd.held...),
		host: append([]uint64(nil), nd.host...), pending: append([]pathPending(nil), nd.pending...)}
	nd.parent.replaceChild(nd, h)
	nd.key = nd.key[k:]
	nd.next = nil
	h.addChild(nd, firstPage(nd.key[:page]))
	return h
}

// split is pathNode.split, keeping track of the new head's pending entries.
func (x *PathIndex) split(nd *pathNode, k, page int) *pathNode {
	h := nd.split(k, page)
	if len(h.pending) > 0 {
		var exp int64
		for _, p := range h.pending {
			exp = max(exp, p.exp)
		}
		x.expiries.push(h, exp)
	}
	return h
}

// walk follows path (whole pages) down from root and returns the nodes that cover it, in
// order, splitting nodes so that one of them starts exactly at token cut (0: no cut) and the
// last ends exactly at the path's end. With create, the part of the path not in the tree is
// added (as new nodes held by none); without, the walk stops where the tree does and reports
// false.
func (x *PathIndex) walk(root *pathNode, path []uint32, cut, page int, create bool) ([]*pathNode, bool) {
	return x.walkFrom(root, 0, x.nodes[:0], path, cut, page, create, false)
}

// walkFrom is walk going on from node nd, which ends at token i of path, after nodes; the
// nodes it adds share path's memory when share, else copy it.
func (x *PathIndex) walkFrom(nd *pathNode, i int, nodes []*pathNode, path []uint32, cut, page int, create, share bool) ([]*pathNode, bool) {
	for i < len(path) {
		c := nd.child(path[i : i+page])
		if c == nil {
			if !create {
				x.nodes = nodes
				return nodes, false
			}
			end := len(path)
			if i < cut {
				end = cut
			}
			key := path[i:end:end]
			if !share {
				key = append([]uint32(nil), key...)
			}
			c = &pathNode{key: key}
			nd.addChild(c, firstPage(path[i:i+page]))
			nodes = append(nodes, c)
			i, nd = end, c
			continue
		}
		m := common(c.key, path[i:], page)
		if i < cut && i+m > cut {
			m = cut - i
		}
		if m < len(c.key) {
			c = x.split(c, m, page)
		}
		nodes = append(nodes, c)
		i += m
		nd = c
	}
	x.nodes = nodes
	return nodes, true
}

// routedWalk returns the nodes that cover path[cut:], in order, for a path AddPending was
// given under KeepTokens (the very memory: routed's key keeps it alive, so no other path has
// it), found from the node its walk ended at, up, the node across cut split there as walk
// splits it; nil when path is not in routed or its node has left root's tree. A node's path
// from its root never changes while it is attached (a split puts the new head above it), so
// these are the nodes walk would reach, having compared the runs above them with path only to
// find them equal; and a node is attached while it has a parent (one is detached only once
// childless, and a detached node gets no child).
func (x *PathIndex) routedWalk(root *pathNode, path []uint32, cut, page int) []*pathNode {
	if len(x.routed) == 0 || len(path) == 0 {
		return nil
	}
	e, ok := x.routed[routedKey{unsafe.SliceData(path), len(path)}]
	if !ok || e.root != root || e.nd.parent == nil {
		return nil
	}
	nodes := x.nodes[:0]
	end := len(path)
	for nd := e.nd; end > cut && nd != root; nd = nd.parent {
		start := end - len(nd.key)
		if start < cut {
			x.split(nd, cut-start, page) // nd keeps path[cut:end]
			start = cut
		}
		nodes = append(nodes, nd)
		end = start
	}
	slices.Reverse(nodes)
	x.nodes = nodes
	return nodes
}

// prune detaches nd, and then its ancestors, while they hold nothing for anyone.
func (x *PathIndex) prune(nd *pathNode) {
	for nd.parent != nil && nd.children.len() == 0 && len(nd.pending) == 0 && !nd.anyHeld() {
		p := nd.parent
		p.removeChild(nd)
		nd.parent = nil
		nd = p
	}
}

// anyHeld reports whether any target holds nd's pages on any tier.
func (nd *pathNode) anyHeld() bool {
	for _, w := range nd.held {
		if w != 0 {
			return true
		}
	}
	for _, w := range nd.host {
		if w != 0 {
			return true
		}
	}
	return false
}

func (nd *pathNode) holds(id TargetID) bool {
	w := int(id) >> 6
	return w < len(nd.held) && nd.held[w]&(uint64(1)<<(id&63)) != 0
}

func (nd *pathNode) holdsHost(id TargetID) bool {
	w := int(id) >> 6
	return w < len(nd.host) && nd.host[w]&(uint64(1)<<(id&63)) != 0
}

func (nd *pathNode) dropPending(id TargetID) {
	for i, p := range nd.pending {
		if p.id == id {
			nd.pending = append(nd.pending[:i], nd.pending[i+1:]...)
			return
		}
	}
}

func (nd *pathNode) setPending(id TargetID, exp int64) {
	for i := range nd.pending {
		if nd.pending[i].id == id {
			nd.pending[i].exp = exp
			return
		}
	}
	nd.pending = append(nd.pending, pathPending{id, exp})
}

// clear drops every page and pending entry of id, in every tree.
func (x *PathIndex) clear(id TargetID) {
	x.gen++
	w, bit := int(id)>>6, uint64(1)<<(id&63)
	var visit func(nd *pathNode)
	visit = func(nd *pathNode) {
		for _, c := range nd.children.all() {
			for ; c != nil; c = c.next {
				visit(c)
			}
		}
		if w < len(nd.held) {
			nd.held[w] &^= bit
		}
		if w < len(nd.host) {
			nd.host[w] &^= bit
		}
		nd.dropPending(id)
	}
	for _, r := range x.roots {
		visit(r)
		x.pruneTree(r)
	}
}

// pruneTree detaches every node below r that holds nothing for anyone.
func (x *PathIndex) pruneTree(r *pathNode) {
	var visit func(nd *pathNode) bool // reports whether nd stays
	visit = func(nd *pathNode) bool {
		nd.children.filter(func(c *pathNode) *pathNode {
			var keep, last *pathNode
			for ; c != nil; c = c.next {
				if !visit(c) {
					c.parent = nil
					continue
				}
				if last == nil {
					keep = c
				} else {
					last.next = c
				}
				last = c
			}
			if last != nil {
				last.next = nil
			}
			return keep
		})
		return nd.children.len() > 0 || len(nd.pending) > 0 || nd.anyHeld()
	}
	visit(r)
}

// expire drops the pending entries expired at nowNs (they no longer count: only memory
// depends on it) and the nodes only they kept, taking the nodes from the front of the FIFO of
// pending entries set.
func (x *PathIndex) expire(nowNs int64) {
	for {
		nd, _, ok := x.expiries.pop(nowNs)
		if !ok {
			break
		}
		if nd.parent == nil || len(nd.pending) == 0 {
			continue // detached, or already swept
		}
		kept := nd.pending[:0]
		for _, p := range nd.pending {
			if p.exp > nowNs {
				kept = append(kept, p)
			}
		}
		clear(nd.pending[len(kept):])
		nd.pending = kept
		if len(kept) == 0 {
			x.gen++
			x.prune(nd)
		}
	}
	for {
		k, exp, ok := x.routedQ.pop(nowNs)
		if !ok {
			break
		}
		if e, ok := x.routed[k]; ok && e.exp == exp { // not routed again since
			delete(x.routed, k)
		}
	}
}

// MatchOrStale appends to dst, for each target in ids, the number of leading whole pages of
// tokens (a chain started from salt) it holds consecutively on the GPU, pending entries not
// expired at now included, or -1 for a stale or unknown target: [Index.MatchOrStale] of the
// tokens' block hashes.
func (x *PathIndex) MatchOrStale(dst []int, tokens []uint32, page int, salt string, ids []TargetID, now time.Time) []int {
	base := len(dst)
	for range ids {
		dst = append(dst, 0)
	}
	x.match(matchOut{out: dst[base:]}, tokens, page, salt, ids, now)
	return dst
}

// MatchTiersOrStale appends to dst, for each target in ids, its [TierMatch] of tokens:
// [Index.MatchTiersOrStale] of the tokens' block hashes.
func (x *PathIndex) MatchTiersOrStale(dst []TierMatch, tokens []uint32, page int, salt string, ids []TargetID, now time.Time) []TierMatch {
	base := len(dst)
	for range ids {
		dst = append(dst, TierMatch{})
	}
	x.match(matchOut{tiers: dst[base:]}, tokens, page, salt, ids, now)
	return dst
}

// match writes, for each target in ids, its leading pages held on the GPU (and, with
// out.tiers, on the GPU or the host) to out (-1 as GPU for a stale or unknown target).
func (x *PathIndex) match(out matchOut, tokens []uint32, page int, salt string, ids []TargetID, now time.Time) {
	withTiers := out.tiers != nil
	x.last.data, x.last.nodes = nil, x.last.nodes[:0]
	if page < 1 {
		page = 1
		tokens = nil
	}
	n := len(tokens) / page * page
	// alive[w]: the word-w targets still matching on the GPU; aliveAny[w]: on the GPU or the
	// host (a superset; with tiers only).
	var aliveArr, anyArr [4]uint64
	alive, aliveAny := aliveArr[:0], anyArr[:0]
	live := false
	for j, id := range ids {
		stale := !x.known(id) || x.stale[id]
		out.start(j, n/page, stale, -1)
		if stale {
			continue
		}
		for len(alive) <= int(id)>>6 {
			alive = append(alive, 0)
			aliveAny = append(aliveAny, 0)
		}
		alive[id>>6] |= uint64(1) << (id & 63)
		if withTiers {
			aliveAny[id>>6] |= uint64(1) << (id & 63)
		}
		live = true
	}
	defer out.finish()
	if !live || n == 0 {
		return
	}
	stopAll := func(at int) {
		for w := range alive {
			if a := alive[w]; a != 0 {
				out.stop(ids, a, w, at, true)
				alive[w] = 0
			}
			if aa := aliveAny[w]; aa != 0 {
				out.stop(ids, aa, w, at, false)
				aliveAny[w] = 0
			}
		}
	}
	usePending := x.cfg.PendingTTL > 0
	nowNs := now.UnixNano()
	nd := x.root(page, salt, false)
	if nd == nil {
		stopAll(0)
		return
	}
	w := &x.last
	w.gen, w.data, w.n, w.root, w.nodes = x.gen, unsafe.SliceData(tokens), n, nd, w.nodes[:0]
	i := 0
	defer func() { w.nd, w.i = nd, i }()
	for i < n {
		c := nd.child(tokens[i : i+page])
		if c == nil {
			stopAll(i / page)
			break
		}
		live = false
		for w := range alive {
			a, aa := alive[w], aliveAny[w]
			if a|aa == 0 {
				continue
			}
			var set uint64
			if w < len(c.held) {
				set = c.held[w]
			}
			if miss := (a | aa) &^ set; miss != 0 && usePending {
				for _, p := range c.pending {
					if int(p.id)>>6 == w && p.exp > nowNs {
						set |= uint64(1) << (p.id & 63)
					}
				}
			}
			if miss := a &^ set; miss != 0 {
				out.stop(ids, miss, w, i/page, true)
				a &^= miss
				alive[w] = a
			}
			if aa != 0 {
				if w < len(c.host) {
					set |= c.host[w]
				}
				if miss := aa &^ set; miss != 0 {
					out.stop(ids, miss, w, i/page, false)
					aa &^= miss
					aliveAny[w] = aa
				}
			}
			live = live || a|aa != 0
		}
		if !live {
			break
		}
		m := common(c.key, tokens[i:n], page)
		if m < len(c.key) {
			stopAll((i + m) / page)
			break
		}
		i += m
		nd = c
		w.nodes = append(w.nodes, c)
	}
}

// AddPending records that a request with these tokens (a chain started from salt, pages of
// page tokens) was routed to id at now: [Index.AddPending] of the tokens' block hashes.
func (x *PathIndex) AddPending(id TargetID, tokens []uint32, page int, salt string, now time.Time) {
	if x.cfg.PendingTTL <= 0 || page < 1 || len(tokens) < page || !x.known(id) || x.stale[id] {
		return
	}
	nowNs := now.UnixNano()
	x.expire(nowNs)
	exp := nowNs + int64(x.cfg.PendingTTL)
	path := tokens[:len(tokens)/page*page]
	root := x.root(page, salt, true)
	var nodes []*pathNode
	if w := &x.last; w.gen == x.gen && w.data == unsafe.SliceData(path) && w.n == len(path) && w.root == root {
		// The match of this very request walked the unchanged tree: go on from where it ended.
		nodes, _ = x.walkFrom(w.nd, w.i, append(x.nodes[:0], w.nodes...), path, 0, page, true, x.keep)
	} else {
		nodes, _ = x.walkFrom(root, 0, x.nodes[:0], path, 0, page, true, x.keep)
	}
	x.gen++
	for _, nd := range nodes {
		if !nd.holds(id) {
			nd.setPending(id, exp)
			x.expiries.push(nd, exp)
		}
	}
	if x.keep && len(nodes) > 0 {
		k := routedKey{unsafe.SliceData(path), len(path)}
		x.routed[k] = routedEnd{nodes[len(nodes)-1], root, exp}
		x.routedQ.push(k, exp)
	}
}

// Blocks returns the number of pages id holds on the GPU, in every tree (a walk of the whole
// index). Only tests call it; it is exported for sim's, which check the index a simulated
// event feed built.
func (x *PathIndex) Blocks(id TargetID) int { return x.blocks(id, TierGPU) }

// HostBlocks is [PathIndex.Blocks] for the host tier.
func (x *PathIndex) HostBlocks(id TargetID) int { return x.blocks(id, TierHost) }

func (x *PathIndex) blocks(id TargetID, tier Tier) int {
	n := 0
	var visit func(nd *pathNode, page int)
	visit = func(nd *pathNode, page int) {
		if (tier == TierGPU && nd.holds(id)) || (tier == TierHost && nd.holdsHost(id)) {
			n += len(nd.key) / page
		}
		for _, c := range nd.children.all() {
			for ; c != nil; c = c.next {
				visit(c, page)
			}
		}
	}
	for k, r := range x.roots {
		visit(r, k.page)
	}
	return n
}

package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return epoch.Add(d) }

// checkInvariants recounts everything the server maintains incrementally.
func (s *Server) checkInvariants() error {
	locks := map[*node]int32{}
	alloc := make([]int, len(s.ranks))
	counts := make([][QueueInflight + 1]int, len(s.ranks))
	nRun, bootTok, preTok := make([]int, len(s.ranks)), make([]int, len(s.ranks)), make([]int, len(s.ranks))
	nlive := 0
	for r := s.live.next; r != &s.live; r = r.next {
		nlive++
		if r.done {
			return fmt.Errorf("room %d is done but live", r.room)
		}
		if s.rooms[r.room] != r {
			return fmt.Errorf("room %d: live list and map disagree", r.room)
		}
		alloc[r.rk.id] += r.alloc
		counts[r.rk.id][r.queue]++
		if r.inRun {
			nRun[r.rk.id]++
		}
		switch r.queue {
		case QueueBootstrap:
			bootTok[r.rk.id] += len(r.prompt)
		case QueuePrealloc:
			preTok[r.rk.id] += len(r.prompt)
		}
		if r.alloc < 0 {
			return fmt.Errorf("room %d: negative alloc %d", r.room, r.alloc)
		}
		for x := r.node; x != nil && r.rk.cache != nil && x != r.rk.cache.root; x = x.parent {
			locks[x]++
		}
	}
	if nlive != len(s.rooms) {
		return fmt.Errorf("live list has %d rooms, map %d", nlive, len(s.rooms))
	}
	for i, rk := range s.ranks {
		if rk.private != alloc[i] {
			return fmt.Errorf("rank %d: private %d != Σ alloc %d", i, rk.private, alloc[i])
		}
		if rk.n != counts[i] {
			return fmt.Errorf("rank %d: queue counters %v != recount %v", i, rk.n, counts[i])
		}
		if rk.nRun != nRun[i] || rk.bootTok != bootTok[i] || rk.preTok != preTok[i] {
			return fmt.Errorf("rank %d: running/bootstrap tokens/prealloc tokens %d/%d/%d, recount %d/%d/%d",
				i, rk.nRun, rk.bootTok, rk.preTok, nRun[i], bootTok[i], preTok[i])
		}
		used := rk.private
		if c := rk.cache; c != nil {
			size, evictable, nodes := 0, 0, 0
			var walk func(x *node) error
			walk = func(x *node) error {
				for _, kc := range x.children {
					ch := kc.n
					if ch.parent != x {
						return fmt.Errorf("rank %d: bad parent link", i)
					}
					nodes++
					size += len(ch.key)
					if len(ch.key) == 0 || len(ch.key)%c.page != 0 {
						return fmt.Errorf("rank %d: key of %d tokens with page %d", i, len(ch.key), c.page)
					}
					if ch.lock != locks[ch] {
						return fmt.Errorf("rank %d: node lock %d, recount %d", i, ch.lock, locks[ch])
					}
					if ch.lock == 0 {
						evictable += len(ch.key)
					}
					inHeap := ch.heapIdx >= 0
					if want := ch.lock == 0 && len(ch.children) == 0; inHeap != want {
						return fmt.Errorf("rank %d: heap membership %v, want %v", i, inHeap, want)
					}
					if inHeap && c.heap.Entry(ch.heapIdx).V != ch {
						return fmt.Errorf("rank %d: heap index broken", i)
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
				return fmt.Errorf("rank %d: size/evictable/nodes %d/%d/%d, recount %d/%d/%d", i, c.size, c.evictable, c.nodes, size, evictable, nodes)
			}
			used += c.size
		}
		if used > rk.capacity {
			return fmt.Errorf("rank %d: KV in use %d > capacity %d", i, used, rk.capacity)
		}
		if h := rk.host(); h != nil {
			size, leaves := 0, 0
			var walk func(x *node)
			walk = func(x *node) {
				for _, kc := range x.children {
					size += len(kc.n.key)
					if len(kc.n.children) == 0 {
						leaves++
					}
					walk(kc.n)
				}
			}
			walk(h.tree.root)
			switch {
			case size != h.tree.size:
				return fmt.Errorf("rank %d: host tier size %d, recount %d", i, h.tree.size, size)
			case size > h.capacity:
				return fmt.Errorf("rank %d: host tier holds %d > its %d", i, size, h.capacity)
			case leaves != h.tree.heap.Len():
				return fmt.Errorf("rank %d: host tier has %d leaves, %d evictable", i, leaves, h.tree.heap.Len())
			}
		}
	}
	return nil
}

// cluster drives servers with zero network latency, forwarding Preallocated (decode) as
// Handshake to the prefill server and TransferDone (prefill) as KVArrived to the decode one.
type cluster struct {
	t       *testing.T
	prefill *Server // may be nil (unified only)
	decode  *Server
	single  *Server // unified
	outs    []Output
	now     time.Time
	check   bool
}

func (c *cluster) servers() []*Server {
	var ss []*Server
	for _, s := range []*Server{c.prefill, c.decode, c.single} {
		if s != nil {
			ss = append(ss, s)
		}
	}
	return ss
}

// next returns the earliest NextEvent over the servers.
func (c *cluster) next() (time.Time, bool) {
	var t time.Time
	ok := false
	for _, s := range c.servers() {
		if u, has := s.NextEvent(); has && (!ok || u.Before(t)) {
			t, ok = u, true
		}
	}
	return t, ok
}

// runUntil advances every server through all events up to until.
func (c *cluster) runUntil(until time.Time) {
	for {
		t, ok := c.next()
		if !ok || t.After(until) {
			break
		}
		c.step(t)
	}
	c.now = until
}

// runAll runs until nothing is scheduled (guarded).
func (c *cluster) runAll() {
	for i := 0; ; i++ {
		require.Less(c.t, i, 10_000_000, "runaway simulation")
		t, ok := c.next()
		if !ok {
			return
		}
		c.step(t)
	}
}

func (c *cluster) step(t time.Time) {
	if t.After(c.now) {
		c.now = t
	}
	for _, s := range c.servers() {
		outs := s.Advance(c.now)
		if c.check {
			require.NoError(c.t, s.checkInvariants())
		}
		for _, o := range outs {
			require.False(c.t, o.At.After(c.now), "output in the future: %v", o)
			switch {
			case s == c.decode && o.Kind == KindPreallocated && c.prefill != nil:
				c.prefill.HandshakeCached(c.now, o.Room, o.CachedTokens)
			case s == c.prefill && o.Kind == KindTransferDone && c.decode != nil:
				c.decode.KVArrived(c.now, o.Room, o.CachedTokens)
			}
		}
		c.outs = append(c.outs, outs...)
	}
}

// of returns the outputs of room (of one kind when kind != 0).
func (c *cluster) of(room uint64, kind Kind) []Output {
	var r []Output
	for _, o := range c.outs {
		if o.Room == room && (kind == 0 || o.Kind == kind) {
			r = append(r, o)
		}
	}
	return r
}

func newServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// prompt returns n token ids starting at base (distinct bases give disjoint prompts).
func prompt(base uint32, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = base + uint32(i)
	}
	return p
}

// testProfile is a simple coefficient profile with round numbers.
func testProfile() Profile {
	return Profile{Name: "test", A0: 0.001, A1: 1e-6, A2: 1e-10, B0: 0.005, B1: 1e-5, B2: 1e-8, T0: 0.001,
		KVBytesPerToken: 1e5, MaxTotalTokens: 100_000}
}

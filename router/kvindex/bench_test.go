package kvindex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// BenchmarkBlockHashes hashes an 8k-token prompt in pages of 16 (512 blocks).
func BenchmarkBlockHashes(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	toks := fillTokens(rng, make([]uint32, 8192))
	dst := make([]Hash, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendBlockHashes(dst[:0], toks, 16, "")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(toks)), "ns/token")
}

// BenchmarkApply applies BlockStored/BlockRemoved events as SGLang publishes them (one page per
// event) to one target holding a steady 256k blocks: each op is a batch of 512 stores of new
// blocks and 512 removals of the oldest. events/s is the one-core throughput.
func BenchmarkApply(b *testing.B) {
	const resident, batch = 1 << 18, 512
	rng := rand.New(rand.NewPCG(3, 4))
	x := New(Config{PendingTTL: time.Second})
	id := x.Target("http://w:1@0")
	x.SetStale(id, false)
	ring := make([]Hash, resident)
	for i := range ring {
		ring[i] = Hash(rng.Int64())
		x.Apply(id, []Event{{Kind: BlockStored, Hashes: ring[i : i+1]}}, t0)
	}
	evs := make([]Event, 2*batch)
	slab := make([]Hash, 2*batch) // the events' one-hash slices, reused
	next := 0
	b.ReportAllocs()
	for b.Loop() {
		for k := range batch {
			old := &ring[(next+k)%resident]
			slab[2*k] = *old
			*old = Hash(rng.Int64())
			slab[2*k+1] = *old
			evs[2*k] = Event{Kind: BlockRemoved, Hashes: slab[2*k : 2*k+1]}
			evs[2*k+1] = Event{Kind: BlockStored, Hashes: slab[2*k+1 : 2*k+2], BlockSize: 16}
		}
		next += batch
		x.Apply(id, evs, t0)
	}
	b.ReportMetric(float64(b.N)*2*batch/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMatch matches an 8k-token request (page 16: 512 blocks) over 32 targets in an index
// that also holds 64k unrelated blocks per target. hold=all: every target holds the whole chain
// (the walk cannot stop early: the worst case); hold=mixed: target i holds the first 16·i blocks.
// BenchmarkMatch matches a 512-block chain against 32 targets: hold=all holds it whole on every
// target's GPU, mixed a different prefix each; hold=tiers is mixed with the rest of each chain in
// host memory, matched by tier (MatchTiersOrStale, what cache_aware does with
// --kv-host-tier-weight > 0).
func BenchmarkMatch(b *testing.B) {
	const targets, blocks, noise = 32, 512, 1 << 16
	for _, hold := range []string{"all", "mixed", "tiers"} {
		b.Run(fmt.Sprintf("targets=%d/blocks=%d/hold=%s", targets, blocks, hold), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			x := New(Config{PendingTTL: time.Second})
			toks := fillTokens(rng, make([]uint32, blocks*16))
			chain := AppendBlockHashes(nil, toks, 16, "")
			ids := make([]TargetID, targets)
			for i := range ids {
				ids[i] = x.Target(fmt.Sprintf("http://10.0.0.%d:30000@0", i))
				x.SetStale(ids[i], false)
				n := blocks
				if hold != "all" {
					n = 16 * i
				}
				x.Apply(ids[i], []Event{{Kind: BlockStored, Hashes: chain[:n]}}, t0)
				if hold == "tiers" {
					x.Apply(ids[i], []Event{{Kind: BlockStored, Hashes: chain, Medium: "CPU_PINNED"}}, t0)
				}
				other := make([]Hash, noise)
				for k := range other {
					other[k] = Hash(rng.Int64())
				}
				x.Apply(ids[i], []Event{{Kind: BlockStored, Hashes: other}}, t0)
			}
			x.AddPending(ids[3], chain, t0) // one target with a pending burst
			dst := make([]int, 0, targets)
			tdst := make([]TierMatch, 0, targets)
			b.ReportAllocs()
			for b.Loop() {
				if hold == "tiers" {
					tdst = x.MatchTiersOrStale(tdst[:0], chain, ids, t0)
				} else {
					dst = x.MatchOrStale(dst[:0], chain, ids, t0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/match")
		})
	}
}

// BenchmarkMemory reports the index's heap per block per target, measured once per
// sub-benchmark (runtime.MemStats around the insertion; the op itself is a Stats call, its time
// is not the point): shared=1 inserts N blocks held by one target; shared=32 inserts N blocks
// held by each of 32 targets (one entry serves them all).
func BenchmarkMemory(b *testing.B) {
	const n = 100_000
	for _, shared := range []int{1, 32} {
		b.Run(fmt.Sprintf("blocks=%d/shared=%d", n, shared), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 8))
			hs := make([]Hash, n)
			for i := range hs {
				hs[i] = Hash(rng.Int64())
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			x := New(Config{})
			var id TargetID
			for t := range shared {
				id = x.Target(fmt.Sprintf("t%d", t))
				for i := range hs {
					x.Apply(id, []Event{{Kind: BlockStored, Hashes: hs[i : i+1]}}, t0)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(hs) // live across both readings: only the index differs
			perBlock := float64(after.HeapAlloc-before.HeapAlloc) / float64(n*shared)
			for b.Loop() {
				_ = x.Stats(id)
			}
			b.ReportMetric(perBlock, "B/block/target")
		})
	}
}

// BenchmarkPathIndexMatch is BenchmarkMatch for a PathIndex: an 8k-token request over 32
// targets at page 16 and page 1 (8k blocks: the simulator's default), each target also holding
// 256 unrelated 256-token runs. hold=all: every target holds the whole request; hold=mixed:
// target i holds its first 256·i tokens.
func BenchmarkPathIndexMatch(b *testing.B) {
	const targets, tokens = 32, 8192
	for _, page := range []int{16, 1} {
		for _, hold := range []string{"all", "mixed"} {
			b.Run(fmt.Sprintf("targets=%d/tokens=%d/page=%d/hold=%s", targets, tokens, page, hold), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(5, 6))
				x := NewPathIndex(Config{PendingTTL: time.Second})
				toks := fillTokens(rng, make([]uint32, tokens))
				ids := make([]TargetID, targets)
				other := make([]uint32, 256)
				for i := range ids {
					ids[i] = x.Target(fmt.Sprintf("http://10.0.0.%d:30000@0", i))
					x.SetStale(ids[i], false)
					n := tokens
					if hold == "mixed" {
						n = 256 * i
					}
					if n > 0 {
						x.Apply(ids[i], page, []PathEvent{{Kind: BlockStored, Path: toks[:n], New: n}}, t0)
					}
					for range 256 {
						fillTokens(rng, other)
						x.Apply(ids[i], page, []PathEvent{{Kind: BlockStored, Path: other, New: len(other)}}, t0)
					}
				}
				x.AddPending(ids[3], toks, page, "", t0) // one target with a pending burst
				dst := make([]int, 0, targets)
				b.ReportAllocs()
				for b.Loop() {
					dst = x.MatchOrStale(dst[:0], toks, page, "", ids, t0)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/match")
			})
		}
	}
}

// fillTokens fills toks with random token ids of a 150k vocabulary and returns it.
func fillTokens(rng *rand.Rand, toks []uint32) []uint32 {
	for i := range toks {
		toks[i] = rng.Uint32N(150_000)
	}
	return toks
}

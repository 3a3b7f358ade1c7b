package tree

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// The benchmark corpus (the acceptance setup): 64 groups of prompts that share a
// prefix of 90% of their length within the group (7,200 of 8,000 chars) and differ in a random
// suffix; 64 tenants, each group mostly routed to its own tenant. ASCII, fixed seeds.
const (
	benchGroups  = 64
	benchTenants = 64
)

var benchLens = []int{100, 8000}

type prompt struct {
	text, tenant string
}

// benchCorpus returns perGroup prompts of n chars for each group, interleaved across groups
// (the arrival order a router sees). The same seed gives the same group prefixes, so corpora
// drawn with different suffixSeeds share them.
func benchCorpus(n, perGroup int, suffixSeed uint64) []prompt {
	const alphabet = "abcdefghijklmnopqrstuvwxyz ,."
	prefixRNG := rand.New(rand.NewPCG(1, 0))
	suffixRNG := rand.New(rand.NewPCG(2, suffixSeed))
	random := func(rng *rand.Rand, k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	tenants := make([]string, benchTenants)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("http://worker-%02d:8000", i)
	}
	prefixLen := n * 9 / 10
	prefixes := make([][]byte, benchGroups)
	for g := range prefixes {
		prefixes[g] = random(prefixRNG, prefixLen)
	}
	out := make([]prompt, 0, benchGroups*perGroup)
	for i := range perGroup {
		for g := range benchGroups {
			tenant := tenants[g%benchTenants]
			if i%4 == 3 { // a quarter go elsewhere (imbalance, misses)
				tenant = tenants[suffixRNG.IntN(benchTenants)]
			}
			text := string(append(append([]byte{}, prefixes[g]...), random(suffixRNG, n-prefixLen)...))
			out = append(out, prompt{text: text, tenant: tenant})
		}
	}
	return out
}

// perGroupFor keeps each corpus around 8 MB of text.
func perGroupFor(n int) int { return max(4, 8<<20/(benchGroups*n)) }

// warmTree holds one earlier prompt per group, so inserts find their group's prefix.
func warmTree(n int) *Tree {
	tr := New()
	for _, p := range benchCorpus(n, 1, 99) {
		tr.Insert(p.text, p.tenant)
	}
	return tr
}

func reportPerChar(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/char")
}

// BenchmarkInsert inserts new prompts (their group prefix present, the suffix new), rebuilding
// the warm tree off the clock whenever the corpus is used up.
func BenchmarkInsert(b *testing.B) {
	for _, n := range benchLens {
		b.Run(fmt.Sprintf("len=%d", n), func(b *testing.B) {
			prompts := benchCorpus(n, perGroupFor(n), 0)
			tr, i := warmTree(n), 0
			b.ReportAllocs()
			for b.Loop() {
				if i == len(prompts) {
					b.StopTimer()
					tr, i = warmTree(n), 0
					b.StartTimer()
				}
				tr.Insert(prompts[i].text, prompts[i].tenant)
				i++
			}
			reportPerChar(b, n)
		})
	}
}

// BenchmarkMatch matches new prompts against a tree holding other prompts of their groups: the
// group prefix matches and the match stops early in the suffix. The dst slice is reused.
func BenchmarkMatch(b *testing.B) {
	for _, n := range benchLens {
		b.Run(fmt.Sprintf("len=%d", n), func(b *testing.B) {
			tr := New()
			for _, p := range benchCorpus(n, perGroupFor(n), 0) {
				tr.Insert(p.text, p.tenant)
			}
			prompts := benchCorpus(n, perGroupFor(n), 1)
			dst := make([]string, 0, benchTenants)
			i, matched := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				var m int
				m, dst = tr.PrefixMatch(prompts[i].text, dst)
				matched += m
				if i++; i == len(prompts) {
					i = 0
				}
			}
			reportPerChar(b, n)
			if matched < b.N*n*9/10 {
				b.Fatalf("matched %d chars in %d matches, want at least the group prefixes", matched, b.N)
			}
		})
	}
}

// BenchmarkMatchInsert is the cache_aware hot path for a new prompt: PrefixMatch, then Insert
// for the chosen tenant.
func BenchmarkMatchInsert(b *testing.B) {
	for _, n := range benchLens {
		b.Run(fmt.Sprintf("len=%d", n), func(b *testing.B) {
			prompts := benchCorpus(n, perGroupFor(n), 0)
			tr, i := warmTree(n), 0
			dst := make([]string, 0, benchTenants)
			b.ReportAllocs()
			for b.Loop() {
				if i == len(prompts) {
					b.StopTimer()
					tr, i = warmTree(n), 0
					b.StartTimer()
				}
				_, dst = tr.PrefixMatch(prompts[i].text, dst)
				tr.Insert(prompts[i].text, prompts[i].tenant)
				i++
			}
			reportPerChar(b, n)
		})
	}
}

// BenchmarkMemory builds a tree from 10 M chars of 8,000-char prompts and reports the live heap
// it holds per char stored on its edges (B/char) and per node (B/node).
func BenchmarkMemory(b *testing.B) {
	const n, chars = 8000, 10_000_000
	b.Run("chars=10M", func(b *testing.B) {
		prompts := benchCorpus(n, chars/n/benchGroups+1, 0)[:chars/n]
		var before, after runtime.MemStats
		var tr *Tree
		b.ReportAllocs()
		for b.Loop() {
			tr = nil
			runtime.GC()
			runtime.ReadMemStats(&before)
			tr = New()
			for _, p := range prompts {
				tr.Insert(p.text, p.tenant)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
		}
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(heap/float64(tr.TotalChars()), "B/char")
		b.ReportMetric(float64(tr.TotalChars()), "stored-chars")
		b.ReportMetric(float64(tr.Nodes()), "nodes")
		runtime.KeepAlive(tr)
		runtime.KeepAlive(prompts)
	})
}

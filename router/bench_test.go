package router

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/pdrouter/pdrouter/internal/testutil"
)

// benchCorpus returns groups×perGroup prompts: each group shares a prefixLen-char random
// prefix, each prompt adds a suffixLen-char random suffix (the corpus: 64 groups,
// 7,200 + 800 chars).
func benchCorpus(groups, perGroup, prefixLen, suffixLen int) []string {
	rng := rand.New(rand.NewPCG(2026, 11))
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ,.0123456789"
	randText := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	var out []string
	for range groups {
		prefix := randText(prefixLen)
		for range perGroup {
			out = append(out, prefix+randText(suffixLen))
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func benchRouter(b *testing.B, targets int) *Router {
	b.Helper()
	cfg := DefaultConfig()
	r, err := New(cfg, testutil.NewManualClock(epoch), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		b.Fatal(err)
	}
	for i := range targets {
		if err := r.AddWorker(WorkerSpec{URL: fmt.Sprintf("http://10.0.0.%d:30000", i), Role: Regular}); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkRoute measures Route+Done with cache_aware over 64 targets on 8,000-char prompts
// from 64 shared-prefix groups. The tree is warmed with one pass over the corpus first, so the
// numbers are the steady state (match of a known prefix + insert).
func BenchmarkRoute(b *testing.B) {
	corpus := benchCorpus(64, 16, 7200, 800)
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(fmt.Sprintf("policy=cache_aware/targets=64/mode=%s", mode), func(b *testing.B) {
			r := benchRouter(b, 64)
			for _, text := range corpus {
				d, err := r.Route(&Request{Text: text})
				if err != nil {
					b.Fatal(err)
				}
				d.Done(Regular, Success)
			}
			b.ReportAllocs()
			b.SetBytes(8000)
			if mode == "serial" {
				i := 0
				for b.Loop() {
					d, _ := r.Route(&Request{Text: corpus[i%len(corpus)]})
					d.Done(Regular, Success)
					i++
				}
				return
			}
			var start atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(start.Add(97)) // spread goroutines over the corpus
				for pb.Next() {
					d, _ := r.Route(&Request{Text: corpus[i%len(corpus)]})
					d.Done(Regular, Success)
					i++
				}
			})
		})
	}
}

// BenchmarkRouteSimplePolicies gives the floor: Route+Done without a tree.
func BenchmarkRouteSimplePolicies(b *testing.B) {
	for _, policy := range []string{PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo} {
		b.Run(fmt.Sprintf("policy=%s/targets=64", policy), func(b *testing.B) {
			r := benchRouter(b, 64)
			r.policies[Regular], _ = NewPolicy(policy, r.cfg, r.rng)
			req := &Request{Text: "hello"}
			b.ReportAllocs()
			for b.Loop() {
				d, _ := r.Route(req)
				d.Done(Regular, Success)
			}
		})
	}
}

// BenchmarkPredictedLatencyPair measures Route+Done with predicted_latency choosing among 16
// prefill × 16 decode targets (256 pairs) with fresh engine reports, on 8,000-char prompts of
// 64 shared-prefix groups (tree warmed first): the bound is 20 µs a decision.
func BenchmarkPredictedLatencyPair(b *testing.B) {
	corpus := benchCorpus(64, 16, 7200, 800)
	cfg := DefaultConfig()
	cfg.PDDisaggregation, cfg.Policy, cfg.TPOTSLOMs = true, PolicyPredictedLatency, 50
	clk := testutil.NewManualClock(epoch)
	r, err := New(cfg, clk, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 16 {
		for _, w := range []WorkerSpec{{URL: fmt.Sprintf("http://10.0.0.%d:30000", i), Role: Prefill}, {URL: fmt.Sprintf("http://10.0.1.%d:30000", i), Role: Decode}} {
			if err := r.AddWorker(w); err != nil {
				b.Fatal(err)
			}
			if err := r.ReportLoad(w.URL, EngineLoad{RunningReqs: i, WaitingReqs: i % 3, WaitingUncachedTokens: 1000 * i, UsedTokens: 5000 * i}, clk.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, role := range []Role{Prefill, Decode} {
		if err := r.UseLatencyModel(role, testModel); err != nil {
			b.Fatal(err)
		}
	}
	route := func(text string) {
		d, err := r.Route(&Request{Text: text})
		if err != nil {
			b.Fatal(err)
		}
		d.Done(Prefill, Success)
		d.Done(Decode, Success)
	}
	for _, text := range corpus {
		route(text)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		route(corpus[i%len(corpus)])
		i++
	}
}

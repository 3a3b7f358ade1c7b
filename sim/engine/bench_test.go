package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeStep measures one decode step (step end: one Token per request, then the next
// batch formed) on a decode rank with batch running requests.
func BenchmarkDecodeStep(b *testing.B) {
	for _, batch := range []int{64, 128, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			p, err := LookupProfile("llama3-8b-h100")
			if err != nil {
				b.Fatal(err)
			}
			s := newServer(b, Config{Role: RoleDecode, Profile: p, MaxTotalTokens: 1 << 40})
			for i := range batch {
				s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(0, 1000), MaxNew: 1 << 40})
			}
			for _, o := range s.Advance(at(0)) {
				s.KVArrived(at(0), o.Room, 0)
			}
			buf := s.Advance(at(0))
			b.ReportAllocs()
			for b.Loop() {
				t, _ := s.NextEvent()
				buf = s.AppendAdvance(buf[:0], t)
				if len(buf) != batch {
					b.Fatalf("%d outputs, want %d", len(buf), batch)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(batch), "ns/request")
		})
	}
}

// BenchmarkAdmit8k admits an 8k-token prompt into a warm cache of 1M tokens: prefix match
// (hit counted), insert, LRU eviction back to capacity. Prompts share one of 16 system prompts
// of 2k tokens and, half the time, 4k tokens of an earlier conversation.
func BenchmarkAdmit8k(b *testing.B) {
	const capacity = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 4096
	prompts := make([][]uint32, n)
	for i := range prompts {
		p := prompt(uint32(rng.IntN(16))<<24, 2048)
		if i > 0 && rng.IntN(2) == 0 {
			prev := prompts[rng.IntN(i)]
			p = append(p[:0:0], prev[:6144]...)
		} else {
			p = append(p, prompt(uint32(i)<<12|1<<31, 4096)...)
		}
		p = append(p, prompt(uint32(i)<<12|1<<30, 8192-len(p))...)
		prompts[i] = p
	}
	c := newRadix(1)
	admit := func(p []uint32) int {
		hit, _ := c.match(p[:len(p)-1])
		c.insert(p)
		if over := c.size - capacity; over > 0 {
			c.evict(over)
		}
		return hit
	}
	for _, p := range prompts { // warm up: the cache is full
		admit(p)
	}
	b.ReportAllocs()
	i, hits := 0, 0
	for b.Loop() {
		hits += admit(prompts[i%n])
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8192, "ns/token")
	b.ReportMetric(float64(hits)/float64(b.N)/8192, "hit-ratio")
}

// BenchmarkPrefillBatch forms and runs prefill batches of n waiting requests on a unified rank
// (groups of 16 sharing a 1,024-token system prompt, 64-token questions, one output token):
// queue ordering (SGLang's default lpm with in-batch prefix sharing up to 128 waiting, FCFS
// past that), admission with prefix match, the steps, and insertion into the cache, per
// request.
func BenchmarkPrefillBatch(b *testing.B) {
	for _, batch := range []int{128, 256} {
		b.Run(fmt.Sprintf("waiting=%d", batch), func(b *testing.B) {
			prompts := make([][]uint32, batch)
			for i := range prompts {
				prompts[i] = append(prompt(uint32(i%16)<<20, 1024), prompt(uint32(i)<<12|1<<31, 64)...)
			}
			p, err := LookupProfile("llama3-8b-h100")
			if err != nil {
				b.Fatal(err)
			}
			s := newServer(b, Config{Role: RoleUnified, Profile: p, ChunkedPrefillSize: 1 << 20, MaxTotalTokens: 1 << 24})
			now := at(0)
			var buf []Output
			room := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				for _, pr := range prompts {
					room++
					s.Submit(now, Req{Room: room, Rank: -1, Prompt: pr, MaxNew: 1})
				}
				done := 0
				for done < batch {
					t, ok := s.NextEvent()
					if !ok {
						b.Fatalf("idle with %d of %d finished", done, batch)
					}
					now = t
					buf = s.AppendAdvance(buf[:0], t)
					for _, o := range buf {
						if o.Kind == KindFinished {
							done++
						}
					}
				}
				s.FlushCache()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(batch), "ns/request")
		})
	}
}

package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// GPUs by memory only: the defaults depend on nothing else, and the catalog's figures may
// change.
var (
	gpu80 = GPU{Name: "h100-80g", MemoryBytes: 80e9} // 76,294 MiB: SGLang's H100/A100-80G band
	gpu24 = GPU{Name: "a10-24g", MemoryBytes: 24e9}  // 22,888 MiB: the A10/4090 band
)

// Hand-checked against server_args.py _handle_gpu_memory_settings:
//
//	H100 TP1: chunk 8192, graph 256; reserved 512 + 1.5·8192 + 2·256 + 1024/8 = 13,440 MiB
//	          → (76,294 − 13,440) / 76,294 = 0.824
//	H100 TP8: graph 512; reserved 512 + 12,288 + 1,024 + 1,024 = 14,848 → 0.805
//	A10 TP1:  chunk 2048, graph 24; reserved 512 + 3,072 + 48 + 128 = 3,760 (no 10 GiB floor
//	          under 60 GiB) → (22,888 − 3,760) / 22,888 = 0.836
//	A10 TP4:  graph 80; reserved 512 + 3,072 + 160 + 512 = 4,256 → 0.814
func TestWithSGLangDefaultsByGPUMemory(t *testing.T) {
	for _, tc := range []struct {
		name                string
		g                   GPU
		par                 Parallelism
		chunk, graph        int
		mfs, conservatively float64
	}{
		{"h100 tp1", gpu80, Parallelism{TP: 1}, 8192, 256, 0.824, 1},
		{"h100 tp8", gpu80, Parallelism{TP: 8}, 8192, 512, 0.805, 1},
		{"a10 tp1", gpu24, Parallelism{TP: 1}, 2048, 24, 0.836, 1},
		{"a10 tp4", gpu24, Parallelism{TP: 4}, 2048, 80, 0.814, 1},
		// Two replicas of TP1 (8 GPUs would be TP8): SGLang's tp_size is 1 per replica.
		{"h100 2×tp1 replicas", gpu80, Parallelism{TP: 2, DP: 2}, 8192, 256, 0.824, 1},
		// Unknown memory: SGLang's fallback.
		{"unknown gpu", GPU{Name: "x"}, Parallelism{TP: 1}, 4096, 160, 0.88, 1},
		// 192 GB (B200): 16k chunks, graph 512; reserved 512 + 24,576 + 1,024 + 128 = 26,240
		// of 183,105 MiB → 0.857.
		{"b200 tp1", GPU{Name: "b200", MemoryBytes: 192e9}, Parallelism{TP: 1}, 16384, 512, 0.857, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ServerArgs{}.WithSGLangDefaults(tc.g, tc.par)
			assert.Equal(t, tc.chunk, a.ChunkedPrefillSize, "chunked_prefill_size")
			assert.Equal(t, tc.graph, a.CUDAGraphMaxBS, "cuda_graph_max_bs")
			assert.InDelta(t, tc.mfs, a.MemFractionStatic, 1e-9, "mem_fraction_static")
			assert.Equal(t, 1, a.PageSize)
			assert.InDelta(t, tc.conservatively, a.ScheduleConservativeness, 1e-12)
			assert.Zero(t, a.MaxRunningRequests, "left to BuildServer (depends on the KV pool)")
		})
	}
}

// Given values stay; a given chunk size shapes the reserved memory.
func TestWithSGLangDefaultsKeepsGivenValues(t *testing.T) {
	a := ServerArgs{ChunkedPrefillSize: 16384, CUDAGraphMaxBS: 64, PageSize: 16, ScheduleConservativeness: 2}.
		WithSGLangDefaults(gpu80, Parallelism{TP: 1})
	assert.Equal(t, 16384, a.ChunkedPrefillSize)
	assert.Equal(t, 64, a.CUDAGraphMaxBS)
	assert.Equal(t, 16, a.PageSize)
	assert.InDelta(t, 2.0, a.ScheduleConservativeness, 1e-12)
	// reserved 512 + 1.5·16384 + 2·64 + 128 = 25,344 → (76,294 − 25,344) / 76,294 = 0.668.
	assert.InDelta(t, 0.668, a.MemFractionStatic, 1e-9)

	b := ServerArgs{MemFractionStatic: 0.9}.WithSGLangDefaults(gpu80, Parallelism{TP: 1})
	assert.InDelta(t, 0.9, b.MemFractionStatic, 1e-12)
}

// Under DP attention (TP8 DP8 on H100): graph 512 per rank; reserved 14,848 + 3·512·8 +
// 1.5·512·8 (graph > 300) = 33,280 → 0.564; the 8192 chunk becomes 1024 per rank,
// conservativeness 0.3, a given max_running_requests 256 → 32 per rank. DP attention with
// dp 1 is off (SGLang turns it off).
func TestWithSGLangDefaultsDPAttention(t *testing.T) {
	a := ServerArgs{MaxRunningRequests: 256}.WithSGLangDefaults(gpu80, Parallelism{TP: 8, DP: 8, DPAttention: true})
	assert.Equal(t, 1024, a.ChunkedPrefillSize)
	assert.Equal(t, 512, a.CUDAGraphMaxBS)
	assert.InDelta(t, 0.564, a.MemFractionStatic, 1e-9)
	assert.InDelta(t, 0.3, a.ScheduleConservativeness, 1e-12)
	assert.Equal(t, 32, a.MaxRunningRequests)

	one := ServerArgs{}.WithSGLangDefaults(gpu80, Parallelism{TP: 8, DP: 1, DPAttention: true})
	assert.Equal(t, 8192, one.ChunkedPrefillSize)
	assert.InDelta(t, 1.0, one.ScheduleConservativeness, 1e-12)

	// PerRank alone divides only the set sizes; conservativeness, unset, is SGLang's 1 × 0.3.
	p := ServerArgs{ChunkedPrefillSize: 65536}.PerRank(Parallelism{TP: 8, DP: 8, DPAttention: true})
	assert.Equal(t, ServerArgs{ChunkedPrefillSize: 8192, ScheduleConservativeness: 0.3}, p)
	assert.Equal(t, ServerArgs{ChunkedPrefillSize: 65536}, ServerArgs{ChunkedPrefillSize: 65536}.PerRank(Parallelism{TP: 8, DP: 8}))
}

func TestMaxRunningRequestsFor(t *testing.T) {
	// Unset: the request pool, capacity/context·512 clamped to [2048, 4096], at most half the pool.
	assert.Equal(t, 2048, MaxRunningRequestsFor(0, 400_000, 131072))   // 1,562 → 2,048
	assert.Equal(t, 3125, MaxRunningRequestsFor(0, 800_000, 131072))   // 3,125
	assert.Equal(t, 4096, MaxRunningRequestsFor(0, 2_000_000, 131072)) // 7,812 → 4,096
	assert.Equal(t, 1000, MaxRunningRequestsFor(0, 2000, 131072))      // half of a 2,000-token pool
	// Given: kept, at most half the pool.
	assert.Equal(t, 256, MaxRunningRequestsFor(256, 400_000, 131072))
	assert.Equal(t, 6000, MaxRunningRequestsFor(10_000, 12_000, 131072))
}

// BuildServer: the KV pool comes from the profile built with the resolved memory fraction,
// capped by a given max_total_tokens, and max_running_requests from that pool.
func TestBuildServer(t *testing.T) {
	g := H100SXM
	p, a, err := BuildServer("", Llama3Dense8B, g, Parallelism{TP: 1}, ServerArgs{})
	require.NoError(t, err)
	assert.Equal(t, "llama3-8b-"+g.Name+"-tp1", p.Name)
	want := ServerArgs{}.WithSGLangDefaults(g, Parallelism{TP: 1})
	g.MemFractionStatic = want.MemFractionStatic
	ref, err := Build("ref", Llama3Dense8B, g, Parallelism{TP: 1})
	require.NoError(t, err)
	assert.Equal(t, ref.MaxTotalTokens, p.MaxTotalTokens, "the profile is built with the resolved mem_fraction_static")
	assert.Equal(t, p.MaxTotalTokens, a.MaxTotalTokens)
	assert.Equal(t, MaxRunningRequestsFor(0, p.MaxTotalTokens, 131072), a.MaxRunningRequests)
	assert.Equal(t, want.ChunkedPrefillSize, a.ChunkedPrefillSize)

	// A smaller --max-total-tokens wins, rounded down to pages; half of it bounds the requests.
	_, a, err = BuildServer("x", Llama3Dense8B, H100SXM, Parallelism{TP: 1}, ServerArgs{MaxTotalTokens: 12_005, PageSize: 16})
	require.NoError(t, err)
	assert.Equal(t, 12_000, a.MaxTotalTokens)
	assert.Equal(t, 2048, a.MaxRunningRequests)
	_, a, err = BuildServer("x", Llama3Dense8B, H100SXM, Parallelism{TP: 1}, ServerArgs{MaxTotalTokens: 3000})
	require.NoError(t, err)
	assert.Equal(t, 1500, a.MaxRunningRequests)
	// A larger one is ignored, as SGLang ignores it.
	_, a, err = BuildServer("x", Llama3Dense8B, H100SXM, Parallelism{TP: 1}, ServerArgs{MaxTotalTokens: 1 << 40})
	require.NoError(t, err)
	assert.Equal(t, ref.MaxTotalTokens, a.MaxTotalTokens)

	_, _, err = BuildServer("x", Llama3Dense8B, H100SXM, Parallelism{TP: 1}, ServerArgs{MemFractionStatic: 1.5})
	assert.ErrorContains(t, err, "--mem-fraction-static")
	_, _, err = BuildServer("x", Llama3Dense8B, H100SXM, Parallelism{TP: 4, DP: 3}, ServerArgs{})
	assert.ErrorContains(t, err, "--dp-size")
}

// A GPU's host and disaggregation overheads (fitted per GPU by sim/validate) reach the server's
// profile; unset, the defaults do, and nothing else in the profile moves with them.
func TestBuildServerHostAndPDOverheadFromTheGPU(t *testing.T) {
	par := Parallelism{TP: 1}
	p, _, err := BuildServer("x", Llama3Dense8B, H100SXM, par, ServerArgs{})
	require.NoError(t, err)
	assert.Equal(t, DefaultHostOverhead, p.HostOverhead)
	assert.Equal(t, DefaultPDOverhead, p.PDOverhead)
	g := H100SXM
	g.HostOverhead, g.PDOverhead = 0.025, 0.004
	q, _, err := BuildServer("x", Llama3Dense8B, g, par, ServerArgs{})
	require.NoError(t, err)
	assert.Equal(t, 0.025, q.HostOverhead)
	assert.Equal(t, 0.004, q.PDOverhead)
	q.HostOverhead, q.PDOverhead = p.HostOverhead, p.PDOverhead
	assert.Equal(t, p, q)
}

// --kv-cache-dtype fp8_e4m3 stores the KV in one byte: the pool holds twice the tokens, a
// long-context decode step reads half the KV, and the engine is otherwise the same.
func TestBuildServerFP8KVCache(t *testing.T) {
	par := Parallelism{TP: 4}
	p16, r16, err := BuildServer("", Llama3Dense70B, H100SXM, par, ServerArgs{})
	require.NoError(t, err)
	p8, r8, err := BuildServer("", Llama3Dense70B, H100SXM, par, ServerArgs{KVCacheDType: "fp8_e4m3"})
	require.NoError(t, err)
	assert.InEpsilon(t, 2*r16.MaxTotalTokens, r8.MaxTotalTokens, 0.001)
	assert.InEpsilon(t, p16.KVBytesPerToken/2, p8.KVBytesPerToken, 1e-9)
	assert.Less(t, p8.DecodeTime(64, 64*8000), p16.DecodeTime(64, 64*8000))
	assert.Equal(t, p16.M0, p8.M0, "the weights are untouched")
	_, _, err = BuildServer("", Llama3Dense70B, H100SXM, par, ServerArgs{KVCacheDType: "int4"})
	assert.ErrorContains(t, err, `--kv-cache-dtype "int4" is not modelled`)
}

package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPresets(t *testing.T) {
	t.Parallel()
	names := PresetNames()
	for _, want := range []string{"llama3-8b-a100", "llama3-8b-h100", "llama3-8b-h200", "llama3-70b-a100-tp8",
		"llama3-70b-h100-tp8", "llama3-70b-h200-tp8", "qwen3-30b-a3b-h100-dp8", "qwen3-30b-a3b-h200-dp8",
		"qwen3-30b-a3b-h20-dp8", "deepseek-v3-h100-dp16", "deepseek-v3-h200-dp8", "deepseek-v3-h20-dp16", "instant", "constant",
		"llama3-70b-h100-tp4", "deepseek-v3-h100-ep32-prefill", "deepseek-v3-h100-ep72-decode", "kimi-k2-h200-ep96-decode",
		"qwen2.5-7b-gptq-a10-tp4", "gpt-oss-120b-b200-dp4", "deepseek-v3-fp4-gb200-ep48-decode"} {
		assert.Contains(t, names, want)
	}
	lines := strings.Split(strings.TrimSuffix(FormatPresets(false), "\n"), "\n")
	require.Len(t, lines, len(names)+1, "a header, then one line per preset")
	assert.Regexp(t, `^profile +kv_tokens +prefill_tok/s +itl_b1 +itl_b64 +itl_b256 +source$`, lines[0])
	for i, l := range lines[1:] {
		assert.True(t, strings.HasPrefix(l, names[i]+" "), "line %q starts with its name", l)
	}
	assert.Len(t, strings.Split(strings.TrimSuffix(FormatPresets(true), "\n"), "\n"), 2*len(names)+1)
	_, err := LookupProfile("gpt-5")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"gpt-5"`)
	assert.Contains(t, err.Error(), "llama3-8b-h100")

	c, err := LookupProfile("constant")
	require.NoError(t, err)
	assert.Equal(t, DefaultTTFT, c.TTFT)
	assert.True(t, c.Constant)
}

// TestRooflineNumbers checks the presets against well-known orders of magnitude.
func TestRooflineNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		kvBytes            float64
		minITL, maxITL     time.Duration // batch 1, short context
		minCap, maxCap     int
		min8kTTFT, max8kTT time.Duration
	}{
		{"llama3-8b-h100", 131072, 5 * time.Millisecond, 9 * time.Millisecond, 350_000, 500_000, 150 * time.Millisecond, 600 * time.Millisecond},
		{"llama3-70b-h100-tp8", 327680, 6 * time.Millisecond, 15 * time.Millisecond, 1_000_000, 1_600_000, 150 * time.Millisecond, 800 * time.Millisecond},
		{"llama3-8b-a100", 131072, 8 * time.Millisecond, 13 * time.Millisecond, 350_000, 500_000, 600 * time.Millisecond, 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := preset(t, tc.name)
			assert.InDelta(t, tc.kvBytes, p.KVBytesPerToken, 0.5)
			itl := p.DecodeTime(1, 1000)
			assert.True(t, itl >= tc.minITL && itl <= tc.maxITL, "ITL %s", itl)
			assert.True(t, p.MaxTotalTokens >= tc.minCap && p.MaxTotalTokens <= tc.maxCap, "capacity %d", p.MaxTotalTokens)
			ttft := p.PrefillTime(8192, 8192*4096)
			assert.True(t, ttft >= tc.min8kTTFT && ttft <= tc.max8kTT, "8k prefill %s", ttft)
			assert.Contains(t, p.Source, "datasheet")
		})
	}
	// DP attention + EP: each GPU holds the attention weights and 1/8 of the experts, so the
	// KV room per rank is far above what a rank holding the whole model would have.
	q := preset(t, "qwen3-30b-a3b-h20-dp8")
	require.NotNil(t, q.DPAttn)
	assert.Equal(t, 8, q.DPAttn.GPUs)
	assert.Greater(t, q.MaxTotalTokens, 600_000)
	// At batch 1 few experts are read: ITL well under the whole-weights read of one H20 (19 ms),
	// of which H20's fitted per-MoE-layer fixed time (MoELayerOverhead, 48 layers) is ~6 ms.
	assert.Less(t, q.ITLAt(1), 12*time.Millisecond)
	assert.Greater(t, q.ITLAt(64), q.ITLAt(1), "more tokens route to more experts")
	_, err := roofline("x", Llama3Dense70B, H100SXM, 1)
	require.Error(t, err, "70B BF16 does not fit on one H100")
	assert.Contains(t, err.Error(), "do not fit")
	_, err = roofline("x", Llama3Dense8B, H100SXM, 0)
	assert.ErrorContains(t, err, "--tp-size")
}

func TestProfileTimes(t *testing.T) {
	t.Parallel()
	p := testProfile()
	assert.Equal(t, 5*time.Millisecond+10*time.Microsecond+10*time.Microsecond, p.DecodeTime(1, 1000), "the additive form")
	assert.Equal(t, time.Millisecond, p.transferTime(1000, 0), "no bandwidth: setup only")
	assert.Zero(t, Profile{}.PrefillTime(0, 0))
}

// A decode step is bound by the larger of its memory and compute times, not their sum: at
// batch 1 the weights read dominates, at a large batch on a compute-poor GPU the FLOPs do.
func TestDecodeTimeIsMaxNotSum(t *testing.T) {
	t.Parallel()
	p := Profile{B0: 0.001, M0: 0.010, M2: 1e-8, C1: 1e-4, C2: 1e-9}
	// batch 1, 1,000 context tokens: memory 10.01 ms, compute 0.101 ms.
	assert.Equal(t, time.Duration(1e6+10.01e6), p.DecodeTime(1, 1000))
	assert.Equal(t, time.Duration(10.01e6), p.memoryTime(1, 1000))
	// batch 256, 256,000 context tokens: memory 10 + 2.56 = 12.56 ms, compute 25.6 + 0.256 =
	// 25.856 ms; the sum would be 38.4 ms.
	assert.Equal(t, time.Duration(1e6+25.856e6), p.DecodeTime(256, 256_000))
	assert.Equal(t, time.Duration(25.856e6), p.computeTime(256, 256_000))
	// MoE: the routed experts read grows with the share of experts the batch hits.
	m := Profile{ExpertM0: 0.008, Experts: 8, TopK: 2}
	assert.Equal(t, time.Duration(2e6), m.DecodeTime(1, 0), "one token hits 2 of 8 experts")
	assert.InDelta(t, 8e6, float64(m.DecodeTime(64, 0)), 1e3, "64 tokens hit them all")
}

// Under DP attention a step costs the slowest rank's attention part plus the shared FFN/MoE
// part on the batch gathered from every rank.
func TestDPAttentionSplitTimes(t *testing.T) {
	t.Parallel()
	p := Profile{A0: 0.001, A2: 1e-10, B0: 0.0005, M2: 1e-8, C2: 1e-9,
		DPAttn: &DPAttnSplit{GPUs: 8, AttnA1: 1e-7, AttnM0: 0.002, AttnC1: 1e-5, FFNM0: 0.003, FFNC1: 1e-6, CommFixed: 0.001, CommPerToken: 1e-7}}
	assert.Equal(t, time.Duration(0.5e6+2e6+0.01e6), p.AttnDecodeTime(1, 1000))
	// 640 requests over 1,280,000 context tokens: GEMMs compute-bound (6.4 ms > 2 ms of
	// weights), attention memory-bound (12.8 ms of KV > 1.28 ms of FLOPs): the kernels add,
	// 0.5 + 6.4 + 12.8 ms, where one max over both would give 0.5 + 14.8.
	assert.Equal(t, time.Duration(0.5e6+6.4e6+12.8e6), p.AttnDecodeTime(640, 1_280_000))
	assert.Equal(t, time.Duration(3e6+1e6+0.1e3), p.SharedTime(1))
	assert.Equal(t, time.Duration(1e6*4+1e6+0.4e6), p.SharedTime(4000), "compute-bound FFN on 4,000 gathered tokens")
	assert.Zero(t, p.SharedTime(0))
	assert.Equal(t, time.Duration(1e6+0.1e6+0.05e6), p.AttnPrefillTime(1000, 1000*500))
}

// A prefill step's linear layers cost the larger of the weights read and their FLOPs.
func TestPrefillIsWeightsReadOrFLOPs(t *testing.T) {
	t.Parallel()
	p := Profile{A0: 0.001, PrefillM0: 0.010, A1: 1e-5, A2: 1e-9}
	// 100 tokens: FLOPs 1 ms < weights 10 ms; 2,000 tokens: FLOPs 20 ms.
	assert.Equal(t, time.Duration(1e6+10e6+0.01e6), p.PrefillTime(100, 10_000))
	assert.Equal(t, time.Duration(1e6+20e6+0.01e6), p.PrefillTime(2000, 10_000))
}

// Two-batch overlap: the dispatch/combine of one micro-batch hides behind the other's
// compute, so the shared part is the larger of the expert compute and the communication the
// attention side cannot hide, plus the split's overhead; without it, their sum.
func TestSharedTimeTwoBatchOverlap(t *testing.T) {
	t.Parallel()
	d := DPAttnSplit{GPUs: 4, FFNC1: 1e-6, CommFixed: 0.001, CommPerToken: 3e-6}
	p := Profile{DPAttn: &d}
	// 1,000 tokens: expert compute 1 ms, comm 1 + 3 = 4 ms.
	assert.Equal(t, 5*time.Millisecond, p.SharedTime(1000))
	d.TwoBatchOverlap, d.Hide, d.OverlapOverhead = true, 1e-6, 0.0002
	// comm 4 ms − 1 ms hidden by attention-side compute = 3 ms > 1 ms of experts; + 0.2 ms.
	assert.Equal(t, 3200*time.Microsecond, p.SharedTime(1000))
	d.CommPerToken = 0
	// comm 1 ms − 1 ms hidden: the experts' 1 ms gates.
	assert.Equal(t, 1200*time.Microsecond, p.SharedTime(1000))
	// Seven tokens on four GPUs do not split in two: no overlap, no split overhead.
	assert.Equal(t, time.Duration(1e6+7e3), p.SharedTime(7))
	// --deepep-mode auto: at most LLMaxTokens per GPU take the low-latency coefficients.
	a := Profile{DPAttn: &DPAttnSplit{GPUs: 4, CommFixed: 0.005, CommPerToken: 1e-6, LLMaxTokens: 128, LLCommFixed: 0.001, LLCommPerToken: 2e-6}}
	assert.Equal(t, time.Duration(1e6+2e-6*512*1e9), a.SharedTime(512), "512 tokens over 4 GPUs: low latency")
	assert.Equal(t, time.Duration(5e6+1e-6*513*1e9), a.SharedTime(513), "one more: normal")
}

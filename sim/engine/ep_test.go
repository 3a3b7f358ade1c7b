package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// saturatedPrefillPerGPU is the prefill tokens/s of one GPU of a DP-attention server whose
// every rank steps perRank new tokens per step as whole prompts of promptLen tokens — SGLang's
// chunked_prefill_size over dp_size — computed as the engine steps it: the slowest rank's
// attention part (all ranks alike) plus the shared part on every rank's tokens. A whole
// prompt's chunk has context promptLen/2 (its mean position, Profile), so Σ(new·context) =
// perRank·promptLen/2.
func saturatedPrefillPerGPU(p Profile, ranks, perRank, promptLen int) float64 {
	step := p.AttnPrefillTime(perRank, float64(perRank)*float64(promptLen)/2) + p.SharedTime(perRank*ranks)
	return float64(perRank) / step.Seconds()
}

// saturatedDecodePerGPU is the output tokens/s of one GPU of a DP-attention decode server
// whose every rank runs batch requests of context tokens each.
func saturatedDecodePerGPU(p Profile, ranks, batch, context int) float64 {
	step := p.AttnDecodeTime(batch, batch*context) + p.SharedTime(batch*ranks)
	return float64(batch) / step.Seconds()
}

// Under DeepEP each GPU dispatches and combines only its own tokens, so at the same tokens
// per GPU a prefill server of 32 GPUs does the work of two of 16 in the same step: per-GPU
// throughput holds as EP grows (SGLang's all-gather without DeepEP would not).
func TestEPPrefillPerGPUHoldsAsEPGrows(t *testing.T) {
	t.Parallel()
	perGPU := func(n int) float64 {
		p, err := Build("x", DeepSeekV3, H100SXM, Parallelism{TP: n, DP: n, EP: n, DPAttention: true, DeepEPMode: "normal", TwoBatchOverlap: true})
		require.NoError(t, err)
		return saturatedPrefillPerGPU(p, n, 16384, 4096)
	}
	ep16, ep32 := perGPU(16), perGPU(32)
	t.Logf("DeepSeek-V3 H100 prefill per GPU: EP16 %.0f, EP32 %.0f tok/s (ratio %.3f)", ep16, ep32, ep32/ep16)
	assert.InEpsilon(t, ep16, ep32, 0.15)
	// The server's throughput doubles with its GPUs (the old all-gather charge kept it flat).
	assert.InEpsilon(t, 2.0, 32*ep32/(16*ep16), 0.15)
	// Without DeepEP, every GPU receives every rank's hidden states: the step grows with the
	// server and per-GPU throughput falls.
	ag := func(n int) float64 {
		p, err := Build("x", DeepSeekV3, H100SXM, Parallelism{TP: n, DP: n, EP: n, DPAttention: true})
		require.NoError(t, err)
		return saturatedPrefillPerGPU(p, n, 16384, 4096)
	}
	assert.Less(t, ag(32), 0.7*ag(16))
}

// The LMSYS 2025-05-05 large-scale EP blog (sim/testdata/published/deepseek-v3-h100-pd-ep-96gpu.json):
// prefill per node on the EP32 server at 1K/2K/4K prompts, decode per node on the EP72 server at
// 256 requests per GPU of 2,000-token contexts, each within ±25 %.
func TestLMSYSLargeScaleEP(t *testing.T) {
	t.Parallel()
	pre := preset(t, "deepseek-v3-h100-ep32-prefill")
	require.Equal(t, 32, pre.DPAttn.GPUs)
	// SGLang gives each DP rank chunked_prefill_size / dp_size = 524,288 / 32 tokens per step.
	const perRank = 524288 / 32
	for _, tc := range []struct {
		prompt    int
		published float64
	}{{1024, 57674}, {2048, 54543}, {4096, 50302}} {
		perNode := 8 * saturatedPrefillPerGPU(pre, 32, perRank, tc.prompt)
		t.Logf("prefill %d-token prompts: %.0f tok/s per node, published %.0f (×%.2f)", tc.prompt, perNode, tc.published, perNode/tc.published)
		assert.InEpsilon(t, tc.published, perNode, 0.25, "prefill %d", tc.prompt)
	}
	one, four := saturatedPrefillPerGPU(pre, 32, perRank, 1024), saturatedPrefillPerGPU(pre, 32, perRank, 4096)
	assert.Greater(t, one, four, "longer prompts spend more on attention")

	dec := preset(t, "deepseek-v3-h100-ep72-decode")
	require.Equal(t, 72, dec.DPAttn.GPUs)
	require.GreaterOrEqual(t, dec.MaxTotalTokens, 256*2000, "256 requests of 2,000 tokens fit a rank's KV")
	perNode := 8 * saturatedDecodePerGPU(dec, 72, 256, 2000)
	t.Logf("decode 256/GPU at 2,000 tokens: %.0f tok/s per node, published 22282 (×%.2f); ITL %s", perNode, perNode/22282,
		(dec.AttnDecodeTime(256, 256*2000) + dec.SharedTime(256*72)).Round(time.Millisecond))
	assert.InEpsilon(t, 22282, perNode, 0.25)
}

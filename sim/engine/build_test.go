package engine

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Build's errors name the SGLang flag at fault.
func TestBuildValidationNamesFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		par  Parallelism
		flag string
	}{
		{Parallelism{TP: -1}, "--tp-size"},
		{Parallelism{TP: 8, DP: 3}, "--dp-size"},
		{Parallelism{TP: 8, DP: -2}, "--dp-size"},
		{Parallelism{TP: 8, EP: 3}, "--ep-size"},
		{Parallelism{TP: 8, DP: 8, DPAttention: true, DeepEPMode: "fast"}, "--deepep-mode"},
		{Parallelism{TP: 1}, "--tp-size 1"}, // DeepSeek-V3 does not fit on one GPU
	} {
		_, err := Build("x", DeepSeekV3, H100SXM, tc.par)
		require.Error(t, err, "%+v", tc.par)
		assert.Contains(t, err.Error(), tc.flag, "%+v", tc.par)
	}
	_, err := Build("x", Llama3Dense8B, H100SXM, Parallelism{TP: 8, DP: 8})
	assert.NoError(t, err)
}

func TestCatalogLookups(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"meta-llama/Llama-3.1-8B-Instruct": "llama3-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama3-8b",
		"meta-llama/Llama-3.1-8B": "llama3-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama3-70b",
		"meta-llama/Llama-3.1-70B": "llama3-70b", "deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-R1": "deepseek-v3",
		"moonshotai/Kimi-K2-Instruct": "kimi-k2", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4": "qwen2.5-7b-gptq-int4",
		"Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b", "openai/gpt-oss-120b": "gpt-oss-120b", "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
		"llama3-8b": "llama3-8b",
	}
	for alias, name := range want {
		m, err := LookupModel(alias)
		require.NoError(t, err, alias)
		assert.Equal(t, name, m.Name, alias)
	}
	for _, g := range []string{"a100-sxm", "h100-sxm", "h200-sxm", "h20", "a10", "b200", "gb200"} {
		_, err := LookupGPU(g)
		assert.NoError(t, err, g)
	}
	// Every GPU has a per-MoE-layer decode time, from sim/engine/fitted.go or its card: a GPU the
	// generated file stops naming (its sets gone) would otherwise decode MoE layers for free,
	// and the fit, which skips a constant at 0, would never give it one again.
	for _, g := range GPUs() {
		assert.Positive(t, g.MoELayerOverhead, "%s: MoELayerOverhead (sim/engine/fitted.go or the card)", g.Name)
	}
	_, err := LookupModel("gpt-5")
	assert.ErrorContains(t, err, "kimi-k2")
	// Every card builds on a GPU big enough at some parallelism, and its parameter split adds up.
	for _, m := range Models() {
		require.NoError(t, m.check(m.Name), m.Name)
	}
	// Cross-checks against the model cards' published totals.
	assert.InDelta(t, 1.04e12, KimiK2.Params, 0.02e12)
	assert.InDelta(t, 117e9, GPTOSS120B.Params, 1e9)
}

// Tensor parallelism: weights and FLOPs split over the GPUs, two all-reduces per layer.
func TestBuildTensorParallel(t *testing.T) {
	t.Parallel()
	p1, err := Build("x", Llama3Dense70B, H100SXM, Parallelism{TP: 1, DP: 1})
	require.Error(t, err, "141 GB of BF16 weights do not fit one H100")
	p4, err := Build("x", Llama3Dense70B, H100SXM, Parallelism{TP: 4})
	require.NoError(t, err)
	g := H100SXM
	// 160 all-reduces of latency each per step on the GPU; the scheduler's CPU time beside it.
	assert.InDelta(t, 160*g.AllReduceLatency, p4.B0, 1e-12)
	assert.Equal(t, g.DecodeOverhead, p4.DecodeHost)
	// Per token: 160 × ring volume 2·(3/4)·8192·2 bytes over NVLink at CollectiveEfficiency.
	comm := 160 * 2 * 0.75 * 8192 * 2 / (g.NVLinkBandwidth * CollectiveEfficiency)
	assert.InDelta(t, comm, p4.B1, 1e-15)
	assert.InDelta(t, 2*70.6e9/(4*g.PeakFLOPS*g.ComputeEfficiency)+comm, p4.A1, 1e-12)
	assert.InDelta(t, 70.6e9*2/(4*g.HBMBandwidth*g.MemoryEfficiency), p4.M0, 1e-12)
	// 8 KV heads over 4 GPUs: each GPU holds a quarter of a token's KV.
	assert.InDelta(t, 327680.0/4/(g.HBMBandwidth*g.MemoryEfficiency), p4.M2, 1e-18)
	// DP replicas: --tp-size 8 --dp-size 2 is two TP4 ranks, each exactly p4.
	p8, err := Build("x", Llama3Dense70B, H100SXM, Parallelism{TP: 8, DP: 2})
	require.NoError(t, err)
	assert.Equal(t, p4.A1, p8.A1)
	assert.Equal(t, p4.MaxTotalTokens, p8.MaxTotalTokens)
	// TP across two nodes: the all-reduce volume goes over the NIC.
	p16, err := Build("x", Llama3Dense70B, H100SXM, Parallelism{TP: 16})
	require.NoError(t, err)
	assert.InDelta(t, 160*2*15.0/16*8192*2/(g.NICBandwidth*CollectiveEfficiency), p16.B1, 1e-15)
	_ = p1
}

// Precision: NVFP4 experts halve the expert GEMM time on a GPU with FP4 tensor cores and shrink
// the expert weights to 0.5625 bytes; FP8 KV halves the KV bytes and runs attention at the FP8
// rate.
func TestBuildPrecision(t *testing.T) {
	t.Parallel()
	par := Parallelism{TP: 48, DP: 48, EP: 48, DPAttention: true, DeepEPMode: "low_latency"}
	hi, err := Build("hi", DeepSeekV3, GB200, par)
	require.NoError(t, err)
	lo, err := Build("lo", DeepSeekV3FP4, GB200, par)
	require.NoError(t, err)
	assert.InDelta(t, 0.5, lo.DPAttn.FFNC1/hi.DPAttn.FFNC1, 1e-9, "FP4 10 PF vs FP8 5 PF")
	assert.InDelta(t, 0.5625, lo.DPAttn.ExpertM0/hi.DPAttn.ExpertM0, 1e-9)
	assert.InDelta(t, 0.5, lo.KVBytesPerToken/hi.KVBytesPerToken, 1e-9)
	// Attention at the FP8 rate (5 PF at the low-precision efficiency) vs BF16 (2.5 PF at the
	// compute efficiency).
	g := GB200
	assert.InDelta(t, g.PeakFLOPS*g.ComputeEfficiency/(g.PeakFLOPSFP8*g.LowPrecisionEfficiency), lo.C2/hi.C2, 1e-9)
}

// DeepEP low-latency dispatch/combine by hand: DeepSeek-V3 on 16 H100s over 2 nodes.
func TestEPCommByHand(t *testing.T) {
	t.Parallel()
	par := Parallelism{TP: 16, DP: 16, EP: 16, DPAttention: true, DeepEPMode: "low_latency", GPUsPerNode: 8}
	perTok, fixed := epComm(DeepSeekV3, H100SXM, par, true)
	bytes := 7168*(1+4.0/128) + 7168*2
	// Of each token's 8 copies, 8/16 go to the other node (NIC) and 7/16 to the own node's other
	// GPUs (NVLink); per gathered token, divided by the 16 GPUs.
	want := 58 * (8*0.5*bytes/(50e9*DeepEPLowLatencyNICShare) + 8*7.0/16*bytes/(450e9*CollectiveEfficiency)) / 16
	assert.InDelta(t, want, perTok, want*1e-12)
	assert.InDelta(t, 2*58*H100SXM.EPLowLatency, fixed, 1e-15)
	// Normal mode: a token crosses to the other node at most once: 1 − (1/2)^8 of them do.
	perTok, _ = epComm(DeepSeekV3, H100SXM, par, false)
	rdma := (1 - math.Pow(0.5, 8)) * bytes / (50e9 * DeepEPNormalNICShare)
	nvl := 8 * 7.0 / 8 * bytes / (450e9 * CollectiveEfficiency)
	assert.InDelta(t, 58*max(rdma, nvl)/16, perTok, 1e-15)
}

// GB200 part II's prefill instances of 4 GPUs (DeepSeek-V3 in FP8, 180 GB per GPU) fit only
// with weight offloading: the fewest MoE layers' experts move to host memory so that the KV
// pool keeps OffloadKVShare of the static memory, and every forward pass streams them over
// the C2C link (DPAttnSplit.OffloadCopy). A GPU without a host link cannot offload.
func TestBuildWeightOffload(t *testing.T) {
	t.Parallel()
	par := Parallelism{TP: 4, DP: 4, EP: 4, DPAttention: true}
	_, err := Build("x", DeepSeekV3, GB200, par)
	require.Error(t, err, "180 GB of weights per GPU do not fit without offloading")
	par.WeightOffload = true
	p, err := Build("x", DeepSeekV3, GB200, par)
	require.NoError(t, err)
	budget := GB200.MemoryBytes * GB200.MemFractionStatic
	perLayer := 654e9 / 4 / 58 // routed-expert bytes of one MoE layer on each GPU (FP8)
	kv := float64(p.MaxTotalTokens) * DeepSeekV3.kvBytesPerGPU(1)
	assert.GreaterOrEqual(t, kv, OffloadKVShare*budget*0.999, "the KV pool keeps its share")
	assert.Less(t, kv, OffloadKVShare*budget+perLayer, "no more layers offloaded than needed")
	offloaded := kv - (budget - (11.4e9 + 5.6e9 + 654e9/4)) // what the KV gained over the (negative) room left
	assert.InEpsilon(t, offloaded/GB200.HostLinkBandwidth, p.DPAttn.OffloadCopy, 0.02, "stream time = offloaded bytes / C2C")
	assert.Zero(t, p.DPAttn.FFNM0, "no non-routed FFN weights in the shared part of a MoE model")
	_, err = Build("x", DeepSeekV3, H100SXM, Parallelism{TP: 4, DP: 4, EP: 4, DPAttention: true, WeightOffload: true})
	assert.Error(t, err, "H100 has no host link modelled")
}

// NVFP4 experts dispatch NVFP4 tokens through DeepEP (0.5625 bytes per value instead of FP8's
// 1.03), and the low-precision card's NVFP4 output projection runs at the FP4 rate.
func TestNVFP4DispatchAndOProj(t *testing.T) {
	t.Parallel()
	par := Parallelism{TP: 48, DP: 48, EP: 48, DPAttention: true, DeepEPMode: "low_latency", GPUsPerNode: 72}
	fp8, _ := epComm(DeepSeekV3, GB200, par, true)
	fp4, _ := epComm(DeepSeekV3FP4, GB200, par, true)
	assert.InDelta(t, (0.5625+2)/(1+4.0/128+2), fp4/fp8, 1e-12)
	r := GB200.rates(DeepSeekV3FP4)
	c := DeepSeekV3FP4.costs(r)
	want := 2*(11.4e9-7.2e9) + 2*7.2e9*GB200.rate(PrecisionFP8)/GB200.rate(PrecisionFP4)
	assert.InDelta(t, want, c.attnLin, 1)
	assert.InDelta(t, (11.4e9-7.2e9)*1+7.2e9*0.5625, c.attnBytes, 1)
}

// gpt-oss's KV pool, as SGLang's hybrid SWA pool sizes it: 2,048 bytes per layer and token
// (8 KV heads × 64 × K,V × BF16), 18 full-attention layers plus 0.8 of a slot in each of the
// 18 sliding-window ones; a model without sliding windows pays every layer.
func TestKVPoolHybridSWA(t *testing.T) {
	t.Parallel()
	assert.InDelta(t, 2048*(18+0.8*18), GPTOSS120B.kvPoolBytesPerGPU(1), 1e-9)
	assert.InDelta(t, Llama3Dense8B.kvBytesPerGPU(1), Llama3Dense8B.kvPoolBytesPerGPU(1), 1e-9)
	p, err := Build("x", GPTOSS120B, B200, Parallelism{TP: 4, DP: 4, EP: 4, DPAttention: true})
	require.NoError(t, err)
	assert.Greater(t, p.MaxTotalTokens, 640*3072, "the PR #9359 batch fits a rank's pool")
}

// The slowest GPU's expert load over the mean: EPImbalance at EP32 of 256 experts (the set
// that fixed it) and above, shrinking with fewer GPUs and more experts per GPU.
func TestEPImbalanceScalesWithExpertsPerGPU(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 1.0, epImbalance(1, 256))
	assert.InDelta(t, EPImbalance, epImbalance(32, 256), 1e-12)
	assert.Equal(t, EPImbalance, epImbalance(72, 256), "capped above the reference")
	// EP4 of 256: spread ratio Φ⁻¹(3.625/4.25)·√(4/256) / (Φ⁻¹(31.625/32.25)·√(32/256)) ≈ 1.049·0.125/(2.068·0.354) ≈ 0.179.
	assert.InDelta(t, 1+0.25*0.179, epImbalance(4, 256), 0.003)
	assert.Less(t, epImbalance(2, 256), epImbalance(4, 256))
	assert.Less(t, epImbalance(32, 384), EPImbalance, "more experts per GPU balance better")
}

// CombineOverlap hides the combine half of the communication behind the down GEMM (a third of
// the expert compute), whichever is smaller; offloaded weights cost only what the step's
// compute does not cover.
func TestCombineOverlapAndOffloadCopy(t *testing.T) {
	t.Parallel()
	d := DPAttnSplit{GPUs: 4, AttnA1: 4e-6, FFNC1: 3e-6, CommPerToken: 2e-6}
	p := Profile{DPAttn: &d}
	// 1,000 tokens: ffn 3 ms, comm 2 ms.
	assert.Equal(t, time.Duration(5e6), p.SharedTime(1000))
	d.CombineOverlap = true
	assert.Equal(t, time.Duration(4e6), p.SharedTime(1000), "combine 1 ms under a 1 ms down GEMM")
	d.CommPerToken = 8e-6 // comm 8 ms: combine 4 ms, down GEMM 1 ms hides 1 ms of it
	assert.Equal(t, time.Duration(10e6), p.SharedTime(1000))
	d.CommPerToken, d.CombineOverlap = 2e-6, false
	// The copies hide behind the shared part (5 ms) and the ranks' attention compute
	// (4 µs × 1,000 / 4 GPUs = 1 ms): 5 ms of copies are free, 9 ms cost 3 ms more.
	d.OffloadCopy = 0.005
	assert.Equal(t, time.Duration(5e6), p.SharedTime(1000))
	d.OffloadCopy = 0.009
	assert.Equal(t, time.Duration(8e6), p.SharedTime(1000))
}

// A prefill step reads the routed experts at the share of their GEMMs' format: block-FP8
// experts (DeepSeek-V3) at PrefillExpertEfficiency, experts computed at 16 bits (gpt-oss's
// MXFP4, dequantized) at PrefillExpertEfficiencyBF16, either at the decode share when unset.
func TestPrefillExpertShareByFormat(t *testing.T) {
	t.Parallel()
	g := B200
	g.PrefillExpertEfficiency, g.PrefillExpertEfficiencyBF16 = 0.1, 0.4
	routed := func(m ModelCard, g GPU) float64 { // PrefillM0 less the other weights' read
		p, err := Build("x", m, g, Parallelism{TP: 8})
		require.NoError(t, err)
		return p.PrefillM0 - p.M0
	}
	bw := g.HBMBandwidth
	assert.InEpsilon(t, DeepSeekV3.RoutedParams*DeepSeekV3.expertBytes()/(8*bw*0.1), routed(DeepSeekV3, g), 1e-9)
	assert.InEpsilon(t, GPTOSS120B.RoutedParams*GPTOSS120B.expertBytes()/(8*bw*0.4), routed(GPTOSS120B, g), 1e-9)
	g.PrefillExpertEfficiency, g.PrefillExpertEfficiencyBF16 = 0, 0
	assert.InEpsilon(t, GPTOSS120B.RoutedParams*GPTOSS120B.expertBytes()/(8*bw*g.MemoryEfficiency), routed(GPTOSS120B, g), 1e-9)
}

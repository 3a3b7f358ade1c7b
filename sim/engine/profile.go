package engine

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Profile holds the step-time model of one DP rank (ARCHITECTURE §4). All durations are in
// seconds of model time, before Config.Speedup divides them.
//
//	prefill step = A0 + max(PrefillM0, A1·Σ new_tokens) + A2·Σ(new_tokens·context)
//	decode step  = B0 + B1·batch + B2·Σ context + max(M0 + E(batch) + M2·Σ context, C1·batch + C2·Σ context)
//	               then the longer of that and DecodeHost (the overlap scheduler), or their sum without it
//	KV transfer  = T0 + PDOverhead + tokens·KVBytesPerToken / link bandwidth
//
// where a prefill chunk's context is its mean position — the tokens before it (cached prefix and
// earlier chunks) plus half the chunk, which makes A2·new·context exact for causal attention —
// and a decode request's context is prompt + tokens generated so far. A decode step on a GPU is
// bound by the larger of its memory time (weights once, then each context token's KV) and its
// compute time, not their sum: the roofline presets use the max form (M, C) with B0 as the
// fixed overhead and B1 for what adds to either bound per request (tensor-parallel all-reduce
// volume, sliding-window KV reads); B1 and B2 also keep the additive form of older profiles.
// E(batch) is the MoE expert reads (ExpertM0). A prefill step's linear layers likewise take the
// larger of the weights read (PrefillM0) and their FLOPs. Build derives the coefficients from a
// model card, a GPU and a parallelism.
//
// Under DP attention (Config.DPAttention) a profile with DPAttn splits every step into a part
// per rank (attention) and a part on the tokens of all ranks (routed experts sharded over the
// server's GPUs, or a dense FFN, plus the collectives), charged per GPU: see DPAttnSplit.
//
// A Constant profile ignores the coefficients: every request gets exactly TTFT and ITL however
// many run (an infinitely parallel server); `instant` is Constant with both zero.
type Profile struct {
	Name string `json:"name" yaml:"name"`

	A0 float64 `json:"a0" yaml:"a0"` // prefill: fixed seconds per step
	A1 float64 `json:"a1" yaml:"a1"` // prefill: seconds per new token (linear layers)
	A2 float64 `json:"a2" yaml:"a2"` // prefill: seconds per new token × context token (attention)
	// PrefillM0 is the seconds a prefill step takes to read the weights: its linear layers are
	// bound by the larger of that and their FLOPs (A1), so a short prompt costs the weights
	// read, a long one its FLOPs. 0 in older profiles (A0 + A1·new).
	PrefillM0 float64 `json:"prefill_m0,omitempty" yaml:"prefill_m0,omitempty"`
	B0        float64 `json:"b0" yaml:"b0"` // decode: fixed seconds per step on the GPU (launches, collectives' latency; older profiles: the scheduler too)
	// DecodeHost is the scheduler's CPU seconds per decode step (forming the batch, processing
	// the last step's tokens: scheduler.py around the forward). SGLang's overlap scheduler
	// (event_loop_overlap, the default since v0.4) does that work while the GPU runs the
	// previous step, so a step takes the longer of the two; without it
	// (Config.DisableOverlap) the GPU waits for it and the two add. 0 in older profiles,
	// whose B0 holds it.
	DecodeHost float64 `json:"decode_host,omitempty" yaml:"decode_host,omitempty"`
	B1         float64 `json:"b1" yaml:"b1"` // decode, additive form: seconds per request in the batch
	B2         float64 `json:"b2" yaml:"b2"` // decode, additive form: seconds per context token in the batch
	M0         float64 `json:"m0" yaml:"m0"` // decode, memory-bound: seconds to read the weights once
	M2         float64 `json:"m2" yaml:"m2"` // decode, memory-bound: seconds per context token (its KV read)
	C1         float64 `json:"c1" yaml:"c1"` // decode, compute-bound: seconds per request (2·active params FLOPs)
	C2         float64 `json:"c2" yaml:"c2"` // decode, compute-bound: seconds per context token (attention FLOPs)
	// ExpertM0 is, for MoE models, the seconds to read every routed expert once; a decode step
	// reads only the experts its batch routes to, Experts·(1 − (1 − TopK/Experts)^batch) of
	// them in expectation (uniform routing), so ExpertM0·that share joins M0. M0 then holds
	// the other weights. Zero for dense models.
	ExpertM0 float64 `json:"expert_m0,omitempty" yaml:"expert_m0,omitempty"`
	Experts  int     `json:"experts,omitempty" yaml:"experts,omitempty"` // routed experts (MoE); 0: dense
	TopK     int     `json:"top_k,omitempty" yaml:"top_k,omitempty"`     // experts each token routes to
	T0       float64 `json:"t0" yaml:"t0"`                               // transfer: fixed seconds per room (connection lookup, descriptor exchange)

	// PDOverhead is the fixed cost of disaggregation per request, in seconds, beyond T0: the
	// bootstrap handshake, KV-transfer setup and the router waiting on both legs. It is added
	// once to every room's KV transfer, so it shows once in TTFT (sim and fakeworker alike).
	PDOverhead float64 `json:"pd_overhead" yaml:"pd_overhead"`

	// DPAttn, when set, is how a step divides under DP attention; nil: each rank's whole step,
	// the slowest gating the server (the lockstep of older profiles).
	DPAttn *DPAttnSplit `json:"dp_attention,omitempty" yaml:"dp_attention,omitempty"`

	// HostOverhead is the seconds a request spends outside the GPU scheduler's steps:
	// HTTP, tokenizer and detokenizer processes, scheduler polling (SGLang's
	// tokenizer_manager.py and detokenizer_manager.py around scheduler.py's event loop).
	HostOverhead float64 `json:"host_overhead,omitempty" yaml:"host_overhead,omitempty"`
	// EagerOverhead is the seconds a decode step costs beyond the roofline when its batch is
	// larger than Config.CUDAGraphMaxBS and runs without a CUDA graph (kernel launches).
	EagerOverhead float64 `json:"eager_overhead,omitempty" yaml:"eager_overhead,omitempty"`

	// Draft, when set, is the draft model of speculative decoding (Spec): one forward of it is
	// its DecodeTime. BuildServer builds it with the target from the model card.
	Draft *Profile `json:"draft,omitempty" yaml:"draft,omitempty"`

	// Fit, when set, records the ranges a calibrated profile was fitted on (calibrate).
	Fit *FitRange `json:"fit,omitempty" yaml:"fit,omitempty"`

	KVBytesPerToken float64 `json:"kv_bytes_per_token" yaml:"kv_bytes_per_token"` // bytes of KV per token for the whole rank (all layers, K and V)
	MaxTotalTokens  int     `json:"max_total_tokens" yaml:"max_total_tokens"`     // default KV capacity per rank in tokens (max_total_num_tokens); Config.MaxTotalTokens overrides

	Constant bool          `json:"constant,omitempty" yaml:"constant,omitempty"` // load-independent timing: TTFT and ITL per request, coefficients unused
	TTFT     time.Duration `json:"ttft,omitempty" yaml:"ttft,omitempty"`         // Constant: time from admission (unified), Handshake (prefill) to the first token
	ITL      time.Duration `json:"itl,omitempty" yaml:"itl,omitempty"`           // Constant: time between output tokens

	Source string `json:"source" yaml:"source"` // where the numbers come from, one line
}

// FitRange is what a calibrated profile was fitted on: predictions outside these ranges are
// extrapolations (`router sim` warns).
type FitRange struct {
	PromptTokensMin int     `json:"prompt_tokens_min" yaml:"prompt_tokens_min"`
	PromptTokensMax int     `json:"prompt_tokens_max" yaml:"prompt_tokens_max"`
	BatchPerRankMax int     `json:"batch_per_rank_max" yaml:"batch_per_rank_max"`
	Residual        float64 `json:"residual" yaml:"residual"` // fitted loss (relative error) on the levels used
}

// DPAttnSplit divides a step under SGLang's DP attention (--enable-dp-attention, with expert
// parallelism for MoE models; python/sglang/srt/layers/dp_attention.py): attention, and the
// KV it reads, is per rank, so the slowest rank gates it; the routed experts (or, for a dense
// model, the FFN) run on every GPU on the tokens routed to it, with collectives around them.
//
//	step = max over ranks (rank's attention part) + shared(n)
//	attention part, prefill = A0 + max(PrefillM0, AttnA1·new) + A2·Σ(new·context)
//	attention part, decode  = B0 + B1·batch + B2·Σ context + max(AttnM0, AttnC1·batch) + max(M2·Σ context, C2·Σ context)
//	shared(n) = ffn(n) + comm(n)                                   without two-batch overlap
//	shared(n) = max(ffn(n), comm(n) − hide·n) + OverlapOverhead    with it
//	shared(n) = ffn(n) + comm(n) − min(comm(n)/2, FFNC1·n/3)      with CombineOverlap
//	ffn(n)    = max(FFNM0 + E(n), FFNC1·n)
//	comm(n)   = CommFixed + CommPerToken·n
//
// where n counts the step's tokens on every rank together: new tokens of prefill ranks, one per
// request of decode ranks. Each GPU computes and communicates only its share of n, so the
// per-token coefficients (FFNC1, CommPerToken) are already divided by the server's GPU count:
// a server of twice the GPUs at the same tokens per GPU takes the same step. With DeepEP
// (--moe-a2a-backend deepep) comm is the dispatch and combine of each GPU's own tokens; without
// it, SGLang all-gathers every rank's hidden states before the MoE/FFN and reduce-scatters
// after (dp_attention.py dp_gather / dp_scatter), so CommPerToken is not divided: every GPU
// receives every token.
//
// --deepep-mode auto resolves per step to normal when any rank extends (prefill) and to
// low_latency otherwise (python/sglang/srt/layers/moe/utils.py DeepEPMode.resolve). SharedTime
// sees only n, so a split with LLMaxTokens > 0 takes the low-latency coefficients (LLComm*,
// LLHide) when n ≤ LLMaxTokens·GPUs — decode batches fit DeepEP's low-latency buffer of
// SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens per GPU, prefill chunks do not.
//
// Two-batch overlap (--enable-two-batch-overlap, python/sglang/srt/two_batch_overlap.py) splits
// the batch into two micro-batches so that one's dispatch/combine runs while the other computes:
// communication costs only what the step's computation cannot hide. SharedTime does not see
// the attention part, so hide·n stands for it: the rank's linear attention-side compute per
// gathered token (AttnA1 or AttnC1 over the ranks) — a lower bound, as attention over the
// context hides more.
type DPAttnSplit struct {
	GPUs     int     `json:"gpus" yaml:"gpus"`           // GPUs of the server the shared coefficients assume
	AttnA1   float64 `json:"attn_a1" yaml:"attn_a1"`     // prefill: seconds per new token in the rank's own layers (attention projections, dense FFN/shared experts)
	AttnM0   float64 `json:"attn_m0" yaml:"attn_m0"`     // decode: seconds to read the rank's own weights (every rank holds them all)
	AttnC1   float64 `json:"attn_c1" yaml:"attn_c1"`     // decode: seconds per request in the rank's own layers
	FFNM0    float64 `json:"ffn_m0" yaml:"ffn_m0"`       // seconds to read one GPU's share of the shared FFN weights other than routed experts
	ExpertM0 float64 `json:"expert_m0" yaml:"expert_m0"` // seconds to read one GPU's share of all routed experts (E(n): the hit share)
	// PrefillExpertM0, when set, is ExpertM0 for a step with prefill tokens (GPU.
	// PrefillExpertEfficiency); 0: ExpertM0.
	PrefillExpertM0 float64 `json:"prefill_expert_m0,omitempty" yaml:"prefill_expert_m0,omitempty"`
	FFNC1           float64 `json:"ffn_c1" yaml:"ffn_c1"`                 // seconds per gathered token of FFN/MoE compute (spread over the GPUs)
	CommFixed       float64 `json:"comm_fixed" yaml:"comm_fixed"`         // collective latency per step, all layers
	CommPerToken    float64 `json:"comm_per_token" yaml:"comm_per_token"` // collective seconds per gathered token

	// LLMaxTokens > 0: steps of at most LLMaxTokens tokens per GPU use the low-latency
	// coefficients below (--deepep-mode auto).
	LLMaxTokens    int     `json:"ll_max_tokens,omitempty" yaml:"ll_max_tokens,omitempty"`
	LLCommFixed    float64 `json:"ll_comm_fixed,omitempty" yaml:"ll_comm_fixed,omitempty"`
	LLCommPerToken float64 `json:"ll_comm_per_token,omitempty" yaml:"ll_comm_per_token,omitempty"`
	// TwoBatchOverlap: communication hides behind computation (see above); Hide and LLHide are
	// the seconds of attention-side compute per gathered token that can hide it (normal and
	// low-latency steps); OverlapOverhead the seconds per step the micro-batch split costs.
	// OffloadCopy is the seconds a step spends copying host-offloaded expert weights in over the
	// host link (Parallelism.WeightOffload). python/sglang/srt/offloader.py prefetches each
	// offloaded layer on a side stream some layers ahead, so the copies run while the GPU
	// computes the earlier layers' attention and experts alike: they cost only what exceeds the
	// step's compute, which SharedTime sees as its own part plus the rank's attention-side
	// linear compute per gathered token (AttnA1 over the ranks, as Hide; a lower bound).
	// (Charged before 2026-11-25 as a floor under the expert compute alone, which put
	// deepseek-gb200-nvl72-pd-ep-part2's 4-GPU prefill bound by the copies.)
	OffloadCopy float64 `json:"offload_copy,omitempty" yaml:"offload_copy,omitempty"`
	// CombineOverlap: the combine half of comm hides behind the down GEMM, a third of the
	// expert compute (Parallelism.CombineOverlap; GB200 part II).
	CombineOverlap  bool    `json:"combine_overlap,omitempty" yaml:"combine_overlap,omitempty"`
	TwoBatchOverlap bool    `json:"two_batch_overlap,omitempty" yaml:"two_batch_overlap,omitempty"`
	Hide            float64 `json:"hide,omitempty" yaml:"hide,omitempty"`
	LLHide          float64 `json:"ll_hide,omitempty" yaml:"ll_hide,omitempty"`
	OverlapOverhead float64 `json:"overlap_overhead,omitempty" yaml:"overlap_overhead,omitempty"`
}

// PrefillTime is the duration of one prefill step computing newTokens tokens in total whose
// Σ(new·context) is newTimesContext (see Profile), without speedup.
func (p Profile) PrefillTime(newTokens int, newTimesContext float64) time.Duration {
	return seconds(p.A0 + max(p.PrefillM0, p.A1*float64(newTokens)) + p.A2*newTimesContext)
}

// DecodeTime is the duration of one decode step over batch requests whose contexts sum to
// context tokens, without speedup, with the overlap scheduler (DecodeHost hidden behind the
// GPU's step).
func (p Profile) DecodeTime(batch, context int) time.Duration {
	return p.withHost(p.verifyTime(batch, 1, context), true)
}

// withHost is a decode step of GPU time d with the scheduler's CPU time (DecodeHost): the
// longer of the two with the overlap scheduler, their sum without it.
func (p Profile) withHost(d time.Duration, overlap bool) time.Duration {
	h := seconds(p.DecodeHost)
	if overlap {
		return max(d, h)
	}
	return d + h
}

// expertRead is the time to read the routed experts a batch of n tokens hits, of m for all.
func (p Profile) expertRead(m float64, n int) float64 {
	if m == 0 || p.Experts <= 0 || p.TopK <= 0 || n <= 0 {
		return 0
	}
	return m * (1 - math.Pow(1-float64(p.TopK)/float64(p.Experts), float64(n)))
}

// AttnPrefillTime is a rank's attention part of a prefill step under DP attention
// (DPAttnSplit); without a split it is PrefillTime.
func (p Profile) AttnPrefillTime(newTokens int, newTimesContext float64) time.Duration {
	if p.DPAttn == nil {
		return p.PrefillTime(newTokens, newTimesContext)
	}
	return seconds(p.A0 + max(p.PrefillM0, p.DPAttn.AttnA1*float64(newTokens)) + p.A2*newTimesContext)
}

// AttnDecodeTime is a rank's attention part of a decode step under DP attention; without a
// split it is DecodeTime. The rank's GEMMs (weights read or their FLOPs) and its attention
// kernel (KV read or its FLOPs) are separate kernels run one after the other in each layer
// (python/sglang/srt/models/deepseek_v2.py, gpt_oss.py: projections, then the attention
// backend's forward_decode, then the output projection), so each is bound by its own roofline
// and the two add: a rank whose GEMMs are compute-bound at a large batch (AttnC1·batch) does not
// hide a memory-bound attention kernel (M2·context) behind them. Set by
// gpt-oss-120b-b200-dp4-ep4-pr9359 (640 per rank over 1,024–3,072-token contexts: GEMMs
// ~2.7 ms of compute, KV ~7.5 ms of reads, the one max charged ~8.2 ms for both); the DeepSeek,
// Kimi and GB200 decode sets are compute-bound in both kernels and barely move.
func (p Profile) AttnDecodeTime(batch, context int) time.Duration {
	return p.attnVerifyTime(batch, 1, context)
}

// SharedTime is the part of a DP-attention step that runs on the tokens gathered from every
// rank (routed experts or FFN, and their collectives; see DPAttnSplit); 0 without a split or
// with no tokens.
func (p Profile) SharedTime(tokens int) time.Duration {
	if p.DPAttn == nil {
		return 0
	}
	return p.sharedTime(tokens, p.DPAttn.ExpertM0)
}

// SharedPrefillTime is SharedTime for a step with prefill tokens: the routed experts read at
// the prefill share of HBM bandwidth (DPAttnSplit.PrefillExpertM0) when it is set.
func (p Profile) SharedPrefillTime(tokens int) time.Duration {
	if p.DPAttn == nil {
		return 0
	}
	return p.sharedTime(tokens, cmp.Or(p.DPAttn.PrefillExpertM0, p.DPAttn.ExpertM0))
}

// sharedTime is SharedTime with expertM0 the time to read every routed expert once.
func (p Profile) sharedTime(tokens int, expertM0 float64) time.Duration {
	d := p.DPAttn
	if d == nil || tokens <= 0 {
		return 0
	}
	n := float64(tokens)
	ffn := max(d.FFNM0+p.expertRead(expertM0, tokens), d.FFNC1*n)
	fixed, perTok, hide := d.CommFixed, d.CommPerToken, d.Hide
	if d.LLMaxTokens > 0 && tokens <= d.LLMaxTokens*max(d.GPUs, 1) {
		fixed, perTok, hide = d.LLCommFixed, d.LLCommPerToken, d.LLHide
	}
	comm := fixed + perTok*n
	// A batch of fewer than two tokens per GPU cannot be split in two (two_batch_overlap.py
	// compute_split_seq_index finds no split): it runs as one.
	t := ffn + comm
	if d.TwoBatchOverlap && tokens >= 2*max(d.GPUs, 1) {
		t = max(ffn, comm-hide*n) + d.OverlapOverhead
	} else if d.CombineOverlap {
		// The combine (half the volume: dispatch, then combine) runs under the down GEMM, a
		// third of the expert FLOPs, signalled tile by tile (GB200 part II blog).
		t -= min(comm/2, d.FFNC1*n/3)
	}
	if d.OffloadCopy > 0 {
		t += max(0, d.OffloadCopy-(t+d.AttnA1*n/float64(max(d.GPUs, 1))))
	}
	return seconds(t)
}

func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	if s > float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(s * 1e9))
}

// String renders the profile on one line, name first, with its coefficients, as
// `router fakeworker profiles --coefficients` lists it.
func (p Profile) String() string {
	if p.Constant {
		return fmt.Sprintf("%s ttft=%s itl=%s (load-independent)", p.Name, p.TTFT, p.ITL)
	}
	s := fmt.Sprintf("%s a0=%.4gs a1=%.4gs/tok a2=%.4gs/tok² b0=%.4gs", p.Name, p.A0, p.A1, p.A2, p.B0)
	if p.DecodeHost != 0 {
		s += fmt.Sprintf(" decode_host=%.4gs", p.DecodeHost)
	}
	if p.PrefillM0 != 0 {
		s += fmt.Sprintf(" prefill_m0=%.4gs", p.PrefillM0)
	}
	if p.B1 != 0 || p.B2 != 0 {
		s += fmt.Sprintf(" b1=%.4gs/req b2=%.4gs/tok", p.B1, p.B2)
	}
	if p.M0 != 0 || p.M2 != 0 || p.C1 != 0 || p.C2 != 0 {
		s += fmt.Sprintf(" m0=%.4gs m2=%.4gs/tok c1=%.4gs/req c2=%.4gs/tok", p.M0, p.M2, p.C1, p.C2)
	}
	s += fmt.Sprintf(" t0=%.4gs pd_overhead=%.4gs", p.T0, p.PDOverhead)
	if d := p.DPAttn; d != nil {
		s += fmt.Sprintf(" dp_attention(gpus=%d attn_a1=%.4gs/tok attn_m0=%.4gs attn_c1=%.4gs/req ffn_m0=%.4gs ffn_c1=%.4gs/tok comm=%.4gs+%.4gs/tok)",
			d.GPUs, d.AttnA1, d.AttnM0, d.AttnC1, d.FFNM0, d.FFNC1, d.CommFixed, d.CommPerToken)
		if d.LLMaxTokens > 0 {
			s += fmt.Sprintf(" low_latency(≤%d tok/gpu comm=%.4gs+%.4gs/tok)", d.LLMaxTokens, d.LLCommFixed, d.LLCommPerToken)
		}
		if d.TwoBatchOverlap {
			s += fmt.Sprintf(" two_batch_overlap(hide=%.4gs/tok ll_hide=%.4gs/tok overhead=%.4gs)", d.Hide, d.LLHide, d.OverlapOverhead)
		}
	}
	if p.HostOverhead != 0 {
		s += fmt.Sprintf(" host_overhead=%.4gs", p.HostOverhead)
	}
	return s + fmt.Sprintf(" kv_bytes_per_token=%.0f max_total_num_tokens=%d", p.KVBytesPerToken, p.MaxTotalTokens)
}

// DefaultTTFT and DefaultITL are the `constant` preset's timings when none are given (SPEC §3:
// `--ttft 100ms --itl 20ms` style).
const (
	DefaultTTFT = 100 * time.Millisecond
	DefaultITL  = 20 * time.Millisecond
)

// Instant returns the near-zero profile: every token at once, no queueing (for overhead
// benchmarks). KV capacity defaults to 1 Mi tokens per rank.
func Instant() Profile {
	return Profile{Name: "instant", Constant: true, MaxTotalTokens: 1 << 20, Source: "no model time: tokens are produced the instant the request is admitted"}
}

// ConstantProfile returns a load-independent profile: each request's first token comes exactly
// ttft after admission and each next one exactly itl later, however many requests run. KV
// capacity defaults to 1 Mi tokens per rank.
func ConstantProfile(ttft, itl time.Duration) Profile {
	return Profile{Name: "constant", Constant: true, TTFT: ttft, ITL: itl, MaxTotalTokens: 1 << 20,
		Source: "fixed TTFT and ITL per request (an infinitely parallel server)"}
}

// DefaultHostOverhead is the presets' Profile.HostOverhead (a GPU's HostOverhead when unset):
// seconds per request spent outside the GPU steps (HTTP, tokenizer and detokenizer processes,
// scheduler polling). Fixed by llama31-8b-a100-sharegpt-v030: median TTFT 31.98 ms at 4 req/s
// on ShareGPT prompts (~220 tokens) is this plus one ~15 ms prefill step and half a ~12 ms
// decode step it waits behind. sim/validate's fit chooses it per GPU (FitFields
// "HostOverhead", bounds 1-60 ms, this as its prior): fitted with every constant to the
// embedded and held-out suite it stays within 7 % of this on A10, A100, H100, H20 and H200;
// B200's goes to 20-25 ms, which leaving each set out does not support (docs/validation.md),
// so the built-in value stays this one everywhere.
const DefaultHostOverhead = 0.011

// presetSpec is one named Build with the note that says where its setup comes from.
type presetSpec struct {
	name string
	m    ModelCard
	g    GPU
	par  Parallelism
	note string
}

// PresetSetup returns the model card and GPU a preset is built from; ok is false for constant,
// instant and unknown names. Only tests call it: sim/validate's, which record validated.json
// (the sets that validate each preset).
func PresetSetup(name string) (m ModelCard, g GPU, ok bool) {
	for _, t := range presetTable() {
		if t.name == name {
			return t.m, t.g, true
		}
	}
	return ModelCard{}, GPU{}, false
}

// presetTable lists the presets Build derives (Presets adds constant and instant).
func presetTable() []presetSpec {
	const (
		a100 = "HF config + NVIDIA A100 datasheet"
		h100 = "HF config + NVIDIA H100 datasheet"
		h200 = "HF config + NVIDIA H200 datasheet"
		h20  = "HF config + NVIDIA H20 datasheet"
		a10  = "HF config + NVIDIA A10 datasheet"
		b200 = "HF config + NVIDIA HGX B200 datasheet"
		gb   = "HF config + NVIDIA GB200 NVL72 datasheet"
	)
	tp := func(n int) Parallelism { return Parallelism{TP: n} }
	// dpEP is a server of n GPUs with one DP-attention rank per GPU and EP over all of them.
	dpEP := func(n int, deepEP string, tbo bool) Parallelism {
		return Parallelism{TP: n, DP: n, EP: n, DPAttention: true, DeepEPMode: deepEP, TwoBatchOverlap: tbo}
	}
	return []presetSpec{
		{"llama3-8b-a100", Llama3Dense8B, A100SXM, tp(1), a100 + "; fitted to llama31-8b-a100-sharegpt-v030"},
		{"llama3-8b-h100", Llama3Dense8B, H100SXM, tp(1), h100 + "; fitted to llama31-8b-h100-random8k-pr1060"},
		{"llama3-8b-h200", Llama3Dense8B, H200SXM, tp(1), h200},
		{"llama3-70b-a100-tp8", Llama3Dense70B, A100SXM, tp(8), a100},
		{"llama3-70b-h100-tp4", Llama3Dense70B, H100SXM, tp(4), h100 + "; fitted to llama31-70b-h100-tp4-sharegpt-v030"},
		{"llama3-70b-h100-tp8", Llama3Dense70B, H100SXM, tp(8), h100},
		{"llama3-70b-h200-tp8", Llama3Dense70B, H200SXM, tp(8), h200},
		{"qwen2.5-7b-gptq-a10-tp4", Qwen25Dense7BGPTQ, A10, tp(4), a10 + "; fitted to qwen25-7b-gptq-a10-pd-1p1d-pr4880 (ITL)"},
		// Qwen3-30B-A3B with DP attention and EP8 without DeepEP: all-gather before the MoE.
		{"qwen3-30b-a3b-h100-dp8", Qwen3MoE30BA3B, H100SXM, dpEP(8, "", false), h100},
		{"qwen3-30b-a3b-h200-dp8", Qwen3MoE30BA3B, H200SXM, dpEP(8, "", false), h200},
		{"qwen3-30b-a3b-h20-dp8", Qwen3MoE30BA3B, H20, dpEP(8, "", false), h20},
		// gpt-oss-120b PR #9359: --tp 4 --dp 4 --ep 4 --enable-dp-attention, no DeepEP.
		{"gpt-oss-120b-b200-dp4", GPTOSS120B, B200, dpEP(4, "", false), b200 + "; setup of gpt-oss-120b-b200-dp4-ep4-pr9359"},
		// DeepSeek-V3 with DeepEP in SGLang's default auto mode (normal in prefill steps,
		// low-latency in decode steps), one node (H200) or two (H100, H20).
		{"deepseek-v3-h200-dp8", DeepSeekV3, H200SXM, dpEP(8, "auto", false), h200},
		{"deepseek-v3-h100-dp16", DeepSeekV3, H100SXM, dpEP(16, "auto", false), h100 + "; two nodes"},
		{"deepseek-v3-h20-dp16", DeepSeekV3, H20, dpEP(16, "auto", false), h20 + "; two nodes"},
		// The LMSYS 2025-05-05 large-scale EP setup (sglang issue #6017): prefill DP32/EP32 on 4
		// nodes with DeepEP normal, decode DP72/EP72 on 9 nodes with DeepEP low-latency, both
		// with two-batch overlap.
		{"deepseek-v3-h100-ep32-prefill", DeepSeekV3, H100SXM, dpEP(32, "normal", true), h100 + "; fitted to deepseek-v3-h100-pd-ep-96gpu prefill"},
		{"deepseek-v3-h100-ep72-decode", DeepSeekV3, H100SXM, dpEP(72, "low_latency", true), h100 + "; fitted to deepseek-v3-h100-pd-ep-96gpu decode"},
		// Kimi K2 (LMSYS 2025-07-17, OME kimi-k2-pd-rt.yaml): prefill 4 nodes, decode 12 nodes.
		{"kimi-k2-h200-ep32-prefill", KimiK2, H200SXM, dpEP(32, "normal", true), h200 + "; setup of kimi-k2-h200-pd-ep-128gpu prefill"},
		{"kimi-k2-h200-ep96-decode", KimiK2, H200SXM, dpEP(96, "low_latency", true), h200 + "; fitted to kimi-k2-h200-pd-ep-128gpu decode"},
		// GB200 NVL72 decode on 48 GPUs of one NVLink domain, no two-batch overlap (LMSYS
		// 2025-06-16 and 2025-09-25), in both precisions of part II.
		{"deepseek-v3-gb200-ep48-decode", DeepSeekV3, GB200, dpEP(48, "low_latency", false), gb + "; setup of deepseek-gb200-nvl72-pd-ep-part2 high precision"},
		{"deepseek-v3-fp4-gb200-ep48-decode", DeepSeekV3FP4, GB200, dpEP(48, "low_latency", false), gb + "; setup of deepseek-gb200-nvl72-pd-ep-part2 low precision"},
	}
}

// Presets returns the named profiles, sorted by name. Each says where its numbers come from
// (Source); `router fakeworker profiles` lists them with their KV capacity and their modelled
// prefill speed and decode ITL (FormatPresets). Besides constant (DefaultTTFT, DefaultITL) and
// instant, each is Build of a model card on a GPU at a parallelism (presetTable), with
// HostOverhead its GPU's (DefaultHostOverhead). Run a DP preset with its --dp-size and --enable-dp-attention.
func Presets() []Profile {
	ps := []Profile{ConstantProfile(DefaultTTFT, DefaultITL), Instant()}
	for _, t := range presetTable() {
		p, err := Build(t.name, t.m, t.g, t.par)
		if err != nil {
			panic(err)
		}
		p.HostOverhead = t.g.hostOverhead()
		p.Source += "; " + t.note
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	return ps
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	ps := Presets()
	names := make([]string, len(ps))
	for i := range ps {
		names[i] = ps[i].Name
	}
	return names
}

// LookupProfile returns the preset called name, or an error listing the valid names.
func LookupProfile(name string) (Profile, error) {
	for _, p := range Presets() {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("engine: unknown profile %q (valid: %s)", name, strings.Join(PresetNames(), ", "))
}

// FormatPresets lists the presets, one per line, name first: KV capacity per rank, modelled
// prefill throughput (tokens/s of one 8k-token step on an empty rank) and decode ITL at batch 1,
// 64 and 256 (1k-token contexts; under DP attention: one rank loaded, the shared part on that
// batch), and where the numbers come from. With coefficients, each preset's Profile.String
// follows on its own line.
func FormatPresets(coefficients bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %12s %14s %10s %10s %10s  %s\n", "profile", "kv_tokens", "prefill_tok/s", "itl_b1", "itl_b64", "itl_b256", "source")
	for _, p := range Presets() {
		if p.Constant {
			fmt.Fprintf(&b, "%-34s %12d %14s %10s %10s %10s  %s\n", p.Name, p.MaxTotalTokens, "-", p.ITL, p.ITL, p.ITL, p.Source)
		} else {
			r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
			fmt.Fprintf(&b, "%-34s %12d %14.0f %10s %10s %10s  %s\n", p.Name, p.MaxTotalTokens, p.PrefillTokensPerSecond(),
				r(p.ITLAt(1)), r(p.ITLAt(64)), r(p.ITLAt(256)), p.Source)
		}
		if coefficients {
			b.WriteString("  " + p.String() + "\n")
		}
	}
	return b.String()
}

// PrefillTokensPerSecond is the modelled prefill speed: an 8,192-token first chunk on an idle
// rank (under DP attention, the shared part included), in tokens/s.
func (p Profile) PrefillTokensPerSecond() float64 {
	const n = 8192
	d := p.AttnPrefillTime(n, n*n/2) + p.SharedPrefillTime(n)
	if d <= 0 {
		return math.Inf(1)
	}
	return n / d.Seconds()
}

// ITLAt is the modelled decode step at batch requests of 1,024 tokens of context each (under
// DP attention: on one rank, the others idle, plus the shared part on that batch).
func (p Profile) ITLAt(batch int) time.Duration {
	if p.Constant {
		return p.ITL
	}
	if p.DPAttn != nil {
		return p.AttnDecodeTime(batch, batch*1024) + p.SharedTime(batch)
	}
	return p.DecodeTime(batch, batch*1024)
}

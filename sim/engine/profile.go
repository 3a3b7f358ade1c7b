package engine

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Profile holds the step-time model of one DP rank (ARCHITECTURE §4). All durations are in
// seconds of model time, before Config.Speedup divides them.
//
//	prefill step = A0 + A1·Σ new_tokens + A2·Σ(new_tokens·context)
//	decode step  = B0 + B1·batch + B2·Σ context + max(M0 + E(batch) + M2·Σ context, C1·batch + C2·Σ context)
//	KV transfer  = T0 + PDOverhead + tokens·KVBytesPerToken / link bandwidth
//
// where a prefill chunk's context is its mean position — the tokens before it (cached prefix and
// earlier chunks) plus half the chunk, which makes A2·new·context exact for causal attention —
// and a decode request's context is prompt + tokens generated so far. A decode step on a GPU is
// bound by the larger of its memory time (weights once, then each context token's KV) and its
// compute time, not their sum: the roofline presets use the max form (M, C) with B0 as the
// fixed overhead; B1 and B2 keep the additive form of older profiles, and a profile may use
// either or both. E(batch) is the MoE expert reads (ExpertM0).
//
// Under DP attention (Config.DPAttention) a profile with DPAttn splits every step into a part
// per rank (attention) and a part on the batch gathered from all ranks (FFN or MoE layers,
// experts sharded over the server's GPUs, plus the collectives): see DPAttnSplit.
//
// A Constant profile ignores the coefficients: every request gets exactly TTFT and ITL however
// many run (an infinitely parallel server); `instant` is Constant with both zero.
type Profile struct {
	Name string `json:"name" yaml:"name"`

	A0 float64 `json:"a0" yaml:"a0"` // prefill: fixed seconds per step
	A1 float64 `json:"a1" yaml:"a1"` // prefill: seconds per new token (linear layers)
	A2 float64 `json:"a2" yaml:"a2"` // prefill: seconds per new token × context token (attention)
	B0 float64 `json:"b0" yaml:"b0"` // decode: fixed seconds per step (scheduler, launches, sampling)
	B1 float64 `json:"b1" yaml:"b1"` // decode, additive form: seconds per request in the batch
	B2 float64 `json:"b2" yaml:"b2"` // decode, additive form: seconds per context token in the batch
	M0 float64 `json:"m0" yaml:"m0"` // decode, memory-bound: seconds to read the weights once
	M2 float64 `json:"m2" yaml:"m2"` // decode, memory-bound: seconds per context token (its KV read)
	C1 float64 `json:"c1" yaml:"c1"` // decode, compute-bound: seconds per request (2·active params FLOPs)
	C2 float64 `json:"c2" yaml:"c2"` // decode, compute-bound: seconds per context token (attention FLOPs)
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
// parallelism for MoE models; python/sglang/srt/layers/dp_attention.py gathers the ranks'
// hidden states before the MoE/FFN layers and scatters them after): attention, and the KV it
// reads, is per rank, so the slowest rank gates it; the FFN or MoE layers run once on the
// batch gathered from all ranks, each GPU holding its share of the experts, with collectives
// (all-gather or all-to-all dispatch and combine) around them.
//
//	step = max over ranks (rank's attention part) + shared(global tokens)
//	attention part, prefill = A0 + AttnA1·new + A2·Σ(new·context)
//	attention part, decode  = B0 + max(AttnM0 + M2·Σ context, AttnC1·batch + C2·Σ context)
//	shared(n) = max(FFNM0 + E(n), FFNC1·n) + CommFixed + CommPerToken·n      (n > 0; 0 when idle)
//
// where n counts the step's tokens on every rank: new tokens of prefill ranks, one per
// request of decode ranks. The coefficients assume the server has GPUs GPUs (its DP size
// times GPUs per rank).
type DPAttnSplit struct {
	GPUs         int     `json:"gpus" yaml:"gpus"`                     // GPUs of the server the shared coefficients assume
	AttnA1       float64 `json:"attn_a1" yaml:"attn_a1"`               // prefill: seconds per new token in the attention projections (per rank)
	AttnM0       float64 `json:"attn_m0" yaml:"attn_m0"`               // decode: seconds to read the attention weights (every rank holds them all)
	AttnC1       float64 `json:"attn_c1" yaml:"attn_c1"`               // decode: seconds per request in the attention projections
	FFNM0        float64 `json:"ffn_m0" yaml:"ffn_m0"`                 // seconds to read one GPU's share of the FFN weights other than routed experts
	ExpertM0     float64 `json:"expert_m0" yaml:"expert_m0"`           // seconds to read one GPU's share of all routed experts (E(n): the hit share)
	FFNC1        float64 `json:"ffn_c1" yaml:"ffn_c1"`                 // seconds per gathered token of FFN/MoE compute (spread over the GPUs)
	CommFixed    float64 `json:"comm_fixed" yaml:"comm_fixed"`         // collective latency per step, all layers
	CommPerToken float64 `json:"comm_per_token" yaml:"comm_per_token"` // collective seconds per gathered token
}

// PrefillTime is the duration of one prefill step computing newTokens tokens in total whose
// Σ(new·context) is newTimesContext (see Profile), without speedup.
func (p Profile) PrefillTime(newTokens int, newTimesContext float64) time.Duration {
	return seconds(p.A0 + p.A1*float64(newTokens) + p.A2*newTimesContext)
}

// DecodeTime is the duration of one decode step over batch requests whose contexts sum to
// context tokens, without speedup.
func (p Profile) DecodeTime(batch, context int) time.Duration {
	b, c := float64(batch), float64(context)
	return seconds(p.B0 + p.B1*b + p.B2*c + max(p.M0+p.expertRead(p.ExpertM0, batch)+p.M2*c, p.C1*b+p.C2*c))
}

// expertRead is the time to read the routed experts a batch of n tokens hits, of m for all.
func (p Profile) expertRead(m float64, n int) float64 {
	if m == 0 || p.Experts <= 0 || p.TopK <= 0 || n <= 0 {
		return 0
	}
	return m * (1 - math.Pow(1-float64(p.TopK)/float64(p.Experts), float64(n)))
}

// MemoryTime and ComputeTime are the two bounds of a decode step's roofline part (M and C):
// DecodeTime = B0 + B1·batch + B2·context + max(MemoryTime, ComputeTime).
func (p Profile) MemoryTime(batch, context int) time.Duration {
	return seconds(p.M0 + p.expertRead(p.ExpertM0, batch) + p.M2*float64(context))
}

// ComputeTime: see MemoryTime.
func (p Profile) ComputeTime(batch, context int) time.Duration {
	return seconds(p.C1*float64(batch) + p.C2*float64(context))
}

// AttnPrefillTime is a rank's attention part of a prefill step under DP attention
// (DPAttnSplit); without a split it is PrefillTime.
func (p Profile) AttnPrefillTime(newTokens int, newTimesContext float64) time.Duration {
	if p.DPAttn == nil {
		return p.PrefillTime(newTokens, newTimesContext)
	}
	return seconds(p.A0 + p.DPAttn.AttnA1*float64(newTokens) + p.A2*newTimesContext)
}

// AttnDecodeTime is a rank's attention part of a decode step under DP attention; without a
// split it is DecodeTime.
func (p Profile) AttnDecodeTime(batch, context int) time.Duration {
	if p.DPAttn == nil {
		return p.DecodeTime(batch, context)
	}
	b, c := float64(batch), float64(context)
	d := p.DPAttn
	return seconds(p.B0 + max(d.AttnM0+p.M2*c, d.AttnC1*b+p.C2*c))
}

// SharedTime is the part of a DP-attention step that runs on the tokens gathered from every
// rank (FFN/MoE and collectives); 0 without a split or with no tokens.
func (p Profile) SharedTime(tokens int) time.Duration {
	d := p.DPAttn
	if d == nil || tokens <= 0 {
		return 0
	}
	n := float64(tokens)
	return seconds(max(d.FFNM0+p.expertRead(d.ExpertM0, tokens), d.FFNC1*n) + d.CommFixed + d.CommPerToken*n)
}

// TransferTime is the duration of moving the KV of tokens tokens over a link of bandwidth
// bytes/s (≤ 0: instantaneous apart from T0 and PDOverhead), without speedup.
func (p Profile) TransferTime(tokens int, bandwidth float64) time.Duration {
	s := p.T0 + p.PDOverhead
	if bandwidth > 0 {
		s += float64(tokens) * p.KVBytesPerToken / bandwidth
	}
	return seconds(s)
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
	}
	return s + fmt.Sprintf(" kv_bytes_per_token=%.0f max_total_num_tokens=%d", p.KVBytesPerToken, p.MaxTotalTokens)
}

// ModelCard describes a transformer for the roofline. Parameter counts are totals (not per GPU).
type ModelCard struct {
	Name         string
	Aliases      []string // other names (Hugging Face ids) LookupModel accepts
	Params       float64 // all parameters (weights read per decode step; MoE: all experts)
	ActiveParams float64 // parameters used per token (dense: = Params)
	AttnParams   float64 // parameters of the attention layers (Q/K/V/O projections, all layers)
	Hidden       int     // hidden width (activations moved by the DP-attention collectives)
	Layers       int
	MoELayers    int // layers whose FFN is a mixture of experts (collectives under EP); 0 for dense
	// RoutedParams are the parameters of the routed experts (all layers); Experts and TopK the
	// routed experts per layer and those each token uses. Zero for dense models.
	RoutedParams  float64
	Experts, TopK int
	Heads         int // query heads
	KVHeads       int // key/value heads (GQA); MLA: 1, with HeadDim half the latent KV width
	HeadDim       int // dimension per head
	// AttnFLOPsPerPair is the attention FLOPs per query×key pair and layer; 0 → 4·Heads·HeadDim
	// (QKᵀ and AV). MLA in SGLang's absorbed form: 2·Heads·(latent + rope + latent).
	AttnFLOPsPerPair float64
	DTypeBytes       float64 // bytes per weight (2 for BF16, 1 for FP8)
	KVDTypeBytes     float64 // bytes per KV element; 0 → DTypeBytes
	FP8              bool    // weights and GEMMs in FP8: GPU.PeakFLOPSFP8 applies
}

// GPU describes an accelerator for the roofline.
type GPU struct {
	Name              string
	PeakFLOPS         float64 // dense BF16 FLOP/s
	PeakFLOPSFP8      float64 // dense FP8 FLOP/s (0: no FP8 tensor cores, BF16 rate)
	HBMBandwidth      float64 // bytes/s
	MemoryBytes       float64 // HBM capacity, bytes
	ComputeEfficiency float64 // achieved share of PeakFLOPS in prefill, (0,1]
	MemoryEfficiency  float64 // achieved share of HBMBandwidth in decode, (0,1]
	MemFractionStatic float64 // share of HBM SGLang gives to weights + KV (mem_fraction_static), (0,1]
	PrefillOverhead   float64 // seconds per prefill step beyond the roofline (scheduler, launches)
	DecodeOverhead    float64 // seconds per decode step beyond the roofline (scheduler, sampling, TP collectives)
	// MoELayerOverhead is the extra fixed time per MoE layer of a decode step (routing, expert
	// dispatch and combine kernels), seconds.
	MoELayerOverhead float64
	// CollectiveLatency is the latency of one all-to-all (EP dispatch or combine) or
	// all-gather across the server's GPUs over NVLink (or the scale-out network), seconds.
	CollectiveLatency float64
	// CollectiveBandwidth is the per-GPU bandwidth of those collectives, bytes/s.
	CollectiveBandwidth float64
}

func (g GPU) flops(m ModelCard) float64 {
	if m.FP8 && g.PeakFLOPSFP8 > 0 {
		return g.PeakFLOPSFP8
	}
	return g.PeakFLOPS
}

func (m ModelCard) kvBytesPerToken() float64 {
	kvd := m.KVDTypeBytes
	if kvd == 0 {
		kvd = m.DTypeBytes
	}
	return 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * kvd
}

func (m ModelCard) attnFLOPsPerPair() float64 {
	if m.AttnFLOPsPerPair > 0 {
		return m.AttnFLOPsPerPair * float64(m.Layers)
	}
	return 4 * float64(m.Layers*m.Heads*m.HeadDim)
}

func (m ModelCard) check(name string) error {
	switch {
	case m.Params <= 0 || m.ActiveParams <= 0 || m.ActiveParams > m.Params:
		return fmt.Errorf("engine: roofline %s: model %s needs 0 < active params ≤ params", name, m.Name)
	case m.RoutedParams < 0 || m.RoutedParams > m.Params-m.AttnParams || (m.RoutedParams > 0 && (m.Experts < 1 || m.TopK < 1 || m.TopK > m.Experts)):
		return fmt.Errorf("engine: roofline %s: model %s needs routed params within the FFN and 1 ≤ top-k ≤ experts", name, m.Name)
	case m.AttnParams < 0 || m.AttnParams >= m.ActiveParams:
		return fmt.Errorf("engine: roofline %s: model %s needs 0 ≤ attention params < active params", name, m.Name)
	case m.Layers < 1 || m.Heads < 1 || m.KVHeads < 1 || m.HeadDim < 1 || m.DTypeBytes <= 0:
		return fmt.Errorf("engine: roofline %s: model %s needs positive layers, heads, KV heads, head dim and dtype bytes", name, m.Name)
	}
	return nil
}

func (g GPU) check(name string) error {
	switch {
	case g.PeakFLOPS <= 0 || g.HBMBandwidth <= 0 || g.MemoryBytes <= 0:
		return fmt.Errorf("engine: roofline %s: GPU %s needs positive peak FLOP/s, HBM bandwidth and memory", name, g.Name)
	case !(g.ComputeEfficiency > 0 && g.ComputeEfficiency <= 1) || !(g.MemoryEfficiency > 0 && g.MemoryEfficiency <= 1) ||
		!(g.MemFractionStatic > 0 && g.MemFractionStatic <= 1):
		return fmt.Errorf("engine: roofline %s: GPU %s efficiencies and memory fraction must be in (0,1]", name, g.Name)
	}
	return nil
}

// DefaultPDOverhead is the presets' PDOverhead: 20 ms per request. An assumption in the range
// public SGLang PD measurements show (tens of ms added to TTFT by the bootstrap handshake,
// transfer setup and the router's two legs, on top of the transfer itself); calibrate it.
const DefaultPDOverhead = 0.020

// Roofline derives a Profile for model on tp GPUs (one DP rank = one tensor-parallel group):
//
//	A0 = PrefillOverhead + weight bytes / bandwidth      A1 = 2·ActiveParams / FLOP/s
//	A2 = attention FLOPs per pair / FLOP/s               (4·Layers·Heads·HeadDim: QKᵀ and AV)
//	B0 = DecodeOverhead
//	M0 = weight bytes / bandwidth                        M2 = KVBytesPerToken / bandwidth
//	C1 = 2·ActiveParams / FLOP/s                         C2 = A2
//	KVBytesPerToken = 2·Layers·KVHeads·HeadDim·KVDTypeBytes
//	MaxTotalTokens  = (tp·MemoryBytes·MemFractionStatic − weight bytes) / KVBytesPerToken
//
// with FLOP/s = tp·PeakFLOPS·ComputeEfficiency and bandwidth = tp·HBMBandwidth·MemoryEfficiency.
// T0 is 1 ms (transfer setup), PDOverhead DefaultPDOverhead. MoE decode reads every expert
// each step (true from batches of a few dozen on).
func Roofline(name string, m ModelCard, g GPU, tp int) (Profile, error) {
	if tp < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: tensor-parallel size %d < 1", name, tp)
	}
	if err := m.check(name); err != nil {
		return Profile{}, err
	}
	if err := g.check(name); err != nil {
		return Profile{}, err
	}
	flops := float64(tp) * g.flops(m) * g.ComputeEfficiency
	bw := float64(tp) * g.HBMBandwidth * g.MemoryEfficiency
	weights := m.Params * m.DTypeBytes
	kvb := m.kvBytesPerToken()
	attn := m.attnFLOPsPerPair() / flops
	capacity := (float64(tp)*g.MemoryBytes*g.MemFractionStatic - weights) / kvb
	if capacity < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %s weights (%.0f GB) do not fit in %d×%s", name, m.Name, weights/1e9, tp, g.Name)
	}
	return Profile{
		Name:            name,
		A0:              g.PrefillOverhead + weights/bw,
		A1:              2 * m.ActiveParams / flops,
		A2:              attn,
		B0:              g.DecodeOverhead + float64(m.MoELayers)*g.MoELayerOverhead,
		M0:              (weights - m.RoutedParams*m.DTypeBytes) / bw,
		ExpertM0:        m.RoutedParams * m.DTypeBytes / bw,
		Experts:         m.Experts,
		TopK:            m.TopK,
		M2:              kvb / bw,
		C1:              2 * m.ActiveParams / flops,
		C2:              attn,
		T0:              0.001,
		PDOverhead:      DefaultPDOverhead,
		KVBytesPerToken: kvb,
		MaxTotalTokens:  int(capacity),
		Source:          fmt.Sprintf("roofline: %s on %d×%s", m.Name, tp, g.Name),
	}, nil
}

// RooflineDP derives a DP-attention profile for model on a server of gpus GPUs, one DP rank
// per GPU (SGLang --tp gpus --dp gpus --enable-dp-attention, with --ep gpus for MoE):
// attention weights replicated on every rank, FFN/expert weights sharded over all gpus.
//
//	per rank: A0 = PrefillOverhead + attention bytes / bw    AttnA1 = 2·AttnParams / FLOP/s
//	          A2 = C2 = attention FLOPs per pair / FLOP/s     B0 = DecodeOverhead
//	          AttnM0 = attention bytes / bw                   M2 = KVBytesPerToken / bw
//	          AttnC1 = 2·AttnParams / FLOP/s
//	shared:   FFNM0 = (Params − AttnParams − RoutedParams)·DTypeBytes / (gpus·bw)
//	          ExpertM0 = RoutedParams·DTypeBytes / (gpus·bw)
//	          FFNC1 = 2·(ActiveParams − AttnParams) / (gpus·FLOP/s)
//	          CommFixed = 2·MoELayers·CollectiveLatency (dispatch and combine; dense: 2·Layers,
//	          all-gather and scatter) and CommPerToken = 2·layers·Hidden·2 bytes (BF16
//	          activations) / CollectiveBandwidth
//	KV per rank = (MemoryBytes·MemFractionStatic − attention bytes − FFN bytes / gpus) / KV per token
//
// with FLOP/s and bw those of one GPU at the GPU's efficiencies. The whole-step coefficients
// (A1, M0, C1) describe the rank alone as if it held everything, for runs without
// --dp-attention.
func RooflineDP(name string, m ModelCard, g GPU, gpus int) (Profile, error) {
	if gpus < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %d GPUs < 1", name, gpus)
	}
	if err := m.check(name); err != nil {
		return Profile{}, err
	}
	if err := g.check(name); err != nil {
		return Profile{}, err
	}
	if m.AttnParams <= 0 {
		return Profile{}, fmt.Errorf("engine: roofline %s: model %s needs its attention params for DP attention", name, m.Name)
	}
	flops := g.flops(m) * g.ComputeEfficiency
	bw := g.HBMBandwidth * g.MemoryEfficiency
	attnBytes := m.AttnParams * m.DTypeBytes
	ffnBytes := (m.Params - m.AttnParams) * m.DTypeBytes
	routedBytes := m.RoutedParams * m.DTypeBytes
	kvb := m.kvBytesPerToken()
	attn := m.attnFLOPsPerPair() / flops
	capacity := (g.MemoryBytes*g.MemFractionStatic - attnBytes - ffnBytes/float64(gpus)) / kvb
	if capacity < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %s weights (%.0f GB) do not fit in %d×%s", name, m.Name, (attnBytes*float64(gpus)+ffnBytes)/1e9, gpus, g.Name)
	}
	collLayers := m.MoELayers
	if collLayers == 0 {
		collLayers = m.Layers
	}
	var perTok float64
	if g.CollectiveBandwidth > 0 {
		perTok = 2 * float64(collLayers) * float64(m.Hidden) * 2 / g.CollectiveBandwidth
	}
	return Profile{
		Name:       name,
		A0:         g.PrefillOverhead + attnBytes/bw,
		A1:         2 * m.ActiveParams / flops,
		A2:         attn,
		B0:         g.DecodeOverhead + float64(m.MoELayers)*g.MoELayerOverhead,
		M0:         (attnBytes + ffnBytes - routedBytes) / bw,
		ExpertM0:   routedBytes / bw,
		Experts:    m.Experts,
		TopK:       m.TopK,
		M2:         kvb / bw,
		C1:         2 * m.ActiveParams / flops,
		C2:         attn,
		T0:         0.001,
		PDOverhead: DefaultPDOverhead,
		DPAttn: &DPAttnSplit{
			GPUs:         gpus,
			AttnA1:       2 * m.AttnParams / flops,
			AttnM0:       attnBytes / bw,
			AttnC1:       2 * m.AttnParams / flops,
			FFNM0:        (ffnBytes - routedBytes) / float64(gpus) / bw,
			ExpertM0:     routedBytes / float64(gpus) / bw,
			FFNC1:        2 * (m.ActiveParams - m.AttnParams) / (float64(gpus) * flops),
			CommFixed:    2 * float64(collLayers) * g.CollectiveLatency,
			CommPerToken: perTok,
		},
		KVBytesPerToken: kvb,
		MaxTotalTokens:  int(capacity),
		Source:          fmt.Sprintf("roofline: %s, DP attention + EP over %d×%s", m.Name, gpus, g.Name),
	}, nil
}

// Model cards (treat as read-only). Sources: the models' Hugging Face config.json (num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim or hidden_size/heads, hidden_size for the
// attention projections) and model cards for parameter counts. AttnParams is Σ over layers of
// the Q, K, V and O projections, computed from config.json.
var (
	// Llama3Dense8B: meta-llama/Llama-3.1-8B config.json (same shape as Llama 3 8B): 32 layers,
	// 32 heads, 8 KV heads, hidden 4096 → head dim 128; 8.03 B parameters (model card);
	// attention 32·(4096·4096·2 + 4096·1024·2) = 1.34 B.
	Llama3Dense8B = ModelCard{Name: "llama3-8b", Params: 8.03e9, ActiveParams: 8.03e9, AttnParams: 1.34e9, Hidden: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Llama3Dense70B: meta-llama/Llama-3.1-70B config.json: 80 layers, 64 heads, 8 KV heads,
	// hidden 8192 → head dim 128; 70.6 B parameters (model card); attention
	// 80·(8192·8192·2 + 8192·1024·2) = 12.1 B.
	Llama3Dense70B = ModelCard{Name: "llama3-70b", Params: 70.6e9, ActiveParams: 70.6e9, AttnParams: 12.1e9, Hidden: 8192, Layers: 80, Heads: 64, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Qwen3MoE30BA3B: Qwen/Qwen3-30B-A3B config.json: 48 layers (all MoE), 32 heads, 4 KV heads,
	// head_dim 128, hidden 2048, 128 experts with 8 active; 30.5 B total, 3.3 B activated
	// parameters (model card); attention 48·(2048·4096·2 + 2048·512·2) = 0.906 B.
	// Routed experts: 48 layers · 128 experts · 3·2048·768 (moe_intermediate_size 768) = 29.0 B.
	Qwen3MoE30BA3B = ModelCard{Name: "qwen3-30b-a3b", Params: 30.5e9, ActiveParams: 3.3e9, AttnParams: 0.906e9, Hidden: 2048, Layers: 48, MoELayers: 48,
		RoutedParams: 29.0e9, Experts: 128, TopK: 8, Heads: 32, KVHeads: 4, HeadDim: 128, DTypeBytes: 2}
	// DeepSeekV3: deepseek-ai/DeepSeek-V3 config.json: 61 layers (58 MoE), 128 heads, hidden
	// 7168, MLA with kv_lora_rank 512 + qk_rope_head_dim 64 (the 576-wide latent KV is cached:
	// KVHeads 1 × HeadDim 288 × 2 reproduces 576 elements per layer, in BF16), q_lora_rank 1536;
	// FP8 weights; 671 B total, 37 B activated (model card). Attention per layer
	// 7168·1536 + 1536·128·192 + 7168·576 + 512·128·256 + 128·128·7168 ≈ 187 M → 11.4 B; absorbed
	// MLA attention FLOPs per pair and layer 2·128·(576 + 512).
	// Routed experts: 58 layers · 256 experts · 3·7168·2048 (moe_intermediate_size 2048) =
	// 654 B, 8 per token.
	DeepSeekV3 = ModelCard{Name: "deepseek-v3", Params: 671e9, ActiveParams: 37e9, AttnParams: 11.4e9, Hidden: 7168, Layers: 61, MoELayers: 58,
		RoutedParams: 654e9, Experts: 256, TopK: 8,
		Heads: 128, KVHeads: 1, HeadDim: 288, AttnFLOPsPerPair: 2 * 128 * (576 + 512), DTypeBytes: 1, KVDTypeBytes: 2, FP8: true}
)

// GPUs (treat as read-only). Sources: NVIDIA datasheets (dense Tensor Core FLOP/s, i.e. half the
// "with sparsity" figure; HBM capacity and bandwidth; NVLink bandwidth). Efficiencies are
// assumptions typical of SGLang on these parts (prefill MFU ~50 %, decode reaching ~80 % of HBM
// bandwidth); mem_fraction_static 0.88 is in the range SGLang picks for 80–141 GB GPUs. The
// collective latency (20 µs per all-to-all within an NVLink domain) is an assumption in the
// range DeepEP's published low-latency kernel timings show; the collective bandwidth is 80 % of
// the NVLink figure; 40 µs per MoE layer of routing and dispatch kernels is assumed.
var (
	// A100SXM: A100 SXM4 80 GB: 312 TFLOP/s BF16 dense, no FP8, 2.039 TB/s HBM2e, NVLink 600 GB/s.
	A100SXM = GPU{Name: "a100-sxm", PeakFLOPS: 312e12, HBMBandwidth: 2.039e12, MemoryBytes: 80e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005,
		MoELayerOverhead: 40e-6, CollectiveLatency: 25e-6, CollectiveBandwidth: 0.8 * 600e9}
	// H100SXM: H100 SXM5 80 GB: 989 TFLOP/s BF16 and 1,979 FP8 dense, 3.35 TB/s HBM3, NVLink 900 GB/s.
	H100SXM = GPU{Name: "h100-sxm", PeakFLOPS: 989e12, PeakFLOPSFP8: 1979e12, HBMBandwidth: 3.35e12, MemoryBytes: 80e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005,
		MoELayerOverhead: 40e-6, CollectiveLatency: 20e-6, CollectiveBandwidth: 0.8 * 900e9}
	// H200SXM: H200 SXM 141 GB: 989 TFLOP/s BF16 and 1,979 FP8 dense, 4.8 TB/s HBM3e, NVLink 900 GB/s.
	H200SXM = GPU{Name: "h200-sxm", PeakFLOPS: 989e12, PeakFLOPSFP8: 1979e12, HBMBandwidth: 4.8e12, MemoryBytes: 141e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005,
		MoELayerOverhead: 40e-6, CollectiveLatency: 20e-6, CollectiveBandwidth: 0.8 * 900e9}
	// H20: H20 96 GB: 148 TFLOP/s BF16 and 296 FP8 dense, 4.0 TB/s HBM3, NVLink 900 GB/s.
	H20 = GPU{Name: "h20", PeakFLOPS: 148e12, PeakFLOPSFP8: 296e12, HBMBandwidth: 4.0e12, MemoryBytes: 96e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005,
		MoELayerOverhead: 40e-6, CollectiveLatency: 20e-6, CollectiveBandwidth: 0.8 * 900e9}
)

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

func mustRoofline(name string, m ModelCard, g GPU, tp int, note string) Profile {
	p, err := Roofline(name, m, g, tp)
	if err != nil {
		panic(err)
	}
	p.Source += "; " + note
	return p
}

func mustRooflineDP(name string, m ModelCard, g GPU, gpus int, note string) Profile {
	p, err := RooflineDP(name, m, g, gpus)
	if err != nil {
		panic(err)
	}
	p.Source += "; " + note
	return p
}

// Presets returns the named profiles, sorted by name. Each says where its numbers come from
// (Source); `router fakeworker profiles` lists them with their KV capacity and their modelled
// prefill speed and decode ITL (FormatPresets).
//
//   - constant (DefaultTTFT, DefaultITL) and instant;
//   - llama3-8b-{a100,h100,h200}: Llama3Dense8B (Llama-3.1-8B) on one GPU;
//   - llama3-70b-{a100,h100,h200}-tp8: Llama3Dense70B (Llama-3.1-70B) on 8 GPUs, TP8, overheads
//     raised (2 ms decode, 4 ms prefill) for the 160 all-reduces per step;
//   - qwen3-30b-a3b-{h100,h200,h20}-dp8: Qwen3MoE30BA3B on 8 GPUs with DP attention and EP8
//     (run with --dp-size 8 --dp-attention);
//   - deepseek-v3-h200-dp8 (one node) and deepseek-v3-{h100,h20}-dp16 (two nodes, EP over
//     400 Gb/s RDMA): DeepSeekV3 in FP8 with DP attention and EP (--dp-size 8 or 16
//     --dp-attention).
func Presets() []Profile {
	tp8 := func(g GPU) GPU {
		g.DecodeOverhead, g.PrefillOverhead = 0.002, 0.004
		return g
	}
	// Two nodes: expert-parallel all-to-all crosses a 400 Gb/s RDMA NIC per GPU (assumed 40 µs
	// latency, 80 % of 50 GB/s).
	twoNodes := func(g GPU) GPU {
		g.CollectiveLatency, g.CollectiveBandwidth = 40e-6, 0.8*50e9
		return g
	}
	const (
		a100 = "HF config + NVIDIA A100 datasheet"
		h100 = "HF config + NVIDIA H100 datasheet"
		h200 = "HF config + NVIDIA H200 datasheet"
		h20  = "HF config + NVIDIA H20 datasheet"
		tpo  = "; 2 ms/step TP8 all-reduce overhead (assumed)"
	)
	ps := []Profile{
		ConstantProfile(DefaultTTFT, DefaultITL),
		Instant(),
		mustRoofline("llama3-8b-a100", Llama3Dense8B, A100SXM, 1, a100),
		mustRoofline("llama3-8b-h100", Llama3Dense8B, H100SXM, 1, h100),
		mustRoofline("llama3-8b-h200", Llama3Dense8B, H200SXM, 1, h200),
		mustRoofline("llama3-70b-a100-tp8", Llama3Dense70B, tp8(A100SXM), 8, a100+tpo),
		mustRoofline("llama3-70b-h100-tp8", Llama3Dense70B, tp8(H100SXM), 8, h100+tpo),
		mustRoofline("llama3-70b-h200-tp8", Llama3Dense70B, tp8(H200SXM), 8, h200+tpo),
		mustRooflineDP("qwen3-30b-a3b-h100-dp8", Qwen3MoE30BA3B, H100SXM, 8, h100),
		mustRooflineDP("qwen3-30b-a3b-h200-dp8", Qwen3MoE30BA3B, H200SXM, 8, h200),
		mustRooflineDP("qwen3-30b-a3b-h20-dp8", Qwen3MoE30BA3B, H20, 8, h20),
		mustRooflineDP("deepseek-v3-h200-dp8", DeepSeekV3, H200SXM, 8, h200),
		mustRooflineDP("deepseek-v3-h100-dp16", DeepSeekV3, twoNodes(H100SXM), 16, h100+"; two nodes"),
		mustRooflineDP("deepseek-v3-h20-dp16", DeepSeekV3, twoNodes(H20), 16, h20+"; two nodes"),
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
	fmt.Fprintf(&b, "%-24s %12s %14s %10s %10s %10s  %s\n", "profile", "kv_tokens", "prefill_tok/s", "itl_b1", "itl_b64", "itl_b256", "source")
	for _, p := range Presets() {
		if p.Constant {
			fmt.Fprintf(&b, "%-24s %12d %14s %10s %10s %10s  %s\n", p.Name, p.MaxTotalTokens, "-", p.ITL, p.ITL, p.ITL, p.Source)
		} else {
			r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
			fmt.Fprintf(&b, "%-24s %12d %14.0f %10s %10s %10s  %s\n", p.Name, p.MaxTotalTokens, p.PrefillTokensPerSecond(),
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
	d := p.AttnPrefillTime(n, n*n/2) + p.SharedTime(n)
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

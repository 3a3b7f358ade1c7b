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
//	decode step  = B0 + B1·batch + B2·Σ context
//	KV transfer  = T0 + tokens·KVBytesPerToken / link bandwidth
//
// where a prefill chunk's context is its mean position — the tokens before it (cached prefix and
// earlier chunks) plus half the chunk, which makes A2·new·context exact for causal attention —
// and a decode request's context is prompt + tokens generated so far.
//
// A Constant profile ignores the coefficients: every request gets exactly TTFT and ITL however
// many run (an infinitely parallel server); `instant` is Constant with both zero.
type Profile struct {
	Name string

	A0 float64 // prefill: fixed seconds per step
	A1 float64 // prefill: seconds per new token (linear layers)
	A2 float64 // prefill: seconds per new token × context token (attention)
	B0 float64 // decode: fixed seconds per step (weights read once)
	B1 float64 // decode: seconds per request in the batch
	B2 float64 // decode: seconds per context token in the batch (KV read)
	T0 float64 // transfer: fixed seconds per room

	KVBytesPerToken float64 // bytes of KV per token for the whole rank (all layers, K and V)
	MaxTotalTokens  int     // default KV capacity per rank in tokens (max_total_num_tokens); Config.MaxTotalTokens overrides

	Constant bool          // load-independent timing: TTFT and ITL per request, coefficients unused
	TTFT     time.Duration // Constant: time from admission (unified), Handshake (prefill) to the first token
	ITL      time.Duration // Constant: time between output tokens

	Source string // where the numbers come from, one line
}

// PrefillTime is the duration of one prefill step computing newTokens tokens in total whose
// Σ(new·context) is newTimesContext (see Profile), without speedup.
func (p Profile) PrefillTime(newTokens int, newTimesContext float64) time.Duration {
	return seconds(p.A0 + p.A1*float64(newTokens) + p.A2*newTimesContext)
}

// DecodeTime is the duration of one decode step over batch requests whose contexts sum to
// context tokens, without speedup.
func (p Profile) DecodeTime(batch, context int) time.Duration {
	return seconds(p.B0 + p.B1*float64(batch) + p.B2*float64(context))
}

// TransferTime is the duration of moving the KV of tokens tokens over a link of bandwidth
// bytes/s (≤ 0: instantaneous apart from T0), without speedup.
func (p Profile) TransferTime(tokens int, bandwidth float64) time.Duration {
	s := p.T0
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
// `router fakeworker profiles` lists it.
func (p Profile) String() string {
	if p.Constant {
		return fmt.Sprintf("%s ttft=%s itl=%s (load-independent)", p.Name, p.TTFT, p.ITL)
	}
	return fmt.Sprintf("%s a0=%.4gs a1=%.4gs/tok a2=%.4gs/tok² b0=%.4gs b1=%.4gs/req b2=%.4gs/tok t0=%.4gs kv_bytes_per_token=%.0f max_total_num_tokens=%d",
		p.Name, p.A0, p.A1, p.A2, p.B0, p.B1, p.B2, p.T0, p.KVBytesPerToken, p.MaxTotalTokens)
}

// ModelCard describes a transformer for the roofline. Parameter counts are totals (not per GPU).
type ModelCard struct {
	Name         string
	Params       float64 // all parameters (weights read per decode step; MoE: all experts)
	ActiveParams float64 // parameters used per token (dense: = Params)
	Layers       int
	Heads        int     // query heads
	KVHeads      int     // key/value heads (GQA)
	HeadDim      int     // dimension per head
	DTypeBytes   float64 // bytes per weight and per KV element (2 for BF16)
}

// GPU describes an accelerator for the roofline.
type GPU struct {
	Name              string
	PeakFLOPS         float64 // dense BF16 FLOP/s
	HBMBandwidth      float64 // bytes/s
	MemoryBytes       float64 // HBM capacity, bytes
	ComputeEfficiency float64 // achieved share of PeakFLOPS in prefill, (0,1]
	MemoryEfficiency  float64 // achieved share of HBMBandwidth in decode, (0,1]
	MemFractionStatic float64 // share of HBM SGLang gives to weights + KV (mem_fraction_static), (0,1]
	PrefillOverhead   float64 // seconds per prefill step beyond the roofline (scheduler, launches)
	DecodeOverhead    float64 // seconds per decode step beyond the roofline (scheduler, sampling, TP collectives)
}

// Roofline derives a Profile for model on tp GPUs (one DP rank = one tensor-parallel group):
//
//	A0 = PrefillOverhead + weight bytes / bandwidth      A1 = 2·ActiveParams / FLOP/s
//	A2 = 4·Layers·Heads·HeadDim / FLOP/s                 (QKᵀ and AV per query×key pair)
//	B0 = DecodeOverhead + weight bytes / bandwidth       B1 = 2·ActiveParams / FLOP/s
//	B2 = KVBytesPerToken / bandwidth + A2                (read each context token's KV once per step)
//	KVBytesPerToken = 2·Layers·KVHeads·HeadDim·DTypeBytes
//	MaxTotalTokens  = (tp·MemoryBytes·MemFractionStatic − weight bytes) / KVBytesPerToken
//
// with FLOP/s = tp·PeakFLOPS·ComputeEfficiency and bandwidth = tp·HBMBandwidth·MemoryEfficiency.
// T0 is 1 ms (transfer setup: connection lookup, descriptor exchange). MoE decode reads every
// expert each step (true from batches of a few dozen on).
func Roofline(name string, m ModelCard, g GPU, tp int) (Profile, error) {
	switch {
	case tp < 1:
		return Profile{}, fmt.Errorf("engine: roofline %s: tensor-parallel size %d < 1", name, tp)
	case m.Params <= 0 || m.ActiveParams <= 0 || m.ActiveParams > m.Params:
		return Profile{}, fmt.Errorf("engine: roofline %s: model %s needs 0 < active params ≤ params", name, m.Name)
	case m.Layers < 1 || m.Heads < 1 || m.KVHeads < 1 || m.HeadDim < 1 || m.DTypeBytes <= 0:
		return Profile{}, fmt.Errorf("engine: roofline %s: model %s needs positive layers, heads, KV heads, head dim and dtype bytes", name, m.Name)
	case g.PeakFLOPS <= 0 || g.HBMBandwidth <= 0 || g.MemoryBytes <= 0:
		return Profile{}, fmt.Errorf("engine: roofline %s: GPU %s needs positive peak FLOP/s, HBM bandwidth and memory", name, g.Name)
	case !(g.ComputeEfficiency > 0 && g.ComputeEfficiency <= 1) || !(g.MemoryEfficiency > 0 && g.MemoryEfficiency <= 1) ||
		!(g.MemFractionStatic > 0 && g.MemFractionStatic <= 1):
		return Profile{}, fmt.Errorf("engine: roofline %s: GPU %s efficiencies and memory fraction must be in (0,1]", name, g.Name)
	}
	flops := float64(tp) * g.PeakFLOPS * g.ComputeEfficiency
	bw := float64(tp) * g.HBMBandwidth * g.MemoryEfficiency
	weights := m.Params * m.DTypeBytes
	kvb := 2 * float64(m.Layers*m.KVHeads*m.HeadDim) * m.DTypeBytes
	attn := 4 * float64(m.Layers*m.Heads*m.HeadDim) / flops
	capacity := (float64(tp)*g.MemoryBytes*g.MemFractionStatic - weights) / kvb
	if capacity < 1 {
		return Profile{}, fmt.Errorf("engine: roofline %s: %s weights (%.0f GB) do not fit in %d×%s", name, m.Name, weights/1e9, tp, g.Name)
	}
	return Profile{
		Name:            name,
		A0:              g.PrefillOverhead + weights/bw,
		A1:              2 * m.ActiveParams / flops,
		A2:              attn,
		B0:              g.DecodeOverhead + weights/bw,
		B1:              2 * m.ActiveParams / flops,
		B2:              kvb/bw + attn,
		T0:              0.001,
		KVBytesPerToken: kvb,
		MaxTotalTokens:  int(capacity),
		Source:          fmt.Sprintf("roofline: %s on %d×%s", m.Name, tp, g.Name),
	}, nil
}

// Model cards (treat as read-only). Sources: the models' Hugging Face config.json (num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim or hidden_size/heads) and model cards for
// parameter counts.
var (
	// Llama3Dense8B: meta-llama/Meta-Llama-3-8B config.json: 32 layers, 32 heads, 8 KV heads,
	// hidden 4096 → head dim 128; 8.03 B parameters (model card).
	Llama3Dense8B = ModelCard{Name: "llama3-8b", Params: 8.03e9, ActiveParams: 8.03e9, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Llama3Dense70B: meta-llama/Meta-Llama-3-70B config.json: 80 layers, 64 heads, 8 KV heads,
	// hidden 8192 → head dim 128; 70.6 B parameters (model card).
	Llama3Dense70B = ModelCard{Name: "llama3-70b", Params: 70.6e9, ActiveParams: 70.6e9, Layers: 80, Heads: 64, KVHeads: 8, HeadDim: 128, DTypeBytes: 2}
	// Qwen3MoE30BA3B: Qwen/Qwen3-30B-A3B config.json: 48 layers, 32 heads, 4 KV heads, head_dim
	// 128, 128 experts with 8 active; 30.5 B total, 3.3 B activated parameters (model card).
	Qwen3MoE30BA3B = ModelCard{Name: "qwen3-30b-a3b", Params: 30.5e9, ActiveParams: 3.3e9, Layers: 48, Heads: 32, KVHeads: 4, HeadDim: 128, DTypeBytes: 2}
)

// GPUs (treat as read-only). Sources: NVIDIA datasheets (dense BF16 Tensor Core FLOP/s, i.e. half the "with
// sparsity" figure). Efficiencies are assumptions typical of SGLang on these parts (prefill MFU
// ~50 %, decode reaching ~80 % of HBM bandwidth); mem_fraction_static 0.88 is in the range SGLang
// picks for 80–96 GB GPUs.
var (
	// H100SXM: H100 SXM5 80 GB: 989 TFLOP/s BF16 dense, 3.35 TB/s HBM3.
	H100SXM = GPU{Name: "h100-sxm", PeakFLOPS: 989e12, HBMBandwidth: 3.35e12, MemoryBytes: 80e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005}
	// H20: H20 96 GB: 148 TFLOP/s BF16 dense, 4.0 TB/s HBM3.
	H20 = GPU{Name: "h20", PeakFLOPS: 148e12, HBMBandwidth: 4.0e12, MemoryBytes: 96e9,
		ComputeEfficiency: 0.5, MemoryEfficiency: 0.8, MemFractionStatic: 0.88, PrefillOverhead: 0.002, DecodeOverhead: 0.0005}
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

// Presets returns the named profiles, sorted by name:
//
//   - constant (DefaultTTFT, DefaultITL) and instant;
//   - llama3-8b-h100: Llama3Dense8B on one H100SXM (≈ 6.6 ms ITL at batch 1 and 1k context,
//     ≈ 0.31 s for a first 8k chunk, ≈ 415k KV tokens per rank);
//   - llama3-70b-h100-tp8: Llama3Dense70B on 8×H100SXM, TP8 (≈ 8.6 ms ITL at batch 1, ≈ 0.33 s for
//     a first 8k chunk, ≈ 1.29 M KV tokens); overheads raised (2 ms decode, 4 ms prefill) for the
//     160 all-reduces per step;
//   - qwen3-30b-a3b-h20: Qwen3MoE30BA3B, one H20 per DP rank (the DP-attention layout: a server of
//     --dp-size N is N such ranks stepping in lockstep; the full weights are counted on each rank,
//     which understates KV room under expert parallelism: ≈ 239k KV tokens per rank; ≈ 20 ms ITL
//     at batch 1, ≈ 1.1 s for a first 8k chunk on the compute-poor H20).
//
// `router fakeworker profiles` prints them with FormatPresets.
func Presets() []Profile {
	tp8 := H100SXM
	tp8.DecodeOverhead = 0.002
	tp8.PrefillOverhead = 0.004
	ps := []Profile{
		ConstantProfile(DefaultTTFT, DefaultITL),
		Instant(),
		mustRoofline("llama3-8b-h100", Llama3Dense8B, H100SXM, 1, "HF config + NVIDIA H100 datasheet"),
		mustRoofline("llama3-70b-h100-tp8", Llama3Dense70B, tp8, 8, "HF config + NVIDIA H100 datasheet; 2 ms/step TP8 all-reduce overhead (assumed)"),
		mustRoofline("qwen3-30b-a3b-h20", Qwen3MoE30BA3B, H20, 1, "HF config + NVIDIA H20 datasheet; one GPU per DP-attention rank"),
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

// FormatPresets lists the presets, one per line, name first, with their coefficients (the output
// of `router fakeworker profiles`).
func FormatPresets() string {
	var b strings.Builder
	for _, p := range Presets() {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

package engine

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"
)

// Speculative decoding as SGLang's EAGLE worker runs it (python/sglang/srt/speculative/
// eagle_worker.py; --speculative-algorithm EAGLE, EAGLE3, or NEXTN, which SGLang runs as EAGLE
// with the model's own multi-token-prediction layer as the draft). Each decode step of a batch
// of b requests is
//
//	draft:  NumSteps forwards of the one-layer draft model on b·TopK tokens (the tree's levels),
//	verify: one forward of the target over b·NumDraftTokens tokens — the weights read once, the
//	        FLOPs and the attention queries NumDraftTokens times, each request's KV read once,
//	extend: one more draft forward on the accepted tokens (forward_draft_extend_after_decode),
//
// and each request gains AcceptLength tokens on average (at least the verified bonus token),
// streamed in one chunk. SGLang's speculative worker runs without the overlap scheduler (its
// server_args.py turns it off unless SGLANG_ENABLE_SPEC_V2), so the scheduler's per-request
// CPU work is charged as with --disable-overlap-schedule.
//
// The acceptance length depends on the draft model, the prompts and the sampling; SGLang logs
// it as "accept len" per decode batch. It is a parameter here, with no default: give what the
// deployment logs (published on MT-bench at batch 1: Llama 3.1 8B EAGLE-2 3.76, EAGLE-3 4.68 at
// 5 steps and 5.39 at 8, sglang PR #4247; Llama 3.3 70B EAGLE-3 5.88 at 8 steps × top-k 8 × 64
// draft tokens, PR #4716; DeepSeek-V3 NextN 2.5–3 at 4 draft tokens, PR #3582).

// The speculative algorithms (SGLang's --speculative-algorithm).
const (
	SpecEAGLE  = "EAGLE"
	SpecEAGLE3 = "EAGLE3"
	SpecNEXTN  = "NEXTN"
)

// EAGLE3DraftVocab is the vocabulary an EAGLE-3 draft head predicts (draft_vocab_size of the
// published EAGLE-3 heads, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): its lm_head is that wide,
// not the target's, which is most of what makes its forwards cheaper than EAGLE-2's.
const EAGLE3DraftVocab = 32000

// SpecDraftOverhead is the seconds one draft forward costs beyond its roofline: the CUDA-graph
// replay of a one-layer model, the top-k and the tree bookkeeping between levels. Fixed by
// sglang PR #4247 (Llama 3.1 8B on an H100, MT-bench, batch 1, EAGLE-3 at 5 and 8 steps: 361.70
// tok/s at accept length 4.68 and 378.57 at 5.39, i.e. 12.94 and 14.24 ms per step): three
// more forwards cost 1.30 ms, 0.43 ms each, of which the roofline of one Llama layer plus a
// 32k lm_head is 0.26 ms.
const SpecDraftOverhead = 0.17e-3

// SpecVerifyOverhead is the seconds a speculative decode step costs beyond the target's
// forward over the draft tokens and the draft forwards: building the tree mask and positions,
// verifying and accepting (eagle_utils.py), freeing the rejected tokens' KV. Fixed by the same
// runs: 12.94 ms per step at 5 steps less a 6.32 ms decode step (the same page's 158.34 tok/s
// without speculation) less six 0.43 ms draft forwards.
const SpecVerifyOverhead = 4.0e-3

// SpecMaxRunningRequests is SGLang's --max-running-requests default under EAGLE speculative
// decoding (server_args.py: 48 when unset, the server's, divided among DP-attention ranks).
const SpecMaxRunningRequests = 48

// Spec is a server's speculative decoding (Algorithm "" → off), with SGLang's names.
type Spec struct {
	Algorithm    string  `json:"speculative_algorithm,omitempty" yaml:"speculative_algorithm,omitempty"`
	NumSteps     int     `json:"speculative_num_steps,omitempty" yaml:"speculative_num_steps,omitempty"`
	EagleTopK    int     `json:"speculative_eagle_topk,omitempty" yaml:"speculative_eagle_topk,omitempty"`
	DraftTokens  int     `json:"speculative_num_draft_tokens,omitempty" yaml:"speculative_num_draft_tokens,omitempty"`
	AcceptLength float64 `json:"speculative_accept_length,omitempty" yaml:"speculative_accept_length,omitempty"` // mean tokens a request gains per step (≥ 1)
}

// On reports whether speculative decoding is configured.
func (s Spec) On() bool { return s.Algorithm != "" }

// WithDefaults fills the unset sizes as SGLang does for the model's architecture
// (server_args.py auto_choose_speculative_params: 3 steps × top-k 1 × 4 draft tokens for
// DeepSeek V2/V3, 5 × 4 × 8 for every other model) and, with top-k 1, makes the draft tokens
// steps + 1 (a chain: SGLang adjusts them with a warning).
func (s Spec) WithDefaults(arch string) Spec {
	if !s.On() {
		return s
	}
	s.Algorithm = strings.ToUpper(s.Algorithm)
	steps, topk, draft := 5, 4, 8
	if arch == "DeepseekV3ForCausalLM" || arch == "DeepseekV2ForCausalLM" {
		steps, topk, draft = 3, 1, 4
	}
	s.NumSteps = cmp.Or(s.NumSteps, steps)
	s.EagleTopK = cmp.Or(s.EagleTopK, topk)
	s.DraftTokens = cmp.Or(s.DraftTokens, draft)
	if s.EagleTopK == 1 {
		s.DraftTokens = s.NumSteps + 1
	}
	return s
}

// Validate reports the first invalid field, with SGLang's flag names.
func (s Spec) Validate() error {
	if !s.On() {
		if s.NumSteps != 0 || s.EagleTopK != 0 || s.DraftTokens != 0 || s.AcceptLength != 0 {
			return fmt.Errorf("engine: --speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens and --speculative-accept-length need --speculative-algorithm")
		}
		return nil
	}
	switch a := strings.ToUpper(s.Algorithm); {
	case a != SpecEAGLE && a != SpecEAGLE3 && a != SpecNEXTN:
		return fmt.Errorf("engine: --speculative-algorithm %q is not modelled (EAGLE, EAGLE3, NEXTN)", s.Algorithm)
	case s.NumSteps < 0 || s.EagleTopK < 0 || s.DraftTokens < 0:
		return fmt.Errorf("engine: --speculative-num-steps %d, --speculative-eagle-topk %d and --speculative-num-draft-tokens %d must be ≥ 1", s.NumSteps, s.EagleTopK, s.DraftTokens)
	case !(s.AcceptLength >= 1) || math.IsInf(s.AcceptLength, 0):
		return fmt.Errorf("engine: --speculative-accept-length %g must be ≥ 1: the mean tokens a request gains per decode step, as SGLang logs it (accept len)", s.AcceptLength)
	}
	return nil
}

// check validates a defaulted s: the accepted tokens fit the verified ones.
func (s Spec) check() error {
	if err := s.Validate(); err != nil || !s.On() {
		return err
	}
	if most := float64(min(s.DraftTokens, s.NumSteps+1)); s.AcceptLength > most {
		return fmt.Errorf("engine: --speculative-accept-length %g exceeds what a step can accept, min(--speculative-num-draft-tokens %d, --speculative-num-steps %d + 1)", s.AcceptLength, s.DraftTokens, s.NumSteps)
	}
	return nil
}

// draftCard is the draft model of algorithm alg for m: one decoder layer of m's shape (EAGLE's
// draft heads and DeepSeek's NextN module are one layer; NextN's is a mixture of experts like
// m's own, an EAGLE head is dense) and an lm_head over m's vocabulary (EAGLE-3: its reduced
// one). The embedding table is the target's, shared, and not read per forward.
func (m ModelCard) draftCard(alg string) (ModelCard, error) {
	if m.Vocab <= 0 {
		return ModelCard{}, fmt.Errorf("engine: speculative decoding of model %s needs its vocab size (a --model-config with vocab_size)", m.Name)
	}
	embed := float64(m.Vocab * m.Hidden)
	layers := float64(m.Layers)
	// The weights of a layer outside attention and the routed experts (dense FFN, shared
	// experts, router), from the card's totals less the embedding and lm_head tables.
	other := max(m.Params-m.AttnParams-m.RoutedParams-2*embed, 0) / layers
	otherActive := max(m.ActiveParams-m.AttnParams-m.RoutedParams*float64(m.TopK)/math.Max(float64(m.Experts), 1)-2*embed, 0) / layers
	vocab := m.Vocab
	if alg == SpecEAGLE3 {
		vocab = min(vocab, EAGLE3DraftVocab)
	}
	head := float64(vocab * m.Hidden)
	d := m
	d.Name, d.Aliases = m.Name+"-draft-"+strings.ToLower(alg), nil
	d.Layers, d.SlidingLayers, d.SlidingWindow, d.LowPrecisionAttnParams = 1, 0, 0, 0
	d.AttnParams = m.AttnParams / layers
	if alg == SpecNEXTN && m.MoELayers > 0 {
		d.MoELayers = 1
		d.RoutedParams = m.RoutedParams / float64(m.MoELayers)
		d.Params = d.AttnParams + other + d.RoutedParams + head
		d.ActiveParams = d.AttnParams + otherActive + d.RoutedParams*float64(m.TopK)/float64(m.Experts) + head
	} else {
		// A dense layer computing what one of m's layers computes per token.
		d.MoELayers, d.RoutedParams, d.Experts, d.TopK = 0, 0, 0, 0
		ffn := otherActive + m.RoutedParams*float64(m.TopK)/math.Max(float64(m.Experts), 1)/layers
		d.Params = d.AttnParams + ffn + head
		d.ActiveParams = d.Params
	}
	return d, nil
}

// buildDraft builds the draft model's profile for a server of m on g at par: one forward of
// it is its DecodeTime, with SpecDraftOverhead as its fixed part instead of a decode step's.
// Under DP attention each rank drafts alone, on its own GPUs.
func buildDraft(m ModelCard, g GPU, par Parallelism, alg string) (*Profile, error) {
	d, err := m.draftCard(alg)
	if err != nil {
		return nil, err
	}
	dpar := Parallelism{TP: par.TP / par.DP, GPUsPerNode: par.GPUsPerNode}
	p, err := Build(d.Name, d, g, dpar)
	if err != nil {
		return nil, fmt.Errorf("engine: draft model: %w", err)
	}
	p.B0, p.B1, p.B2, p.DecodeHost = SpecDraftOverhead, 0, 0, 0
	p.DPAttn, p.HostOverhead, p.EagerOverhead = nil, 0, 0
	return &p, nil
}

// verifyTime is the target's forward over batch requests of k draft tokens each whose contexts
// sum to context tokens: DecodeTime with the FLOPs, the attention queries and the experts hit
// k times over, the weights and each request's KV read once (k = 1: DecodeTime).
func (p Profile) verifyTime(batch, k, context int) time.Duration {
	b, c, kf := float64(batch), float64(context), float64(k)
	return seconds(p.B0 + p.B1*b + p.B2*c + max(p.M0+p.expertRead(p.ExpertM0, batch*k)+p.M2*c, p.C1*b*kf+p.C2*c*kf))
}

// attnVerifyTime is verifyTime's rank part under DP attention (AttnDecodeTime for k = 1).
func (p Profile) attnVerifyTime(batch, k, context int) time.Duration {
	if p.DPAttn == nil {
		return p.verifyTime(batch, k, context)
	}
	b, c, kf := float64(batch), float64(context), float64(k)
	d := p.DPAttn
	return seconds(p.B0 + p.B1*b + p.B2*c + max(d.AttnM0, d.AttnC1*b*kf) + max(p.M2*c, p.C2*c*kf))
}

// specDraftTime is the draft and verify work of a speculative decode step of n (padded)
// requests over context tokens, beyond the target's own forward: the draft forwards and
// SpecVerifyOverhead.
func (p Profile) specDraftTime(s Spec, n, context int) time.Duration {
	if p.Draft == nil {
		return 0
	}
	draft := time.Duration(s.NumSteps) * p.Draft.DecodeTime(n*s.EagleTopK, context)
	extend := p.Draft.DecodeTime(n*max(1, int(math.Ceil(s.AcceptLength))), context)
	return draft + extend + seconds(SpecVerifyOverhead)
}

package engine

import (
	"fmt"
	"sort"
	"strings"
)

// Parallelism is how one SGLang server spreads a model over its GPUs, in SGLang's terms
// (python/sglang/srt/server_args.py): --tp-size GPUs per server, --dp-size data-parallel
// ranks, --ep-size expert-parallel ranks, --enable-dp-attention. Without DP attention a
// server of TP GPUs and DP ranks runs DP replicas of TP/DP GPUs each; with it, attention is
// data-parallel over DP ranks of TP/DP GPUs and the FFN/MoE layers span all TP GPUs (EP of
// them for experts).
type Parallelism struct {
	TP          int  // --tp-size: GPUs of the server; 0 → 1
	DP          int  // --dp-size: DP ranks; 0 → 1
	EP          int  // --ep-size: expert-parallel size (MoE); 0 → 1 (experts tensor-parallel)
	DPAttention bool // --enable-dp-attention
	// GPUsPerNode is the GPUs one node holds (NVLink domain); collectives among more GPUs than
	// that cross the scale-out network. 0 → 8.
	GPUsPerNode int
	// TwoBatchOverlap is --enable-two-batch-overlap: communication of one micro-batch hides
	// behind computation of the other.
	TwoBatchOverlap bool
	// DeepEPMode is --deepep-mode ("normal", "low_latency", "auto"); "" without DeepEP.
	DeepEPMode string
}

// WithDefaults returns p with zero fields at their defaults.
func (p Parallelism) WithDefaults() Parallelism {
	if p.TP == 0 {
		p.TP = 1
	}
	if p.DP == 0 {
		p.DP = 1
	}
	if p.EP == 0 {
		p.EP = 1
	}
	if p.GPUsPerNode == 0 {
		p.GPUsPerNode = 8
	}
	return p
}

// Validate reports the first invalid field, with SGLang's flag name.
func (p Parallelism) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.TP < 1:
		return fmt.Errorf("engine: --tp-size %d must be ≥ 1", p.TP)
	case p.DP < 1 || p.TP%p.DP != 0:
		return fmt.Errorf("engine: --dp-size %d must be ≥ 1 and divide --tp-size %d", p.DP, p.TP)
	case p.EP < 1 || p.TP%p.EP != 0:
		return fmt.Errorf("engine: --ep-size %d must be ≥ 1 and divide --tp-size %d", p.EP, p.TP)
	case p.GPUsPerNode < 1:
		return fmt.Errorf("engine: GPUs per node %d must be ≥ 1", p.GPUsPerNode)
	}
	return nil
}

// Build derives the profile of one DP rank of a server running model m on GPU g with
// parallelism par (see Parallelism). The server runs with Config.DPSize = par.DP and
// Config.DPAttention = par.DPAttention.
func Build(name string, m ModelCard, g GPU, par Parallelism) (Profile, error) {
	if err := par.Validate(); err != nil {
		return Profile{}, err
	}
	par = par.WithDefaults()
	if par.DPAttention {
		return RooflineDP(name, m, g, par.TP)
	}
	return Roofline(name, m, g, par.TP/par.DP)
}

// Models returns the model cards by name (sorted by name); each card's Aliases (Hugging Face
// ids) name it too.
func Models() []ModelCard {
	ms := []ModelCard{Llama3Dense8B, Llama3Dense70B, Qwen3MoE30BA3B, DeepSeekV3}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms
}

// GPUs returns the GPU descriptions, sorted by name.
func GPUs() []GPU {
	gs := []GPU{A100SXM, H100SXM, H200SXM, H20}
	sort.Slice(gs, func(i, j int) bool { return gs[i].Name < gs[j].Name })
	return gs
}

// LookupModel returns the model card called name (its Name or one of its Aliases, case
// insensitive), or an error listing the valid names.
func LookupModel(name string) (ModelCard, error) {
	var names []string
	for _, m := range Models() {
		if strings.EqualFold(m.Name, name) {
			return m, nil
		}
		for _, a := range m.Aliases {
			if strings.EqualFold(a, name) {
				return m, nil
			}
		}
		names = append(names, m.Name)
	}
	return ModelCard{}, fmt.Errorf("engine: unknown model %q (valid: %s)", name, strings.Join(names, ", "))
}

// LookupGPU returns the GPU called name (case insensitive), or an error listing the names.
func LookupGPU(name string) (GPU, error) {
	var names []string
	for _, g := range GPUs() {
		if strings.EqualFold(g.Name, name) {
			return g, nil
		}
		names = append(names, g.Name)
	}
	return GPU{}, fmt.Errorf("engine: unknown GPU %q (valid: %s)", name, strings.Join(names, ", "))
}

// ServerArgs are SGLang's engine arguments that shape scheduling and memory, with SGLang's
// names (python/sglang/srt/server_args.py). Zero fields are unset: WithSGLangDefaults fills
// them as SGLang would for the GPU and parallelism, Apply leaves unset ones to Config's
// defaults.
type ServerArgs struct {
	ChunkedPrefillSize       int     `json:"chunked_prefill_size,omitempty" yaml:"chunked_prefill_size,omitempty"`
	MaxRunningRequests       int     `json:"max_running_requests,omitempty" yaml:"max_running_requests,omitempty"`
	MaxTotalTokens           int     `json:"max_total_tokens,omitempty" yaml:"max_total_tokens,omitempty"`
	PageSize                 int     `json:"page_size,omitempty" yaml:"page_size,omitempty"`
	CUDAGraphMaxBS           int     `json:"cuda_graph_max_bs,omitempty" yaml:"cuda_graph_max_bs,omitempty"`
	MemFractionStatic        float64 `json:"mem_fraction_static,omitempty" yaml:"mem_fraction_static,omitempty"`
	ScheduleConservativeness float64 `json:"schedule_conservativeness,omitempty" yaml:"schedule_conservativeness,omitempty"`
}

// Apply returns c with the set fields of a copied in. MemFractionStatic is not a Config
// field: it shapes the profile's KV capacity (GPU.MemFractionStatic before Build).
func (a ServerArgs) Apply(c Config) Config {
	if a.ChunkedPrefillSize != 0 {
		c.ChunkedPrefillSize = a.ChunkedPrefillSize
	}
	if a.MaxRunningRequests != 0 {
		c.MaxRunningRequests = a.MaxRunningRequests
	}
	if a.MaxTotalTokens != 0 {
		c.MaxTotalTokens = a.MaxTotalTokens
	}
	if a.PageSize != 0 {
		c.PageSize = a.PageSize
	}
	if a.CUDAGraphMaxBS != 0 {
		c.CUDAGraphMaxBS = a.CUDAGraphMaxBS
	}
	if a.ScheduleConservativeness != 0 {
		c.ScheduleConservativeness = a.ScheduleConservativeness
	}
	return c
}

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
	"go.yaml.in/yaml/v3"
)

// Engine profiles as files (--profile FILE): the fields of a preset, YAML or JSON, units in
// the comments `router fakeworker profiles --show NAME` writes. A --profile value is a file
// when it names one (a path separator, or a .yaml/.yml/.json suffix); otherwise a preset.

// isProfileFile reports whether a --profile value names a file rather than a preset.
func isProfileFile(v string) bool {
	ext := strings.ToLower(filepath.Ext(v))
	return strings.ContainsRune(v, os.PathSeparator) || ext == ".yaml" || ext == ".yml" || ext == ".json"
}

// profileDoc is each key of a profile file with its meaning and unit, in file order.
var profileDoc = []struct{ key, doc string }{
	{"name", "profile name (results.json records it)"},
	{"source", "where the numbers come from"},
	{"a0", "prefill: fixed seconds per step"},
	{"a1", "prefill: seconds per new token (linear layers)"},
	{"a2", "prefill: seconds per new token × context token (attention)"},
	{"b0", "decode: fixed seconds per step (scheduler, launches, sampling)"},
	{"b1", "decode, additive: seconds per request in the batch"},
	{"b2", "decode, additive: seconds per context token in the batch"},
	{"m0", "decode, memory-bound: seconds to read the weights once"},
	{"m2", "decode, memory-bound: seconds per context token (KV read)"},
	{"c1", "decode, compute-bound: seconds per request"},
	{"c2", "decode, compute-bound: seconds per context token (attention FLOPs)"},
	{"expert_m0", "MoE: seconds to read every routed expert once (0: dense)"},
	{"experts", "MoE: routed experts"},
	{"top_k", "MoE: experts each token routes to"},
	{"t0", "KV transfer: fixed seconds per room"},
	{"pd_overhead", "PD: fixed seconds per request (bootstrap, transfer setup), once in TTFT"},
	{"host_overhead", "seconds per request outside the GPU steps (HTTP, tokenizer, detokenizer)"},
	{"eager_overhead", "seconds a decode step costs beyond the roofline above cuda_graph_max_bs"},
	{"fit", "calibrate: the range this profile was fitted on (router sim warns outside it)"},
	{"prompt_tokens_min", "shortest prompt of the fitted levels, tokens"},
	{"prompt_tokens_max", "longest prompt of the fitted levels, tokens"},
	{"batch_per_rank_max", "most requests in flight per decode rank in a fitted level"},
	{"residual", "rms log error of the fit on its own levels (≈ relative error)"},
	{"kv_bytes_per_token", "bytes of KV per token per rank (all layers, K and V)"},
	{"max_total_tokens", "KV capacity per rank in tokens"},
	{"constant", "load-independent timing: ttft and itl per request, coefficients unused"},
	{"ttft", "constant: time to first token (e.g. 100ms)"},
	{"itl", "constant: time between output tokens (e.g. 20ms)"},
	{"dp_attention", "DP attention split (omit: each rank's whole step, the slowest gating)"},
	{"gpus", "GPUs of the server the shared coefficients assume"},
	{"attn_a1", "prefill: seconds per new token in attention projections (per rank)"},
	{"attn_m0", "decode: seconds to read the attention weights"},
	{"attn_c1", "decode: seconds per request in attention projections"},
	{"ffn_m0", "seconds to read one GPU's share of the non-expert FFN weights"},
	{"ffn_c1", "seconds per gathered token of FFN/MoE compute"},
	{"comm_fixed", "collective latency per step, all layers"},
	{"comm_per_token", "collective seconds per gathered token"},
}

// profileYAML writes p as a profile file: every key, with its unit as a comment.
func profileYAML(p engine.Profile) ([]byte, error) {
	raw, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return nil, err
	}
	docs := map[string]string{}
	for _, d := range profileDoc {
		docs[d.key] = d.doc
	}
	var comment func(n *yaml.Node)
	comment = func(n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if d, ok := docs[k.Value]; ok {
				if v.Kind == yaml.MappingNode {
					k.HeadComment = d
				} else {
					v.LineComment = d
				}
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!float" {
				if f, err := strconv.ParseFloat(v.Value, 64); err == nil {
					v.Value = strconv.FormatFloat(f, 'g', -1, 64) // 1.2e-05, not 0.000012
				}
			}
			if k.Value == "ttft" || k.Value == "itl" {
				if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
					v.Value, v.Tag = time.Duration(n).String(), "!!str"
				}
			}
			if v.Kind == yaml.MappingNode {
				comment(v)
			}
		}
	}
	comment(node.Content[0])
	var b bytes.Buffer
	b.WriteString("# pdrouter engine profile: router sim/fakeworker --profile FILE. Times in seconds unless noted.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// loadProfileFile reads a profile file (YAML or JSON). Unknown keys and wrong types are errors
// naming the file and line; a missing name is the file's base name.
func loadProfileFile(path string) (engine.Profile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return engine.Profile{}, fmt.Errorf("--profile: %w", err)
	}
	var p engine.Profile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("--profile %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if err := checkProfile(p); err != nil {
		return p, fmt.Errorf("--profile %s: %w", path, err)
	}
	return p, nil
}

// checkProfile rejects profiles the engine cannot run: negative or non-finite coefficients,
// no KV capacity, a model with neither prefill nor decode cost.
func checkProfile(p engine.Profile) error {
	vals := map[string]float64{"a0": p.A0, "a1": p.A1, "a2": p.A2, "b0": p.B0, "b1": p.B1, "b2": p.B2, "m0": p.M0, "m2": p.M2,
		"c1": p.C1, "c2": p.C2, "expert_m0": p.ExpertM0, "t0": p.T0, "pd_overhead": p.PDOverhead, "kv_bytes_per_token": p.KVBytesPerToken,
		"host_overhead": p.HostOverhead, "eager_overhead": p.EagerOverhead}
	if f := p.Fit; f != nil {
		vals["fit.residual"] = f.Residual
		if f.PromptTokensMin < 0 || f.PromptTokensMax < f.PromptTokensMin || f.BatchPerRankMax < 0 {
			return fmt.Errorf("fit: prompt_tokens_min %d, prompt_tokens_max %d and batch_per_rank_max %d must be ≥ 0 with min ≤ max",
				f.PromptTokensMin, f.PromptTokensMax, f.BatchPerRankMax)
		}
	}
	for k, v := range vals {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s = %g must be a finite number ≥ 0", k, v)
		}
	}
	switch {
	case p.MaxTotalTokens < 1:
		return fmt.Errorf("max_total_tokens = %d must be ≥ 1", p.MaxTotalTokens)
	case p.Constant && (p.TTFT < 0 || p.ITL < 0):
		return fmt.Errorf("ttft %v and itl %v must be ≥ 0", p.TTFT, p.ITL)
	case !p.Constant && p.A1 == 0 && p.A2 == 0 && p.A0 == 0:
		return fmt.Errorf("a0, a1 and a2 are all 0: prefill would cost nothing (set constant: true for fixed timings)")
	case p.Experts < 0 || p.TopK < 0 || p.TopK > p.Experts:
		return fmt.Errorf("top_k %d must be in [0, experts %d]", p.TopK, p.Experts)
	}
	return nil
}

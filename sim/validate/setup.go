package validate

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// gpuNames maps the data files' GPU strings to engine GPU names (engine.LookupGPU).
var gpuNames = map[string]string{
	"a100": "a100-sxm", "a100-80g": "a100-sxm", "a100-sxm": "a100-sxm",
	"h100": "h100-sxm", "h100-80g": "h100-sxm", "h100-sxm": "h100-sxm",
	"h200": "h200-sxm", "h200-141g": "h200-sxm", "h200-sxm": "h200-sxm",
	"h20":  "h20",
	"b200": "b200", "gb200": "gb200", "a10": "a10",
}

// modelNames maps Hugging Face ids to engine model names for cards that do not list the id
// among their Aliases yet; engine.LookupModel is asked first, so an alias added to a card
// takes over.
var modelNames = map[string]string{
	"meta-llama/llama-3.1-8b-instruct":      "llama3-8b",
	"meta-llama/meta-llama-3.1-8b-instruct": "llama3-8b",
	"meta-llama/llama-3.1-70b-instruct":     "llama3-70b",
	"deepseek-ai/deepseek-v3":               "deepseek-v3",
	"deepseek-ai/deepseek-r1":               "deepseek-v3",
}

// notExpressible prefixes the note of every figure the suite cannot compute today.
const notExpressible = "not expressible yet: "

// resolveModel finds the set's model card: the first word of the file's model field (its HF
// id) by engine.LookupModel (names and aliases), then by modelNames. A quantized checkpoint
// (…-GPTQ-Int4, …-AWQ, …-FP8) is its base model's card at another precision (the set's
// precision field; applyPrecision).
func resolveModel(s Set) (engine.ModelCard, error) {
	id := firstWord(s.Model)
	ids := []string{id}
	if i := quantSuffix.FindStringIndex(id); i != nil && i[0] > 0 {
		ids = append(ids, id[:i[0]])
	}
	for _, c := range ids {
		if m, err := engine.LookupModel(c); err == nil {
			return m, nil
		}
		if n, ok := modelNames[strings.ToLower(c)]; ok {
			if m, err := engine.LookupModel(n); err == nil {
				return m, nil
			}
		}
	}
	return engine.ModelCard{}, fmt.Errorf("unknown model %s", id)
}

var quantSuffix = regexp.MustCompile(`(?i)-(gptq|awq|fp8|int4|int8|w4a16|w8a8)([-_].*)?$`)

// resolveGPU finds the set's GPU.
func resolveGPU(s Set) (engine.GPU, error) {
	id := strings.ToLower(firstWord(s.GPU))
	name, ok := gpuNames[id]
	if !ok {
		name = id
	}
	g, err := engine.LookupGPU(name)
	if err != nil {
		return engine.GPU{}, fmt.Errorf("unknown GPU %s", s.GPU)
	}
	return g, nil
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// applyPrecision adjusts the card to the precision a set (or one level of it) ran with, where
// the card's native precision differs and a single number expresses it; notes say what was
// done. The catalog's cards carry their checkpoint's native dtype.
func applyPrecision(m engine.ModelCard, precision string, notes *[]string) engine.ModelCard {
	p := strings.ToLower(precision)
	kv := m.KVDTypeBytes
	if kv == 0 {
		kv = m.DTypeBytes
	}
	switch {
	case strings.HasPrefix(p, "int4"):
		// GPTQ int4 weights (dequantized into BF16 GEMMs): half a byte per weight read, the
		// BF16 compute rate, BF16 KV.
		if m.DTypeBytes != 0.5 {
			m.DTypeBytes, m.KVDTypeBytes, m.FP8 = 0.5, kv, false
			*notes = append(*notes, "int4 weights: 0.5 B/weight, BF16 GEMM rate and KV")
		}
	case strings.HasPrefix(p, "low"):
		// GB200 part II "low": FP8 attention (KV) + NVFP4 MoE; the card has one weight dtype,
		// so every weight is taken as 4-bit at the FP8 GEMM rate.
		m.DTypeBytes, m.KVDTypeBytes, m.FP8 = 0.5, 1, true
		*notes = append(*notes, "low precision approximated: all weights 0.5 B (NVFP4) at the FP8 GEMM rate, FP8 KV")
	case strings.HasPrefix(p, "fp8"):
		if !m.FP8 {
			m.DTypeBytes, m.KVDTypeBytes, m.FP8 = 1, kv, true
			*notes = append(*notes, "fp8 weights and GEMMs")
		}
	}
	return m
}

// serverArgs reads SGLang's server arguments from m (snake case, lenient numbers) into
// engine.ServerArgs for a server of par.
//
// Under DP attention SGLang splits two of them over the DP ranks: chunked_prefill_size is
// divided by dp_size (python/sglang/srt/server_args.py, the enable_dp_attention branch of
// ServerArgs.__post_init__ / _handle_data_parallelism) and max_running_requests is a budget
// per DP worker of max_running_requests // dp_size (model_runner.py, where the request pool
// is sized). engine.Config holds both per rank, so they are divided here. cuda_graph_bs
// without cuda_graph_max_bs gives its largest size.
func serverArgs(m map[string]any, par engine.Parallelism, notes *[]string) engine.ServerArgs {
	var a engine.ServerArgs
	num := func(k string) (float64, bool) {
		v, ok := m[k]
		if !ok || v == nil {
			return 0, false
		}
		f, ok := Num(v)
		if !ok || math.IsInf(f, 0) || f <= 0 {
			*notes = append(*notes, fmt.Sprintf("server arg %s = %v not used", k, v))
			return 0, false
		}
		if _, isStr := v.(string); isStr {
			*notes = append(*notes, fmt.Sprintf("server arg %s = %q read as %g", k, v, f))
		}
		return f, true
	}
	par = par.WithDefaults()
	perRank := 1
	if par.DPAttention && par.DP > 1 {
		perRank = par.DP
	}
	if f, ok := num("chunked_prefill_size"); ok {
		a.ChunkedPrefillSize = max(int(f)/perRank, 1)
	}
	if f, ok := num("max_running_requests"); ok {
		a.MaxRunningRequests = max(int(f)/perRank, 1)
	}
	if f, ok := num("max_total_tokens"); ok {
		a.MaxTotalTokens = int(f)
	}
	if f, ok := num("page_size"); ok {
		a.PageSize = int(f)
	}
	if f, ok := num("cuda_graph_max_bs"); ok {
		a.CUDAGraphMaxBS = int(f)
	} else if bs, ok := m["cuda_graph_bs"].([]any); ok {
		for _, b := range bs {
			if f, ok := Num(b); ok && int(f) > a.CUDAGraphMaxBS {
				a.CUDAGraphMaxBS = int(f)
			}
		}
	}
	if f, ok := num("mem_fraction_static"); ok && f <= 1 {
		a.MemFractionStatic = f
	}
	if f, ok := num("schedule_conservativeness"); ok {
		a.ScheduleConservativeness = f
	}
	return a
}

// parallelism reads a server's parallelism; args are its server arguments (for two-batch
// overlap and the DeepEP mode).
func parallelism(tp, dp, ep int, dpAttn bool, gpusPerNode int, args map[string]any) engine.Parallelism {
	par := engine.Parallelism{TP: tp, DP: dp, EP: ep, DPAttention: dpAttn && dp > 1, GPUsPerNode: gpusPerNode}
	par.TwoBatchOverlap, _ = args["enable_two_batch_overlap"].(bool)
	par.DeepEPMode, _ = args["deepep_mode"].(string)
	return par.WithDefaults()
}

// buildProfile builds the profile of one server: the GPU's memory fraction from the server
// arguments, then engine.Build.
func buildProfile(name string, m engine.ModelCard, g engine.GPU, par engine.Parallelism, a engine.ServerArgs) (engine.Profile, error) {
	if a.MemFractionStatic > 0 {
		g.MemFractionStatic = a.MemFractionStatic
	}
	return engine.Build(name, m, g, par)
}

// roleArgs returns the server-argument object of a PD role ("prefill", "decode"), or the
// unified one.
func roleArgs(s Set, role string) map[string]any {
	if role == "" {
		return s.ServerArgs
	}
	m, _ := s.ServerArgs[role].(map[string]any)
	return m
}

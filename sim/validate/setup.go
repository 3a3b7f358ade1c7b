package validate

import (
	"fmt"
	"math"
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

// notExpressible prefixes the note of every figure the suite cannot compute today.
const notExpressible = "not expressible yet: "

// resolveModel finds the set's model card: the first word of the file's model field (its HF
// id, a ModelCard alias) by engine.LookupModel. The catalog has a card per checkpoint
// precision (…-GPTQ-Int4 is its own card), so the id names the precision too.
func resolveModel(s Set) (engine.ModelCard, error) {
	id := firstWord(s.Model)
	m, err := engine.LookupModel(id)
	if err != nil {
		return engine.ModelCard{}, fmt.Errorf("unknown model %s", id)
	}
	return m, nil
}

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

// lowPrecision is the card of the GB200 part II blog's "low precision" levels (FP8 attention
// and KV, NVFP4 routed experts); its "high precision" is the DeepSeek-V3 card itself.
const lowPrecision = "deepseek-v3-fp8kv-nvfp4moe"

// applyPrecision returns the card a level ran with: a level whose precision starts with "low"
// runs DeepSeek-V3 as lowPrecision; anything else is the checkpoint's own card.
func applyPrecision(m engine.ModelCard, precision string, notes *[]string) engine.ModelCard {
	if m.Name == engine.DeepSeekV3.Name && strings.HasPrefix(strings.ToLower(precision), "low") {
		if c, err := engine.LookupModel(lowPrecision); err == nil {
			*notes = append(*notes, "low precision: card "+lowPrecision)
			return c
		}
	}
	return m
}

// serverArgs reads SGLang's server arguments from m (snake case, lenient numbers) into
// engine.ServerArgs as given on SGLang's command line: server-wide values, not yet divided
// among DP-attention ranks (engine.BuildServer and sim do that, as SGLang's server_args.py
// _handle_data_parallelism does). cuda_graph_bs without cuda_graph_max_bs gives its largest
// size.
func serverArgs(m map[string]any, notes *[]string) engine.ServerArgs {
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
	if f, ok := num("chunked_prefill_size"); ok {
		a.ChunkedPrefillSize = int(f)
	}
	if f, ok := num("max_running_requests"); ok {
		a.MaxRunningRequests = int(f)
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
	if v, ok := m["kv_cache_dtype"].(string); ok && v != "" && v != "auto" {
		a.KVCacheDType = v
	}
	return a
}

// nvlinkDomain is the GPUs one collective reaches over NVLink: the GPU's NVLink domain when
// it spans more than a physical node (GB200 NVL72: 72 GPUs over 18 trays of 4), else the
// node's GPUs. gpus_per_server counts a node's GPUs for the per-node figures only; taking it
// as the NVLink domain sent the 48-rank GB200 decode's collectives over the 50 GB/s NIC
// (deepseek-gb200-nvl72-pd-ep-decode-part1 at 0.06×).
func nvlinkDomain(g engine.GPU, gpusPerNode int) int {
	return max(g.NVLinkDomain, gpusPerNode)
}

// parallelism reads a server's parallelism; args are its server arguments (for two-batch
// overlap and the DeepEP mode).
func parallelism(tp, dp, ep int, dpAttn bool, gpusPerNode int, args map[string]any) engine.Parallelism {
	par := engine.Parallelism{TP: tp, DP: dp, EP: ep, DPAttention: dpAttn && dp > 1, GPUsPerNode: gpusPerNode}
	par.TwoBatchOverlap, _ = args["enable_two_batch_overlap"].(bool)
	par.DeepEPMode, _ = args["deepep_mode"].(string)
	par.WeightOffload = truthy(args["offload_weights_to_host"])
	par.CombineOverlap = truthy(args["combine_down_gemm_overlap"])
	return par.WithDefaults()
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

// truthy reads a flag the data files give as a boolean or as a string starting with "true"
// (an inferred value with its reason).
func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return strings.HasPrefix(strings.ToLower(strings.TrimSpace(x)), "true")
	}
	return false
}

// reservedDecodeTokens reads the decode side's KV reserve per room from the set's environment:
// SGLang's disaggregation/decode.py reserves num_reserved_decode_tokens per room
// (SGLANG_NUM_RESERVED_DECODE_TOKENS; the 2025-05-05 recipe's
// SGLANG_HACK_PD_DECODE_NUM_RESERVED_DECODE_TOKENS). 0 when not set.
func reservedDecodeTokens(args map[string]any, notes *[]string) int {
	env, _ := args["env"].(map[string]any)
	for _, k := range []string{"SGLANG_HACK_PD_DECODE_NUM_RESERVED_DECODE_TOKENS", "SGLANG_NUM_RESERVED_DECODE_TOKENS"} {
		if f, ok := Num(env[k]); ok && f >= 1 {
			if _, isStr := env[k].(string); isStr {
				*notes = append(*notes, fmt.Sprintf("env %s = %q read as %g", k, env[k], f))
			}
			return int(f)
		}
	}
	return 0
}

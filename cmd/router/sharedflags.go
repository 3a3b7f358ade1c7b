package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// Commands that share flags: the key of sharedFlagHelp's inner maps.
const (
	cmdServe      = "serve"
	cmdSim        = "sim"
	cmdBench      = "bench"
	cmdFakeworker = "fakeworker"
	cmdDemo       = "demo"
)

// sharedFlagHelp is the one place that defines the flags several commands take (by their
// config-file key), with the help text each command gives it: the same name means the same
// thing, but what it acts on differs (serve asks live workers; sim has simulated servers).
// A test walks every command's --help for phrases that were once copied to the wrong one.
var sharedFlagHelp = map[string]map[string]string{
	"seed": {
		cmdServe:      "seed for rooms, rids and random policies: the same seed gives the same ids and picks (default: a random seed, logged at start)",
		cmdSim:        "seed of the workload, arrivals, router and engine (same flags and seed: byte-identical results)",
		cmdBench:      "seed of all generated text, lengths and random arrivals (same seed: the same requests)",
		cmdFakeworker: "seed of failure-injection draws and generated ids",
		cmdDemo:       "seed of the router, the rids and rooms, and the workload (both runs)",
	},
	"dp_aware": {
		cmdServe: "route to DP ranks: read dp_size from each worker's /get_server_info and address url@rank targets",
		cmdSim:   "route to the DP ranks (url@rank) of the simulated servers, --dp-size ranks each",
	},
	"pd_disaggregation": {
		cmdServe: "prefill/decode disaggregated mode: give --prefill and --decode workers",
		cmdSim:   "simulate a PD cluster of --prefill prefill and --decode decode servers (set false, or give --regular K, for a regular cluster)",
	},
	"decision_log": {
		cmdServe: "file receiving one JSON line per routing decision (the format router sim writes, to compare the two)",
		cmdSim:   "file receiving one JSON line per simulated routing decision (the format router serve writes, to compare the two)",
	},
}

// modelFlagHelp is the help of the model and parallelism flags sim, sim sweep and fakeworker
// share (by SGLang's argument name, then command): one definition for the commands that
// model an SGLang server.
var modelFlagHelp = map[string]map[string]string{
	"model_path": {
		cmdSim:        "model of every server, as SGLang --model-path: a model card or its Hugging Face id (" + modelNames() + "); with --gpu it builds each pool's profile for its parallelism, with SGLang's defaults for the engine arguments not given (instead of --profile)",
		cmdFakeworker: "model path and id the worker reports; with --gpu also the model it runs, as SGLang --model-path: a model card or its Hugging Face id (" + modelNames() + ")",
	},
	"model_config": {
		cmdSim:        "a Hugging Face config.json (a file, or a model directory holding one) to build every server's model from, for a model without a built-in card: dense, MoE or MLA (DeepSeek) shapes, torch_dtype and quantization_config (fp8, mxfp4, gptq, awq); --model-path then only names it (default: the config's _name_or_path); needs --gpu",
		cmdFakeworker: "a Hugging Face config.json (a file, or a model directory holding one) to build the worker's model from, for a model without a built-in card: dense, MoE or MLA (DeepSeek) shapes, torch_dtype and quantization_config (fp8, mxfp4, gptq, awq); --model-path then only names it (default: the config's _name_or_path); needs --gpu",
	},
	"gpu": {
		cmdSim:        "GPU of every server with --model-path: " + gpuNames(),
		cmdFakeworker: "with --model-path, the GPU the worker models (instead of --profile): " + gpuNames(),
	},
	"tp_size": {
		cmdSim:        "GPUs per model replica, as SGLang --tp-size (a --model-path engine; a preset brings its own, and refuses it)",
		cmdFakeworker: "GPUs per model replica, as SGLang --tp-size (a --model-path engine; a preset brings its own, and refuses it)",
	},
	"dp_size": {
		cmdSim:        "DP ranks per server, as SGLang --dp-size: replicas of --tp-size GPUs, or with --enable-dp-attention attention ranks among them",
		cmdFakeworker: "data-parallel ranks per worker, as SGLang --dp-size: replicas of --tp-size GPUs, or with --enable-dp-attention attention ranks among them",
	},
	"ep_size": {
		cmdSim:        "expert-parallel size of MoE layers, as SGLang --ep-size (a --model-path engine; a preset refuses it)",
		cmdFakeworker: "expert-parallel size of MoE layers, as SGLang --ep-size (a --model-path engine; a preset refuses it)",
	},
	"enable_dp_attention": {
		cmdSim:        "as SGLang: a server's DP ranks step in lockstep, attention per rank and the MoE/FFN layers on the gathered batch (with a -dp preset or --model-path); --chunked-prefill-size and --max-running-requests are then divided among the ranks (old name: --dp-attention)",
		cmdFakeworker: "as SGLang: the worker's DP ranks step in lockstep, attention per rank and the MoE/FFN layers on the gathered batch (with a -dp preset or --model-path); --chunked-prefill-size and --max-running-requests are then divided among the ranks (old name: --dp-attention)",
	},
}

// flagHelp is the help text of the setting key in command cmd: its shared definition when it
// has one, else def (the setting's help tag).
func flagHelp(cmd, key, def string) string {
	if h, ok := sharedFlagHelp[key][cmd]; ok {
		return h
	}
	if _, shared := sharedFlagHelp[key]; shared {
		panic(fmt.Sprintf("sharedFlagHelp[%q] has no text for %s", key, cmd))
	}
	return def
}

// seedValue is --seed in every command: one flag type ("int", a non-negative integer) whatever
// the field it fills.
type seedValue struct {
	set func(int64)
	get func() (int64, bool)
}

func (s seedValue) Type() string { return "int" }
func (s seedValue) String() string {
	if s.get == nil {
		return ""
	}
	if v, ok := s.get(); ok {
		return strconv.FormatInt(v, 10)
	}
	return ""
}
func (s seedValue) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a non-negative integer", v)
	}
	s.set(n)
	return nil
}

// seedFlag registers --seed on fs for command cmd, filling whichever kind of field it holds:
// *uint64, *int64, or **int64 (nil: not given).
func seedFlag(fs *pflag.FlagSet, cmd string, dst any) {
	var v seedValue
	switch p := dst.(type) {
	case *uint64:
		v = seedValue{set: func(n int64) { *p = uint64(n) }, get: func() (int64, bool) { return int64(*p), true }}
	case *int64:
		v = seedValue{set: func(n int64) { *p = n }, get: func() (int64, bool) { return *p, true }}
	case **int64:
		v = seedValue{set: func(n int64) { *p = &n }, get: func() (int64, bool) {
			if *p == nil {
				return 0, false
			}
			return **p, true
		}}
	default:
		panic(fmt.Sprintf("seedFlag: unsupported field type %T", dst))
	}
	fs.Var(v, "seed", flagHelp(cmd, "seed", ""))
}

// modelNames and gpuNames list what --model-path and --gpu take.
func modelNames() string {
	var names []string
	for _, m := range engine.Models() {
		names = append(names, m.Name)
	}
	return strings.Join(names, ", ")
}

func gpuNames() string {
	var names []string
	for _, g := range engine.GPUs() {
		names = append(names, g.Name)
	}
	return strings.Join(names, ", ")
}

// parallelismFlags registers SGLang's parallelism flags on fs for command cmd: --tp-size,
// --dp-size, --ep-size, --enable-dp-attention (and its old name --dp-attention, hidden).
func parallelismFlags(fs *pflag.FlagSet, cmd string, tp, dp, ep *int, dpAttention *bool) {
	fs.IntVar(tp, "tp-size", 1, modelFlagHelp["tp_size"][cmd])
	fs.IntVar(dp, "dp-size", 1, modelFlagHelp["dp_size"][cmd])
	fs.IntVar(ep, "ep-size", 1, modelFlagHelp["ep_size"][cmd])
	fs.BoolVar(dpAttention, "enable-dp-attention", false, modelFlagHelp["enable_dp_attention"][cmd])
	fs.BoolVar(dpAttention, "dp-attention", false, "old name of --enable-dp-attention")
	_ = fs.MarkHidden("dp-attention")
}

// engineArg is one of SGLang's engine arguments as a flag of sim, sim sweep and fakeworker,
// under SGLang's name (python/sglang/srt/server_args.py).
type engineArg struct {
	name  string
	help  string
	int   func(*engine.ServerArgs) *int
	float func(*engine.ServerArgs) *float64
	str   func(*engine.ServerArgs) *string
}

// engineArgs are the engine arguments, with what their defaults are.
var engineArgs = []engineArg{
	{name: "chunked-prefill-size", int: func(a *engine.ServerArgs) *int { return &a.ChunkedPrefillSize },
		help: "most prompt tokens in one prefill step, the server's (divided among the ranks under --enable-dp-attention) (default: by GPU memory as SGLang: 2048 under 35 GB, 4096 under 60 GB, 8192 up to 160 GB, 16384 above; presets: 8192)"},
	{name: "max-running-requests", int: func(a *engine.ServerArgs) *int { return &a.MaxRunningRequests },
		help: "most requests running at once, the server's (divided among the ranks under --enable-dp-attention) (default: as SGLang, from the KV pool: 2048 to 4096 by pool and context length, at most half the pool's tokens; presets: 1024 per rank)"},
	{name: "max-total-tokens", int: func(a *engine.ServerArgs) *int { return &a.MaxTotalTokens },
		help: "KV pool per rank in tokens; as SGLang, at most what memory holds with a --model-path engine (default: what the model's weights leave of --mem-fraction-static; a preset's own)"},
	{name: "page-size", int: func(a *engine.ServerArgs) *int { return &a.PageSize },
		help: "tokens per KV page (default 1)"},
	{name: "cuda-graph-max-bs", int: func(a *engine.ServerArgs) *int { return &a.CUDAGraphMaxBS },
		help: "largest decode batch replayed as a CUDA graph (padded to a captured size); larger ones run eagerly (default: as SGLang by GPU memory and --tp-size, 256 or 512 on 80-141 GB GPUs; presets: not modelled)"},
	{name: "mem-fraction-static", float: func(a *engine.ServerArgs) *float64 { return &a.MemFractionStatic },
		help: "share of GPU memory for weights and KV pool, with --model-path (default: as SGLang, the memory less activations and CUDA graphs sized by --chunked-prefill-size and --cuda-graph-max-bs)"},
	{name: "hicache-ratio", float: func(a *engine.ServerArgs) *float64 { return &a.HiCacheRatio },
		help: "a host KV tier (SGLang's HiCache L2, as --enable-hierarchical-cache --hicache-ratio) of this many times the GPU pool: KV the GPU cache evicts moves there, a prefix found there is loaded back before the rest is prefilled, and KV events name each block's medium (GPU, CPU_PINNED) (default 0: no host tier, SGLang's default)"},
	{name: "hicache-bandwidth", float: func(a *engine.ServerArgs) *float64 { return &a.HiCacheBandwidth },
		help: "with --hicache-ratio: GB/s at which a host-tier hit is loaded back to the GPU (ours; SGLang moves what its host link carries) (default 50: PCIe Gen5 x16)"},
	{name: "schedule-conservativeness", float: func(a *engine.ServerArgs) *float64 { return &a.ScheduleConservativeness },
		help: "above 1 admission reserves more of running requests' remaining output, below 1 less (default 1, as SGLang; ×0.3 under --enable-dp-attention)"},
	{name: "kv-cache-dtype", str: func(a *engine.ServerArgs) *string { return &a.KVCacheDType },
		help: "KV cache format, as SGLang: auto (the model's) or fp8_e4m3 / fp8_e5m2 (one byte per element: twice the pool's tokens, half the KV each step reads and each PD transfer moves, FP8 attention) (a --model-path engine)"},
	{name: "speculative-algorithm", str: func(a *engine.ServerArgs) *string { return &a.Algorithm },
		help: "speculative decoding, as SGLang: EAGLE, EAGLE3 or NEXTN (DeepSeek's multi-token-prediction layer as the draft); each decode step drafts, verifies and accepts --speculative-accept-length tokens per request, without the overlap scheduler (a --model-path engine)"},
	{name: "speculative-num-steps", int: func(a *engine.ServerArgs) *int { return &a.NumSteps },
		help: "draft forwards per step, as SGLang (default as SGLang's auto choice: 3 for DeepSeek V2/V3, else 5)"},
	{name: "speculative-eagle-topk", int: func(a *engine.ServerArgs) *int { return &a.EagleTopK },
		help: "draft branches per level, as SGLang (default 1 for DeepSeek V2/V3, else 4)"},
	{name: "speculative-num-draft-tokens", int: func(a *engine.ServerArgs) *int { return &a.DraftTokens },
		help: "tokens per request the target verifies each step, as SGLang (default 4 for DeepSeek V2/V3, else 8; steps + 1 with top-k 1)"},
	{name: "speculative-accept-length", float: func(a *engine.ServerArgs) *float64 { return &a.AcceptLength },
		help: "mean tokens a request gains per speculative step, as SGLang logs it (accept len); needed with --speculative-algorithm: it depends on the draft model and the prompts (published at batch 1 on MT-bench: Llama 3.1 8B EAGLE-3 4.68 at 5 steps; DeepSeek-V3 NextN 2.5-3 at 4 draft tokens)"},
}

// engineArgFlags registers the engine arguments on fs, filling a. prefix "" registers
// --chunked-prefill-size …; "prefill-" and "decode-" register one pool's variants (sim).
func engineArgFlags(fs *pflag.FlagSet, a *engine.ServerArgs, prefix string) {
	for _, e := range engineArgs {
		help := e.help
		if prefix != "" {
			help = fmt.Sprintf("--%s of the %s servers (default --%s)", e.name, strings.TrimSuffix(prefix, "-"), e.name)
		}
		switch {
		case e.int != nil:
			fs.IntVar(e.int(a), prefix+e.name, 0, help)
		case e.str != nil:
			fs.StringVar(e.str(a), prefix+e.name, "", help)
		default:
			fs.Float64Var(e.float(a), prefix+e.name, 0, help)
		}
	}
}

// overlayEngineArgs returns base with the arguments whose flags (prefix + name) were given on
// fs taken from flags, and whether any was given.
func overlayEngineArgs(fs *pflag.FlagSet, base, flags engine.ServerArgs, prefix string) (engine.ServerArgs, bool) {
	changed := false
	for _, e := range engineArgs {
		if !fs.Changed(prefix + e.name) {
			continue
		}
		changed = true
		switch {
		case e.int != nil:
			*e.int(&base) = *e.int(&flags)
		case e.str != nil:
			*e.str(&base) = *e.str(&flags)
		default:
			*e.float(&base) = *e.float(&flags)
		}
	}
	return base, changed
}

// checkEngineArgFlags names the first given engine argument that is not positive.
func checkEngineArgFlags(fs *pflag.FlagSet, a engine.ServerArgs, prefix string) error {
	for _, e := range engineArgs {
		if !fs.Changed(prefix+e.name) || e.str != nil {
			continue // a string argument is checked by engine.ServerArgs.Validate
		}
		var v float64
		if e.int != nil {
			v = float64(*e.int(&a))
		} else {
			v = *e.float(&a)
		}
		if !(v > 0) || (e.name == "mem-fraction-static" && v > 1) {
			want := "> 0"
			if e.name == "mem-fraction-static" {
				want = "in (0, 1]"
			}
			return fmt.Errorf("--%s%s %g must be %s", prefix, e.name, v, want)
		}
	}
	return nil
}

// readModelConfig builds the model card of --model-config: path is a Hugging Face config.json
// or a model directory holding one (as SGLang's --model-path takes a local directory); name
// names the card ("" → the config's _name_or_path).
func readModelConfig(path, name string) (engine.ModelCard, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return engine.ModelCard{}, fmt.Errorf("--model-config: %w", err)
	}
	m, err := engine.ModelFromHFConfig(name, data)
	if err != nil {
		return m, fmt.Errorf("--model-config %s: %s", path, strings.TrimPrefix(err.Error(), "engine: "))
	}
	return m, nil
}

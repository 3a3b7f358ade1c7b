package engine

import (
	"cmp"
	"fmt"
	"math"
	"strings"
)

// SGLang's memory-dependent defaults of its engine arguments, as python/sglang/srt/server_args.py
// (ServerArgs.__post_init__ → _handle_gpu_memory_settings, _handle_page_size,
// _handle_data_parallelism) and the model runner's pool sizing derive them. The rules are
// SGLang's; the code and its wording are ours.
//
// SGLang's tp_size is the GPUs of one model replica. Parallelism.TP is the GPUs of the whole
// server (see Parallelism), so without DP attention SGLang's tp_size is TP/DP (DP replicas of
// TP/DP GPUs), with it TP.

// sglangTP is SGLang's --tp-size of a server of parallelism par.
func sglangTP(par Parallelism) int {
	par = par.WithDefaults()
	if par.DPAttention {
		return par.TP
	}
	return max(par.TP/par.DP, 1)
}

// SGLangParallelism converts SGLang's sizes into a Parallelism: without DP attention a server
// launched with --tp-size tp --dp-size dp runs dp replicas of tp GPUs (tp·dp GPUs in all);
// with --enable-dp-attention it runs tp GPUs in dp attention ranks (SGLang requires dp to
// divide tp). Zero sizes are 1; DP attention with dp 1 is off, as SGLang turns it off.
func SGLangParallelism(tp, dp, ep int, enableDPAttention bool) Parallelism {
	tp, dp, ep = max(tp, 1), max(dp, 1), max(ep, 1)
	par := Parallelism{TP: tp, DP: dp, EP: ep, DPAttention: enableDPAttention && dp > 1}
	if !par.DPAttention {
		par.TP = tp * dp
	}
	return par
}

// dpAttention reports whether SGLang runs par with DP attention: server_args.py
// _handle_data_parallelism turns enable_dp_attention off when dp_size is 1.
func dpAttention(par Parallelism) bool {
	par = par.WithDefaults()
	return par.DPAttention && par.DP > 1
}

// gpuMemMiB is SGLang's gpu_mem: the capacity of one device in MiB
// (utils/common.py get_device_memory_capacity); 0 when the GPU states none.
func gpuMemMiB(g GPU) float64 { return g.MemoryBytes / (1 << 20) }

// WithSGLangDefaults returns a with its unset fields filled as SGLang fills them for a server
// on GPUs g with parallelism par, then brought to the per-rank values SGLang's schedulers run
// with under DP attention. a holds the arguments as given on SGLang's command line (call it
// once: the DP-attention division is not idempotent); the result holds what each rank uses,
// what Apply writes into a Config and what SGLang's /get_server_info reports for them.
//
//   - chunked_prefill_size and cuda_graph_max_bs by the memory of one GPU
//     (server_args.py _handle_gpu_memory_settings): under 20 GiB 2048 and 8; under 35 GiB
//     (A10, 4090) 2048 and 24, 80 from tp_size 4; under 60 GiB (A100-40G, L40) 4096 and 32,
//     160 from tp_size 4; under 90 GiB (H100, A100-80G) and under 160 GiB (H20, H200) 8192 and
//     256, 512 from tp_size 4; above (B200, MI300) 16384 and 512. A GPU without a memory
//     size gets SGLang's fallback, 4096 and 160.
//   - mem_fraction_static (same function): (gpu_mem − reserved) / gpu_mem rounded to 3
//     decimals, reserved in MiB = 512 + 1.5·max(chunked_prefill_size, 2048) +
//     2·cuda_graph_max_bs + 1024·tp_size/8 (pp_size 1); with DP attention also
//     3·cuda_graph_max_bs·dp_size, and 1.5·cuda_graph_max_bs·dp_size more when
//     cuda_graph_max_bs > 300; at least 10 GiB on GPUs above 60 GiB. Without a memory size:
//     0.88. Below 0.3 (dp_size × cuda_graph_max_bs so large that the reserve nears the GPU's
//     memory: such servers are launched with --mem-fraction-static) the GPU's own
//     MemFractionStatic is used instead. The chunked prefill size here is the one before the DP-attention division below
//     (SGLang computes the memory settings first). Not modelled: the further reserves for
//     piecewise CUDA graphs (8 MiB per captured token count when enabled, about 0.5 GB at
//     8k-token chunks), speculative decoding and multimodal models.
//   - page_size 1 (_handle_page_size: 1 unless an attention backend needs larger pages,
//     which the engine does not model); schedule_conservativeness 1 (its default).
//   - DP attention with dp_size > 1 (_handle_data_parallelism): chunked_prefill_size is
//     divided by dp_size (the flag is the server's, each rank gets its share) and
//     schedule_conservativeness multiplied by 0.3; a given max_running_requests is divided by
//     dp_size too (model runner pool sizing, model_executor/pool_configurator.py
//     resolve_max_num_reqs: the per-worker request budget).
//
// max_running_requests and max_total_tokens, when unset, depend on the KV pool, which the
// profile decides: BuildServer fills them (see MaxRunningRequestsFor).
func (a ServerArgs) WithSGLangDefaults(g GPU, par Parallelism) ServerArgs {
	const minFormulaFraction = 0.3
	par = par.WithDefaults()
	tp := sglangTP(par)
	mem := gpuMemMiB(g)
	chunk, graph := 4096, 160 // SGLang's fallback when the device memory is unknown
	switch {
	case mem <= 0:
	case mem < 20*1024: // T4, 4080
		chunk, graph = 2048, 8
	case mem < 35*1024: // A10, 4090, 5090
		chunk, graph = 2048, 24
		if tp >= 4 {
			graph = 80
		}
	case mem < 60*1024: // A100-40G, L40
		chunk, graph = 4096, 32
		if tp >= 4 {
			graph = 160
		}
	case mem < 160*1024: // H100, A100-80G (< 90 GiB); H20, H200 (< 160 GiB): the same values
		chunk, graph = 8192, 256
		if tp >= 4 {
			graph = 512
		}
	default: // B200, MI300
		chunk, graph = 16384, 512
	}
	if a.ChunkedPrefillSize == 0 {
		a.ChunkedPrefillSize = chunk
	}
	if a.CUDAGraphMaxBS == 0 {
		a.CUDAGraphMaxBS = graph
	}
	dpa := dpAttention(par)
	if a.MemFractionStatic == 0 {
		a.MemFractionStatic = 0.88
		if mem > 0 {
			bs := float64(a.CUDAGraphMaxBS)
			reserved := 512 + 1.5*float64(max(a.ChunkedPrefillSize, 2048)) + 2*bs + float64(tp)/8*1024
			if dpa {
				reserved += 3 * bs * float64(par.DP)
				if a.CUDAGraphMaxBS > 300 {
					reserved += 1.5 * bs * float64(par.DP)
				}
			}
			if mem > 60*1024 {
				reserved = max(reserved, 10*1024)
			}
			a.MemFractionStatic = math.Round((mem-reserved)/mem*1000) / 1000
			if a.MemFractionStatic < minFormulaFraction && g.MemFractionStatic > 0 {
				// Large DP-attention servers (dp_size × cuda_graph_max_bs in the
				// thousands) reserve more than the GPU holds by this formula; such
				// deployments set --mem-fraction-static, and the GPU's catalog value
				// stands in for it.
				a.MemFractionStatic = g.MemFractionStatic
			}
		}
	}
	if a.PageSize == 0 {
		a.PageSize = 1
	}
	if a.ScheduleConservativeness == 0 {
		a.ScheduleConservativeness = 1
	}
	return a.PerRank(par)
}

// PerRank returns a with the DP-attention adjustments SGLang makes to the arguments it was
// given (server_args.py _handle_data_parallelism; pool_configurator.py
// resolve_max_num_reqs): under DP attention with dp_size > 1, chunked_prefill_size and
// max_running_requests, when set, are divided by dp_size (at least 1) and
// schedule_conservativeness (unset: 1) is multiplied by 0.3. Without DP attention it returns a. For
// profiles that do not say which GPU they run on (presets, profile files), whose unset
// arguments keep the engine's defaults.
func (a ServerArgs) PerRank(par Parallelism) ServerArgs {
	if !dpAttention(par) {
		return a
	}
	dp := par.WithDefaults().DP
	if a.ChunkedPrefillSize > 0 {
		a.ChunkedPrefillSize = max(a.ChunkedPrefillSize/dp, 1)
	}
	if a.MaxRunningRequests > 0 {
		a.MaxRunningRequests = max(a.MaxRunningRequests/dp, 1)
	}
	a.ScheduleConservativeness = cmp.Or(a.ScheduleConservativeness, 1) * 0.3 // unset is SGLang's default 1
	return a
}

// Request-pool bounds of SGLang's model runner (model_executor/model_runner.py
// init_memory_pool; pool_configurator.py resolve_max_num_reqs): the request-to-token pool
// holds KV capacity / context length × 512 requests, clamped to [2048, 4096].
const (
	reqPoolMin = 2048
	reqPoolMax = 4096
)

// MaxRunningRequestsFor is the running-request limit of one rank as SGLang derives it from
// its KV pool of capacity tokens for a model of context length contextLen
// (pool_configurator.py resolve_max_num_reqs; before it, model_runner.py init_memory_pool and
// the scheduler's min over server limit and pool size): requested (already per rank, 0 when
// unset) or, when unset, the request pool (capacity/contextLen·512 clamped to
// [2048, 4096]), in both cases at most capacity/2. (Older SGLang capped a given value by the
// request pool, 2048 to 4096, instead of capacity/2.)
func MaxRunningRequestsFor(requested, capacity, contextLen int) int {
	half := max(capacity/2, 1)
	if requested > 0 {
		return min(requested, half)
	}
	pool := reqPoolMin
	if contextLen > 0 {
		pool = min(max(int(float64(capacity)/float64(contextLen)*512), reqPoolMin), reqPoolMax)
	}
	return min(pool, half)
}

// DefaultContextLen is the context length assumed for a model card the engine does not know
// one for (128k tokens, that of Llama 3.1 and most current models).
const DefaultContextLen = 131072

// contextLens are the models' context lengths (max_position_embeddings of their Hugging Face
// config.json), which SGLang's request-pool sizing reads.
var contextLens = map[string]int{
	"llama3-8b":     131072, // meta-llama/Llama-3.1-8B-Instruct
	"llama3-70b":    131072, // meta-llama/Llama-3.1-70B-Instruct
	"qwen3-30b-a3b": 40960,  // Qwen/Qwen3-30B-A3B
	"deepseek-v3":   163840, // deepseek-ai/DeepSeek-V3
}

// ContextLen returns model m's context length (DefaultContextLen when not known).
func ContextLen(m ModelCard) int {
	if n, ok := contextLens[m.Name]; ok {
		return n
	}
	return DefaultContextLen
}

// BuildServer resolves one server of an SGLang deployment: model m on GPUs g with parallelism
// par, launched with the engine arguments a (as given; unset fields zero). It returns the
// profile of one DP rank, built with the resolved mem_fraction_static, and the per-rank
// arguments the server runs with (every field set):
//
//   - a.WithSGLangDefaults(g, par) (see there);
//   - max_total_tokens: the KV pool the profile derives, lowered to a given max_total_tokens
//     (model_runner.py init_memory_pool takes the smaller of the profiled pool and
//     --max-total-tokens; a larger value is ignored with a warning), then rounded down to
//     whole pages;
//   - max_running_requests: MaxRunningRequestsFor on that pool;
//   - HostOverhead: g's (DefaultHostOverhead when unset), as the presets.
//
// name names the profile; "" gives "MODEL-GPU-tpN" (with "-dpN" and "-epN" when above 1).
func BuildServer(name string, m ModelCard, g GPU, par Parallelism, a ServerArgs) (Profile, ServerArgs, error) {
	if err := par.Validate(); err != nil {
		return Profile{}, ServerArgs{}, err
	}
	if err := a.Validate(); err != nil {
		return Profile{}, ServerArgs{}, err
	}
	par = par.WithDefaults()
	if name == "" {
		name = fmt.Sprintf("%s-%s-tp%d", m.Name, g.Name, par.TP)
		if par.DP > 1 {
			name += fmt.Sprintf("-dp%d", par.DP)
		}
		if par.EP > 1 {
			name += fmt.Sprintf("-ep%d", par.EP)
		}
	}
	if a.Spec.On() && a.MaxRunningRequests == 0 {
		a.MaxRunningRequests = SpecMaxRunningRequests
	}
	r := a.WithSGLangDefaults(g, par)
	g.MemFractionStatic = r.MemFractionStatic
	if strings.HasPrefix(r.KVCacheDType, "fp8") {
		m.KVDTypeBytes = 1
	}
	p, err := Build(name, m, g, par)
	if err != nil {
		return Profile{}, ServerArgs{}, err
	}
	p.HostOverhead = g.hostOverhead() // as the presets: a server has its tokenizer and HTTP path
	if r.Spec.On() {
		r.Spec = r.Spec.WithDefaults(m.Architecture)
		if err := r.Spec.check(); err != nil {
			return Profile{}, ServerArgs{}, err
		}
		if p.Draft, err = buildDraft(m, g, par, r.Spec.Algorithm); err != nil {
			return Profile{}, ServerArgs{}, err
		}
	}
	capacity := p.MaxTotalTokens
	if r.MaxTotalTokens > 0 && r.MaxTotalTokens < capacity {
		capacity = r.MaxTotalTokens
	}
	capacity = capacity / r.PageSize * r.PageSize
	if capacity < r.PageSize {
		return Profile{}, ServerArgs{}, fmt.Errorf("engine: %s: a KV pool of %d tokens holds no page of %d (--max-total-tokens, --mem-fraction-static)", name, capacity, r.PageSize)
	}
	r.MaxTotalTokens = capacity
	r.MaxRunningRequests = MaxRunningRequestsFor(r.MaxRunningRequests, capacity, ContextLen(m))
	return p, r, nil
}

// Validate reports the first invalid field, with SGLang's flag name. Zero fields are unset.
func (a ServerArgs) Validate() error {
	switch {
	case a.ChunkedPrefillSize < 0:
		return fmt.Errorf("engine: --chunked-prefill-size %d must be ≥ 1", a.ChunkedPrefillSize)
	case a.MaxRunningRequests < 0:
		return fmt.Errorf("engine: --max-running-requests %d must be ≥ 1", a.MaxRunningRequests)
	case a.MaxTotalTokens < 0:
		return fmt.Errorf("engine: --max-total-tokens %d must be ≥ 1", a.MaxTotalTokens)
	case a.PageSize < 0:
		return fmt.Errorf("engine: --page-size %d must be ≥ 1", a.PageSize)
	case a.CUDAGraphMaxBS < 0:
		return fmt.Errorf("engine: --cuda-graph-max-bs %d must be ≥ 1", a.CUDAGraphMaxBS)
	case a.MemFractionStatic < 0 || a.MemFractionStatic > 1 || math.IsNaN(a.MemFractionStatic):
		return fmt.Errorf("engine: --mem-fraction-static %g must be in (0, 1]", a.MemFractionStatic)
	case a.ScheduleConservativeness < 0 || math.IsNaN(a.ScheduleConservativeness) || math.IsInf(a.ScheduleConservativeness, 0):
		return fmt.Errorf("engine: --schedule-conservativeness %g must be > 0", a.ScheduleConservativeness)
	case a.KVCacheDType != "" && a.KVCacheDType != "auto" && a.KVCacheDType != "fp8_e4m3" && a.KVCacheDType != "fp8_e5m2":
		return fmt.Errorf("engine: --kv-cache-dtype %q is not modelled (auto, fp8_e4m3, fp8_e5m2)", a.KVCacheDType)
	case a.HiCacheRatio < 0 || math.IsNaN(a.HiCacheRatio) || math.IsInf(a.HiCacheRatio, 0):
		return fmt.Errorf("engine: --hicache-ratio %g must be ≥ 0 (0: no host tier)", a.HiCacheRatio)
	case a.HiCacheBandwidth < 0 || math.IsNaN(a.HiCacheBandwidth) || math.IsInf(a.HiCacheBandwidth, 0):
		return fmt.Errorf("engine: --hicache-bandwidth %g GB/s must be > 0", a.HiCacheBandwidth)
	}
	return a.Spec.Validate()
}

package sim

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// Defaults of the embedded cluster (what `router sim` runs with no cluster flags).
const (
	DefaultPrefill    = 2                      // prefill servers in PD mode
	DefaultDecode     = 2                      // decode servers in PD mode
	DefaultRegular    = 4                      // servers in regular mode
	DefaultProfile    = "llama3-8b-h100"       // engine profile of every server
	DefaultNetLatency = 100 * time.Microsecond // one-way latency between any two nodes
	DefaultLinkGbps   = 400.0                  // KV transfer link per room, Gb/s (one 400 Gb/s NIC)
)

// Cluster describes the simulated servers. Zero fields take the defaults named on them; JSON
// keys are the `router sim` flag names with underscores (meta.cluster of results.json and the
// --cluster file).
type Cluster struct {
	// Prefill and Decode are the server counts of PD mode; Regular the count of regular mode
	// (Config.Router.PDDisaggregation decides the mode).
	Prefill int `json:"prefill" yaml:"prefill"`
	Decode  int `json:"decode" yaml:"decode"`
	Regular int `json:"regular" yaml:"regular"`
	// ModelPath and GPU pick the engine by model and hardware, as SGLang's --model-path does
	// on a given GPU: a model card name or Hugging Face id (engine.LookupModel) and a GPU
	// name (engine.LookupGPU). Each server's profile is then engine.BuildServer of its pool's
	// parallelism with SGLang's memory-dependent defaults for the unset engine arguments.
	// Exclusive with Profile, PrefillProfile and DecodeProfile (presets and profile files).
	ModelPath string `json:"model_path" yaml:"model_path"`
	GPU       string `json:"gpu" yaml:"gpu"`
	// PrefillGPU and DecodeGPU, when set, replace GPU for that pool (prefill and decode on
	// different hardware).
	PrefillGPU string `json:"prefill_gpu" yaml:"prefill_gpu"`
	DecodeGPU  string `json:"decode_gpu" yaml:"decode_gpu"`
	// TPSize, DPSize and EPSize are SGLang's --tp-size, --dp-size and --ep-size of every
	// server (0 → 1): without DP attention a server runs DPSize replicas of TPSize GPUs each,
	// with it TPSize GPUs in DPSize attention ranks. The Prefill… and Decode… sizes, when
	// set, replace them for that pool. TPSize and EPSize shape only profiles built from
	// ModelPath; DPSize is the ranks of every server.
	TPSize int `json:"tp_size" yaml:"tp_size"`
	DPSize int `json:"dp_size" yaml:"dp_size"`
	EPSize int `json:"ep_size" yaml:"ep_size"`
	// DPAttention is SGLang's --enable-dp-attention: every server's ranks step in lockstep;
	// with a DP-attention profile (qwen3-…-dp8, deepseek-v3-…, or one built from ModelPath)
	// attention is per rank and the MoE/FFN layers run on the gathered batch
	// (engine.DPAttnSplit). The key stays dp_attention (the flag's old name, still accepted);
	// enable_dp_attention is accepted in cluster files and sweeps.
	DPAttention bool `json:"dp_attention" yaml:"dp_attention"`
	// TwoBatchOverlap is SGLang's --enable-two-batch-overlap and DeepEPMode its --deepep-mode
	// ("normal", "low_latency", "auto"; "" without DeepEP): how the MoE layers of a profile
	// built from ModelPath communicate (engine.Parallelism).
	TwoBatchOverlap bool   `json:"enable_two_batch_overlap,omitempty" yaml:"enable_two_batch_overlap,omitempty"`
	DeepEPMode      string `json:"deepep_mode,omitempty" yaml:"deepep_mode,omitempty"`
	// Per-pool parallelism of PD mode (SGLang runs prefill and decode servers with their own
	// sizes); 0 → TPSize, DPSize, EPSize.
	PrefillTPSize int `json:"prefill_tp_size" yaml:"prefill_tp_size"`
	PrefillDPSize int `json:"prefill_dp_size" yaml:"prefill_dp_size"`
	PrefillEPSize int `json:"prefill_ep_size" yaml:"prefill_ep_size"`
	DecodeTPSize  int `json:"decode_tp_size" yaml:"decode_tp_size"`
	DecodeDPSize  int `json:"decode_dp_size" yaml:"decode_dp_size"`
	DecodeEPSize  int `json:"decode_ep_size" yaml:"decode_ep_size"`
	// SchedulePolicy orders prefill queues (SGLang --schedule-policy): lpm or fcfs; "" → lpm.
	SchedulePolicy string `json:"schedule_policy" yaml:"schedule_policy"`
	// DisableOverlap is SGLang's --disable-overlap-schedule: prompts are matchable as soon as
	// their prefill step ends, not one scheduling decision later.
	DisableOverlap bool `json:"disable_overlap_schedule" yaml:"disable_overlap_schedule"`
	// MixedChunk is SGLang's --enable-mixed-chunk: a regular server's running requests decode
	// inside its prefill steps (engine.Config.MixedChunk).
	MixedChunk bool `json:"enable_mixed_chunk,omitempty" yaml:"enable_mixed_chunk,omitempty"`
	// DecodeRadixCache gives decode servers a prefix cache of the prompts they served (SGLang
	// --disaggregation-decode-enable-radix-cache): a hit shrinks the KV transfer.
	DecodeRadixCache bool `json:"decode_radix_cache" yaml:"decode_radix_cache"`
	// Profile names the engine profile of every server (engine.LookupProfile); "" →
	// DefaultProfile. PrefillProfile and DecodeProfile override it per role.
	Profile        string `json:"profile" yaml:"profile"`
	PrefillProfile string `json:"prefill_profile" yaml:"prefill_profile"`
	DecodeProfile  string `json:"decode_profile" yaml:"decode_profile"`
	// TTFT and ITL are the timings of the constant profile; 0 → engine.DefaultTTFT / DefaultITL.
	TTFT time.Duration `json:"ttft" yaml:"ttft"`
	ITL  time.Duration `json:"itl" yaml:"itl"`
	// LinkGbps is the KV transfer bandwidth per room in Gb/s; 0 → DefaultLinkGbps.
	LinkGbps float64 `json:"link_gbps" yaml:"link_gbps"`
	// NetLatency is the one-way latency between client, router and servers; 0 →
	// DefaultNetLatency, negative → none.
	NetLatency time.Duration `json:"net_latency" yaml:"net_latency"`
	// Speedup divides every model duration, as fakeworker's --speedup; 0 → 1.
	Speedup float64 `json:"speedup" yaml:"speedup"`
	// Profiles are profiles by name beyond the presets (profile files, calibrated fits); a
	// name here wins over a preset of the same name. They are recorded in results.json with
	// the cluster, so a run says exactly which coefficients it used.
	Profiles map[string]engine.Profile `json:"profiles,omitempty" yaml:"profiles,omitempty"`
	// Models are model cards by name beyond the built-in ones (built from a Hugging Face
	// config.json: --model-config, engine.ModelFromHFConfig); ModelPath names one of them or a
	// built-in card. Recorded in results.json like Profiles.
	Models map[string]engine.ModelCard `json:"models,omitempty" yaml:"models,omitempty"`
	// GPUs are GPU descriptions by name that replace or add to the built-in ones (a fit's
	// efficiencies: router sim validate --fit). Recorded in results.json like Profiles.
	GPUs map[string]engine.GPU `json:"gpus,omitempty" yaml:"gpus,omitempty"`
	// Args are SGLang's engine arguments of every server (unset fields: the engine's
	// defaults); PrefillArgs and DecodeArgs, when set, replace them for that role.
	Args        engine.ServerArgs  `json:"engine_args" yaml:"engine_args"`
	PrefillArgs *engine.ServerArgs `json:"prefill_engine_args,omitempty" yaml:"prefill_engine_args,omitempty"`
	DecodeArgs  *engine.ServerArgs `json:"decode_engine_args,omitempty" yaml:"decode_engine_args,omitempty"`
	// Resolved is output only (results.json meta.cluster; ignored on input): what each pool's
	// servers ran with, by role ("prefill", "decode", "regular").
	Resolved map[string]ResolvedServer `json:"resolved,omitempty" yaml:"resolved,omitempty"`
}

// ResolvedServer is what one pool's servers ran with: the profile, SGLang's parallelism and
// the per-rank engine arguments after defaults (engine.ServerArgs.WithSGLangDefaults for a
// model on a GPU; the engine's defaults fill what a preset leaves unset).
type ResolvedServer struct {
	Profile     string            `json:"profile" yaml:"profile"`
	TPSize      int               `json:"tp_size" yaml:"tp_size"`
	DPSize      int               `json:"dp_size" yaml:"dp_size"`
	EPSize      int               `json:"ep_size" yaml:"ep_size"`
	DPAttention bool              `json:"enable_dp_attention" yaml:"enable_dp_attention"`
	Args        engine.ServerArgs `json:"engine_args" yaml:"engine_args"`
}

// Sizes are the pool sizes: SGLang's --tp-size, --dp-size and --ep-size of role's servers.
func (c Cluster) Sizes(role engine.Role) (tp, dp, ep int) {
	tp, dp, ep = c.TPSize, c.DPSize, c.EPSize
	pick := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	switch role {
	case engine.RolePrefill:
		pick(&tp, c.PrefillTPSize)
		pick(&dp, c.PrefillDPSize)
		pick(&ep, c.PrefillEPSize)
	case engine.RoleDecode:
		pick(&tp, c.DecodeTPSize)
		pick(&dp, c.DecodeDPSize)
		pick(&ep, c.DecodeEPSize)
	}
	return max(tp, 1), max(dp, 1), max(ep, 1)
}

// parallelism is role's engine parallelism.
func (c Cluster) parallelism(role engine.Role) engine.Parallelism {
	tp, dp, ep := c.Sizes(role)
	par := engine.SGLangParallelism(tp, dp, ep, c.DPAttention)
	par.TwoBatchOverlap, par.DeepEPMode = c.TwoBatchOverlap, c.DeepEPMode
	return par
}

// server resolves role's servers: their profile and the per-rank engine arguments to Apply.
// With ModelPath the profile is built for the pool's parallelism and the unset arguments take
// SGLang's defaults; with a preset or profile file the given arguments get SGLang's
// DP-attention adjustments and the unset ones keep the engine's defaults.
func (c Cluster) server(role engine.Role, profileName string) (engine.Profile, engine.ServerArgs, error) {
	par := c.parallelism(role)
	args := c.args(role)
	if c.ModelPath == "" {
		p, err := c.profile(profileName)
		return p, args.PerRank(par), err
	}
	m, err := c.Model()
	if err != nil {
		return engine.Profile{}, args, err
	}
	gpu, flag := c.GPU, "gpu"
	if role == engine.RolePrefill && c.PrefillGPU != "" {
		gpu, flag = c.PrefillGPU, "prefill-gpu"
	} else if role == engine.RoleDecode && c.DecodeGPU != "" {
		gpu, flag = c.DecodeGPU, "decode-gpu"
	}
	g, ok := c.GPUs[gpu]
	if !ok {
		g, err = engine.LookupGPU(gpu)
	}
	if err != nil {
		return engine.Profile{}, args, fmt.Errorf("sim: --%s: %w", flag, err)
	}
	p, r, err := engine.BuildServer("", m, g, par, args)
	if err != nil {
		return p, r, fmt.Errorf("sim: %s servers (%s): %w", role, c.sizeFlags(role), err)
	}
	return p, r, nil
}

// presetSizes refuses a tensor- or expert-parallel size that would be ignored: a preset or
// profile file is one rank's measured or built engine, whose GPUs and experts are part of it
// (llama3-70b-h100-tp8 runs on 8 GPUs whatever --tp-size says), so only a --model-path engine
// takes them. --dp-size stays: it is the ranks of every server, preset or not.
func (c Cluster) presetSizes() error {
	if c.ModelPath != "" {
		return nil
	}
	for _, s := range []struct {
		flag string
		v    int
	}{{"tp-size", c.TPSize}, {"ep-size", c.EPSize}, {"prefill-tp-size", c.PrefillTPSize}, {"prefill-ep-size", c.PrefillEPSize},
		{"decode-tp-size", c.DecodeTPSize}, {"decode-ep-size", c.DecodeEPSize}} {
		if s.v > 1 {
			return fmt.Errorf("sim: --%s %d shapes only a --model-path engine: a preset or profile file brings its own GPUs (its name says how many, router fakeworker profiles lists them); give --model-path MODEL --gpu GPU --%s %d, or pick a preset of that size", s.flag, s.v, s.flag, s.v)
		}
	}
	return nil
}

// Server resolves the servers of role (prefill, decode or unified) as a run would: their
// engine profile (built from ModelPath and GPU at the pool's parallelism, or the named preset
// or profile file) and the per-rank engine arguments (SGLang's defaults filled in for a model
// on a GPU; unset ones zero for a preset, which then takes the engine's defaults). Call it on
// WithDefaults(pd). `router sim plan` bounds a candidate cluster with it before simulating.
func (c Cluster) Server(role engine.Role) (engine.Profile, engine.ServerArgs, error) {
	name := c.Profile
	switch {
	case role == engine.RolePrefill && c.PrefillProfile != "":
		name = c.PrefillProfile
	case role == engine.RoleDecode && c.DecodeProfile != "":
		name = c.DecodeProfile
	}
	return c.server(role, name)
}

// Model is the model card ModelPath names: one of Models (--model-config), else a built-in
// card or its Hugging Face id.
func (c Cluster) Model() (engine.ModelCard, error) {
	if m, ok := c.Models[c.ModelPath]; ok {
		return m, nil
	}
	m, err := engine.LookupModel(c.ModelPath)
	if err != nil {
		return m, fmt.Errorf("sim: --model-path: %w", err)
	}
	return m, nil
}

// sizeFlags names the flags that set role's parallelism, for errors.
func (c Cluster) sizeFlags(role engine.Role) string {
	tp, dp, ep := c.Sizes(role)
	pre := ""
	if role == engine.RolePrefill && (c.PrefillTPSize|c.PrefillDPSize|c.PrefillEPSize) != 0 {
		pre = "prefill-"
	} else if role == engine.RoleDecode && (c.DecodeTPSize|c.DecodeDPSize|c.DecodeEPSize) != 0 {
		pre = "decode-"
	}
	return fmt.Sprintf("--%stp-size %d --%sdp-size %d --%sep-size %d", pre, tp, pre, dp, pre, ep)
}

// args returns the engine arguments of role's servers.
func (c Cluster) args(role engine.Role) engine.ServerArgs {
	switch {
	case role == engine.RolePrefill && c.PrefillArgs != nil:
		return *c.PrefillArgs
	case role == engine.RoleDecode && c.DecodeArgs != nil:
		return *c.DecodeArgs
	}
	return c.Args
}

// WithDefaults returns c with zero fields set to their defaults; pd says which mode's counts
// to default.
func (c Cluster) WithDefaults(pd bool) Cluster {
	if pd {
		if c.Prefill == 0 {
			c.Prefill = DefaultPrefill
		}
		if c.Decode == 0 {
			c.Decode = DefaultDecode
		}
	} else if c.Regular == 0 {
		c.Regular = DefaultRegular
	}
	if c.TPSize == 0 {
		c.TPSize = 1
	}
	if c.DPSize == 0 {
		c.DPSize = 1
	}
	if c.EPSize == 0 {
		c.EPSize = 1
	}
	if c.Profile == "" && c.ModelPath == "" {
		c.Profile = DefaultProfile
	}
	if c.TTFT == 0 {
		c.TTFT = engine.DefaultTTFT
	}
	if c.ITL == 0 {
		c.ITL = engine.DefaultITL
	}
	if c.LinkGbps == 0 {
		c.LinkGbps = DefaultLinkGbps
	}
	if c.NetLatency == 0 {
		c.NetLatency = DefaultNetLatency
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	return c
}

// profile resolves a profile name (constant takes TTFT and ITL).
func (c Cluster) profile(name string) (engine.Profile, error) {
	if name == "" {
		name = c.Profile
	}
	if p, ok := c.Profiles[name]; ok {
		return p, nil
	}
	p, err := engine.LookupProfile(name)
	if err != nil {
		return p, fmt.Errorf("sim: --profile: %w", err)
	}
	if p.Constant && name == "constant" {
		p.TTFT, p.ITL = c.TTFT, c.ITL
	}
	return p, nil
}

// Validate reports the first invalid field (after defaults), naming its flag.
func (c Cluster) Validate(pd bool) error {
	c = c.WithDefaults(pd)
	switch {
	case pd && c.Prefill < 1:
		return fmt.Errorf("sim: --prefill %d must be ≥ 1 in PD mode", c.Prefill)
	case pd && c.Decode < 1:
		return fmt.Errorf("sim: --decode %d must be ≥ 1 in PD mode", c.Decode)
	case pd && c.Regular > 0:
		return fmt.Errorf("sim: --regular %d needs regular mode (--pd-disaggregation=false)", c.Regular)
	case !pd && (c.Prefill > 0 || c.Decode > 0):
		return fmt.Errorf("sim: --prefill/--decode need PD mode (--pd-disaggregation)")
	case !pd && c.Regular < 1:
		return fmt.Errorf("sim: --regular %d must be ≥ 1", c.Regular)
	case c.DPSize < 1:
		return fmt.Errorf("sim: --dp-size %d must be ≥ 1", c.DPSize)
	case c.ModelPath != "" && (c.Profile != "" || c.PrefillProfile != "" || c.DecodeProfile != ""):
		return fmt.Errorf("sim: --model-path and --profile (or --prefill-profile, --decode-profile) both pick the engine: give one")
	case c.ModelPath != "" && c.GPU == "" && !(pd && c.PrefillGPU != "" && c.DecodeGPU != ""):
		return fmt.Errorf("sim: --model-path %s needs --gpu (%s)", c.ModelPath, gpuNames())
	case c.ModelPath == "" && (c.GPU != "" || c.PrefillGPU != "" || c.DecodeGPU != ""):
		return fmt.Errorf("sim: --gpu, --prefill-gpu and --decode-gpu need --model-path (a preset's GPU is part of its name)")
	case !pd && (c.PrefillGPU != "" || c.DecodeGPU != ""):
		return fmt.Errorf("sim: --prefill-gpu and --decode-gpu need PD mode (--pd-disaggregation)")
	case c.ModelPath == "" && (c.Args.MemFractionStatic != 0 || c.PrefillArgs != nil && c.PrefillArgs.MemFractionStatic != 0 ||
		c.DecodeArgs != nil && c.DecodeArgs.MemFractionStatic != 0):
		return fmt.Errorf("sim: --mem-fraction-static needs --model-path and --gpu (a profile's KV capacity is its own; set --max-total-tokens)")
	case c.ModelPath == "" && (c.Args.KVCacheDType != "" || c.PrefillArgs != nil && c.PrefillArgs.KVCacheDType != "" ||
		c.DecodeArgs != nil && c.DecodeArgs.KVCacheDType != ""):
		return fmt.Errorf("sim: --kv-cache-dtype needs --model-path and --gpu (a profile's KV format is its own)")
	case !pd && (c.PrefillTPSize|c.PrefillDPSize|c.PrefillEPSize|c.DecodeTPSize|c.DecodeDPSize|c.DecodeEPSize) != 0:
		return fmt.Errorf("sim: --prefill-…-size and --decode-…-size need PD mode (--pd-disaggregation)")
	}
	if err := c.presetSizes(); err != nil {
		return err
	}
	for _, s := range []struct {
		flag string
		v    int
	}{{"tp-size", c.TPSize}, {"ep-size", c.EPSize}, {"prefill-tp-size", c.PrefillTPSize}, {"prefill-dp-size", c.PrefillDPSize},
		{"prefill-ep-size", c.PrefillEPSize}, {"decode-tp-size", c.DecodeTPSize}, {"decode-dp-size", c.DecodeDPSize}, {"decode-ep-size", c.DecodeEPSize}} {
		if s.v < 0 {
			return fmt.Errorf("sim: --%s %d must be ≥ 1", s.flag, s.v)
		}
	}
	for _, a := range []struct {
		prefix string
		args   *engine.ServerArgs
	}{{"", &c.Args}, {"prefill-", c.PrefillArgs}, {"decode-", c.DecodeArgs}} {
		if a.args == nil {
			continue
		}
		if err := a.args.Validate(); err != nil {
			return fmt.Errorf("sim: %s", strings.Replace(strings.TrimPrefix(err.Error(), "engine: "), "--", "--"+a.prefix, 1))
		}
	}
	switch {
	case !(c.LinkGbps > 0):
		return fmt.Errorf("sim: --link-gbps %g must be > 0", c.LinkGbps)
	case !(c.Speedup > 0):
		return fmt.Errorf("sim: --speedup %g must be > 0", c.Speedup)
	case c.TTFT < 0 || c.ITL < 0:
		return fmt.Errorf("sim: --ttft %v and --itl %v must be ≥ 0", c.TTFT, c.ITL)
	}
	for _, r := range c.roles(pd) {
		if _, _, err := c.server(r.role, r.profile); err != nil {
			return err
		}
	}
	return nil
}

// pool is one kind of server of the cluster.
type pool struct {
	role    engine.Role
	n       int
	profile string // profile name ("" → Profile)
}

// roles returns the cluster's pools: prefill and decode in PD mode, regular otherwise.
func (c Cluster) roles(pd bool) []pool {
	if pd {
		return []pool{{engine.RolePrefill, c.Prefill, c.PrefillProfile}, {engine.RoleDecode, c.Decode, c.DecodeProfile}}
	}
	return []pool{{engine.RoleUnified, c.Regular, c.Profile}}
}

// gpuNames lists the GPU names --gpu takes.
func gpuNames() string {
	var names []string
	for _, g := range engine.GPUs() {
		names = append(names, g.Name)
	}
	return strings.Join(names, ", ")
}

// Kill makes the server named Worker (e.g. "http://sim-decode-1:30000") die At virtual time
// after the start of the run and, when Back is after At, restart then with empty caches
// (--kill WORKER@T or WORKER@T..BACK).
type Kill struct {
	Worker string
	At     time.Duration
	Back   time.Duration // 0: it stays dead
}

// ParseKill parses "WORKER@T" or "WORKER@T..BACK", T and BACK Go durations since the start
// ("http://sim-decode-1:30000@30s", "http://sim-regular-1:30000@60s..90s"). The last "@"
// separates the worker.
func ParseKill(s string) (Kill, error) {
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return Kill{}, fmt.Errorf("sim: --kill %q: want WORKER@TIME or WORKER@TIME..BACK, e.g. http://sim-decode-0:30000@30s", s)
	}
	at, back, restarts := strings.Cut(s[i+1:], "..")
	d, err := time.ParseDuration(at)
	if err != nil || d < 0 {
		return Kill{}, fmt.Errorf("sim: --kill %q: %q is not a duration ≥ 0", s, at)
	}
	k := Kill{Worker: s[:i], At: d}
	if restarts {
		b, err := time.ParseDuration(back)
		if err != nil || b <= d {
			return Kill{}, fmt.Errorf("sim: --kill %q: the restart time %q is not a duration after %s", s, back, d)
		}
		k.Back = b
	}
	return k, nil
}

// String returns the --kill form.
func (k Kill) String() string {
	if k.Back > 0 {
		return k.Worker + "@" + k.At.String() + ".." + k.Back.String()
	}
	return k.Worker + "@" + k.At.String()
}

// WorkerURL returns the name of the i-th simulated worker of role: "http://sim-{role}-{i}:30000".
func WorkerURL(role router.Role, i int) string {
	return "http://sim-" + role.String() + "-" + strconv.Itoa(i) + ":30000"
}

// DefaultTreeChars is Config.TreeChars's default, 2^26 characters per tree: the text of about
// 10,000 conversations of the default multiturn workload, 20 s of the scale benchmark's
// arrivals, five times the 4 s a conversation waits between its turns there (a trim takes the
// least recently used texts, so a conversation in progress keeps its history). Serve's bound,
// 2^30 per tree, holds about a gigabyte per tree in a run of a million requests. No test or
// default run reaches either; at a million requests the scale benchmark's TTFT mean moves by
// 0.3 % (219.2 -> 218.5 ms), its P99 by 3 % (468 -> 483 ms), its cache hit rate by 0.0001.
const DefaultTreeChars = 1 << 26

// Config is one simulation run.
type Config struct {
	// Cluster describes the servers; zero fields take defaults.
	Cluster Cluster
	// Router is the routing configuration (worker lists are ignored: the simulated workers
	// are added by the simulator). Its Seed (nil → 1) seeds the router and the rid/room source.
	Router router.Config
	// Routing is the routing layer around it: router replicas and KV-event routing; the zero
	// value is one router on its approximate tree.
	Routing Routing
	// Workload and Load are the bench's workload and load options.
	Workload workloads.Params
	Load     workloads.LoadParams
	// Kills are failure scenarios.
	Kills []Kill
	// Direct is traffic that reaches workers around the routers (--direct-load).
	Direct []DirectLoad
	// SLO, when set, makes each level report goodput.
	SLO *reports.SLO
	// DecisionLog, when set, receives one --decision-log line per routing decision.
	DecisionLog io.Writer
	// Version is written into the results' meta.
	Version string
	// Conversations, when set, remembers the conversations each level generates, and a level
	// of a workload it remembers takes copies of them instead (runs of one workload many times
	// over, as validate's fit does); the results are the same.
	Conversations *Conversations
	// Progress, when set, is called from the simulation goroutine about every 1,024 completed
	// requests and once at the end of each level, with the level's label, the requests
	// completed so far in the run and the virtual time elapsed. It must not block for long.
	Progress func(level string, completed int, virtual time.Duration)
	// TreeChars bounds every router tree (cache_aware's approximate tree, one per role and
	// replica) at this many characters, below Router.MaxTreeTotalChars when that is larger:
	// past it the tree is trimmed as serve trims at max_tree_total_chars (LRU, to 90 %). 0:
	// DefaultTreeChars; < 0: Router.MaxTreeTotalChars alone, as serve (2^30 by default, about
	// 1 GiB of text per tree). Stats.TreeTrims says whether a run reached the bound.
	TreeChars int
	// KeepITL keeps every record's ITL list (for requests.jsonl). Without it a level counts
	// its ITLs (reports.Counts, exact percentiles) and the records carry none, which keeps a
	// run of a million requests in bounded memory.
	KeepITL bool
}

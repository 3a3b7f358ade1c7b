package fakeworker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// Defaults of Config fields (SPEC §3).
const (
	DefaultBootstrapPort = 8998 // SGLang's --disaggregation-bootstrap-port; a null bootstrap_port means it
	DefaultMaxNewTokens  = 128  // output tokens when the request sets no max_tokens / max_new_tokens
	DefaultModelPath     = "pdrouter/fake-model"
	DefaultErrorStatus   = 500
)

// Failures are the failure-injection knobs of one worker (SPEC §3). The zero value injects
// nothing.
type Failures struct {
	ErrorRate       float64       // fraction in [0,1] of inference requests answered at once with ErrorStatus
	ErrorStatus     int           // HTTP status of injected errors; 0 → DefaultErrorStatus (500)
	HangRate        float64       // fraction in [0,1] of inference requests accepted and never answered (until the client goes away or the worker stops)
	CrashAfter      int           // the worker dies (engine killed, listeners and connections closed) on inference request CrashAfter+1; 0: never
	SlowFactor      float64       // every model duration is multiplied by it; 0 → 1
	CutStreamAfter  int           // streams are cut (connection dropped, no [DONE]) after this many tokens; 0: never
	NeverSignalKV   bool          // prefill: compute, then never finish the KV transfer (decode times out)
	FailHealthAfter time.Duration // /health and /health_generate answer 503 from this long after start; 0: never
}

// Config describes one fake worker. Zero fields take the defaults named on them.
type Config struct {
	Mode          engine.Role // RoleUnified (SGLang's "regular", disaggregation_mode "null"), RolePrefill or RoleDecode
	Host          string      // address to listen on; "" → 127.0.0.1
	Port          int         // HTTP port; 0: the OS picks one (see Worker.URL)
	BootstrapPort int         // prefill: port of the bootstrap server; 0: the OS picks one (the CLI defaults to DefaultBootstrapPort)

	// SGLang's parallelism (--tp-size, --dp-size, --ep-size, --enable-dp-attention): without
	// DP attention DPSize replicas of TPSize GPUs, with it TPSize GPUs in DPSize attention
	// ranks (engine.SGLangParallelism). DPSize is the engine's ranks; TPSize and EPSize shape
	// only an engine built from ModelPath and GPU, and are reported.
	TPSize      int  // 0 → 1
	DPSize      int  // DP ranks; 0 → 1
	EPSize      int  // 0 → 1
	DPAttention bool // DP-attention lockstep (engine.Config.DPAttention)
	// GPU, when set, builds the engine from the model ModelPath names (a model card or Hugging
	// Face id, engine.LookupModel) on that GPU (engine.LookupGPU) at the parallelism above,
	// with SGLang's defaults for the unset Args (engine.BuildServer). Profile must then be
	// zero.
	GPU string
	// Args are SGLang's engine arguments as given on its command line (zero fields unset):
	// with GPU they take SGLang's defaults, otherwise the engine's (PageSize and
	// MaxTotalTokens below count when the Args fields are unset). Under DP attention
	// ChunkedPrefillSize and MaxRunningRequests are the server's, divided among its ranks.
	Args             engine.ServerArgs
	SchedulePolicy   string            // prefill queue order: lpm (default) or fcfs (engine.Config.SchedulePolicy)
	DisableOverlap   bool              // prompts matchable when their step ends (engine.Config.DisableOverlap)
	MixedChunk       bool              // regular worker: running requests decode inside prefill steps (engine.Config.MixedChunk)
	DecodeRadixCache bool              // decode: keep served prompts in a prefix cache (engine.Config.DecodeRadixCache)
	Profile          engine.Profile    // step-time model; zero → engine.Instant()
	BootstrapTimeout time.Duration     // PD: engine bootstrap deadline after a request arrives; 0 → 30 s; < 0: never
	LinkGbps         float64           // prefill: KV link bandwidth in Gbit/s; 0 → the engine default (400 Gb/s)
	Speedup          float64           // every model duration is divided by it; 0 → 1
	PageSize         int               // tokens per KV page; 0 → 1
	MaxTotalTokens   int               // KV capacity per rank in tokens; 0 → the profile's
	ModelPath        string            // reported model_path and model id (with GPU: the model too); "" → DefaultModelPath
	Model            *engine.ModelCard // with GPU: the model to build instead of the built-in card ModelPath names (--model-config)
	Seed             uint64            // seeds failure injection (error and hang draws) and generated ids; same seed, same draws

	// KVEventsConfig is SGLang's --kv-events-config JSON (KVEventsConfig): with publisher
	// "zmq" every DP rank publishes its radix cache's block stores, removals and clears as
	// SGLang does (kvpublish.go); "" or publisher "null": no events.
	KVEventsConfig string
	// KVEventsShape is the events' wire shape: KVShapeArray (SGLang's tagged arrays; "" means
	// it) or KVShapeMap (tagged maps, sglang PR #37482).
	KVEventsShape string
	// TokenizerPath, when set, tokenizes prompts with a real tokenizer (router/tokenize: a
	// tokenizer.json file or a model directory) instead of the approximate workloads one;
	// ChatTemplate replaces its chat template (SGLang's --tokenizer-path, --chat-template).
	TokenizerPath string
	ChatTemplate  string

	// NoLoadReports makes the worker report no engine load, as an SGLang from before
	// /v1/loads started without --enable-metrics: GET /v1/loads answers 404 and /metrics has
	// no per-rank sglang gauges (the counters and histograms stay; so does the deprecated
	// /get_load). For testing a router's fallback to its own in-flight counts.
	NoLoadReports bool

	Failures Failures
	Logger   *slog.Logger // nil: discard
	// TLS, when set, makes the worker serve HTTPS (URL https://…), requiring client
	// certificates when its ClientAuth says so. The bootstrap server stays plain HTTP.
	TLS *tls.Config
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = "127.0.0.1"
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
	if c.GPU == "" && c.Profile.Name == "" && !c.Profile.Constant && c.Profile.A0 == 0 && c.Profile.B0 == 0 {
		c.Profile = engine.Instant()
	}
	if c.BootstrapTimeout == 0 {
		c.BootstrapTimeout = engine.DefaultBootstrapTimeout
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.ModelPath == "" {
		c.ModelPath = DefaultModelPath
	}
	if c.Failures.ErrorStatus == 0 {
		c.Failures.ErrorStatus = DefaultErrorStatus
	}
	if c.Failures.SlowFactor == 0 {
		c.Failures.SlowFactor = 1
	}
	if c.KVEventsShape == "" {
		c.KVEventsShape = KVShapeArray
	}
	return c
}

// engineConfig is the sim/engine configuration of the worker (after withDefaults; Validate
// reports what engine() cannot resolve).
func (c Config) engineConfig() engine.Config {
	prof, args, _ := c.engine()
	return args.Apply(engine.Config{
		Role:             c.Mode,
		DPSize:           c.DPSize,
		Profile:          prof,
		DPAttention:      c.DPAttention,
		SchedulePolicy:   c.SchedulePolicy,
		DisableOverlap:   c.DisableOverlap,
		MixedChunk:       c.MixedChunk,
		DecodeRadixCache: c.DecodeRadixCache && c.Mode == engine.RoleDecode,
		LinkBandwidth:    c.LinkGbps * 1e9 / 8,
		BootstrapTimeout: c.BootstrapTimeout,
		Speedup:          c.Speedup / c.Failures.SlowFactor,
		NeverSignalKV:    c.Failures.NeverSignalKV,
	})
}

// parallelism is the worker's engine parallelism.
func (c Config) parallelism() engine.Parallelism {
	return engine.SGLangParallelism(c.TPSize, c.DPSize, c.EPSize, c.DPAttention)
}

// engine resolves the worker's profile and the per-rank engine arguments it runs with: built
// from ModelPath on GPU with SGLang's defaults, or c.Profile with the given arguments
// (SGLang's DP-attention division applied; unset ones left to the engine's defaults).
func (c Config) engine() (engine.Profile, engine.ServerArgs, error) {
	args := c.Args
	if args.PageSize == 0 {
		args.PageSize = c.PageSize
	}
	if args.MaxTotalTokens == 0 {
		args.MaxTotalTokens = c.MaxTotalTokens
	}
	par := c.parallelism()
	if c.GPU == "" {
		return c.Profile, args.PerRank(par), nil
	}
	m, err := c.model()
	if err != nil {
		return engine.Profile{}, args, err
	}
	g, err := engine.LookupGPU(c.GPU)
	if err != nil {
		return engine.Profile{}, args, fmt.Errorf("fakeworker: --gpu: %w", err)
	}
	p, r, err := engine.BuildServer("", m, g, par, args)
	if err != nil {
		return p, r, fmt.Errorf("fakeworker: %w", err)
	}
	return p, r, nil
}

// model is the model the engine is built from: Model, else the built-in card ModelPath names.
func (c Config) model() (engine.ModelCard, error) {
	if c.Model != nil {
		return *c.Model, nil
	}
	m, err := engine.LookupModel(c.ModelPath)
	if err != nil {
		return m, fmt.Errorf("fakeworker: --model-path: %w", err)
	}
	return m, nil
}

// Validate reports the first invalid field of c (after defaults), naming the flag at fault.
func (c Config) Validate() error {
	if c.GPU != "" && (c.Profile.Name != "" || c.Profile.Constant) {
		return fmt.Errorf("fakeworker: --gpu (with --model-path) and --profile both pick the engine: give one")
	}
	if c.GPU != "" && c.ModelPath == "" {
		return fmt.Errorf("fakeworker: --gpu %s needs --model-path (a model card or Hugging Face id)", c.GPU)
	}
	if c.GPU == "" && c.Args.MemFractionStatic != 0 {
		return fmt.Errorf("fakeworker: --mem-fraction-static needs --model-path and --gpu (a profile's KV capacity is its own; set --max-total-tokens)")
	}
	if c.GPU == "" && c.Args.KVCacheDType != "" {
		return fmt.Errorf("fakeworker: --kv-cache-dtype needs --model-path and --gpu (a profile's KV format is its own)")
	}
	c = c.withDefaults()
	f := c.Failures
	switch {
	case c.TPSize < 0 || c.EPSize < 0:
		return fmt.Errorf("fakeworker: --tp-size %d and --ep-size %d must be ≥ 1", c.TPSize, c.EPSize)
	case c.Mode > engine.RoleDecode:
		return fmt.Errorf("fakeworker: --mode %d is not regular, prefill or decode", c.Mode)
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("fakeworker: --port %d is outside [0,65535]", c.Port)
	case c.BootstrapPort < 0 || c.BootstrapPort > 65535:
		return fmt.Errorf("fakeworker: --bootstrap-port %d is outside [0,65535]", c.BootstrapPort)
	case c.DPSize < 1:
		return fmt.Errorf("fakeworker: --dp-size %d must be at least 1", c.DPSize)
	case c.LinkGbps < 0:
		return fmt.Errorf("fakeworker: --link-gbps %g must not be negative", c.LinkGbps)
	case !(c.Speedup > 0):
		return fmt.Errorf("fakeworker: --speedup %g must be > 0", c.Speedup)
	case f.ErrorRate < 0 || f.ErrorRate > 1:
		return fmt.Errorf("fakeworker: --error-rate %g is outside [0,1]", f.ErrorRate)
	case f.ErrorStatus < 400 || f.ErrorStatus > 599:
		return fmt.Errorf("fakeworker: --error-status %d is not a 4xx or 5xx status", f.ErrorStatus)
	case f.HangRate < 0 || f.HangRate > 1:
		return fmt.Errorf("fakeworker: --hang-rate %g is outside [0,1]", f.HangRate)
	case f.CrashAfter < 0:
		return fmt.Errorf("fakeworker: --crash-after %d must not be negative", f.CrashAfter)
	case !(f.SlowFactor > 0):
		return fmt.Errorf("fakeworker: --slow-factor %g must be > 0", f.SlowFactor)
	case f.CutStreamAfter < 0:
		return fmt.Errorf("fakeworker: --cut-stream-after %d must not be negative", f.CutStreamAfter)
	case f.NeverSignalKV && c.Mode != engine.RolePrefill:
		return fmt.Errorf("fakeworker: --never-signal-kv needs --mode prefill")
	case f.FailHealthAfter < 0:
		return fmt.Errorf("fakeworker: --fail-health-after %s must not be negative", f.FailHealthAfter)
	case c.KVEventsShape != "" && c.KVEventsShape != KVShapeArray && c.KVEventsShape != KVShapeMap:
		return fmt.Errorf("fakeworker: --kv-events-shape %q is not %s or %s", c.KVEventsShape, KVShapeArray, KVShapeMap)
	case c.ChatTemplate != "" && c.TokenizerPath == "":
		return fmt.Errorf("fakeworker: --chat-template needs --tokenizer-path")
	}
	if c.KVEventsConfig != "" {
		if _, err := ParseKVEventsConfig(c.KVEventsConfig); err != nil {
			return err
		}
	}
	if err := c.Args.Validate(); err != nil {
		return fmt.Errorf("fakeworker: %w", err)
	}
	if _, _, err := c.engine(); err != nil {
		return err
	}
	if err := c.engineConfig().Validate(); err != nil {
		return fmt.Errorf("fakeworker: %w", err)
	}
	return nil
}

// ResolveProfile returns the profile called name: "constant" with the given ttft and itl (zero:
// engine.DefaultTTFT, engine.DefaultITL), "instant", or a preset of engine.Presets. ttft and itl
// are accepted only with "constant".
func ResolveProfile(name string, ttft, itl time.Duration) (engine.Profile, error) {
	if name != "constant" && (ttft != 0 || itl != 0) {
		return engine.Profile{}, fmt.Errorf("fakeworker: --ttft and --itl need --profile constant (got %q)", name)
	}
	switch name {
	case "constant":
		if ttft < 0 || itl < 0 {
			return engine.Profile{}, fmt.Errorf("fakeworker: --ttft %s and --itl %s must not be negative", ttft, itl)
		}
		if ttft == 0 {
			ttft = engine.DefaultTTFT
		}
		if itl == 0 {
			itl = engine.DefaultITL
		}
		return engine.ConstantProfile(ttft, itl), nil
	case "instant":
		return engine.Instant(), nil
	}
	p, err := engine.LookupProfile(name)
	if err != nil {
		return engine.Profile{}, fmt.Errorf("fakeworker: --profile: %w", err)
	}
	return p, nil
}

// ModeName returns the SGLang name of a worker mode: "regular", "prefill" or "decode".
func ModeName(m engine.Role) string {
	if m == engine.RoleUnified {
		return "regular"
	}
	return m.String()
}

// disaggregationMode is /get_server_info's disaggregation_mode: SGLang's string "null",
// "prefill" or "decode".
func disaggregationMode(m engine.Role) string {
	if m == engine.RoleUnified {
		return "null"
	}
	return m.String()
}

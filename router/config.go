package router

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Policy names accepted by --policy, --prefill-policy and --decode-policy.
const (
	PolicyRandom            = "random"
	PolicyRoundRobin        = "round_robin"
	PolicyPowerOfTwo        = "power_of_two"
	PolicyCacheAware        = "cache_aware"
	PolicyLeastLoad         = "least_load"
	PolicyConsistentHashing = "consistent_hashing"
	PolicyManual            = "manual"
	PolicyPredictedLatency  = "predicted_latency"
)

// PolicyNames lists the policies in the order --help shows them.
var PolicyNames = []string{PolicyCacheAware, PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo, PolicyLeastLoad, PolicyConsistentHashing, PolicyManual, PolicyPredictedLatency}

// DP rank field styles for --dp-rank-fields (SPEC §1.4).
const (
	DPRankFieldsLegacy = "legacy" // data_parallel_rank / data_parallel_rank_decode
	DPRankFieldsRouted = "routed" // routed_dp_rank / disagg_prefill_dp_rank
)

// PrefillWorker is one --prefill URL [BOOTSTRAP_PORT|none].
type PrefillWorker struct {
	URL string `json:"url" yaml:"url"`
	// BootstrapPort is sent to workers as bootstrap_port; nil (none) is sent as JSON null,
	// which SGLang reads as its default bootstrap port.
	BootstrapPort *int `json:"bootstrap_port" yaml:"bootstrap_port"`
}

// Config holds the routing settings (SPEC §2) under the sgl-router names: those the routing
// core or the simulator reads — mode and workers, policies, DP awareness, retries, breaker,
// health checks and the seed. It is what `router sim` takes and what `sim --write-config`
// writes (JSON or YAML, snake_case keys). It names no file: whoever writes a decision log
// opens it and hands the writer over. The settings of the live HTTP server (listeners, API
// key, limits, admission, logging, service discovery, TLS) are in server.Config (package
// router/server), which embeds this one: `serve --config` reads both from one flat file.
//
// The fields are declared in the order they print (serve --print-config, sim --write-config,
// /get_router_config) and --help lists them: a new setting goes beside its relatives, with
// its json and yaml key and a help tag (its flag's --help text; cmd/router binds the flags
// from these fields). Related settings are read together through [Config.Retry],
// [Config.Breaker] and [Config.Health]. Durations keep sgl-router's unit-suffixed integer fields so existing configs read the same.
// Build it with [DefaultConfig] and check it with [Config.Validate].
type Config struct {
	// Workers and mode.
	WorkerURLs       []string        `json:"worker_urls" yaml:"worker_urls" help:"regular-mode worker URLs (space-separated after the flag, or repeated)"`
	PDDisaggregation bool            `json:"pd_disaggregation" yaml:"pd_disaggregation"`
	Prefill          []PrefillWorker `json:"prefill" yaml:"prefill" help:"prefill worker: URL [BOOTSTRAP_PORT|none] (repeatable; none or omitted sends bootstrap_port null)"`
	Decode           []string        `json:"decode" yaml:"decode" help:"decode worker URL (repeatable)"`

	// Policies.
	Policy              string  `json:"policy" yaml:"policy" help:"routing policy: cache_aware, round_robin, random, power_of_two, least_load, consistent_hashing or manual (both by routing key), predicted_latency (the engine model's lowest predicted TTFT within the TPOT SLO; PD: both roles)"` // default cache_aware
	PrefillPolicy       string  `json:"prefill_policy" yaml:"prefill_policy" help:"PD: policy for prefill workers (default: --policy)"`                                                                                                                                                               // "" = --policy
	DecodePolicy        string  `json:"decode_policy" yaml:"decode_policy" help:"PD: policy for decode workers (default: --policy)"`                                                                                                                                                                  // "" = --policy
	CacheThreshold      float64 `json:"cache_threshold" yaml:"cache_threshold" help:"cache_aware: route to the best-matching worker when its matched share of the prompt (characters on the approximate tree, tokens on KV events) is above this, in [0,1]"`                                          // default 0.3
	BalanceAbsThreshold int     `json:"balance_abs_threshold" yaml:"balance_abs_threshold" help:"cache_aware: loads are imbalanced when max-min exceeds this (and the relative rule holds)"`                                                                                                          // default 64
	BalanceRelThreshold float64 `json:"balance_rel_threshold" yaml:"balance_rel_threshold" help:"cache_aware: loads are imbalanced when max exceeds min times this (and the absolute rule holds)"`                                                                                                    // default 1.5

	// BalanceUncachedTokenThreshold is cache_aware's balance check on engine load reports
	// (CacheAwareConfig.BalanceUncachedTokenThreshold).
	BalanceUncachedTokenThreshold int `json:"balance_uncached_token_threshold" yaml:"balance_uncached_token_threshold" help:"cache_aware, while every candidate's engine load report is fresh: loads are also imbalanced when the prefill or regular workers' queued uncached prompt tokens (num_waiting_uncached_tokens, plus what this router sent since) differ by more than this and max exceeds min times --balance-rel-threshold; 0: off (request counts alone, sgl-router's rule)"` // default 65536

	EvictionIntervalSecs int `json:"eviction_interval_secs" yaml:"eviction_interval_secs" help:"cache_aware: seconds between tree evictions"` // default 120
	// CacheWarmupSecs is how long a worker that entered rotation (added, or back from
	// unhealthy or an open breaker) takes, under cache_aware, a request whose prompt another
	// worker's cache holds, while it carries less than the mean load (CacheAwareConfig.WarmUp).
	CacheWarmupSecs int `json:"cache_warmup_secs" yaml:"cache_warmup_secs" help:"cache_aware: for this many seconds after a worker enters rotation (added, back from unhealthy or an open breaker), it takes requests that match another worker's cache while it carries less than the mean load, so it gets its share at once; 0: never (sgl-router's rule)"` // default 30
	// KVHostTierWeight is what a block held only in a worker's host memory (SGLang HiCache's
	// CPU_PINNED tier) is worth to cache_aware on KV events, beside 1 for a block on its GPU
	// (CacheAwareConfig.HostTierWeight). DefaultKVHostTierWeight says where its default comes from.
	KVHostTierWeight float64 `json:"kv_host_tier_weight" yaml:"kv_host_tier_weight" help:"cache_aware on KV events: what a prefix block held only in a worker's host memory (HiCache's CPU_PINNED tier, loaded back before prefill) counts for beside 1 for a block on its GPU, in [0,1]; 0: only GPU blocks count (the host tier is ignored), 1: every tier alike"` // default DefaultKVHostTierWeight
	// HashLoadFactor bounds consistent_hashing's load (ConsistentHashing.LoadFactor).
	HashLoadFactor float64 `json:"hash_load_factor" yaml:"hash_load_factor" help:"consistent_hashing: a worker takes a key's request only while its load is below this times the mean load (plus one); otherwise the request goes to the next worker on the ring, so one hot key cannot pile onto one worker; 0: never (pure consistent hashing)"` // default 1.25
	// MaxIdleSecs and AssignmentMode are the manual policy's (Manual.MaxIdle, Manual.AssignMode).
	MaxIdleSecs    int    `json:"max_idle_secs" yaml:"max_idle_secs" help:"manual: a routing key without a request for this many seconds is forgotten (its next request is assigned anew)"`                                    // default 14400
	AssignmentMode string `json:"assignment_mode" yaml:"assignment_mode" help:"manual: how a new routing key gets its worker: random (empty too), min_load (the least loaded) or min_group (the one holding the fewest keys)"` // default "" (random)
	// MaxTreeSize is the per-tenant (per-target) character budget of the cache-aware tree
	// (--max-tree-size, default 2^26), sgl-router's meaning.
	MaxTreeSize int `json:"max_tree_size" yaml:"max_tree_size" help:"cache_aware: characters each worker (DP rank) may own in the tree before LRU eviction"`
	// MaxTreeTotalChars bounds the characters held by one tree overall
	// (--max-tree-total-chars, default 2^30).
	MaxTreeTotalChars int `json:"max_tree_total_chars" yaml:"max_tree_total_chars" help:"cache_aware: characters one tree may hold in all before LRU eviction (memory guard)"`

	// Engine load: what the workers' engines report of their load (SGLang's /v1/loads, or
	// its Prometheus gauges), read by the policies when fresh for every candidate (SPEC §1.2,
	// "loads"), and the overload bounds under which a worker is passed over.
	LoadReportMaxAgeMs            int     `json:"load_report_max_age_ms" yaml:"load_report_max_age_ms" help:"engine load reports older than this count as absent (the policies fall back to the router's in-flight counts), ms; 0: never use them"` // default 1000
	WorkerOverloadTokenUsage      float64 `json:"worker_overload_token_usage" yaml:"worker_overload_token_usage" help:"a worker whose engine reports KV token usage at or above this, in (0,1], is passed over while another is below it; all over: 503 with Retry-After; 0: off"`
	WorkerOverloadWaitingRequests int     `json:"worker_overload_waiting_requests" yaml:"worker_overload_waiting_requests" help:"a worker whose engine reports this many waiting requests or more is passed over while another has fewer; all over: 503 with Retry-After; 0: off. Poll every 100 ms with it (--load-poll-interval-ms): between reports every request sent since and still in flight counts as waiting"`
	// MaxWorkerRequests caps the requests this router has in flight on one worker (its DP
	// ranks together; a PD request counts once on its prefill and once on its decode), from
	// the router's own count, not the engine's: a worker that hangs holds at most this many
	// requests and upstream connections until its breaker opens, instead of every request
	// the policy sends it meanwhile (and their retries).
	MaxWorkerRequests int `json:"max_worker_requests" yaml:"max_worker_requests" help:"requests in flight from this router to one worker (its DP ranks together); a worker at the cap is passed over while another is below it; all at it: 503 with Retry-After; 0: off"`

	// predicted_latency: the SLOs of requests that name none, what to do with a request no
	// worker is predicted to serve within them, and how fast the corrections forget
	// (PredictedLatencyConfig).
	TTFTSLOMs                   int    `json:"ttft_slo_ms" yaml:"ttft_slo_ms" help:"predicted_latency: TTFT SLO of a request without an x-slo-ttft-ms (llm-d) or x-sgl-ttft-slo-ms (SGLang) header, ms; 0: none"`
	TPOTSLOMs                   int    `json:"tpot_slo_ms" yaml:"tpot_slo_ms" help:"predicted_latency: TPOT SLO of a request without an x-slo-tpot-ms (llm-d) or x-sgl-tps-slo (SGLang, tokens/s) header, ms: only workers predicted within it are chosen while one is; 0: none"`
	SLOMiss                     string `json:"slo_miss" yaml:"slo_miss" help:"predicted_latency: a request no worker (pair) is predicted to serve within its SLOs is routed best_effort (the lowest TTFT within the TPOT SLO, else the lowest TPOT) or shed (503 with Retry-After)"`
	LatencyCorrectionHalfLifeMs int    `json:"latency_correction_half_life_ms" yaml:"latency_correction_half_life_ms" help:"predicted_latency: half-life of each worker's online correction (observed ÷ predicted TTFT and TPOT), ms: an observation's weight halves every half-life"`

	// DP awareness.
	DPAware      bool   `json:"dp_aware" yaml:"dp_aware"`
	DPRankFields string `json:"dp_rank_fields" yaml:"dp_rank_fields" help:"DP rank fields sent to workers: legacy (data_parallel_rank…) or routed (routed_dp_rank…)"`

	// Retries.
	RetryMaxRetries        int     `json:"retry_max_retries" yaml:"retry_max_retries" help:"attempts per request including the first"`           // total attempts, default 5
	RetryInitialBackoffMs  int     `json:"retry_initial_backoff_ms" yaml:"retry_initial_backoff_ms" help:"wait before the first retry, ms"`      // default 50
	RetryMaxBackoffMs      int     `json:"retry_max_backoff_ms" yaml:"retry_max_backoff_ms" help:"cap on the wait between retries, ms"`          // default 30000
	RetryBackoffMultiplier float64 `json:"retry_backoff_multiplier" yaml:"retry_backoff_multiplier" help:"growth of the wait per retry"`         // default 1.5
	RetryJitterFactor      float64 `json:"retry_jitter_factor" yaml:"retry_jitter_factor" help:"random spread of each wait, ±fraction in [0,1]"` // default 0.2
	DisableRetries         bool    `json:"disable_retries" yaml:"disable_retries" help:"one attempt per request"`
	// The retry budget (Envoy's shape): requests being retried at once stay within a share of
	// the requests in flight, or a floor, so failures of many requests together cannot
	// multiply the load on the workers left. Off by default, as in sgl-router: at Envoy's 20 %,
	// one hung decode of two turned requests that retries answer into 502s in the tests
	// (TestPDHangingDecodeChargesDecodeNotPrefill: 16 in flight, 3 retried at once).
	RetryBudgetPercent  float64 `json:"retry_budget_percent" yaml:"retry_budget_percent" help:"requests being retried at once, as a percent of the requests in flight, e.g. 20 as Envoy (100: no budget)"` // default 100
	RetryMinConcurrency int     `json:"retry_min_concurrency" yaml:"retry_min_concurrency" help:"requests that may be retried at once whatever --retry-budget-percent allows"`                             // default 3

	// Circuit breaker.
	CBFailureThreshold    int  `json:"cb_failure_threshold" yaml:"cb_failure_threshold" help:"consecutive failures that open a worker's circuit breaker"`                                 // default 10
	CBSuccessThreshold    int  `json:"cb_success_threshold" yaml:"cb_success_threshold" help:"consecutive half-open successes that close it again"`                                       // default 3
	CBTimeoutDurationSecs int  `json:"cb_timeout_duration_secs" yaml:"cb_timeout_duration_secs" help:"seconds an open breaker waits before letting a probe request through"`              // default 60
	CBWindowDurationSecs  int  `json:"cb_window_duration_secs" yaml:"cb_window_duration_secs" help:"accepted for sgl-router compatibility; unused (breakers count consecutive failures)"` // accepted, unused (as in sgl-router)
	DisableCircuitBreaker bool `json:"disable_circuit_breaker" yaml:"disable_circuit_breaker" help:"never open circuit breakers"`

	// Health checks: how often and how each worker is probed, and how many probes in a row
	// flip its verdict ([Config.Health]). The simulator probes at the interval too.
	HealthCheckIntervalSecs int    `json:"health_check_interval_secs" yaml:"health_check_interval_secs" help:"seconds between health probes of each worker"`       // default 60
	HealthCheckTimeoutSecs  int    `json:"health_check_timeout_secs" yaml:"health_check_timeout_secs" help:"timeout of one health probe, seconds"`                 // default 5
	HealthFailureThreshold  int    `json:"health_failure_threshold" yaml:"health_failure_threshold" help:"consecutive failed probes that mark a worker unhealthy"` // default 3
	HealthSuccessThreshold  int    `json:"health_success_threshold" yaml:"health_success_threshold" help:"consecutive passed probes that mark it healthy again"`   // default 2
	HealthCheckEndpoint     string `json:"health_check_endpoint" yaml:"health_check_endpoint" help:"path probed on each worker"`                                   // default /health

	// Admission ([Admission], [Config.Admission]): how many requests run at once, who waits
	// and who is refused when the router is saturated or a tenant is over its limits. Serve
	// and the simulator both apply them.
	MaxConcurrentRequests int `json:"max_concurrent_requests" yaml:"max_concurrent_requests" help:"requests served at once (0 or -1: no limit, as sgl-router); others wait in the queue"` // ≤ 0 = no limit (default -1), as sgl-router
	QueueSize             int `json:"queue_size" yaml:"queue_size" help:"requests that may wait for a slot (full: 429)"`                                                                  // default 100
	QueueTimeoutSecs      int `json:"queue_timeout_secs" yaml:"queue_timeout_secs" help:"seconds a request may wait for a slot (then 408)"`                                               // default 60
	// RateLimitTokensPerSecond is smg's refill rate of its admission bucket, whose tokens are
	// requests (one each) and whose capacity is MaxConcurrentRequests: at most this many
	// requests start per second, after a burst of MaxConcurrentRequests. 0: none.
	RateLimitTokensPerSecond int `json:"rate_limit_tokens_per_second" yaml:"rate_limit_tokens_per_second" help:"smg's admission bucket: requests admitted per second (each takes one token; burst --max-concurrent-requests, which it needs); over it: 429 with Retry-After; 0: no rate limit"`
	// TenantMaxConcurrentRequests and TenantTokensPerSecond are the limits of a tenant without
	// its own entry in Tenants, and of an entry's unset fields.
	TenantMaxConcurrentRequests int     `json:"tenant_max_concurrent_requests" yaml:"tenant_max_concurrent_requests" help:"each tenant's requests in the router at once, running or queued (tenants: its entry's max_concurrent_requests); over it: 429 with Retry-After; 0: no limit"`
	TenantTokensPerSecond       float64 `json:"tenant_tokens_per_second" yaml:"tenant_tokens_per_second" help:"each tenant's LLM tokens (prompt plus the output asked for) admitted per second, burst one second's worth (tenants: its entry's tokens_per_second); over it: 429 with Retry-After; 0: no limit"`
	// ScheduleLowPriorityValuesFirst is SGLang's --schedule-low-priority-values-first: without
	// it a request with a higher priority value goes first, as SGLang's default.
	ScheduleLowPriorityValuesFirst bool `json:"schedule_low_priority_values_first" yaml:"schedule_low_priority_values_first" help:"in the admission queue, serve lower priority values first (SGLang's flag; default: higher first, as SGLang)"`
	// Tenants are the tenants with entries of their own: their keys, weight and limits.
	Tenants []TenantSpec `json:"tenants" yaml:"tenants" help:"a tenant's entry NAME:key=value,... with keys tenant_key (auth:SHA256_OF_API_KEY or header:VALUE; repeatable), weight, max_concurrent_requests, tokens_per_second (repeatable; a settings file's tenants: list takes the same fields)"`

	// Seed seeds rooms, rids and the random policies; nil picks a random seed at start.
	Seed *int64 `json:"seed" yaml:"seed"`
}

// DefaultKVHostTierWeight is --kv-host-tier-weight's default: one minus the cost of loading a
// token's KV back from host memory relative to recomputing it. SGLang's HiCache moves KV
// between its pinned host pool and the GPU over the host link with its own kernels
// (--hicache-io-backend kernel, its default). SGLang measured that load path at 73–97 GB/s
// on GB300's C2C link (sglang PR #40278, "H2D, one layer at a time from a page-first host
// pool") and a per-layer copy at 28 GB/s on H20 (PR #37231); an H100's PCIe Gen5 x16 carries
// 64 GB/s per direction, some 50 in practice. Llama-3.1-8B's KV is 128 KiB a token (32 layers
// × 8 KV heads × 128 × K,V × 2 bytes): 2.6 µs a token to load back at 50 GB/s (4.7 at 28),
// where prefilling it costs 2 × 8e9 FLOP ÷ (989 TFLOP/s × ~0.5) ≈ 32 µs. A host hit saves
// 85–92 % of what a GPU hit saves over that range: 0.9. Larger models under tensor
// parallelism split both costs over their GPUs and come out higher; a slower or shared host
// link, lower (0 once loading back costs what recomputing does).
const DefaultKVHostTierWeight = 0.9

// DefaultConfig returns sgl-router's defaults (v0.2.2), plus ours (SPEC §2).
func DefaultConfig() Config {
	return Config{
		Policy:                        PolicyCacheAware,
		CacheThreshold:                0.3,
		BalanceAbsThreshold:           64,
		BalanceRelThreshold:           1.5,
		BalanceUncachedTokenThreshold: 65536,
		CacheWarmupSecs:               30,
		KVHostTierWeight:              DefaultKVHostTierWeight,
		HashLoadFactor:                1.25,
		MaxIdleSecs:                   14400,
		EvictionIntervalSecs:          120,
		MaxTreeSize:                   1 << 26,
		MaxTreeTotalChars:             1 << 30,
		DPRankFields:                  DPRankFieldsLegacy,
		RetryMaxRetries:               5,
		RetryInitialBackoffMs:         50,
		RetryMaxBackoffMs:             30000,
		RetryBackoffMultiplier:        1.5,
		RetryJitterFactor:             0.2,
		RetryBudgetPercent:            100,
		RetryMinConcurrency:           3,
		CBFailureThreshold:            10,
		CBSuccessThreshold:            3,
		CBTimeoutDurationSecs:         60,
		CBWindowDurationSecs:          120,
		HealthCheckIntervalSecs:       60,
		HealthCheckTimeoutSecs:        5,
		HealthFailureThreshold:        3,
		HealthSuccessThreshold:        2,
		HealthCheckEndpoint:           "/health",
		LoadReportMaxAgeMs:            1000,
		SLOMiss:                       SLOMissBestEffort,
		LatencyCorrectionHalfLifeMs:   DefaultLatencyCorrectionHalfLife,
		MaxConcurrentRequests:         -1,
		QueueSize:                     100,
		QueueTimeoutSecs:              60,
	}
}

// Admission returns the admission settings as an [AdmissionConfig].
func (c Config) Admission() AdmissionConfig {
	return AdmissionConfig{MaxConcurrent: c.MaxConcurrentRequests, QueueSize: c.QueueSize,
		RatePerSecond: float64(c.RateLimitTokensPerSecond), TenantMaxConcurrent: c.TenantMaxConcurrentRequests,
		TenantTokensPerSec: c.TenantTokensPerSecond, LowPriorityFirst: c.ScheduleLowPriorityValuesFirst, Tenants: c.Tenants}
}

// RoutingOnly returns a copy without worker lists: what `sim --write-config` writes, so that
// `serve --config FILE --prefill … --decode …` adds its own workers to tuned settings.
// (Listen addresses and secrets are server.Config's, never in a Config.)
func (c Config) RoutingOnly() Config {
	c.WorkerURLs, c.Prefill, c.Decode = nil, nil, nil
	return c
}

// PolicyFor returns the policy name used for role: --prefill-policy / --decode-policy in PD
// mode when set, else --policy.
func (c Config) PolicyFor(role Role) string {
	switch {
	case role == Prefill && c.PrefillPolicy != "":
		return c.PrefillPolicy
	case role == Decode && c.DecodePolicy != "":
		return c.DecodePolicy
	}
	return c.Policy
}

// UsesRoutingKeys reports whether a role's policy routes by [Request.RoutingKey]
// (consistent_hashing or manual): only then need a driver find a request's key.
func (c Config) UsesRoutingKeys() bool {
	for _, role := range []Role{Regular, Prefill, Decode} {
		if p := c.PolicyFor(role); p == PolicyConsistentHashing || p == PolicyManual {
			return true
		}
	}
	return false
}

// Retry returns the retry settings as a [RetryConfig].
func (c Config) Retry() RetryConfig {
	attempts := c.RetryMaxRetries
	if c.DisableRetries {
		attempts = 1
	}
	return RetryConfig{
		MaxAttempts:    attempts,
		InitialBackoff: time.Duration(c.RetryInitialBackoffMs) * time.Millisecond,
		MaxBackoff:     time.Duration(c.RetryMaxBackoffMs) * time.Millisecond,
		Multiplier:     c.RetryBackoffMultiplier,
		Jitter:         c.RetryJitterFactor,
		BudgetPercent:  c.RetryBudgetPercent,
		MinConcurrency: c.RetryMinConcurrency,
	}
}

// Breaker returns the circuit-breaker settings as a [BreakerConfig].
func (c Config) Breaker() BreakerConfig {
	return BreakerConfig{
		FailureThreshold: c.CBFailureThreshold,
		SuccessThreshold: c.CBSuccessThreshold,
		Timeout:          time.Duration(c.CBTimeoutDurationSecs) * time.Second,
		Disabled:         c.DisableCircuitBreaker,
	}
}

// Health returns the health-check settings as a [HealthConfig]: the probes' interval,
// timeout and endpoint, and the thresholds that flip a worker's verdict.
func (c Config) Health() HealthConfig {
	return HealthConfig{
		Interval:         time.Duration(c.HealthCheckIntervalSecs) * time.Second,
		Timeout:          time.Duration(c.HealthCheckTimeoutSecs) * time.Second,
		Endpoint:         c.HealthCheckEndpoint,
		FailureThreshold: c.HealthFailureThreshold,
		SuccessThreshold: c.HealthSuccessThreshold,
	}
}

// EvictionInterval is EvictionIntervalSecs as a duration.
func (c Config) EvictionInterval() time.Duration {
	return time.Duration(c.EvictionIntervalSecs) * time.Second
}

// SettingError is a setting Validate (this package's or server.Config's) rejects. Key is its config-file key (cache_threshold),
// Msg the problem, starting with the flag (--cache-threshold 1.7 is outside [0,1]), so a
// command can name where the value came from: the flag, or a settings file's line.
type SettingError struct {
	Key string
	Msg string
	Err error // the wrapped cause, if any
}

func (e *SettingError) Error() string { return "router: " + e.Msg }
func (e *SettingError) Unwrap() error { return e.Err }

// SettingErrorf returns a *SettingError about the setting whose config-file key is key; format
// and a make its message, as fmt.Errorf (a %w operand becomes Err).
func SettingErrorf(key, format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	return &SettingError{Key: key, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// FlagKey turns a flag (--cache-threshold) into its config-file key (cache_threshold).
func FlagKey(flag string) string { return strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_") }

// Validate checks every routing setting and returns the first problem as a *SettingError
// naming the flag, e.g. "router: --cache-threshold 1.7 is outside [0,1]".
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateMode, c.validatePolicies, c.validateReliability, c.validateAdmission} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateMode() error {
	if !c.PDDisaggregation {
		switch {
		case len(c.Prefill) > 0:
			return SettingErrorf("prefill", "--prefill needs --pd-disaggregation")
		case len(c.Decode) > 0:
			return SettingErrorf("decode", "--decode needs --pd-disaggregation")
		case c.PrefillPolicy != "":
			return SettingErrorf("prefill_policy", "--prefill-policy needs --pd-disaggregation (use --policy in regular mode)")
		case c.DecodePolicy != "":
			return SettingErrorf("decode_policy", "--decode-policy needs --pd-disaggregation (use --policy in regular mode)")
		}
	} else if len(c.WorkerURLs) > 0 {
		return SettingErrorf("worker_urls", "--worker-urls is for regular mode; with --pd-disaggregation give --prefill and --decode")
	}
	seen := map[string]string{}
	add := func(flag, u string) error {
		if err := CheckWorkerURL(u); err != nil {
			return SettingErrorf(FlagKey(flag), "%s: %w", flag, err)
		}
		if prev, ok := seen[u]; ok {
			return SettingErrorf(FlagKey(flag), "%s %s is already given by %s", flag, u, prev)
		}
		seen[u] = flag
		return nil
	}
	for _, u := range c.WorkerURLs {
		if err := add("--worker-urls", u); err != nil {
			return err
		}
	}
	for _, p := range c.Prefill {
		if err := add("--prefill", p.URL); err != nil {
			return err
		}
		if p.BootstrapPort != nil && (*p.BootstrapPort < 1 || *p.BootstrapPort > 65535) {
			return SettingErrorf("prefill", "--prefill %s bootstrap port %d is outside [1,65535] (or use none)", p.URL, *p.BootstrapPort)
		}
	}
	for _, u := range c.Decode {
		if err := add("--decode", u); err != nil {
			return err
		}
	}
	if c.DPRankFields != DPRankFieldsLegacy && c.DPRankFields != DPRankFieldsRouted {
		return SettingErrorf("dp_rank_fields", "--dp-rank-fields %q is not legacy or routed", c.DPRankFields)
	}
	return nil
}

func (c Config) validatePolicies() error {
	for _, p := range []struct{ flag, v string }{{"--policy", c.Policy}, {"--prefill-policy", c.PrefillPolicy}, {"--decode-policy", c.DecodePolicy}} {
		if p.v == "" && p.flag != "--policy" {
			continue
		}
		if !validPolicy(p.v) {
			return SettingErrorf(FlagKey(p.flag), "%s %q is not one of %s", p.flag, p.v, strings.Join(PolicyNames, ", "))
		}
	}
	switch {
	case !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1):
		return SettingErrorf("cache_threshold", "--cache-threshold %g is outside [0,1]", c.CacheThreshold)
	case c.BalanceAbsThreshold < 0:
		return SettingErrorf("balance_abs_threshold", "--balance-abs-threshold %d must be ≥ 0", c.BalanceAbsThreshold)
	case c.BalanceUncachedTokenThreshold < 0:
		return SettingErrorf("balance_uncached_token_threshold", "--balance-uncached-token-threshold %d must be ≥ 0 (0: off)", c.BalanceUncachedTokenThreshold)
	case !(c.HashLoadFactor == 0 || c.HashLoadFactor >= 1):
		return SettingErrorf("hash_load_factor", "--hash-load-factor %g must be 0 (no bound) or ≥ 1 (a multiple of the mean load)", c.HashLoadFactor)
	case c.MaxIdleSecs < 0:
		return SettingErrorf("max_idle_secs", "--max-idle-secs %d must be ≥ 0 (0: keys are never forgotten)", c.MaxIdleSecs)
	case c.AssignmentMode != "" && c.AssignmentMode != AssignRandom && c.AssignmentMode != AssignMinLoad && c.AssignmentMode != AssignMinGroup:
		return SettingErrorf("assignment_mode", "--assignment-mode %q is not random, min_load or min_group", c.AssignmentMode)
	case !(c.KVHostTierWeight >= 0 && c.KVHostTierWeight <= 1):
		return SettingErrorf("kv_host_tier_weight", "--kv-host-tier-weight %g is outside [0,1] (0: GPU blocks only, 1: every tier alike)", c.KVHostTierWeight)
	case c.CacheWarmupSecs < 0:
		return SettingErrorf("cache_warmup_secs", "--cache-warmup-secs %d must be ≥ 0 (0: no warm-up)", c.CacheWarmupSecs)
	case !(c.BalanceRelThreshold >= 0):
		return SettingErrorf("balance_rel_threshold", "--balance-rel-threshold %g must be ≥ 0", c.BalanceRelThreshold)
	case c.EvictionIntervalSecs < 1:
		return SettingErrorf("eviction_interval_secs", "--eviction-interval-secs %d must be ≥ 1", c.EvictionIntervalSecs)
	case c.MaxTreeSize < 1:
		return SettingErrorf("max_tree_size", "--max-tree-size %d must be ≥ 1", c.MaxTreeSize)
	case c.MaxTreeTotalChars < 1:
		return SettingErrorf("max_tree_total_chars", "--max-tree-total-chars %d must be ≥ 1", c.MaxTreeTotalChars)
	case c.LoadReportMaxAgeMs < 0:
		return SettingErrorf("load_report_max_age_ms", "--load-report-max-age-ms %d must be ≥ 0", c.LoadReportMaxAgeMs)
	case !(c.WorkerOverloadTokenUsage >= 0 && c.WorkerOverloadTokenUsage <= 1):
		return SettingErrorf("worker_overload_token_usage", "--worker-overload-token-usage %g is outside [0,1] (0: off)", c.WorkerOverloadTokenUsage)
	case c.WorkerOverloadWaitingRequests < 0:
		return SettingErrorf("worker_overload_waiting_requests", "--worker-overload-waiting-requests %d must be ≥ 0 (0: off)", c.WorkerOverloadWaitingRequests)
	case c.MaxWorkerRequests < 0:
		return SettingErrorf("max_worker_requests", "--max-worker-requests %d must be ≥ 0 (0: off)", c.MaxWorkerRequests)
	case c.TTFTSLOMs < 0:
		return SettingErrorf("ttft_slo_ms", "--ttft-slo-ms %d must be ≥ 0 (0: none)", c.TTFTSLOMs)
	case c.TPOTSLOMs < 0:
		return SettingErrorf("tpot_slo_ms", "--tpot-slo-ms %d must be ≥ 0 (0: none)", c.TPOTSLOMs)
	case c.SLOMiss != "" && c.SLOMiss != SLOMissBestEffort && c.SLOMiss != SLOMissShed:
		return SettingErrorf("slo_miss", "--slo-miss %q is not best_effort or shed", c.SLOMiss)
	case c.LatencyCorrectionHalfLifeMs < 0:
		return SettingErrorf("latency_correction_half_life_ms", "--latency-correction-half-life-ms %d must be ≥ 1 (0: the default, %d)", c.LatencyCorrectionHalfLifeMs, DefaultLatencyCorrectionHalfLife)
	}
	if c.PDDisaggregation && (c.PolicyFor(Prefill) == PolicyPredictedLatency) != (c.PolicyFor(Decode) == PolicyPredictedLatency) {
		return SettingErrorf("policy", "predicted_latency picks the prefill and the decode worker together: give it to both roles (--policy predicted_latency), not to --%s-policy alone", map[bool]string{true: "prefill", false: "decode"}[c.PolicyFor(Prefill) == PolicyPredictedLatency])
	}
	return nil
}

// PredictedLatency returns predicted_latency's settings.
func (c Config) PredictedLatency() PredictedLatencyConfig {
	return PredictedLatencyConfig{TTFTSLO: time.Duration(c.TTFTSLOMs) * time.Millisecond, TPOTSLO: time.Duration(c.TPOTSLOMs) * time.Millisecond,
		SLOMiss: cmp.Or(c.SLOMiss, SLOMissBestEffort), HalfLife: time.Duration(cmp.Or(c.LatencyCorrectionHalfLifeMs, DefaultLatencyCorrectionHalfLife)) * time.Millisecond, MaxAge: c.LoadReportMaxAge()}
}

// DefaultLatencyCorrectionHalfLife is --latency-correction-half-life-ms's default: at tens of
// requests a second per worker a correction rests on a few hundred observations, and a worker
// that turns 2× slower moves its correction past 1.4× within one half-life, so it loses
// traffic within the 10 s the issue asks.
const DefaultLatencyCorrectionHalfLife = 5000

// LoadReportMaxAge is LoadReportMaxAgeMs as a duration.
func (c Config) LoadReportMaxAge() time.Duration {
	return time.Duration(c.LoadReportMaxAgeMs) * time.Millisecond
}

func (c Config) validateReliability() error {
	switch {
	case c.RetryMaxRetries < 1:
		return SettingErrorf("retry_max_retries", "--retry-max-retries %d must be ≥ 1 (it counts attempts, the first included)", c.RetryMaxRetries)
	case c.RetryInitialBackoffMs < 0:
		return SettingErrorf("retry_initial_backoff_ms", "--retry-initial-backoff-ms %d must be ≥ 0", c.RetryInitialBackoffMs)
	case c.RetryMaxBackoffMs < c.RetryInitialBackoffMs:
		return SettingErrorf("retry_max_backoff_ms", "--retry-max-backoff-ms %d is below --retry-initial-backoff-ms %d", c.RetryMaxBackoffMs, c.RetryInitialBackoffMs)
	case !(c.RetryBackoffMultiplier >= 1):
		return SettingErrorf("retry_backoff_multiplier", "--retry-backoff-multiplier %g must be ≥ 1", c.RetryBackoffMultiplier)
	case !(c.RetryJitterFactor >= 0 && c.RetryJitterFactor <= 1):
		return SettingErrorf("retry_jitter_factor", "--retry-jitter-factor %g is outside [0,1]", c.RetryJitterFactor)
	case !(c.RetryBudgetPercent > 0 && c.RetryBudgetPercent <= 100):
		return SettingErrorf("retry_budget_percent", "--retry-budget-percent %g is outside (0,100] (100: no budget)", c.RetryBudgetPercent)
	case c.RetryMinConcurrency < 1:
		return SettingErrorf("retry_min_concurrency", "--retry-min-concurrency %d must be ≥ 1", c.RetryMinConcurrency)
	case c.CBFailureThreshold < 1:
		return SettingErrorf("cb_failure_threshold", "--cb-failure-threshold %d must be ≥ 1", c.CBFailureThreshold)
	case c.CBSuccessThreshold < 1:
		return SettingErrorf("cb_success_threshold", "--cb-success-threshold %d must be ≥ 1", c.CBSuccessThreshold)
	case c.CBTimeoutDurationSecs < 1:
		return SettingErrorf("cb_timeout_duration_secs", "--cb-timeout-duration-secs %d must be ≥ 1", c.CBTimeoutDurationSecs)
	case c.HealthCheckIntervalSecs < 1:
		return SettingErrorf("health_check_interval_secs", "--health-check-interval-secs %d must be ≥ 1", c.HealthCheckIntervalSecs)
	case c.HealthCheckTimeoutSecs < 1:
		return SettingErrorf("health_check_timeout_secs", "--health-check-timeout-secs %d must be ≥ 1", c.HealthCheckTimeoutSecs)
	case !strings.HasPrefix(c.HealthCheckEndpoint, "/"):
		return SettingErrorf("health_check_endpoint", "--health-check-endpoint %q must start with /", c.HealthCheckEndpoint)
	case c.HealthFailureThreshold < 1:
		return SettingErrorf("health_failure_threshold", "--health-failure-threshold %d must be ≥ 1", c.HealthFailureThreshold)
	case c.HealthSuccessThreshold < 1:
		return SettingErrorf("health_success_threshold", "--health-success-threshold %d must be ≥ 1", c.HealthSuccessThreshold)
	}
	return nil
}

func validPolicy(name string) bool {
	for _, p := range PolicyNames {
		if p == name {
			return true
		}
	}
	return false
}

// CheckWorkerURL accepts absolute http or https URLs with a host and no query or fragment
// (SPEC §1.7).
func CheckWorkerURL(raw string) error {
	shown := RedactURL(raw) // errors name the URL without its credentials
	if !strings.Contains(raw, "://") {
		// "10.0.0.1:30001" would otherwise fail in url.Parse with its own wording ("first
		// path segment in URL cannot contain colon"), which does not say what to write.
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			shown = Redacted + raw[at:]
		}
		return fmt.Errorf("worker URL %q must start with http:// or https:// (e.g. http://%s)", shown, shown)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("worker URL %q: %s", shown, RedactIn(err.Error(), raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("worker URL %q must start with http:// or https://", shown)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("worker URL %q has no host", shown)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("worker URL %q must not have a query or fragment", shown)
	}
	return nil
}

func (c Config) validateAdmission() error {
	switch {
	case c.QueueSize < 0:
		return SettingErrorf("queue_size", "--queue-size %d must be ≥ 0", c.QueueSize)
	case c.QueueTimeoutSecs < 1:
		return SettingErrorf("queue_timeout_secs", "--queue-timeout-secs %d must be ≥ 1", c.QueueTimeoutSecs)
	case c.RateLimitTokensPerSecond < 0:
		return SettingErrorf("rate_limit_tokens_per_second", "--rate-limit-tokens-per-second %d must be ≥ 0 (0: no rate limit)", c.RateLimitTokensPerSecond)
	case c.RateLimitTokensPerSecond > 0 && c.MaxConcurrentRequests <= 0:
		return SettingErrorf("rate_limit_tokens_per_second", "--rate-limit-tokens-per-second needs --max-concurrent-requests (the bucket's capacity, as smg)")
	case c.TenantMaxConcurrentRequests < 0:
		return SettingErrorf("tenant_max_concurrent_requests", "--tenant-max-concurrent-requests %d must be ≥ 0 (0: no limit)", c.TenantMaxConcurrentRequests)
	case c.TenantTokensPerSecond < 0 || math.IsNaN(c.TenantTokensPerSecond) || math.IsInf(c.TenantTokensPerSecond, 0):
		return SettingErrorf("tenant_tokens_per_second", "--tenant-tokens-per-second %g must be a finite number ≥ 0 (0: no limit)", c.TenantTokensPerSecond)
	}
	names, keys := map[string]bool{}, map[string]string{}
	for i, t := range c.Tenants {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " \t\n:,") || t.Name == DefaultTenant:
			return SettingErrorf("tenants", "--tenants %d: name %q must be non-empty, without spaces, colons or commas, and not %q", i+1, t.Name, DefaultTenant)
		case names[t.Name]:
			return SettingErrorf("tenants", "--tenants %s is given twice", t.Name)
		case t.Weight < 0 || math.IsNaN(t.Weight) || math.IsInf(t.Weight, 0):
			return SettingErrorf("tenants", "--tenants %s: weight %g must be a finite number ≥ 0 (0: 1)", t.Name, t.Weight)
		case math.IsNaN(t.TokensPerSecond) || math.IsInf(t.TokensPerSecond, 0):
			return SettingErrorf("tenants", "--tenants %s: tokens_per_second %g must be finite", t.Name, t.TokensPerSecond)
		}
		names[t.Name] = true
		for _, k := range t.Keys {
			if err := checkTenantKey(k); err != nil {
				return SettingErrorf("tenants", "--tenants %s: tenant_key %q: %v", t.Name, k, err)
			}
			if prev, ok := keys[k]; ok {
				return SettingErrorf("tenants", "--tenants %s: tenant_key %q is already tenant %s's", t.Name, k, prev)
			}
			keys[k] = t.Name
		}
	}
	return nil
}

// checkTenantKey checks a canonical tenant key as smg spells them: auth:<64 hex digits> (the
// SHA-256 of an API key, never the key itself) or header:<value>; anonymous is every request
// without either.
func checkTenantKey(k string) error {
	if k == TenantAnonymous {
		return nil
	}
	if h, ok := strings.CutPrefix(k, "auth:"); ok {
		if len(h) != 64 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			return errors.New("want auth: and the 64 hex digits of the API key's SHA-256 (printf %s KEY | sha256sum), never the key itself")
		}
		return nil
	}
	if v, ok := strings.CutPrefix(k, "header:"); ok && strings.TrimSpace(v) != "" {
		return nil
	}
	return errors.New("want auth:SHA256_HEX, header:VALUE or anonymous")
}

package router

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Policy names accepted by --policy, --prefill-policy and --decode-policy.
const (
	PolicyRandom     = "random"
	PolicyRoundRobin = "round_robin"
	PolicyPowerOfTwo = "power_of_two"
	PolicyCacheAware = "cache_aware"
)

// PolicyNames lists the policies in the order --help shows them.
var PolicyNames = []string{PolicyCacheAware, PolicyRoundRobin, PolicyRandom, PolicyPowerOfTwo}

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

// Config holds every setting of `router serve` (SPEC §2), under the sgl-router names. It is
// the file format of `serve --config`, `sim --config` and `sim sweep --write-config` (JSON or
// YAML, snake_case keys). Durations keep sgl-router's unit-suffixed integer fields so existing
// configs read the same. Build it with [DefaultConfig] and check it with [Config.Validate].
type Config struct {
	// Server.
	Host string `json:"host" yaml:"host"` // --host, default 0.0.0.0
	Port int    `json:"port" yaml:"port"` // --port, default 30000

	// Workers and mode.
	WorkerURLs       []string        `json:"worker_urls" yaml:"worker_urls"`             // --worker-urls (regular mode)
	PDDisaggregation bool            `json:"pd_disaggregation" yaml:"pd_disaggregation"` // --pd-disaggregation
	Prefill          []PrefillWorker `json:"prefill" yaml:"prefill"`                     // --prefill URL [PORT|none]
	Decode           []string        `json:"decode" yaml:"decode"`                       // --decode URL
	// WorkerURLAllow, when non-empty, restricts worker URLs added at run time to these hosts
	// or CIDRs (--worker-url-allow).
	WorkerURLAllow []string `json:"worker_url_allow" yaml:"worker_url_allow"`

	// Policies.
	Policy               string  `json:"policy" yaml:"policy"`                                 // --policy, default cache_aware
	PrefillPolicy        string  `json:"prefill_policy" yaml:"prefill_policy"`                 // --prefill-policy, "" = --policy
	DecodePolicy         string  `json:"decode_policy" yaml:"decode_policy"`                   // --decode-policy, "" = --policy
	CacheThreshold       float64 `json:"cache_threshold" yaml:"cache_threshold"`               // --cache-threshold, default 0.3
	BalanceAbsThreshold  int     `json:"balance_abs_threshold" yaml:"balance_abs_threshold"`   // --balance-abs-threshold, default 64
	BalanceRelThreshold  float64 `json:"balance_rel_threshold" yaml:"balance_rel_threshold"`   // --balance-rel-threshold, default 1.5
	EvictionIntervalSecs int     `json:"eviction_interval_secs" yaml:"eviction_interval_secs"` // --eviction-interval-secs, default 120
	// MaxTreeSize is the per-tenant (per-target) character budget of the cache-aware tree
	// (--max-tree-size, default 2^26), sgl-router's meaning.
	MaxTreeSize int `json:"max_tree_size" yaml:"max_tree_size"`
	// MaxTreeTotalChars bounds the characters held by one tree overall
	// (--max-tree-total-chars, default 2^30).
	MaxTreeTotalChars int `json:"max_tree_total_chars" yaml:"max_tree_total_chars"`

	// DP awareness.
	DPAware                    bool   `json:"dp_aware" yaml:"dp_aware"`                                           // --dp-aware
	DPRankFields               string `json:"dp_rank_fields" yaml:"dp_rank_fields"`                               // --dp-rank-fields legacy|routed
	WorkerStartupTimeoutSecs   int    `json:"worker_startup_timeout_secs" yaml:"worker_startup_timeout_secs"`     // default 600
	WorkerStartupCheckInterval int    `json:"worker_startup_check_interval" yaml:"worker_startup_check_interval"` // seconds, default 10

	// Limits and security.
	APIKey             string `json:"api_key" yaml:"api_key"`                           // --api-key; never printed
	RequestTimeoutSecs int    `json:"request_timeout_secs" yaml:"request_timeout_secs"` // default 1800
	MaxPayloadSize     int64  `json:"max_payload_size" yaml:"max_payload_size"`         // bytes, default 512 MiB

	// Retries.
	RetryMaxRetries        int     `json:"retry_max_retries" yaml:"retry_max_retries"`               // total attempts, default 5
	RetryInitialBackoffMs  int     `json:"retry_initial_backoff_ms" yaml:"retry_initial_backoff_ms"` // default 50
	RetryMaxBackoffMs      int     `json:"retry_max_backoff_ms" yaml:"retry_max_backoff_ms"`         // default 30000
	RetryBackoffMultiplier float64 `json:"retry_backoff_multiplier" yaml:"retry_backoff_multiplier"` // default 1.5
	RetryJitterFactor      float64 `json:"retry_jitter_factor" yaml:"retry_jitter_factor"`           // default 0.2
	DisableRetries         bool    `json:"disable_retries" yaml:"disable_retries"`
	// UpstreamIdleTimeoutMs recycles idle upstream connections before SGLang's keep-alive
	// (5 s) closes them (--upstream-idle-timeout-ms, default 3000).
	UpstreamIdleTimeoutMs int `json:"upstream_idle_timeout_ms" yaml:"upstream_idle_timeout_ms"`

	// Circuit breaker.
	CBFailureThreshold    int  `json:"cb_failure_threshold" yaml:"cb_failure_threshold"`         // default 10
	CBSuccessThreshold    int  `json:"cb_success_threshold" yaml:"cb_success_threshold"`         // default 3
	CBTimeoutDurationSecs int  `json:"cb_timeout_duration_secs" yaml:"cb_timeout_duration_secs"` // default 60
	CBWindowDurationSecs  int  `json:"cb_window_duration_secs" yaml:"cb_window_duration_secs"`   // accepted, unused (as in sgl-router)
	DisableCircuitBreaker bool `json:"disable_circuit_breaker" yaml:"disable_circuit_breaker"`

	// Health checks.
	HealthCheckIntervalSecs int    `json:"health_check_interval_secs" yaml:"health_check_interval_secs"` // default 60
	HealthCheckTimeoutSecs  int    `json:"health_check_timeout_secs" yaml:"health_check_timeout_secs"`   // default 5
	HealthFailureThreshold  int    `json:"health_failure_threshold" yaml:"health_failure_threshold"`     // default 3
	HealthSuccessThreshold  int    `json:"health_success_threshold" yaml:"health_success_threshold"`     // default 2
	HealthCheckEndpoint     string `json:"health_check_endpoint" yaml:"health_check_endpoint"`           // default /health

	// Admission.
	MaxConcurrentRequests int `json:"max_concurrent_requests" yaml:"max_concurrent_requests"` // ≤ 0 = no limit (default -1), as sgl-router
	QueueSize             int `json:"queue_size" yaml:"queue_size"`                           // default 100
	QueueTimeoutSecs      int `json:"queue_timeout_secs" yaml:"queue_timeout_secs"`           // default 60
	// ShutdownTimeoutSecs bounds the drain of in-flight requests on SIGTERM (default 30).
	ShutdownTimeoutSecs int `json:"shutdown_timeout_secs" yaml:"shutdown_timeout_secs"`

	// Request ids, CORS.
	RequestIDHeaders   []string `json:"request_id_headers" yaml:"request_id_headers"`
	CORSAllowedOrigins []string `json:"cors_allowed_origins" yaml:"cors_allowed_origins"`

	// Observability.
	PrometheusHost string `json:"prometheus_host" yaml:"prometheus_host"` // default 0.0.0.0
	PrometheusPort int    `json:"prometheus_port" yaml:"prometheus_port"` // default 29000
	LogLevel       string `json:"log_level" yaml:"log_level"`             // debug|info|warn|error, default info
	LogJSON        bool   `json:"log_json" yaml:"log_json"`
	// DecisionLog is a file receiving one JSON line per routed request ("" = off).
	DecisionLog string `json:"decision_log" yaml:"decision_log"`
	// AccessLog is a file receiving one line per HTTP request ("" = off, "-" = stderr).
	AccessLog string `json:"access_log" yaml:"access_log"`

	// Kubernetes service discovery (sgl-router's flags and meanings): pods matching the
	// selectors become workers while they are Running, Ready and have an IP.
	ServiceDiscovery          bool     `json:"service_discovery" yaml:"service_discovery"`                     // --service-discovery
	Selector                  []string `json:"selector" yaml:"selector"`                                       // regular mode: k=v ... (all must match)
	PrefillSelector           []string `json:"prefill_selector" yaml:"prefill_selector"`                       // PD: k=v ... of prefill pods
	DecodeSelector            []string `json:"decode_selector" yaml:"decode_selector"`                         // PD: k=v ... of decode pods
	ServiceDiscoveryPort      int      `json:"service_discovery_port" yaml:"service_discovery_port"`           // worker port on each pod, default 80
	ServiceDiscoveryNamespace string   `json:"service_discovery_namespace" yaml:"service_discovery_namespace"` // "" = all namespaces allowed, else the pod's own
	BootstrapPortAnnotation   string   `json:"bootstrap_port_annotation" yaml:"bootstrap_port_annotation"`     // default sglang.ai/bootstrap-port
	Kubeconfig                string   `json:"kubeconfig" yaml:"kubeconfig"`                                   // "" = $KUBECONFIG, ~/.kube/config, or in-cluster

	// TLS. To workers: https:// URLs verified against CACertPaths (none: the system roots),
	// with a client certificate when both paths are set. To clients: TLSCertPath/TLSKeyPath.
	// Certificate files are re-read when they change.
	ClientCertPath string   `json:"client_cert_path" yaml:"client_cert_path"`
	ClientKeyPath  string   `json:"client_key_path" yaml:"client_key_path"`
	CACertPaths    []string `json:"ca_cert_paths" yaml:"ca_cert_paths"`
	TLSCertPath    string   `json:"tls_cert_path" yaml:"tls_cert_path"`
	TLSKeyPath     string   `json:"tls_key_path" yaml:"tls_key_path"`

	// Seed seeds rooms, rids and the random policies; nil picks a random seed at start.
	Seed *int64 `json:"seed" yaml:"seed"`
}

// DefaultConfig returns sgl-router's defaults (v0.2.2), plus ours (SPEC §2).
func DefaultConfig() Config {
	return Config{
		Host:                       "0.0.0.0",
		Port:                       30000,
		Policy:                     PolicyCacheAware,
		CacheThreshold:             0.3,
		BalanceAbsThreshold:        64,
		BalanceRelThreshold:        1.5,
		EvictionIntervalSecs:       120,
		MaxTreeSize:                1 << 26,
		MaxTreeTotalChars:          1 << 30,
		DPRankFields:               DPRankFieldsLegacy,
		WorkerStartupTimeoutSecs:   600,
		WorkerStartupCheckInterval: 10,
		RequestTimeoutSecs:         1800,
		MaxPayloadSize:             512 << 20,
		RetryMaxRetries:            5,
		RetryInitialBackoffMs:      50,
		RetryMaxBackoffMs:          30000,
		RetryBackoffMultiplier:     1.5,
		RetryJitterFactor:          0.2,
		UpstreamIdleTimeoutMs:      3000,
		CBFailureThreshold:         10,
		CBSuccessThreshold:         3,
		CBTimeoutDurationSecs:      60,
		CBWindowDurationSecs:       120,
		HealthCheckIntervalSecs:    60,
		HealthCheckTimeoutSecs:     5,
		HealthFailureThreshold:     3,
		HealthSuccessThreshold:     2,
		HealthCheckEndpoint:        "/health",
		MaxConcurrentRequests:      -1,
		QueueSize:                  100,
		QueueTimeoutSecs:           60,
		ShutdownTimeoutSecs:        30,
		RequestIDHeaders:           []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		PrometheusHost:             "0.0.0.0",
		PrometheusPort:             29000,
		LogLevel:                   "info",
		ServiceDiscoveryPort:       80,
		BootstrapPortAnnotation:    "sglang.ai/bootstrap-port",
	}
}

// RoutingOnly returns a copy without worker lists, listen addresses or secrets: what
// `sim --write-config` writes, so that `serve --config FILE --prefill … --decode …` adds its
// own workers to tuned settings.
func (c Config) RoutingOnly() Config {
	c.WorkerURLs, c.Prefill, c.Decode = nil, nil, nil
	c.APIKey = ""
	return c
}

// Redacted returns a copy safe to print or log: the API key is masked.
func (c Config) Redacted() Config {
	if c.APIKey != "" {
		c.APIKey = "<redacted>"
	}
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

// Health returns the health-threshold settings as a [HealthConfig].
func (c Config) Health() HealthConfig {
	return HealthConfig{FailureThreshold: c.HealthFailureThreshold, SuccessThreshold: c.HealthSuccessThreshold}
}

// EvictionInterval is EvictionIntervalSecs as a duration.
func (c Config) EvictionInterval() time.Duration {
	return time.Duration(c.EvictionIntervalSecs) * time.Second
}

// SettingError is a setting Validate rejects. Key is its config-file key (cache_threshold),
// Msg the problem, starting with the flag (--cache-threshold 1.7 is outside [0,1]), so a
// command can name where the value came from: the flag, or a settings file's line.
type SettingError struct {
	Key string
	Msg string
	Err error // the wrapped cause, if any
}

func (e *SettingError) Error() string { return "router: " + e.Msg }
func (e *SettingError) Unwrap() error { return e.Err }

func settingErrorf(key, format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	return &SettingError{Key: key, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// flagKey turns a flag (--cache-threshold) into its config-file key (cache_threshold).
func flagKey(flag string) string { return strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_") }

// Validate checks every setting and returns the first problem as a *SettingError naming the
// flag, e.g. "router: --cache-threshold 1.7 is outside [0,1]".
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateMode, c.validatePolicies, c.validateLimits, c.validateReliability, c.validateDiscovery, c.validateTLS} {
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
			return settingErrorf("prefill", "--prefill needs --pd-disaggregation")
		case len(c.Decode) > 0:
			return settingErrorf("decode", "--decode needs --pd-disaggregation")
		case c.PrefillPolicy != "":
			return settingErrorf("prefill_policy", "--prefill-policy needs --pd-disaggregation (use --policy in regular mode)")
		case c.DecodePolicy != "":
			return settingErrorf("decode_policy", "--decode-policy needs --pd-disaggregation (use --policy in regular mode)")
		}
	} else if len(c.WorkerURLs) > 0 {
		return settingErrorf("worker_urls", "--worker-urls is for regular mode; with --pd-disaggregation give --prefill and --decode")
	}
	seen := map[string]string{}
	add := func(flag, u string) error {
		if err := CheckWorkerURL(u); err != nil {
			return settingErrorf(flagKey(flag), "%s: %w", flag, err)
		}
		if prev, ok := seen[u]; ok {
			return settingErrorf(flagKey(flag), "%s %s is already given by %s", flag, u, prev)
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
			return settingErrorf("prefill", "--prefill %s bootstrap port %d is outside [1,65535] (or use none)", p.URL, *p.BootstrapPort)
		}
	}
	for _, u := range c.Decode {
		if err := add("--decode", u); err != nil {
			return err
		}
	}
	if c.DPRankFields != DPRankFieldsLegacy && c.DPRankFields != DPRankFieldsRouted {
		return settingErrorf("dp_rank_fields", "--dp-rank-fields %q is not legacy or routed", c.DPRankFields)
	}
	return nil
}

func (c Config) validatePolicies() error {
	for _, p := range []struct{ flag, v string }{{"--policy", c.Policy}, {"--prefill-policy", c.PrefillPolicy}, {"--decode-policy", c.DecodePolicy}} {
		if p.v == "" && p.flag != "--policy" {
			continue
		}
		if !validPolicy(p.v) {
			return settingErrorf(flagKey(p.flag), "%s %q is not one of %s", p.flag, p.v, strings.Join(PolicyNames, ", "))
		}
	}
	switch {
	case !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1):
		return settingErrorf("cache_threshold", "--cache-threshold %g is outside [0,1]", c.CacheThreshold)
	case c.BalanceAbsThreshold < 0:
		return settingErrorf("balance_abs_threshold", "--balance-abs-threshold %d must be ≥ 0", c.BalanceAbsThreshold)
	case !(c.BalanceRelThreshold >= 0):
		return settingErrorf("balance_rel_threshold", "--balance-rel-threshold %g must be ≥ 0", c.BalanceRelThreshold)
	case c.EvictionIntervalSecs < 1:
		return settingErrorf("eviction_interval_secs", "--eviction-interval-secs %d must be ≥ 1", c.EvictionIntervalSecs)
	case c.MaxTreeSize < 1:
		return settingErrorf("max_tree_size", "--max-tree-size %d must be ≥ 1", c.MaxTreeSize)
	case c.MaxTreeTotalChars < 1:
		return settingErrorf("max_tree_total_chars", "--max-tree-total-chars %d must be ≥ 1", c.MaxTreeTotalChars)
	}
	return nil
}

func (c Config) validateLimits() error {
	switch {
	case c.Port < 0 || c.Port > 65535:
		return settingErrorf("port", "--port %d is outside [0,65535]", c.Port)
	case c.PrometheusPort < 0 || c.PrometheusPort > 65535:
		return settingErrorf("prometheus_port", "--prometheus-port %d is outside [0,65535]", c.PrometheusPort)
	case c.WorkerStartupTimeoutSecs < 0:
		return settingErrorf("worker_startup_timeout_secs", "--worker-startup-timeout-secs %d must be ≥ 0", c.WorkerStartupTimeoutSecs)
	case c.WorkerStartupCheckInterval < 1:
		return settingErrorf("worker_startup_check_interval", "--worker-startup-check-interval %d must be ≥ 1", c.WorkerStartupCheckInterval)
	case c.RequestTimeoutSecs < 1:
		return settingErrorf("request_timeout_secs", "--request-timeout-secs %d must be ≥ 1", c.RequestTimeoutSecs)
	case c.MaxPayloadSize < 1:
		return settingErrorf("max_payload_size", "--max-payload-size %d must be ≥ 1", c.MaxPayloadSize)
	case c.QueueSize < 0:
		return settingErrorf("queue_size", "--queue-size %d must be ≥ 0", c.QueueSize)
	case c.QueueTimeoutSecs < 1:
		return settingErrorf("queue_timeout_secs", "--queue-timeout-secs %d must be ≥ 1", c.QueueTimeoutSecs)
	case c.ShutdownTimeoutSecs < 0:
		return settingErrorf("shutdown_timeout_secs", "--shutdown-timeout-secs %d must be ≥ 0", c.ShutdownTimeoutSecs)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "warning", "error":
	default:
		return settingErrorf("log_level", "--log-level %q is not debug, info, warn or error", c.LogLevel)
	}
	for _, h := range c.RequestIDHeaders {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\t") {
			return settingErrorf("request_id_headers", "--request-id-headers %q is not a header name", h)
		}
	}
	return nil
}

func (c Config) validateReliability() error {
	switch {
	case c.RetryMaxRetries < 1:
		return settingErrorf("retry_max_retries", "--retry-max-retries %d must be ≥ 1 (it counts attempts, the first included)", c.RetryMaxRetries)
	case c.RetryInitialBackoffMs < 0:
		return settingErrorf("retry_initial_backoff_ms", "--retry-initial-backoff-ms %d must be ≥ 0", c.RetryInitialBackoffMs)
	case c.RetryMaxBackoffMs < c.RetryInitialBackoffMs:
		return settingErrorf("retry_max_backoff_ms", "--retry-max-backoff-ms %d is below --retry-initial-backoff-ms %d", c.RetryMaxBackoffMs, c.RetryInitialBackoffMs)
	case !(c.RetryBackoffMultiplier >= 1):
		return settingErrorf("retry_backoff_multiplier", "--retry-backoff-multiplier %g must be ≥ 1", c.RetryBackoffMultiplier)
	case !(c.RetryJitterFactor >= 0 && c.RetryJitterFactor <= 1):
		return settingErrorf("retry_jitter_factor", "--retry-jitter-factor %g is outside [0,1]", c.RetryJitterFactor)
	case c.UpstreamIdleTimeoutMs < 0:
		return settingErrorf("upstream_idle_timeout_ms", "--upstream-idle-timeout-ms %d must be ≥ 0", c.UpstreamIdleTimeoutMs)
	case c.CBFailureThreshold < 1:
		return settingErrorf("cb_failure_threshold", "--cb-failure-threshold %d must be ≥ 1", c.CBFailureThreshold)
	case c.CBSuccessThreshold < 1:
		return settingErrorf("cb_success_threshold", "--cb-success-threshold %d must be ≥ 1", c.CBSuccessThreshold)
	case c.CBTimeoutDurationSecs < 1:
		return settingErrorf("cb_timeout_duration_secs", "--cb-timeout-duration-secs %d must be ≥ 1", c.CBTimeoutDurationSecs)
	case c.HealthCheckIntervalSecs < 1:
		return settingErrorf("health_check_interval_secs", "--health-check-interval-secs %d must be ≥ 1", c.HealthCheckIntervalSecs)
	case c.HealthCheckTimeoutSecs < 1:
		return settingErrorf("health_check_timeout_secs", "--health-check-timeout-secs %d must be ≥ 1", c.HealthCheckTimeoutSecs)
	case c.HealthFailureThreshold < 1:
		return settingErrorf("health_failure_threshold", "--health-failure-threshold %d must be ≥ 1", c.HealthFailureThreshold)
	case c.HealthSuccessThreshold < 1:
		return settingErrorf("health_success_threshold", "--health-success-threshold %d must be ≥ 1", c.HealthSuccessThreshold)
	case !strings.HasPrefix(c.HealthCheckEndpoint, "/"):
		return settingErrorf("health_check_endpoint", "--health-check-endpoint %q must start with /", c.HealthCheckEndpoint)
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
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("worker URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("worker URL %q must start with http:// or https://", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("worker URL %q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("worker URL %q must not have a query or fragment", raw)
	}
	return nil
}

func (c Config) validateDiscovery() error {
	sels := []struct {
		flag string
		kvs  []string
	}{{"--selector", c.Selector}, {"--prefill-selector", c.PrefillSelector}, {"--decode-selector", c.DecodeSelector}}
	for _, sel := range sels {
		for _, kv := range sel.kvs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsAny(k+v, " ,!()") {
				return settingErrorf(flagKey(sel.flag), "%s %q is not a label key=value", sel.flag, kv)
			}
		}
	}
	if !c.ServiceDiscovery {
		for _, sel := range sels {
			if len(sel.kvs) > 0 {
				return settingErrorf(flagKey(sel.flag), "%s needs --service-discovery", sel.flag)
			}
		}
		return nil
	}
	switch {
	case c.ServiceDiscoveryPort < 1 || c.ServiceDiscoveryPort > 65535:
		return settingErrorf("service_discovery_port", "--service-discovery-port %d is outside [1,65535]", c.ServiceDiscoveryPort)
	case c.BootstrapPortAnnotation == "":
		return settingErrorf("bootstrap_port_annotation", "--bootstrap-port-annotation is empty")
	case c.PDDisaggregation && (len(c.PrefillSelector) == 0 || len(c.DecodeSelector) == 0):
		return settingErrorf("prefill_selector", "--service-discovery with --pd-disaggregation needs --prefill-selector and --decode-selector (k=v ...)")
	case c.PDDisaggregation && len(c.Selector) > 0:
		return settingErrorf("selector", "--selector is for regular mode; with --pd-disaggregation give --prefill-selector and --decode-selector")
	case !c.PDDisaggregation && len(c.Selector) == 0:
		return settingErrorf("selector", "--service-discovery needs --selector k=v ... (the labels of the worker pods)")
	case !c.PDDisaggregation && (len(c.PrefillSelector) > 0 || len(c.DecodeSelector) > 0):
		return settingErrorf("prefill_selector", "--prefill-selector and --decode-selector need --pd-disaggregation")
	}
	return nil
}

func (c Config) validateTLS() error {
	switch {
	case (c.ClientCertPath == "") != (c.ClientKeyPath == ""):
		return settingErrorf("client_cert_path", "--client-cert-path and --client-key-path go together (got only one)")
	case (c.TLSCertPath == "") != (c.TLSKeyPath == ""):
		return settingErrorf("tls_cert_path", "--tls-cert-path and --tls-key-path go together (got only one)")
	}
	return nil
}

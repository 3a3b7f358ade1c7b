package server

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/router"
)

// Config holds every setting of `router serve` (SPEC §2), under the sgl-router names: the
// routing settings ([router.Config], embedded, so cfg.Policy reads through) and those of the
// live HTTP server — listeners, API key, limits, admission, logging, Kubernetes service
// discovery, TLS. It is the file format of `serve --config` (and `sim --config` reads the
// same files, keeping only the routing settings): one flat mapping of snake_case keys, the
// embedded settings inline in YAML and JSON alike.
//
// The fields are declared in the order they print (serve --print-config, /get_router_config)
// and serve --help lists them: the listener, then the routing settings in router.Config's own
// order, then the server's. encoding/json and YAML both write an embedded struct's fields in
// its place, so no code orders them. A help tag holds each setting's --help text. Build it
// with [DefaultConfig] and check it with [Config.Validate].
type Config struct {
	// Listener.
	Host string `json:"host" yaml:"host" help:"address to listen on"` // default 0.0.0.0
	Port int    `json:"port" yaml:"port" help:"port to listen on"`    // default 30000

	router.Config `yaml:",inline"`

	// WorkerURLAllow, when non-empty, restricts worker URLs added at run time to these hosts
	// or CIDRs (--worker-url-allow).
	WorkerURLAllow []string `json:"worker_url_allow" yaml:"worker_url_allow" help:"hosts or CIDRs that workers added at run time must match (empty: any)"`

	// Worker startup (dp_size discovery of a starting worker).
	WorkerStartupTimeoutSecs   int `json:"worker_startup_timeout_secs" yaml:"worker_startup_timeout_secs" help:"seconds to keep retrying discovery of a starting worker"`     // default 600
	WorkerStartupCheckInterval int `json:"worker_startup_check_interval" yaml:"worker_startup_check_interval" help:"seconds between discovery attempts of a starting worker"` // seconds, default 10

	// Limits and security.
	APIKey             string `json:"api_key" yaml:"api_key" help:"require Authorization: Bearer KEY on inference and admin routes (never logged)"`    // never printed
	RequestTimeoutSecs int    `json:"request_timeout_secs" yaml:"request_timeout_secs" help:"upper bound on one request, stream included, in seconds"` // default 1800
	MaxPayloadSize     int64  `json:"max_payload_size" yaml:"max_payload_size" help:"largest accepted request body in bytes (larger: 413)"`            // bytes, default 512 MiB
	// BodyReadTimeoutSecs bounds the reading of one request body once its headers arrived
	// (--body-read-timeout-secs, default 60): a client trickling or stalling is answered 408
	// and its connection closed, instead of holding a connection and a goroutine.
	BodyReadTimeoutSecs int `json:"body_read_timeout_secs" yaml:"body_read_timeout_secs" help:"seconds a client has to send a request body once its headers arrived (then 408 and the connection closes)"`
	// MaxBatchSize caps the elements of one batch request (--max-batch-size, default 1024):
	// a generate text or input_ids list, a completions prompt list, chat n. Each element
	// becomes its own rid and bootstrap room on both PD legs, so a small body of a million
	// empty prompts would otherwise cost the router and both workers in proportion.
	MaxBatchSize int `json:"max_batch_size" yaml:"max_batch_size" help:"largest batch in one request: elements of a generate text or input_ids list, a completions prompt list, chat n (larger: 400)"`
	// BodyMemoryBudget bounds the bytes of request bodies and held worker replies in flight
	// across all requests (--body-memory-budget); a request that would go over it is answered
	// 503 with Retry-After. 0 (the default) means a quarter of the container's memory limit
	// (cgroup), or 2 GiB when there is none.
	BodyMemoryBudget int64 `json:"body_memory_budget" yaml:"body_memory_budget" help:"bytes of request bodies and held replies in flight across all requests (over it: 503 with Retry-After); 0: a quarter of the container's memory limit, or 2 GiB without one"`
	// GCMinHeap is the heap size below which the Go collector does not run
	// (--gc-min-heap, default 32 MiB; 0: Go's own pacing): serve raises GOGC while what is live
	// is under half of it and leaves Go's default (100) above, so it costs at most this much
	// more memory, and a large live heap (the cache-aware trees) is paced as Go paces it. A
	// proxy's live heap is a few MiB, which Go's default collects every 2 MiB allocated
	// (about 300 PD requests): under load those collections were much of the added TTFT tail
	// at an open loop of 1,000 req/s, though not all of it on a quiet machine
	// (docs/performance.md). GOGC, when set, wins.
	GCMinHeap int64 `json:"gc_min_heap" yaml:"gc_min_heap" help:"bytes the Go heap may grow to before a collection while little of it is live (fewer collections, a shorter latency tail; Go's default pacing, GOGC=100, once half of it is live); 0: Go's default throughout; GOGC, when set, wins"`
	// MaxConnections caps the client connections open at once (--max-connections, default
	// 10000); a connection over it is closed as soon as it is accepted. 0 means no cap.
	MaxConnections int `json:"max_connections" yaml:"max_connections" help:"client connections open at once; one over the cap is closed on accept (0: no cap)"`
	// UpstreamIdleTimeoutMs recycles idle upstream connections before SGLang's keep-alive
	// (5 s) closes them (--upstream-idle-timeout-ms, default 3000).
	UpstreamIdleTimeoutMs int `json:"upstream_idle_timeout_ms" yaml:"upstream_idle_timeout_ms" help:"close idle upstream connections after this many ms (keep it below the workers' keep-alive)"`
	// LoadPollIntervalMs is how often each worker's engine load is read (GET /v1/loads, else
	// its sglang gauges) for the policies (--load-poll-interval-ms, default 500; 0: never).
	// The simulated gain of reports is the same from 10 ms to 1 s (docs/engine-load.md, report
	// age), while a poll costs the router about as much CPU as half a proxied request: at
	// 100 ms, 64 workers' polls added 10–12 % CPU per request (BenchmarkLoadPolling).
	LoadPollIntervalMs int `json:"load_poll_interval_ms" yaml:"load_poll_interval_ms" help:"read each worker's engine load (GET /v1/loads, else its sglang gauges on /metrics) every this many ms, for the policies; 0: never (they use in-flight counts)"`

	// LatencyProfile, LatencyPrefillProfile and LatencyDecodeProfile name the engine model
	// predicted_latency predicts with (cmd/router resolves them into Options.LatencyModels: a
	// preset as `router fakeworker profiles` lists them, or a profile file such as `router sim
	// calibrate` writes), as `router sim --profile` names the simulated servers'.
	LatencyProfile        string `json:"latency_profile" yaml:"latency_profile" help:"predicted_latency: the workers' engine model, as router sim --profile takes it: a preset (router fakeworker profiles lists them) or a profile file (YAML/JSON, e.g. from router sim calibrate); needed with --policy predicted_latency"`
	LatencyPrefillProfile string `json:"latency_prefill_profile" yaml:"latency_prefill_profile" help:"predicted_latency: the prefill workers' engine model (default --latency-profile)"`
	LatencyDecodeProfile  string `json:"latency_decode_profile" yaml:"latency_decode_profile" help:"predicted_latency: the decode workers' engine model (default --latency-profile)"`

	// Tenants (the admission settings are router.Config's): which header names a request's
	// tenant, as smg's flags. Without it, a request's Bearer API key does (hashed), else it is
	// anonymous.
	TrustTenantHeader bool   `json:"trust_tenant_header" yaml:"trust_tenant_header" help:"a request's tenant is the value of --tenant-header-name when it has one (set by a gateway you trust; before the API key)"`
	TenantHeaderName  string `json:"tenant_header_name" yaml:"tenant_header_name" help:"the header naming a request's tenant, with --trust-tenant-header"` // default x-smg-tenant-id, as smg
	// ShutdownTimeoutSecs bounds the drain of in-flight requests on SIGTERM (default 30).
	ShutdownTimeoutSecs int `json:"shutdown_timeout_secs" yaml:"shutdown_timeout_secs" help:"seconds to drain in-flight requests on SIGTERM"`
	// ShutdownDelaySecs keeps the listener accepting for this long after SIGTERM, with
	// /readiness answering 503 and keep-alives off, before the drain begins (default 0: drain
	// at once, as sgl-router): the time a load balancer (a Kubernetes Service's endpoints)
	// needs to stop sending new connections. The pod's grace period must exceed it plus
	// shutdown_timeout_secs.
	ShutdownDelaySecs int `json:"shutdown_delay_secs" yaml:"shutdown_delay_secs" help:"seconds to keep accepting after SIGTERM, /readiness failing, before the drain (for a load balancer to stop sending)"`

	// Request ids, CORS.
	RequestIDHeaders   []string `json:"request_id_headers" yaml:"request_id_headers" help:"headers whose first present value is the request id (space-separated or repeated)"`
	RoutingKeyFields   []string `json:"routing_key_fields" yaml:"routing_key_fields" help:"consistent_hashing, manual: request body fields whose first present value (a string or number) is the routing key when no routing-key header is sent, e.g. user (OpenAI's) or session_id; a dotted path reaches into objects (metadata.session_id); space-separated or repeated"`
	RoutingKeyHeaders  []string `json:"routing_key_headers" yaml:"routing_key_headers" help:"consistent_hashing: headers whose first present value is a request's routing key, read before X-SMG-Routing-Key (always read, as smg does); space-separated or repeated"`
	CORSAllowedOrigins []string `json:"cors_allowed_origins" yaml:"cors_allowed_origins" help:"allowed CORS origins (space-separated or repeated; empty: any)"`

	// Observability.
	PrometheusHost string `json:"prometheus_host" yaml:"prometheus_host" help:"address of the Prometheus /metrics listener"` // default 0.0.0.0
	PrometheusPort int    `json:"prometheus_port" yaml:"prometheus_port" help:"port of the Prometheus /metrics listener"`    // default 29000
	LogLevel       string `json:"log_level" yaml:"log_level" help:"debug, info, warn or error"`                              // debug|info|warn|error, default info
	LogJSON        bool   `json:"log_json" yaml:"log_json" help:"log JSON lines instead of text"`
	// DecisionLog is a file receiving one JSON line per routing decision ("" = off), the
	// format `router sim --decision-log` writes; serve opens it and hands the server the
	// writer (Options.DecisionLog).
	DecisionLog string `json:"decision_log" yaml:"decision_log"`
	// AccessLog is a file receiving one line per HTTP request ("" = off, "-" = stderr).
	AccessLog string `json:"access_log" yaml:"access_log" help:"file receiving one line per HTTP request (- for stderr)"`
	// OpenTelemetry tracing (smg's --enable-trace and --otlp-traces-endpoint; tracing.go):
	// off by default. The exporter speaks OTLP/HTTP (protobuf), so the endpoint is the
	// collector's OTLP/HTTP port (4318), not smg's OTLP/gRPC one (4317).
	EnableTrace        bool    `json:"enable_trace" yaml:"enable_trace" help:"export OpenTelemetry spans (a span per request, one per upstream leg and attempt) over OTLP/HTTP, and send W3C traceparent to the workers"`
	OTLPTracesEndpoint string  `json:"otlp_traces_endpoint" yaml:"otlp_traces_endpoint" help:"with --enable-trace: the collector's OTLP/HTTP receiver, host:port (plain HTTP, path /v1/traces) or a full http(s):// URL"`
	TraceSamplingRatio float64 `json:"trace_sampling_ratio" yaml:"trace_sampling_ratio" help:"with --enable-trace: share of the requests that come without a traceparent that are traced, in [0,1]; one that comes with a traceparent follows its sampled flag"`
	TraceServiceName   string  `json:"trace_service_name" yaml:"trace_service_name" help:"with --enable-trace: the spans' service.name (empty: $OTEL_SERVICE_NAME, else pdrouter)"`

	// Kubernetes service discovery (sgl-router's flags and meanings): pods matching the
	// selectors become workers while they are Running, Ready and have an IP.
	ServiceDiscovery          bool     `json:"service_discovery" yaml:"service_discovery" help:"find workers among Kubernetes pods (Running, Ready, with an IP) by label; combines with static workers"`
	Selector                  []string `json:"selector" yaml:"selector" help:"service discovery, regular mode: labels k=v ... worker pods carry (all must match)"`                                                            // regular mode: k=v ... (all must match)
	PrefillSelector           []string `json:"prefill_selector" yaml:"prefill_selector" help:"service discovery, PD: labels k=v ... of prefill pods"`                                                                         // PD: k=v ... of prefill pods
	DecodeSelector            []string `json:"decode_selector" yaml:"decode_selector" help:"service discovery, PD: labels k=v ... of decode pods"`                                                                            // PD: k=v ... of decode pods
	ServiceDiscoveryPort      int      `json:"service_discovery_port" yaml:"service_discovery_port" help:"service discovery: the port workers listen on in each pod (URL http://POD_IP:PORT)"`                                // worker port on each pod, default 80
	ServiceDiscoveryNamespace string   `json:"service_discovery_namespace" yaml:"service_discovery_namespace" help:"service discovery: namespace to watch (empty: all namespaces if RBAC allows, else the router pod's own)"` // "" = all namespaces allowed, else the pod's own
	BootstrapPortAnnotation   string   `json:"bootstrap_port_annotation" yaml:"bootstrap_port_annotation" help:"service discovery: pod annotation holding a prefill pod's bootstrap port (absent: null)"`                     // default sglang.ai/bootstrap-port
	Kubeconfig                string   `json:"kubeconfig" yaml:"kubeconfig" help:"service discovery: kubeconfig file (empty: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)"`                                // "" = $KUBECONFIG, ~/.kube/config, or in-cluster

	// Precise prefix-cache routing (cache_aware on SGLang's KV events, as SGLang's own router
	// does per worker): the router tokenizes each request as the workers do and matches its
	// block hashes against the blocks each worker's events say it holds; workers without an
	// event feed keep the approximate tree.
	KVEvents       string `json:"kv_events" yaml:"kv_events" help:"auto: cache_aware subscribes to the KV events of every worker whose /server_info advertises kv_events, or of all workers when --kv-events-config is given; off: the approximate tree only"`
	KVEventsConfig string `json:"kv_events_config" yaml:"kv_events_config" help:"the workers' own --kv-events-config JSON (SGLang's), for workers whose /server_info does not advertise kv_events: each rank publishes on the endpoint's port + rank at the worker's host"`
	ModelPath      string `json:"model_path" yaml:"model_path" help:"model directory whose tokenizer.json, tokenizer_config.json and chat template the router uses to tokenize requests (--tokenizer-path overrides)"`
	TokenizerPath  string `json:"tokenizer_path" yaml:"tokenizer_path" help:"tokenizer.json, or a directory holding it and tokenizer_config.json: text and chat requests are tokenized as the workers do, for KV-event routing (input_ids requests need none)"`
	ChatTemplate   string `json:"chat_template" yaml:"chat_template" help:"Jinja chat template file replacing the tokenizer's own, as the workers' --chat-template"`
	BlockSize      int    `json:"block_size" yaml:"block_size" help:"tokens per KV block (the workers' --page-size) until a worker's /server_info or events tell"` // default 16, as SGLang's router
	// KVEventsWarmupSecs bounds how long /readiness fails while the index catches up: until
	// every publishing worker's subscription has received a batch (or its replay), at most
	// this long after start — a new replica then routes on what it has learnt (default 10).
	KVEventsWarmupSecs int `json:"kv_events_warmup_secs" yaml:"kv_events_warmup_secs" help:"at most this many seconds after start /readiness fails while the KV-event index catches up (every publishing worker heard from); 0: ready at once"`

	// TLS. To workers: https:// URLs verified against CACertPaths (none: the system roots),
	// with a client certificate when both paths are set. To clients: TLSCertPath/TLSKeyPath.
	// Certificate files are re-read when they change.
	ClientCertPath string   `json:"client_cert_path" yaml:"client_cert_path" help:"TLS to workers: client certificate (PEM) presented to https:// workers; re-read when it changes"`
	ClientKeyPath  string   `json:"client_key_path" yaml:"client_key_path" help:"TLS to workers: the client certificate's private key (PEM)"`
	CACertPaths    []string `json:"ca_cert_paths" yaml:"ca_cert_paths" help:"TLS to workers: CA bundles (PEM) that https:// workers' certificates must chain to (empty: system roots)"`
	TLSCertPath    string   `json:"tls_cert_path" yaml:"tls_cert_path" help:"serve HTTPS with this certificate (PEM); re-read when it changes"`
	TLSKeyPath     string   `json:"tls_key_path" yaml:"tls_key_path" help:"serve HTTPS: the certificate's private key (PEM)"`
}

// DefaultConfig returns sgl-router's defaults (v0.2.2), plus ours (SPEC §2): the routing
// defaults of [router.DefaultConfig] and the server's.
func DefaultConfig() Config {
	return Config{
		Config:                     router.DefaultConfig(),
		Host:                       "0.0.0.0",
		Port:                       30000,
		WorkerStartupTimeoutSecs:   600,
		WorkerStartupCheckInterval: 10,
		RequestTimeoutSecs:         1800,
		MaxPayloadSize:             512 << 20,
		BodyReadTimeoutSecs:        60,
		MaxBatchSize:               1024,
		MaxConnections:             10000,
		GCMinHeap:                  32 << 20,
		UpstreamIdleTimeoutMs:      3000,
		LoadPollIntervalMs:         500,
		TenantHeaderName:           "x-smg-tenant-id",
		ShutdownTimeoutSecs:        30,
		RequestIDHeaders:           []string{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"},
		PrometheusHost:             "0.0.0.0",
		PrometheusPort:             29000,
		LogLevel:                   "info",
		ServiceDiscoveryPort:       80,
		BootstrapPortAnnotation:    "sglang.ai/bootstrap-port",
		KVEvents:                   "auto",
		BlockSize:                  16,
		KVEventsWarmupSecs:         10,
		OTLPTracesEndpoint:         "localhost:4318",
		TraceSamplingRatio:         1,
	}
}

// seed returns the Seed setting, or a random non-negative seed when it is nil (serve without
// --seed: fresh rooms and rids per process).
func (c Config) seed() int64 {
	if c.Seed != nil {
		return *c.Seed
	}
	return rand.Int64()
}

// requestIDKeys returns RequestIDHeaders in canonical form (net/http's header map keys), once,
// for New: looking a lowercase name up with Header.Get canonicalises it again on every request
// (an allocation each).
func (c Config) requestIDKeys() []string { return canonicalKeys(c.RequestIDHeaders) }

// canonicalKeys returns header names in canonical form, each once.
func canonicalKeys(names []string) []string {
	keys := make([]string, 0, len(names))
	for _, h := range names {
		k := http.CanonicalHeaderKey(strings.TrimSpace(h))
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// Redacted returns a copy safe to print or log (serve --print-config, /get_router_config,
// which `router bench` records): the API key is masked and the worker URLs (worker_urls,
// prefill, decode) lose their credentials, user name included ([router.RedactURL]). The
// copy shares nothing with c.
func (c Config) Redacted() Config {
	if c.APIKey != "" {
		c.APIKey = "<redacted>"
	}
	redact := func(urls []string) []string {
		if urls == nil {
			return nil
		}
		out := make([]string, len(urls))
		for i, u := range urls {
			out[i] = router.RedactURL(u)
		}
		return out
	}
	c.WorkerURLs, c.Decode = redact(c.WorkerURLs), redact(c.Decode)
	if c.Prefill != nil {
		p := make([]router.PrefillWorker, len(c.Prefill))
		for i, w := range c.Prefill {
			w.URL = router.RedactURL(w.URL)
			p[i] = w
		}
		c.Prefill = p
	}
	return c
}

// Validate checks every setting, the routing ones first ([router.Config.Validate]), and
// returns the first problem as a *router.SettingError naming the flag, e.g.
// "router: --port 70000 is outside [0,65535]".
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	for _, check := range []func() error{c.validateLimits, c.validateDiscovery, c.validateTLS, c.validateKVEvents, c.validateTrace} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateLimits() error {
	switch {
	case c.Port < 0 || c.Port > 65535:
		return router.SettingErrorf("port", "--port %d is outside [0,65535]", c.Port)
	case c.PrometheusPort < 0 || c.PrometheusPort > 65535:
		return router.SettingErrorf("prometheus_port", "--prometheus-port %d is outside [0,65535]", c.PrometheusPort)
	case c.WorkerStartupTimeoutSecs < 0:
		return router.SettingErrorf("worker_startup_timeout_secs", "--worker-startup-timeout-secs %d must be ≥ 0", c.WorkerStartupTimeoutSecs)
	case c.WorkerStartupCheckInterval < 1:
		return router.SettingErrorf("worker_startup_check_interval", "--worker-startup-check-interval %d must be ≥ 1", c.WorkerStartupCheckInterval)
	case c.RequestTimeoutSecs < 1:
		return router.SettingErrorf("request_timeout_secs", "--request-timeout-secs %d must be ≥ 1", c.RequestTimeoutSecs)
	case c.MaxPayloadSize < 1:
		return router.SettingErrorf("max_payload_size", "--max-payload-size %d must be ≥ 1", c.MaxPayloadSize)
	case c.ShutdownTimeoutSecs < 0:
		return router.SettingErrorf("shutdown_timeout_secs", "--shutdown-timeout-secs %d must be ≥ 0", c.ShutdownTimeoutSecs)
	case c.ShutdownDelaySecs < 0:
		return router.SettingErrorf("shutdown_delay_secs", "--shutdown-delay-secs %d must be ≥ 0", c.ShutdownDelaySecs)
	}
	switch {
	case c.BodyReadTimeoutSecs < 1:
		return router.SettingErrorf("body_read_timeout_secs", "--body-read-timeout-secs %d must be ≥ 1", c.BodyReadTimeoutSecs)
	case c.MaxBatchSize < 1:
		return router.SettingErrorf("max_batch_size", "--max-batch-size %d must be ≥ 1", c.MaxBatchSize)
	case c.BodyMemoryBudget < 0:
		return router.SettingErrorf("body_memory_budget", "--body-memory-budget %d must be ≥ 0 (0: from the container's memory limit)", c.BodyMemoryBudget)
	case c.MaxConnections < 0:
		return router.SettingErrorf("max_connections", "--max-connections %d must be ≥ 0 (0: no cap)", c.MaxConnections)
	case c.GCMinHeap < 0:
		return router.SettingErrorf("gc_min_heap", "--gc-min-heap %d must be ≥ 0 (0: Go's default pacing)", c.GCMinHeap)
	}
	if c.UpstreamIdleTimeoutMs < 0 {
		return router.SettingErrorf("upstream_idle_timeout_ms", "--upstream-idle-timeout-ms %d must be ≥ 0", c.UpstreamIdleTimeoutMs)
	}
	if c.LoadPollIntervalMs < 0 {
		return router.SettingErrorf("load_poll_interval_ms", "--load-poll-interval-ms %d must be ≥ 0 (0: never)", c.LoadPollIntervalMs)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "warning", "error":
	default:
		return router.SettingErrorf("log_level", "--log-level %q is not debug, info, warn or error", c.LogLevel)
	}
	if c.TrustTenantHeader && (strings.TrimSpace(c.TenantHeaderName) == "" || strings.ContainsAny(c.TenantHeaderName, " :\t")) {
		return router.SettingErrorf("tenant_header_name", "--tenant-header-name %q is not a header name", c.TenantHeaderName)
	}
	for _, h := range c.RequestIDHeaders {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\t") {
			return router.SettingErrorf("request_id_headers", "--request-id-headers %q is not a header name", h)
		}
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
				return router.SettingErrorf(router.FlagKey(sel.flag), "%s %q is not a label key=value", sel.flag, kv)
			}
		}
	}
	if !c.ServiceDiscovery {
		for _, sel := range sels {
			if len(sel.kvs) > 0 {
				return router.SettingErrorf(router.FlagKey(sel.flag), "%s needs --service-discovery", sel.flag)
			}
		}
		return nil
	}
	switch {
	case c.ServiceDiscoveryPort < 1 || c.ServiceDiscoveryPort > 65535:
		return router.SettingErrorf("service_discovery_port", "--service-discovery-port %d is outside [1,65535]", c.ServiceDiscoveryPort)
	case c.BootstrapPortAnnotation == "":
		return router.SettingErrorf("bootstrap_port_annotation", "--bootstrap-port-annotation is empty")
	case c.PDDisaggregation && (len(c.PrefillSelector) == 0 || len(c.DecodeSelector) == 0):
		return router.SettingErrorf("prefill_selector", "--service-discovery with --pd-disaggregation needs --prefill-selector and --decode-selector (k=v ...)")
	case c.PDDisaggregation && len(c.Selector) > 0:
		return router.SettingErrorf("selector", "--selector is for regular mode; with --pd-disaggregation give --prefill-selector and --decode-selector")
	case !c.PDDisaggregation && len(c.Selector) == 0:
		return router.SettingErrorf("selector", "--service-discovery needs --selector k=v ... (the labels of the worker pods)")
	case !c.PDDisaggregation && (len(c.PrefillSelector) > 0 || len(c.DecodeSelector) > 0):
		return router.SettingErrorf("prefill_selector", "--prefill-selector and --decode-selector need --pd-disaggregation")
	}
	return nil
}

func (c Config) validateTLS() error {
	switch {
	case (c.ClientCertPath == "") != (c.ClientKeyPath == ""):
		return router.SettingErrorf("client_cert_path", "--client-cert-path and --client-key-path go together (got only one)")
	case (c.TLSCertPath == "") != (c.TLSKeyPath == ""):
		return router.SettingErrorf("tls_cert_path", "--tls-cert-path and --tls-key-path go together (got only one)")
	}
	return nil
}

func (c Config) validateKVEvents() error {
	switch {
	case c.KVEvents != "auto" && c.KVEvents != "off":
		return router.SettingErrorf("kv_events", "--kv-events %q is not auto or off", c.KVEvents)
	case c.KVEventsWarmupSecs < 0:
		return router.SettingErrorf("kv_events_warmup_secs", "--kv-events-warmup-secs %d must be ≥ 0", c.KVEventsWarmupSecs)
	case c.BlockSize < 1:
		return router.SettingErrorf("block_size", "--block-size %d must be ≥ 1 (the workers' --page-size)", c.BlockSize)
	case c.KVEventsConfig != "" && !json.Valid([]byte(c.KVEventsConfig)):
		return router.SettingErrorf("kv_events_config", "--kv-events-config is not JSON (want SGLang's form, e.g. '{\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\"}')")
	}
	return nil
}

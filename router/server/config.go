package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"github.com/pdrouter/pdrouter/router"
)

// Config holds every setting of `router serve` (SPEC §2), under the sgl-router names: the
// routing settings ([router.Config], embedded, so cfg.Policy reads through) and those of the
// live HTTP server — listeners, API key, limits, admission, logging, Kubernetes service
// discovery, TLS. It is the file format of `serve --config` (and `sim --config` reads the
// same files, keeping only the routing settings): one flat mapping of snake_case keys, the
// embedded settings inline in YAML and JSON alike. Build it with [DefaultConfig] and check
// it with [Config.Validate].
type Config struct {
	router.Config `yaml:",inline"`

	// Listener.
	Host string `json:"host" yaml:"host"` // --host, default 0.0.0.0
	Port int    `json:"port" yaml:"port"` // --port, default 30000

	// WorkerURLAllow, when non-empty, restricts worker URLs added at run time to these hosts
	// or CIDRs (--worker-url-allow).
	WorkerURLAllow []string `json:"worker_url_allow" yaml:"worker_url_allow"`

	// Worker startup (dp_size discovery of a starting worker).
	WorkerStartupTimeoutSecs   int `json:"worker_startup_timeout_secs" yaml:"worker_startup_timeout_secs"`     // default 600
	WorkerStartupCheckInterval int `json:"worker_startup_check_interval" yaml:"worker_startup_check_interval"` // seconds, default 10

	// Limits and security.
	APIKey             string `json:"api_key" yaml:"api_key"`                           // --api-key; never printed
	RequestTimeoutSecs int    `json:"request_timeout_secs" yaml:"request_timeout_secs"` // default 1800
	MaxPayloadSize     int64  `json:"max_payload_size" yaml:"max_payload_size"`         // bytes, default 512 MiB
	// UpstreamIdleTimeoutMs recycles idle upstream connections before SGLang's keep-alive
	// (5 s) closes them (--upstream-idle-timeout-ms, default 3000).
	UpstreamIdleTimeoutMs int `json:"upstream_idle_timeout_ms" yaml:"upstream_idle_timeout_ms"`

	// Health probes (their interval and thresholds are router.Config's).
	HealthCheckTimeoutSecs int    `json:"health_check_timeout_secs" yaml:"health_check_timeout_secs"` // default 5
	HealthCheckEndpoint    string `json:"health_check_endpoint" yaml:"health_check_endpoint"`         // default /health

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
		UpstreamIdleTimeoutMs:      3000,
		HealthCheckTimeoutSecs:     5,
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

// Redacted returns a copy safe to print or log: the API key is masked.
func (c Config) Redacted() Config {
	if c.APIKey != "" {
		c.APIKey = "<redacted>"
	}
	return c
}

// settingOrder is the order in which the settings are printed (serve --print-config,
// /get_router_config) and listed by serve --help: the order they had when router.Config
// held them all, so that the output did not change when the server's moved here. Settings
// missing from it follow in declaration order.
var settingOrder = []string{
	"host", "port",
	"worker_urls", "pd_disaggregation", "prefill", "decode", "worker_url_allow",
	"policy", "prefill_policy", "decode_policy", "cache_threshold", "balance_abs_threshold",
	"balance_rel_threshold", "eviction_interval_secs", "max_tree_size", "max_tree_total_chars",
	"dp_aware", "dp_rank_fields", "worker_startup_timeout_secs", "worker_startup_check_interval",
	"api_key", "request_timeout_secs", "max_payload_size",
	"retry_max_retries", "retry_initial_backoff_ms", "retry_max_backoff_ms", "retry_backoff_multiplier",
	"retry_jitter_factor", "disable_retries", "upstream_idle_timeout_ms",
	"cb_failure_threshold", "cb_success_threshold", "cb_timeout_duration_secs", "cb_window_duration_secs",
	"disable_circuit_breaker",
	"health_check_interval_secs", "health_check_timeout_secs", "health_failure_threshold",
	"health_success_threshold", "health_check_endpoint",
	"max_concurrent_requests", "queue_size", "queue_timeout_secs", "shutdown_timeout_secs",
	"request_id_headers", "cors_allowed_origins",
	"prometheus_host", "prometheus_port", "log_level", "log_json", "decision_log", "access_log",
	"service_discovery", "selector", "prefill_selector", "decode_selector", "service_discovery_port",
	"service_discovery_namespace", "bootstrap_port_annotation", "kubeconfig",
	"client_cert_path", "client_key_path", "ca_cert_paths", "tls_cert_path", "tls_key_path",
	"seed",
}

// SettingKeys returns the config-file key of every setting (router.Config's and the
// server's) in print order.
func SettingKeys() []string {
	ordered()
	return append([]string(nil), orderedKeys...)
}

var (
	orderOnce   sync.Once
	orderedType reflect.Type // a struct of every setting's field, in settingOrder
	orderedPath [][]int      // per field of orderedType: its index path in Config
	orderedKeys []string
)

// ordered builds, once, the flat struct type the settings print as.
func ordered() {
	orderOnce.Do(func() {
		type field struct {
			f    reflect.StructField
			path []int
		}
		var fields []field
		var walk func(t reflect.Type, path []int)
		walk = func(t reflect.Type, path []int) {
			for i := range t.NumField() {
				f := t.Field(i)
				p := append(append([]int(nil), path...), i)
				if f.Anonymous {
					walk(f.Type, p)
					continue
				}
				fields = append(fields, field{f, p})
			}
		}
		walk(reflect.TypeFor[Config](), nil)
		rank := map[string]int{}
		for i, k := range settingOrder {
			rank[k] = i
		}
		pos := func(f field) int {
			if r, ok := rank[f.f.Tag.Get("json")]; ok {
				return r
			}
			return len(settingOrder)
		}
		// Stable: settings missing from settingOrder keep their declaration order.
		for i := 1; i < len(fields); i++ {
			for j := i; j > 0 && pos(fields[j]) < pos(fields[j-1]); j-- {
				fields[j], fields[j-1] = fields[j-1], fields[j]
			}
		}
		sf := make([]reflect.StructField, len(fields))
		for i, f := range fields {
			sf[i] = reflect.StructField{Name: f.f.Name, Type: f.f.Type, Tag: f.f.Tag}
			orderedPath = append(orderedPath, f.path)
			orderedKeys = append(orderedKeys, f.f.Tag.Get("json"))
		}
		orderedType = reflect.StructOf(sf)
	})
}

// flat returns c as one flat struct, its settings in print order.
func (c Config) flat() any {
	ordered()
	v, src := reflect.New(orderedType).Elem(), reflect.ValueOf(c)
	for i, p := range orderedPath {
		v.Field(i).Set(src.FieldByIndex(p))
	}
	return v.Interface()
}

// MarshalJSON writes the settings as one flat object in print order (the order of
// serve --print-config).
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(c.flat()) }

// MarshalYAML (go.yaml.in/yaml/v3's Marshaler) writes the settings as one flat mapping in
// print order: what serve --print-config shows.
func (c Config) MarshalYAML() (any, error) { return c.flat(), nil }

// Validate checks every setting, the routing ones first ([router.Config.Validate]), and
// returns the first problem as a *router.SettingError naming the flag, e.g.
// "router: --port 70000 is outside [0,65535]".
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	for _, check := range []func() error{c.validateLimits, c.validateDiscovery, c.validateTLS} {
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
	case c.QueueSize < 0:
		return router.SettingErrorf("queue_size", "--queue-size %d must be ≥ 0", c.QueueSize)
	case c.QueueTimeoutSecs < 1:
		return router.SettingErrorf("queue_timeout_secs", "--queue-timeout-secs %d must be ≥ 1", c.QueueTimeoutSecs)
	case c.ShutdownTimeoutSecs < 0:
		return router.SettingErrorf("shutdown_timeout_secs", "--shutdown-timeout-secs %d must be ≥ 0", c.ShutdownTimeoutSecs)
	}
	switch {
	case c.UpstreamIdleTimeoutMs < 0:
		return router.SettingErrorf("upstream_idle_timeout_ms", "--upstream-idle-timeout-ms %d must be ≥ 0", c.UpstreamIdleTimeoutMs)
	case c.HealthCheckTimeoutSecs < 1:
		return router.SettingErrorf("health_check_timeout_secs", "--health-check-timeout-secs %d must be ≥ 1", c.HealthCheckTimeoutSecs)
	case !strings.HasPrefix(c.HealthCheckEndpoint, "/"):
		return router.SettingErrorf("health_check_endpoint", "--health-check-endpoint %q must start with /", c.HealthCheckEndpoint)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "warning", "error":
	default:
		return router.SettingErrorf("log_level", "--log-level %q is not debug, info, warn or error", c.LogLevel)
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

package main

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/spf13/pflag"
)

// serveFlagHelp documents every server.Config setting (router.Config's included), keyed by
// its json name, except those sharedFlagHelp defines per command; the flag is the same name
// with dashes, and --help lists the flags in the structs' declaration order (this map's order
// follows it for the reader). A test checks that every field has an entry in one of them, so a
// new setting cannot ship without a flag and help.
var serveFlagHelp = map[string]string{
	"host":                          "address to listen on",
	"port":                          "port to listen on",
	"worker_urls":                   "regular-mode worker URLs (space-separated after the flag, or repeated)",
	"prefill":                       "prefill worker: URL [BOOTSTRAP_PORT|none] (repeatable; none or omitted sends bootstrap_port null)",
	"decode":                        "decode worker URL (repeatable)",
	"policy":                        "routing policy: cache_aware, round_robin, random or power_of_two",
	"prefill_policy":                "PD: policy for prefill workers (default: --policy)",
	"decode_policy":                 "PD: policy for decode workers (default: --policy)",
	"cache_threshold":               "cache_aware: route to the best-matching worker when matched/total chars is above this, in [0,1]",
	"balance_abs_threshold":         "cache_aware: loads are imbalanced when max-min exceeds this (and the relative rule holds)",
	"balance_rel_threshold":         "cache_aware: loads are imbalanced when max exceeds min times this (and the absolute rule holds)",
	"eviction_interval_secs":        "cache_aware: seconds between tree evictions",
	"max_tree_size":                 "cache_aware: characters each worker (DP rank) may own in the tree before LRU eviction",
	"max_tree_total_chars":          "cache_aware: characters one tree may hold in all before LRU eviction (memory guard)",
	"dp_rank_fields":                "DP rank fields sent to workers: legacy (data_parallel_rank…) or routed (routed_dp_rank…)",
	"retry_max_retries":             "attempts per request including the first",
	"retry_initial_backoff_ms":      "wait before the first retry, ms",
	"retry_max_backoff_ms":          "cap on the wait between retries, ms",
	"retry_backoff_multiplier":      "growth of the wait per retry",
	"retry_jitter_factor":           "random spread of each wait, ±fraction in [0,1]",
	"disable_retries":               "one attempt per request",
	"cb_failure_threshold":          "consecutive failures that open a worker's circuit breaker",
	"cb_success_threshold":          "consecutive half-open successes that close it again",
	"cb_timeout_duration_secs":      "seconds an open breaker waits before letting a probe request through",
	"cb_window_duration_secs":       "accepted for sgl-router compatibility; unused (breakers count consecutive failures)",
	"disable_circuit_breaker":       "never open circuit breakers",
	"health_check_interval_secs":    "seconds between health probes of each worker",
	"health_check_timeout_secs":     "timeout of one health probe, seconds",
	"health_failure_threshold":      "consecutive failed probes that mark a worker unhealthy",
	"health_success_threshold":      "consecutive passed probes that mark it healthy again",
	"health_check_endpoint":         "path probed on each worker",
	"worker_url_allow":              "hosts or CIDRs that workers added at run time must match (empty: any)",
	"worker_startup_timeout_secs":   "seconds to keep retrying discovery of a starting worker",
	"worker_startup_check_interval": "seconds between discovery attempts of a starting worker",
	"api_key":                       "require Authorization: Bearer KEY on inference and admin routes (never logged)",
	"request_timeout_secs":          "upper bound on one request, stream included, in seconds",
	"max_payload_size":              "largest accepted request body in bytes (larger: 413)",
	"upstream_idle_timeout_ms":      "close idle upstream connections after this many ms (keep it below the workers' keep-alive)",
	"max_concurrent_requests":       "requests served at once (0 or -1: no limit, as sgl-router); others wait in the queue",
	"queue_size":                    "requests that may wait for a slot (full: 429)",
	"queue_timeout_secs":            "seconds a request may wait for a slot (then 408)",
	"shutdown_timeout_secs":         "seconds to drain in-flight requests on SIGTERM",
	"request_id_headers":            "headers whose first present value is the request id (space-separated or repeated)",
	"cors_allowed_origins":          "allowed CORS origins (space-separated or repeated; empty: any)",
	"prometheus_host":               "address of the Prometheus /metrics listener",
	"prometheus_port":               "port of the Prometheus /metrics listener",
	"log_level":                     "debug, info, warn or error",
	"log_json":                      "log JSON lines instead of text",
	"access_log":                    "file receiving one line per HTTP request (- for stderr)",
	"service_discovery":             "find workers among Kubernetes pods (Running, Ready, with an IP) by label; combines with static workers",
	"selector":                      "service discovery, regular mode: labels k=v ... worker pods carry (all must match)",
	"prefill_selector":              "service discovery, PD: labels k=v ... of prefill pods",
	"decode_selector":               "service discovery, PD: labels k=v ... of decode pods",
	"service_discovery_port":        "service discovery: the port workers listen on in each pod (URL http://POD_IP:PORT)",
	"service_discovery_namespace":   "service discovery: namespace to watch (empty: all namespaces if RBAC allows, else the router pod's own)",
	"bootstrap_port_annotation":     "service discovery: pod annotation holding a prefill pod's bootstrap port (absent: null)",
	"kubeconfig":                    "service discovery: kubeconfig file (empty: $KUBECONFIG, ~/.kube/config, or the in-cluster service account)",
	"client_cert_path":              "TLS to workers: client certificate (PEM) presented to https:// workers; re-read when it changes",
	"client_key_path":               "TLS to workers: the client certificate's private key (PEM)",
	"ca_cert_paths":                 "TLS to workers: CA bundles (PEM) that https:// workers' certificates must chain to (empty: system roots)",
	"tls_cert_path":                 "serve HTTPS with this certificate (PEM); re-read when it changes",
	"tls_key_path":                  "serve HTTPS: the certificate's private key (PEM)",
}

// serveFlagAliases are other spellings sgl-router versions used for the same setting.
var serveFlagAliases = map[string]string{
	"json-log":            "log-json",
	"eviction-interval":   "eviction-interval-secs",
	"policy-prefill":      "prefill-policy",
	"policy-decode":       "decode-policy",
	"prometheus-hostname": "prometheus-host",
	"ca-cert-path":        "ca-cert-paths", // the SGLang Model Gateway's spelling, repeatable
}

// ignoredSGLangFlags are sgl-router flags we accept so existing command lines keep working,
// with what each would have done; the value says whether the flag takes values (0: a switch,
// 1: one value, -1: any number of values).
var ignoredSGLangFlags = map[string]struct {
	arity int
	what  string
}{
	"log-dir":                      {1, "log files (we log to stderr)"},
	"enable-igw":                   {0, "multi-model gateway"},
	"backend":                      {1, "non-SGLang backends"},
	"mini-lb":                      {0, "the Python mini load balancer"},
	"model-path":                   {1, "tokenizer/gRPC features"},
	"tokenizer-path":               {1, "tokenizer/gRPC features"},
	"chat-template":                {1, "tokenizer/gRPC features"},
	"reasoning-parser":             {1, "tokenizer/gRPC features"},
	"tool-call-parser":             {1, "tokenizer/gRPC features"},
	"mcp-config-path":              {1, "tokenizer/gRPC features"},
	"history-backend":              {1, "the Responses API"},
	"enable-trace":                 {0, "OpenTelemetry tracing"},
	"otlp-traces-endpoint":         {1, "OpenTelemetry tracing"},
	"rate-limit-tokens-per-second": {1, "token-bucket refill (our admission holds a permit per request)"},
	"prometheus-duration-buckets":  {-1, "custom histogram buckets"},
}

// multiValueServeFlags take several space-separated values after the flag (argparse nargs).
var multiValueServeFlags = map[string]bool{
	"worker-urls": true, "request-id-headers": true, "cors-allowed-origins": true,
	"worker-url-allow": true, "prefill": true, "selector": true, "prefill-selector": true,
	"decode-selector": true, "ca-cert-paths": true,
}

// normalizeServeArgs rewrites sgl-router's argparse forms into what pflag parses:
// "--prefill URL 9001" → "--prefill=URL 9001" (one value holding both tokens),
// "--worker-urls a b" → "--worker-urls=a --worker-urls=b", and ignored sgl-router flags are
// removed (returned separately, for the warning). Values of a multi-value flag run until the
// next token starting with "-".
func normalizeServeArgs(args []string) (out, ignored []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...), ignored
		}
		if !strings.HasPrefix(a, "--") {
			out = append(out, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if alias, ok := serveFlagAliases[name]; ok {
			a = "--" + alias + strings.TrimPrefix(a, "--"+name)
			name = alias
		}
		if ig, ok := ignoredSGLangFlags[name]; ok {
			ignored = append(ignored, "--"+name)
			if !hasValue {
				for n := 0; i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && (ig.arity < 0 || n < ig.arity); n++ {
					i++
				}
			}
			continue
		}
		if !multiValueServeFlags[name] || hasValue {
			out = append(out, a)
			continue
		}
		var vals []string
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			vals = append(vals, args[i])
		}
		switch {
		case len(vals) == 0:
			out = append(out, a) // pflag reports the missing value
		case name == "prefill":
			out = append(out, "--prefill="+strings.Join(vals, " "))
		default:
			for _, v := range vals {
				out = append(out, "--"+name+"="+v)
			}
		}
	}
	return out, ignored
}

// ignoredWarning is the one warning naming every ignored sgl-router flag and what is lost.
func ignoredWarning(ignored []string) string {
	if len(ignored) == 0 {
		return ""
	}
	var parts []string
	for _, f := range ignored {
		parts = append(parts, fmt.Sprintf("%s (%s)", f, ignoredSGLangFlags[strings.TrimPrefix(f, "--")].what))
	}
	return "sgl-router flags pdrouter does not implement: " + strings.Join(parts, ", ")
}

// flagName turns a Config json key into its flag name.
func flagName(jsonKey string) string { return strings.ReplaceAll(jsonKey, "_", "-") }

// serveFlags binds one flag per server.Config setting (named after its json key) to cfg, which
// should hold the defaults: they show in --help.
func serveFlags(fs *pflag.FlagSet, cfg *server.Config) { configFlags(fs, cfg, cmdServe, nil) }

// notSimFlags are the router.Config keys `router sim` has no flag for: the worker lists (the
// simulator names its own workers) and the health checks' interval, timeout and endpoint (a
// live deployment's probes; a --config file may still set them). The server's settings
// (server.Config) are not the simulator's at all.
var notSimFlags = map[string]bool{
	"worker_urls": true, "prefill": true, "decode": true,
	"health_check_interval_secs": true, "health_check_timeout_secs": true, "health_check_endpoint": true,
}

// routingFlags binds only the routing settings (mode, policy, thresholds, tree, DP awareness,
// retry, breaker and health thresholds, seed): the flags `router sim` shares with serve,
// under the same names, so one settings file serves both.
func routingFlags(fs *pflag.FlagSet, cfg *router.Config) {
	configFlags(fs, cfg, cmdSim, func(key string) bool { return !notSimFlags[key] })
}

// setting is one settings field of a config struct: its config-file key and its value.
type setting struct {
	key   string
	name  string // the Go field name
	value reflect.Value
}

// settingsOf lists the settings of cfg, a pointer to a settings struct (server.Config,
// router.Config, sim.Cluster), in declaration order, the fields of an embedded struct in its
// place: the order the settings print in and --help lists them. Each is keyed by its json
// name. This is the one reflection over the settings: flags are bound and merged from it.
func settingsOf(cfg any) []setting {
	var out []setting
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				walk(v.Field(i))
				continue
			}
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if key == "" || key == "-" {
				continue
			}
			out = append(out, setting{key: key, name: f.Name, value: v.Field(i)})
		}
	}
	walk(reflect.ValueOf(cfg).Elem())
	return out
}

// configFlags binds the settings of cfg (a *server.Config or *router.Config) whose json key
// passes include (nil: all), with the help text of command cmd.
func configFlags(fs *pflag.FlagSet, cfg any, cmd string, include func(key string) bool) {
	for _, st := range settingsOf(cfg) {
		key := st.key
		if include != nil && !include(key) {
			continue
		}
		name, help := flagName(key), flagHelp(cmd, key)
		if key == "seed" {
			seedFlag(fs, cmd, st.value.Addr().Interface())
			continue
		}
		switch p := st.value.Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, name, *p, help)
		case *int:
			fs.IntVar(p, name, *p, help)
		case *int64:
			fs.Int64Var(p, name, *p, help)
		case *float64:
			fs.Float64Var(p, name, *p, help)
		case *bool:
			fs.BoolVar(p, name, *p, help)
		case *[]string:
			fs.Var(&stringList{p: p}, name, help)
		case *[]router.PrefillWorker:
			fs.Var(&prefillList{p}, name, help)
		default:
			panic(fmt.Sprintf("configFlags: no flag type for Config.%s", st.name))
		}
	}
}

// stringList collects every value given (space-separated values in one token too); the first
// value given replaces the default list.
type stringList struct {
	p   *[]string
	set bool
}

func (s *stringList) String() string {
	if s.p == nil {
		return ""
	}
	return strings.Join(*s.p, " ")
}
func (s *stringList) Type() string { return "strings" }
func (s *stringList) Set(v string) error {
	if !s.set {
		*s.p, s.set = nil, true
	}
	*s.p = append(*s.p, strings.Fields(v)...)
	return nil
}

// prefillList parses "URL [BOOTSTRAP_PORT|none]" values.
type prefillList struct{ p *[]router.PrefillWorker }

func (s *prefillList) String() string { return "" }
func (s *prefillList) Type() string   { return "URL [PORT|none]" }
func (s *prefillList) Set(v string) error {
	f := strings.Fields(v)
	if len(f) == 0 || len(f) > 2 {
		return fmt.Errorf("want URL [BOOTSTRAP_PORT|none], got %q", v)
	}
	w := router.PrefillWorker{URL: f[0]}
	if len(f) == 2 && !strings.EqualFold(f[1], "none") {
		port, err := strconv.Atoi(f[1])
		if err != nil {
			return fmt.Errorf("bootstrap port %q of %s is not a number or none", f[1], f[0])
		}
		w.BootstrapPort = &port
	}
	*s.p = append(*s.p, w)
	return nil
}

// loadConfigFile reads a YAML or JSON settings file (YAML is a superset, so one decoder reads
// both) over the defaults. Unknown keys and wrong types are errors naming the file, line and
// key, so a typo never silently falls back to a default.
func loadConfigFile(path string) (server.Config, settingsFile, error) {
	cfg := server.DefaultConfig()
	doc, file, err := readSettingsFile("--config", path)
	if err != nil || doc == nil {
		return cfg, file, err
	}
	return cfg, file, file.decode(doc, &cfg)
}

// workerListKeys are the settings whose flags add to a settings file's list rather than
// replace it.
var workerListKeys = map[string]bool{"worker_urls": true, "prefill": true, "decode": true}

// mergeFlags applies the flags the user set (fs.Changed) from flagCfg onto fileCfg, both of
// one settings struct type (server.Config, router.Config, sim.Cluster): flags override the
// file, except worker lists, which are appended to the file's.
func mergeFlags[C any](fs *pflag.FlagSet, fileCfg, flagCfg C) C {
	dst, src := settingsOf(&fileCfg), settingsOf(&flagCfg)
	for i, d := range dst {
		switch {
		case !fs.Changed(flagName(d.key)):
		case workerListKeys[d.key] && d.value.Kind() == reflect.Slice:
			d.value.Set(reflect.AppendSlice(d.value, src[i].value))
		default:
			d.value.Set(src[i].value)
		}
	}
	return fileCfg
}

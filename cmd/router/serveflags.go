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

// serveFlagAliases are other spellings sgl-router versions used for the same setting: older
// sgl-router releases, the SGLang Model Gateway, and today's smg
// (testdata/sglrouter_flags.tsv lists its flags with their other spellings).
var serveFlagAliases = map[string]string{
	"json-log":              "log-json",
	"eviction-interval":     "eviction-interval-secs",
	"policy-prefill":        "prefill-policy",
	"policy-decode":         "decode-policy",
	"prometheus-hostname":   "prometheus-host",
	"ca-cert-path":          "ca-cert-paths", // the SGLang Model Gateway's spelling, repeatable
	"server-cert-path":      "tls-cert-path", // the SGLang Model Gateway's names of the serving certificate
	"server-key-path":       "tls-key-path",
	"cache-match-threshold": "cache-threshold", // smg's other spellings
	"spill-abs-threshold":   "balance-abs-threshold",
	"spill-rel-threshold":   "balance-rel-threshold",
	"model":                 "model-path",
	// smg's name of the KV-usage overload bound.
	"overload-token-usage-threshold": "worker-overload-token-usage",
	// smg drains in-flight requests for --shutdown-grace-period-secs on SIGTERM: our
	// --shutdown-timeout-secs. Its default stays 30 s, not smg's 180 s: Kubernetes kills a pod
	// 30 s after SIGTERM unless its terminationGracePeriodSeconds says otherwise, so a longer
	// default drain would be cut short anyway.
	"shutdown-grace-period-secs": "shutdown-timeout-secs",
	"sticky-key-idle-secs":       "max-idle-secs", // smg's other spelling
}

// scaledServeFlags are sgl-router flags whose setting we hold in another unit: serve takes
// them as flags of their own that set flag to the value times factor.
var scaledServeFlags = []struct {
	name, flag string
	factor     int
	help       string
}{
	{"upstream-pool-idle-timeout-secs", "upstream-idle-timeout-ms", 1000,
		"smg's spelling of --upstream-idle-timeout-ms, in seconds (its default 3 is ours)"},
	{"load-monitor-interval", "load-poll-interval-ms", 1000,
		"smg's interval of its worker load monitor, in seconds (ours: --load-poll-interval-ms, default 500 ms)"},
	{"worker-load-check-interval", "load-poll-interval-ms", 1000,
		"the SGLang Model Gateway's spelling of --load-monitor-interval, in seconds"},
}

// switchServeFlags are sgl-router switches that set one of our settings: the switch, and the
// flag=value it stands for.
var switchServeFlags = map[string]string{
	"disable-load-monitoring": "load-poll-interval-ms=0", // the policies then use in-flight counts
}

// scaledFlag is one of scaledServeFlags on a flag set: Set sets its target flag.
type scaledFlag struct {
	fs           *pflag.FlagSet
	name, target string
	factor       int
}

func (f scaledFlag) String() string {
	if f.fs == nil {
		return ""
	}
	if t := f.fs.Lookup(f.target); t != nil {
		if n, err := strconv.Atoi(t.Value.String()); err == nil {
			return strconv.Itoa(n / f.factor)
		}
	}
	return ""
}
func (f scaledFlag) Type() string { return "int" }
func (f scaledFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a non-negative integer", v)
	}
	return f.fs.Set(f.target, strconv.Itoa(n*f.factor))
}

// noEffectSGLangFlags are sgl-router switches that turn off something pdrouter never does:
// accepted, and they change nothing (docs/sgl-router-compat.md lists them).
var noEffectSGLangFlags = map[string]string{
	"disable-tokenizer-autoload": "pdrouter loads a tokenizer only from --model-path or --tokenizer-path, never from the workers",
}

// Reasons pdrouter does not implement an sgl-router flag (docs/sgl-router-compat.md's table gives
// the same).
const (
	whyGateway     = "a gateway feature outside PD routing: "
	whyStorage     = "the Responses/conversation history storage"
	whyAuth        = "control-plane authentication (pdrouter has one --api-key)"
	whyMesh        = "multi-router mesh state sharing"
	whyLeastLoad   = "least_load's tuning knobs (pdrouter's least_load learns each prefill's rate from its reports)"
	whyPolicy      = "a routing policy pdrouter does not have: "
	whyOverload    = "smg's other load-balancing knobs (pdrouter reads the engines' loads every --load-poll-interval-ms and bounds them with --worker-overload-token-usage and --worker-overload-waiting-requests)"
	whyEPD         = "encode/prefill/decode (EPD) disaggregation"
	whyTokenizer   = "tokenizer caches and parsers of the gRPC path (pdrouter proxies HTTP)"
	whyWorkerMgmt  = "worker management pdrouter does differently: "
	whyUpstreamOpt = "an upstream transport option pdrouter does not have: "
)

// ignoredSGLangFlags are sgl-router flags pdrouter does not implement, with why; serve refuses
// them unless --allow-ignored-flags, then drops them with one warning. arity says how many
// values follow the flag (0: a switch, 1: one value, -1: any number), as its argparse nargs.
var ignoredSGLangFlags = map[string]struct {
	arity int
	what  string
}{
	"log-dir":                     {1, "log files (we log to stderr)"},
	"enable-igw":                  {0, "multi-model gateway"},
	"backend":                     {1, "non-SGLang backends"},
	"mini-lb":                     {0, "the Python mini load balancer"},
	"reasoning-parser":            {1, "tokenizer/gRPC features"},
	"tool-call-parser":            {1, "tokenizer/gRPC features"},
	"mcp-config-path":             {1, "tokenizer/gRPC features"},
	"history-backend":             {1, "the Responses API"},
	"prometheus-duration-buckets": {-1, "custom histogram buckets"},

	// Workers and transport.
	"upstream-http2":                 {0, whyUpstreamOpt + "HTTP/2 to workers (SGLang serves HTTP/1.1)"},
	"health-check-port":              {1, "a separate probe listener (/health and /readiness are served on --port)"},
	"disable-health-check":           {0, whyWorkerMgmt + "health checks always run (make them rare with --health-check-interval-secs); without them a dead worker takes traffic until its breaker opens"},
	"worker-auto-recovery":           {0, whyWorkerMgmt + "an unhealthy worker leaves rotation and comes back when it passes its probes; removal is DELETE /workers or service discovery"},
	"remove-unhealthy-workers":       {0, whyWorkerMgmt + "an unhealthy worker leaves rotation and comes back when it passes its probes; removal is DELETE /workers or service discovery"},
	"worker-startup-delay":           {1, whyWorkerMgmt + "a starting worker is probed every second and takes traffic once it passes"},
	"job-queue-capacity":             {1, whyWorkerMgmt + "workers are registered directly, without a job queue"},
	"job-queue-concurrency":          {1, whyWorkerMgmt + "workers are registered directly, without a job queue"},
	"zmq-engine-count":               {1, whyWorkerMgmt + "ZMQ-launched engines"},
	"stream-request-bodies-over":     {1, whyUpstreamOpt + "streaming request bodies (bodies are read whole, within --max-payload-size)"},
	"stream-body-stall-timeout-secs": {1, whyUpstreamOpt + "streaming request bodies"},
	"multimodal-tensor-transport":    {1, whyGateway + "multimodal tensor transport"},
	"multimodal-shm-min-bytes":       {1, whyGateway + "multimodal tensor transport"},
	"model-alias":                    {1, whyGateway + "model aliases; requests pass the model through"},
	"model-id-from":                  {1, whyGateway + "model ids of discovered workers"},
	"router-selector":                {-1, whyMesh},
	"storage-context-headers":        {-1, whyStorage},

	// Policies and their knobs.
	"encode-policy":                     {1, whyEPD},
	"epd-disaggregation":                {0, whyEPD},
	"encode":                            {-1, whyEPD},
	"encode-selector":                   {-1, whyEPD},
	"prefix-token-count":                {1, whyPolicy + "prefix_hash"},
	"prefix-hash-load-factor":           {1, whyPolicy + "prefix_hash"},
	"prefix-hash-balance-abs-threshold": {1, whyPolicy + "prefix_hash"},
	"least-load-kv-pressure-weight":     {1, whyLeastLoad},
	"least-load-default-throughput":     {1, whyLeastLoad},
	"least-load-mean-prefill-tokens":    {1, whyLeastLoad},
	"least-load-max-waiting-requests":   {1, whyLeastLoad},
	"bucket-adjust-interval-secs":       {1, whyPolicy + "bucket"},
	"sticky-sessions":                   {0, whyPolicy + "routing keys"},
	"routing-key-override":              {0, whyPolicy + "routing keys"},
	"overlap-decay":                     {1, whyPolicy + "smg's cache_aware scoring variants"},
	"selection-temperature":             {1, whyPolicy + "smg's cache_aware scoring variants"},
	"cache-index":                       {1, whyPolicy + "smg's cache index variants"},
	"cache-ttl-secs":                    {1, whyPolicy + "smg's cache index variants"},
	"cache-boundaries":                  {1, whyPolicy + "smg's cache index variants"},
	"dp-minimum-tokens-scheduler":       {0, whyOverload},
	"balance-token-usage-threshold":     {1, whyOverload},
	"worker-overload-protection":        {0, whyOverload},

	// Tokenizer caches (the gRPC path).
	"tokenizer-cache-enable-l0":      {0, whyTokenizer},
	"tokenizer-cache-l0-max-entries": {1, whyTokenizer},
	"tokenizer-cache-enable-l1":      {0, whyTokenizer},
	"tokenizer-cache-l1-max-memory":  {1, whyTokenizer},

	// Gateway features: storage, WASM, auth, mesh.
	"enable-wasm":                 {0, whyGateway + "WASM plugins"},
	"storage-hook-wasm-path":      {1, whyStorage},
	"oracle-wallet-path":          {1, whyStorage},
	"oracle-tns-alias":            {1, whyStorage},
	"oracle-connect-descriptor":   {1, whyStorage},
	"oracle-username":             {1, whyStorage},
	"oracle-password":             {1, whyStorage},
	"oracle-external-auth":        {0, whyStorage},
	"oracle-pool-min":             {1, whyStorage},
	"oracle-pool-max":             {1, whyStorage},
	"oracle-pool-timeout-secs":    {1, whyStorage},
	"postgres-db-url":             {1, whyStorage},
	"postgres-pool-max":           {1, whyStorage},
	"redis-url":                   {1, whyStorage},
	"redis-pool-max":              {1, whyStorage},
	"redis-retention-days":        {1, whyStorage},
	"schema-config":               {1, whyStorage},
	"control-plane-api-keys":      {-1, whyAuth},
	"control-plane-audit-enabled": {0, whyAuth},
	"jwt-issuer":                  {1, whyAuth},
	"jwt-audience":                {1, whyAuth},
	"jwt-jwks-uri":                {1, whyAuth},
	"jwt-role-mapping":            {-1, whyAuth},
	"enable-mesh":                 {0, whyMesh},
	"mesh-server-name":            {1, whyMesh},
	"mesh-host":                   {1, whyMesh},
	"mesh-advertise-host":         {1, whyMesh},
	"mesh-port":                   {1, whyMesh},
	"mesh-peer-urls":              {-1, whyMesh},
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
		if _, ok := noEffectSGLangFlags[name]; ok && !hasValue {
			continue // a switch off of something pdrouter never does
		}
		if set, ok := switchServeFlags[name]; ok && !hasValue {
			out = append(out, "--"+set)
			continue
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
func serveFlags(fs *pflag.FlagSet, cfg *server.Config) {
	configFlags(fs, cfg, cmdServe, nil)
	for _, sf := range scaledServeFlags {
		fs.Var(scaledFlag{fs: fs, name: sf.name, target: sf.flag, factor: sf.factor}, sf.name, sf.help)
	}
}

// serveDefaults are serve's defaults: server.DefaultConfig with today's sgl-router (smg) default
// where we adopt it. --worker-startup-timeout-secs is 1800 s, as smg's: a large model takes
// more than our former 600 s to load. --worker-startup-check-interval stays 10 s (smg: 30 s):
// a starting worker is found up to 20 s sooner, for one GET every 10 s while it starts.
func serveDefaults() server.Config {
	cfg := server.DefaultConfig()
	cfg.WorkerStartupTimeoutSecs = 1800
	return cfg
}

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

// setting is one settings field of a config struct: its config-file key, its flag's help
// (the field's help tag) and its value.
type setting struct {
	key   string
	name  string // the Go field name
	help  string
	value reflect.Value
}

// settingsOf lists the settings of cfg, a pointer to a settings struct (server.Config,
// router.Config, sim.Cluster), in declaration order, the fields of an embedded struct in its
// place: the order the settings print in and --help lists them. Each is keyed by its json
// name; its flag is the same name with dashes, documented by the field's help tag (or, for
// the flags several commands share, by sharedFlagHelp). This is the one reflection over the
// settings: flags are bound and merged from it, so a new setting needs only its field (with
// its tags) and its default.
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
			out = append(out, setting{key: key, name: f.Name, help: f.Tag.Get("help"), value: v.Field(i)})
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
		name, help := flagName(key), flagHelp(cmd, key, st.help)
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
		case *[]router.TenantSpec:
			fs.Var(&tenantList{p: p}, name, help)
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

// tenantList parses --tenants NAME:key=value,... (tenant_key repeatable within one value); the
// first value given replaces the list (a settings file's tenants).
type tenantList struct {
	p   *[]router.TenantSpec
	set bool
}

func (s *tenantList) String() string { return "" }
func (s *tenantList) Type() string   { return "NAME:key=value,..." }
func (s *tenantList) Set(v string) error {
	name, rest, _ := strings.Cut(v, ":")
	t := router.TenantSpec{Name: strings.TrimSpace(name)}
	for _, kv := range strings.Split(rest, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		var err error
		switch {
		case !ok:
			err = fmt.Errorf("want key=value, got %q", kv)
		case k == "tenant_key":
			t.Keys = append(t.Keys, val)
		case k == "weight":
			t.Weight, err = strconv.ParseFloat(val, 64)
		case k == "max_concurrent_requests":
			t.MaxConcurrentRequests, err = strconv.Atoi(val)
		case k == "tokens_per_second":
			t.TokensPerSecond, err = strconv.ParseFloat(val, 64)
		default:
			err = fmt.Errorf("unknown key %q (want tenant_key, weight, max_concurrent_requests or tokens_per_second)", k)
		}
		if err != nil {
			return fmt.Errorf("tenant %s: %w", t.Name, err)
		}
	}
	if !s.set {
		*s.p, s.set = nil, true
	}
	*s.p = append(*s.p, t)
	return nil
}

// loadConfigFile reads a YAML or JSON settings file (YAML is a superset, so one decoder reads
// both) over the defaults. Unknown keys and wrong types are errors naming the file, line and
// key, so a typo never silently falls back to a default.
func loadConfigFile(path string) (server.Config, settingsFile, error) {
	cfg := serveDefaults()
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

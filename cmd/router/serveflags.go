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

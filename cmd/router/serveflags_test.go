package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseServe runs the serve flag pipeline on an sgl-router style command line.
func parseServe(t *testing.T, args ...string) (server.Config, []string, error) {
	t.Helper()
	norm, ignored := normalizeServeArgs(args)
	cfg := server.DefaultConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	serveFlags(fs, &cfg)
	err := fs.Parse(norm)
	return cfg, ignored, err
}

// Every setting has a flag with help: its help tag, or sharedFlagHelp's text for a flag
// several commands share — never both, so there is one place to edit.
func TestEveryConfigFieldHasAFlagWithHelp(t *testing.T) {
	cfg := server.DefaultConfig()
	settings := settingsOf(&cfg)
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	serveFlags(fs, &cfg)
	shared := 0
	for _, st := range settings {
		key := st.key
		_, isShared := sharedFlagHelp[key]
		if isShared {
			shared++
			require.Empty(t, st.help, "%s: a shared flag is documented in sharedFlagHelp only", key)
		} else {
			require.NotEmpty(t, st.help, "%s: give the field a help tag", key)
		}
		f := fs.Lookup(flagName(key))
		require.NotNil(t, f, key)
		require.NotEmpty(t, f.Usage, key)
	}
	require.Equal(t, len(sharedFlagHelp), shared, "every shared flag (dp_aware, pd_disaggregation, decision_log, seed) is a setting of serve")
}

func TestSGLangCommandLineParses(t *testing.T) {
	// The example, unchanged.
	cfg, ignored, err := parseServe(t, strings.Fields(`--pd-disaggregation --policy random
		--prefill http://127.0.0.1:30001 none --decode http://127.0.0.1:30002
		--host 127.0.0.1 --port 58887 --log-level debug`)...)
	require.NoError(t, err)
	require.Empty(t, ignored)
	require.NoError(t, cfg.Validate())
	assert.True(t, cfg.PDDisaggregation)
	assert.Equal(t, "random", cfg.Policy)
	assert.Equal(t, []router.PrefillWorker{{URL: "http://127.0.0.1:30001"}}, cfg.Prefill)
	assert.Equal(t, []string{"http://127.0.0.1:30002"}, cfg.Decode)
	assert.Equal(t, 58887, cfg.Port)
	assert.Equal(t, "debug", cfg.LogLevel)
}

func TestMultiValueFlags(t *testing.T) {
	cfg, ignored, err := parseServe(t, strings.Fields(`--pd-disaggregation
		--prefill http://p1:30001 9001 --prefill http://p2:30001 --prefill http://[::1]:30001 NONE
		--decode http://d1:1 --decode http://d2:1
		--request-id-headers x-a x-b --cors-allowed-origins https://a https://b
		--log-dir /tmp/x --enable-igw --service-discovery --prefill-selector app=a tier=b --decode-selector app=d --ca-cert-paths a b --json-log --seed 7`)...)
	require.NoError(t, err)
	port := 9001
	assert.Equal(t, []router.PrefillWorker{{URL: "http://p1:30001", BootstrapPort: &port}, {URL: "http://p2:30001"}, {URL: "http://[::1]:30001"}}, cfg.Prefill)
	assert.Equal(t, []string{"http://d1:1", "http://d2:1"}, cfg.Decode)
	assert.Equal(t, []string{"x-a", "x-b"}, cfg.RequestIDHeaders, "the first value replaces the defaults")
	assert.Equal(t, []string{"https://a", "https://b"}, cfg.CORSAllowedOrigins)
	assert.True(t, cfg.LogJSON, "--json-log is an alias")
	require.NotNil(t, cfg.Seed)
	assert.Equal(t, int64(7), *cfg.Seed)
	assert.Equal(t, []string{"--log-dir", "--enable-igw"}, ignored)
	assert.Equal(t, []string{"app=a", "tier=b"}, cfg.PrefillSelector)
	assert.Equal(t, []string{"app=d"}, cfg.DecodeSelector)
	assert.Equal(t, []string{"a", "b"}, cfg.CACertPaths)
	require.NoError(t, cfg.Validate())
	w := ignoredWarning(ignored)
	assert.Contains(t, w, "--log-dir (log files")
	assert.Contains(t, w, "--enable-igw (multi-model gateway)")

	cfg, _, err = parseServe(t, strings.Fields(`--worker-urls http://a:1 http://b:1 --worker-urls http://c:1 --policy round_robin`)...)
	require.NoError(t, err)
	assert.Equal(t, []string{"http://a:1", "http://b:1", "http://c:1"}, cfg.WorkerURLs)
	assert.Equal(t, "round_robin", cfg.Policy)
}

func TestBadServeFlagsNameTheFlag(t *testing.T) {
	_, _, err := parseServe(t, "--pd-disaggregation", "--prefill", "http://p:1", "port")
	require.ErrorContains(t, err, `bootstrap port "port" of http://p:1 is not a number or none`)
	_, _, err = parseServe(t, "--prefill", "a", "1", "2")
	require.ErrorContains(t, err, "--prefill")
	_, _, err = parseServe(t, "--cache-threshold", "high")
	require.ErrorContains(t, err, "--cache-threshold")
	cfg, _, err := parseServe(t, "--prefill", "http://p:1", "--cache-threshold", "1.7")
	require.NoError(t, err)
	require.ErrorContains(t, cfg.Validate(), "--prefill needs --pd-disaggregation")
	_, _, err = parseServe(t, "--no-such-flag")
	require.ErrorContains(t, err, "no-such-flag")
}

func TestConfigFileAndFlagPrecedence(t *testing.T) {
	dir := t.TempDir()
	yamlPath := filepath.Join(dir, "tuned.yaml")
	require.NoError(t, os.WriteFile(yamlPath, []byte(`
pd_disaggregation: true
cache_threshold: 0.6
balance_abs_threshold: 16
prefill:
  - url: http://file-p:1
    bootstrap_port: 8998
seed: 11
`), 0o644))
	fileCfg, _, err := loadConfigFile(yamlPath)
	require.NoError(t, err)
	require.Equal(t, 0.6, fileCfg.CacheThreshold)
	require.Equal(t, 1.5, fileCfg.BalanceRelThreshold, "defaults stay for keys the file omits")

	args := strings.Fields(`--config ` + yamlPath + ` --cache-threshold 0.4 --prefill http://flag-p:1 --decode http://d:1`)
	norm, _ := normalizeServeArgs(args)
	flagCfg := server.DefaultConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("config", "", "")
	serveFlags(fs, &flagCfg)
	require.NoError(t, fs.Parse(norm))
	cfg := mergeFlags(fs, fileCfg, flagCfg)
	require.NoError(t, cfg.Validate())
	assert.Equal(t, 0.4, cfg.CacheThreshold, "flags override the file")
	assert.Equal(t, 16, cfg.BalanceAbsThreshold, "the file overrides defaults")
	assert.Len(t, cfg.Prefill, 2, "worker lists from flags are appended")
	assert.Equal(t, "http://file-p:1", cfg.Prefill[0].URL)
	assert.Equal(t, int64(11), *cfg.Seed)

	// JSON files read the same; unknown keys are named.
	jsonPath := filepath.Join(dir, "c.json")
	require.NoError(t, os.WriteFile(jsonPath, []byte(`{"cache_treshold": 0.5}`), 0o644))
	_, _, err = loadConfigFile(jsonPath)
	require.ErrorContains(t, err, jsonPath+`:1: unknown key "cache_treshold"`)
	require.NoError(t, os.WriteFile(jsonPath, []byte(`{"policy": "round_robin"}`), 0o644))
	cfg, _, err = loadConfigFile(jsonPath)
	require.NoError(t, err)
	require.Equal(t, "round_robin", cfg.Policy)
	_, _, err = loadConfigFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorContains(t, err, "--config")
	require.NoError(t, os.WriteFile(yamlPath, []byte("cache_threshold: [1"), 0o644))
	_, _, err = loadConfigFile(yamlPath)
	require.ErrorContains(t, err, yamlPath)
}

func TestRoutingFlagsLeaveOutDeploymentSettings(t *testing.T) {
	cfg := router.DefaultConfig()
	fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	routingFlags(fs, &cfg)
	for _, name := range []string{"policy", "cache-threshold", "balance-abs-threshold", "dp-aware", "seed",
		"pd-disaggregation", "cb-failure-threshold", "max-tree-total-chars", "dp-rank-fields", "health-failure-threshold"} {
		require.NotNil(t, fs.Lookup(name), name)
	}
	for _, name := range []string{"prefill", "decode", "worker-urls", "port", "api-key", "prometheus-port",
		"decision-log", "health-check-interval-secs", "health-check-timeout-secs", "health-check-endpoint"} {
		require.Nil(t, fs.Lookup(name), name)
	}
	keys := map[string]bool{}
	for _, st := range settingsOf(&cfg) {
		keys[st.key] = true
	}
	for key := range notSimFlags {
		require.True(t, keys[key], "notSimFlags names %s, which is no router.Config key", key)
	}
	// sim's --decision-log is its own flag, not a routing setting: the core names no file.
	sim := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	bindSimFlags(sim)
	require.NotNil(t, sim.Lookup("decision-log"))
}

// A settings file from a sweep reads back in serve, and a serve file's server settings
// (decision_log included) do not reach the simulator.
func TestWriteConfigReadsBackInServe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "best.yaml")
	rc := router.DefaultConfig()
	rc.PDDisaggregation, rc.CacheThreshold, rc.HealthCheckTimeoutSecs = true, 0.6, 9
	seed := int64(3)
	rc.Seed = &seed
	require.NoError(t, writeSimConfig(path, rc, sim.Routing{}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "decision_log")
	require.NotContains(t, string(raw), "kv_events", "a simulation that never chose leaves serve's default")
	cfg, _, err := loadConfigFile(path)
	require.NoError(t, err)
	require.Equal(t, 0.6, cfg.CacheThreshold)
	require.Equal(t, 9, cfg.HealthCheckTimeoutSecs)
	require.Nil(t, cfg.Seed, "a live router draws fresh rooms")
	require.Equal(t, "auto", cfg.KVEvents)

	// KV-event routing as simulated reaches serve's kv_events: precise → auto, approximate → off.
	for simulated, want := range map[string]string{"precise": "auto", "on": "auto", "approximate": "off", "off": "off"} {
		require.NoError(t, writeSimConfig(path, rc, sim.Routing{KVEvents: simulated}))
		cfg, _, err := loadConfigFile(path)
		require.NoError(t, err)
		require.Equal(t, want, cfg.KVEvents, "simulated --kv-events %s", simulated)
	}

	require.NoError(t, os.WriteFile(path, []byte("cache_threshold: 0.6\ndecision_log: "+filepath.Join(dir, "serve.jsonl")+"\n"), 0o644))
	_, err = run(t, append([]string{"sim", "--config", path, "--decision-log", filepath.Join(dir, "sim.jsonl")}, simSmall...)...)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "sim.jsonl"))
	require.NoFileExists(t, filepath.Join(dir, "serve.jsonl"), "serve's decision log is not sim's")
}

// The cluster file merges with the cluster flags through the same walker as the settings.
func TestSimClusterFlagsOverrideTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, os.WriteFile(path, []byte("prefill: 3\ndecode: 5\ndp_size: 2\n"), 0o644))
	file, err := loadSimCluster(path)
	require.NoError(t, err)
	f := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	sf := bindSimFlags(f)
	require.NoError(t, f.Parse([]string{"--decode", "1", "--dp-size", "4"}))
	cl := mergeFlags(f, file, sf.cluster)
	assert.Equal(t, 3, cl.Prefill, "kept from the file")
	assert.Equal(t, 1, cl.Decode, "the flag wins, and a count is not a worker list")
	assert.Equal(t, 4, cl.DPSize)
}

// A bad value names where it came from: the file and line when the file gave it, the flag
// when the flag did; never "router: router:".
func TestSettingErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "router.yaml")
	require.NoError(t, os.WriteFile(path, []byte("policy: cache_aware\n\ncache_threshold: 1.7\nbalance_abs_threshold: many\n"), 0o644))
	_, err := run(t, "serve", "--config", path, "--print-config")
	require.ErrorContains(t, err, path+":4: balance_abs_threshold: want int, got string")

	require.NoError(t, os.WriteFile(path, []byte("policy: cache_aware\n\ncache_threshold: 1.7\n"), 0o644))
	_, err = run(t, "serve", "--config", path, "--print-config")
	require.EqualError(t, err, path+":3: cache_threshold 1.7 is outside [0,1]")
	_, err = run(t, "serve", "--config", path, "--cache-threshold", "2", "--print-config")
	require.EqualError(t, err, "router: --cache-threshold 2 is outside [0,1]", "the flag overrides the file: the flag is named")
	_, err = run(t, "sim", "--config", path, "--requests", "1")
	require.EqualError(t, err, path+":3: cache_threshold 1.7 is outside [0,1]")

	require.NoError(t, os.WriteFile(path, []byte("- a\n- b\n"), 0o644))
	_, err = run(t, "serve", "--config", path, "--print-config")
	require.ErrorContains(t, err, path+":1: want a mapping of settings")

	cluster := filepath.Join(dir, "cluster.yaml")
	require.NoError(t, os.WriteFile(cluster, []byte("prefill: 2\nnet_latency: soon\n"), 0o644))
	_, err = run(t, "sim", "--cluster", cluster)
	require.ErrorContains(t, err, cluster+":2: net_latency: ")
	require.NoError(t, os.WriteFile(cluster, []byte("prefill: 2\ndecodes: 2\n"), 0o644))
	_, err = run(t, "sim", "--cluster", cluster)
	require.ErrorContains(t, err, cluster+`:2: unknown key "decodes"`)
}

// The Model Gateway spells the CA flag --ca-cert-path, repeatable; both spellings collect.
func TestCACertPathAlias(t *testing.T) {
	cfg, ignored, err := parseServe(t, strings.Fields(`--worker-urls https://w:1 --ca-cert-path a.pem --ca-cert-path b.pem`)...)
	require.NoError(t, err)
	require.Empty(t, ignored)
	assert.Equal(t, []string{"a.pem", "b.pem"}, cfg.CACertPaths)
}

// --tenants NAME:key=value,... builds a tenant entry; smg's --rate-limit-tokens-per-second is
// accepted again.
func TestTenantFlags(t *testing.T) {
	cfg, ignored, err := parseServe(t, "--tenants", "chat:tenant_key=header:chat,tenant_key=anonymous,weight=3",
		"--tenants", "batch:max_concurrent_requests=8,tokens_per_second=500.5", "--rate-limit-tokens-per-second", "20",
		"--trust-tenant-header", "--tenant-header-name", "x-team")
	require.NoError(t, err)
	require.Empty(t, ignored)
	require.Equal(t, []router.TenantSpec{{Name: "chat", Keys: []string{"header:chat", "anonymous"}, Weight: 3},
		{Name: "batch", MaxConcurrentRequests: 8, TokensPerSecond: 500.5}}, cfg.Tenants)
	require.Equal(t, 20, cfg.RateLimitTokensPerSecond)
	require.True(t, cfg.TrustTenantHeader)
	require.Equal(t, "x-team", cfg.TenantHeaderName)
	for bad, want := range map[string]string{
		"a:weight":       `want key=value, got "weight"`,
		"a:color=red":    `unknown key "color"`,
		"a:weight=heavy": "tenant a:",
	} {
		_, _, err := parseServe(t, "--tenants", bad)
		require.ErrorContains(t, err, want, bad)
		require.ErrorContains(t, err, "--tenants", bad)
	}
}

package router

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultConfigIsValidAndMatchesSGLang(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	assert.Equal(t, 0.3, c.CacheThreshold)
	assert.Equal(t, 64, c.BalanceAbsThreshold)
	assert.Equal(t, 1.5, c.BalanceRelThreshold)
	assert.Equal(t, 120, c.EvictionIntervalSecs)
	assert.Equal(t, 67108864, c.MaxTreeSize)
	assert.Equal(t, 1<<30, c.MaxTreeTotalChars)
	// The retry budget is pdrouter's, off by default: sgl-router has none.
	assert.Equal(t, RetryConfig{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 30 * time.Second, Multiplier: 1.5, Jitter: 0.2,
		BudgetPercent: 100, MinConcurrency: 3}, c.Retry())
	assert.Equal(t, BreakerConfig{FailureThreshold: 10, SuccessThreshold: 3, Timeout: time.Minute}, c.Breaker())
	assert.Equal(t, HealthConfig{Interval: time.Minute, Timeout: 5 * time.Second, Endpoint: "/health", FailureThreshold: 3, SuccessThreshold: 2}, c.Health())
	assert.Equal(t, PolicyCacheAware, c.PolicyFor(Prefill))
}

func TestValidateNamesTheFlag(t *testing.T) {
	t.Parallel()
	port := 70000
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"threshold high", func(c *Config) { c.CacheThreshold = 1.7 }, "router: --cache-threshold 1.7 is outside [0,1]"},
		{"threshold negative", func(c *Config) { c.CacheThreshold = -0.1 }, "--cache-threshold -0.1 is outside [0,1]"},
		{"host tier weight", func(c *Config) { c.KVHostTierWeight = 1.5 }, "--kv-host-tier-weight 1.5 is outside [0,1]"},
		{"host tier weight NaN", func(c *Config) { c.KVHostTierWeight = math.NaN() }, "--kv-host-tier-weight NaN is outside [0,1]"},
		{"prefill without pd", func(c *Config) { c.Prefill = []PrefillWorker{{URL: "http://a:1"}} }, "--prefill needs --pd-disaggregation"},
		{"decode without pd", func(c *Config) { c.Decode = []string{"http://a:1"} }, "--decode needs --pd-disaggregation"},
		{"prefill policy without pd", func(c *Config) { c.PrefillPolicy = PolicyRandom }, "--prefill-policy needs --pd-disaggregation"},
		{"worker urls with pd", func(c *Config) { c.PDDisaggregation = true; c.WorkerURLs = []string{"http://a:1"} }, "--worker-urls is for regular mode"},
		{"bad policy", func(c *Config) { c.Policy = "bucket" }, `--policy "bucket" is not one of cache_aware, round_robin, random, power_of_two, least_load`},
		{"bad decode policy", func(c *Config) { c.PDDisaggregation = true; c.DecodePolicy = "x" }, `--decode-policy "x"`},
		{"bad url", func(c *Config) { c.WorkerURLs = []string{"localhost:30000"} }, "--worker-urls: worker URL"},
		{"duplicate url", func(c *Config) {
			c.PDDisaggregation = true
			c.Prefill = []PrefillWorker{{URL: "http://a:1"}}
			c.Decode = []string{"http://a:1"}
		}, "--decode http://a:1 is already given by --prefill"},
		{"bootstrap port", func(c *Config) {
			c.PDDisaggregation = true
			c.Prefill = []PrefillWorker{{URL: "http://a:1", BootstrapPort: &port}}
		}, "--prefill http://a:1 bootstrap port 70000 is outside [1,65535]"},
		{"rank fields", func(c *Config) { c.DPRankFields = "new" }, `--dp-rank-fields "new" is not legacy or routed`},
		{"abs", func(c *Config) { c.BalanceAbsThreshold = -1 }, "--balance-abs-threshold -1"},
		{"rel", func(c *Config) { c.BalanceRelThreshold = -1 }, "--balance-rel-threshold -1"},
		{"eviction", func(c *Config) { c.EvictionIntervalSecs = 0 }, "--eviction-interval-secs 0"},
		{"tree size", func(c *Config) { c.MaxTreeSize = 0 }, "--max-tree-size 0"},
		{"tree total", func(c *Config) { c.MaxTreeTotalChars = 0 }, "--max-tree-total-chars 0"},
		{"retries", func(c *Config) { c.RetryMaxRetries = 0 }, "--retry-max-retries 0"},
		{"backoff order", func(c *Config) { c.RetryMaxBackoffMs = 10 }, "--retry-max-backoff-ms 10 is below --retry-initial-backoff-ms 50"},
		{"multiplier", func(c *Config) { c.RetryBackoffMultiplier = 0.5 }, "--retry-backoff-multiplier 0.5"},
		{"jitter", func(c *Config) { c.RetryJitterFactor = 1.5 }, "--retry-jitter-factor 1.5 is outside [0,1]"},
		{"cb failures", func(c *Config) { c.CBFailureThreshold = 0 }, "--cb-failure-threshold 0"},
		{"cb successes", func(c *Config) { c.CBSuccessThreshold = 0 }, "--cb-success-threshold 0"},
		{"cb timeout", func(c *Config) { c.CBTimeoutDurationSecs = 0 }, "--cb-timeout-duration-secs 0"},
		{"health interval", func(c *Config) { c.HealthCheckIntervalSecs = 0 }, "--health-check-interval-secs 0"},
		{"health failures", func(c *Config) { c.HealthFailureThreshold = 0 }, "--health-failure-threshold 0"},
		{"health successes", func(c *Config) { c.HealthSuccessThreshold = 0 }, "--health-success-threshold 0"},
		{"health timeout", func(c *Config) { c.HealthCheckTimeoutSecs = 0 }, "--health-check-timeout-secs 0"},
		{"health endpoint", func(c *Config) { c.HealthCheckEndpoint = "health" }, `--health-check-endpoint "health" must start with /`},
		{"rate without bound", func(c *Config) { c.RateLimitTokensPerSecond = 5 }, "--rate-limit-tokens-per-second needs --max-concurrent-requests"},
		{"tenant tokens", func(c *Config) { c.TenantTokensPerSecond = -1 }, "--tenant-tokens-per-second -1"},
		{"tenant concurrency", func(c *Config) { c.TenantMaxConcurrentRequests = -1 }, "--tenant-max-concurrent-requests -1"},
		{"tenant name", func(c *Config) { c.Tenants = []TenantSpec{{Name: "default"}} }, `--tenants 1: name "default"`},
		{"tenant twice", func(c *Config) { c.Tenants = []TenantSpec{{Name: "a"}, {Name: "a"}} }, "--tenants a is given twice"},
		{"tenant raw key", func(c *Config) { c.Tenants = []TenantSpec{{Name: "a", Keys: []string{"auth:sk-secret"}}} }, "never the key itself"},
		{"tenant key shape", func(c *Config) { c.Tenants = []TenantSpec{{Name: "a", Keys: []string{"team-a"}}} }, "want auth:SHA256_HEX, header:VALUE or anonymous"},
		{"tenant key twice", func(c *Config) {
			c.Tenants = []TenantSpec{{Name: "a", Keys: []string{"header:x"}}, {Name: "b", Keys: []string{"header:x"}}}
		}, `tenant_key "header:x" is already tenant a's`},
		{"tenant weight", func(c *Config) { c.Tenants = []TenantSpec{{Name: "a", Weight: -2}} }, "weight -2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestValidPDConfigs(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.PDDisaggregation = true
	require.NoError(t, c.Validate(), "PD may start with no workers")
	port := 8998
	c.Prefill = []PrefillWorker{{URL: "http://[::1]:30001", BootstrapPort: &port}, {URL: "https://p2:30001"}}
	c.Decode = []string{"http://d:30002"}
	c.PrefillPolicy, c.DecodePolicy = PolicyCacheAware, PolicyPowerOfTwo
	c.DPRankFields = DPRankFieldsRouted
	require.NoError(t, c.Validate())
	assert.Equal(t, PolicyPowerOfTwo, c.PolicyFor(Decode))
	assert.Equal(t, PolicyCacheAware, c.PolicyFor(Regular))
}

// Every field has a snake_case json tag and the same yaml tag, so the file format is one;
// none names a file (the core is handed writers, not paths).
func TestConfigTagsAgree(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeOf(Config{})
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		j, y := f.Tag.Get("json"), f.Tag.Get("yaml")
		require.NotEmpty(t, j, f.Name)
		require.Equal(t, j, y, f.Name)
		require.Regexp(t, `^[a-z][a-z0-9_]*$`, j, f.Name)
		require.NotRegexp(t, `_(log|path|paths|file)$`, j, "%s: file settings are the commands' (server.Config, sim's flags)", f.Name)
		require.False(t, seen[j], "duplicate key %s", j)
		seen[j] = true
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.PDDisaggregation = true
	port := 9001
	seed := int64(42)
	c.Prefill = []PrefillWorker{{URL: "http://a:1", BootstrapPort: &port}, {URL: "http://b:1"}}
	c.Seed = &seed
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"bootstrap_port":null`)
	var back Config
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, c, back)

	// A partial file over the defaults keeps the other defaults.
	partial := DefaultConfig()
	require.NoError(t, json.Unmarshal([]byte(`{"cache_threshold":0.5,"policy":"round_robin"}`), &partial))
	require.Equal(t, 0.5, partial.CacheThreshold)
	require.Equal(t, 64, partial.BalanceAbsThreshold)

	r := c.RoutingOnly()
	require.Nil(t, r.Prefill)
	require.True(t, r.PDDisaggregation, "the mode is a routing setting")
}

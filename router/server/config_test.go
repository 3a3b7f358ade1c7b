package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestDefaultConfigIsValid(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, router.DefaultConfig(), c.Config, "the routing defaults are router.DefaultConfig's")
	assert.Equal(t, 30000, c.Port)
	assert.Equal(t, int64(512<<20), c.MaxPayloadSize)
}

func TestValidateNamesTheServerFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"routing setting", func(c *Config) { c.CacheThreshold = 1.7 }, "router: --cache-threshold 1.7 is outside [0,1]"},
		{"port", func(c *Config) { c.Port = 65536 }, "router: --port 65536"},
		{"prom port", func(c *Config) { c.PrometheusPort = -1 }, "--prometheus-port -1"},
		{"startup interval", func(c *Config) { c.WorkerStartupCheckInterval = 0 }, "--worker-startup-check-interval 0"},
		{"request timeout", func(c *Config) { c.RequestTimeoutSecs = 0 }, "--request-timeout-secs 0"},
		{"payload", func(c *Config) { c.MaxPayloadSize = 0 }, "--max-payload-size 0"},
		{"queue", func(c *Config) { c.QueueSize = -1 }, "--queue-size -1"},
		{"queue timeout", func(c *Config) { c.QueueTimeoutSecs = 0 }, "--queue-timeout-secs 0"},
		{"log level", func(c *Config) { c.LogLevel = "trace" }, `--log-level "trace"`},
		{"request id header", func(c *Config) { c.RequestIDHeaders = []string{"x id"} }, `--request-id-headers "x id"`},
		{"upstream idle", func(c *Config) { c.UpstreamIdleTimeoutMs = -1 }, "--upstream-idle-timeout-ms -1"},
		{"health timeout", func(c *Config) { c.HealthCheckTimeoutSecs = 0 }, "--health-check-timeout-secs 0"},
		{"health endpoint", func(c *Config) { c.HealthCheckEndpoint = "health" }, `--health-check-endpoint "health" must start with /`},
		{"selector without discovery", func(c *Config) { c.Selector = []string{"app=w"} }, "--selector needs --service-discovery"},
		{"bad selector", func(c *Config) { c.Selector = []string{"app"} }, `--selector "app" is not a label key=value`},
		{"discovery without selector", func(c *Config) { c.ServiceDiscovery = true }, "--service-discovery needs --selector"},
		{"discovery pd", func(c *Config) {
			c.ServiceDiscovery, c.PDDisaggregation = true, true
			c.PrefillSelector = []string{"r=p"}
		}, "needs --prefill-selector and --decode-selector"},
		{"client cert alone", func(c *Config) { c.ClientCertPath = "c.pem" }, "--client-cert-path and --client-key-path go together"},
		{"tls key alone", func(c *Config) { c.TLSKeyPath = "k.pem" }, "--tls-cert-path and --tls-key-path go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			var se *router.SettingError
			require.True(t, errors.As(err, &se), "a *router.SettingError, so serve can name a settings file's line")
		})
	}
}

// sgl-router treats --max-concurrent-requests ≤ 0 as no limit; so do we.
func TestMaxConcurrentRequestsZeroIsUnlimited(t *testing.T) {
	for _, n := range []int{0, -1, -5} {
		c := DefaultConfig()
		c.MaxConcurrentRequests = n
		assert.NoError(t, c.Validate(), n)
	}
}

// settingKeys lists the config-file keys of t's settings in declaration order, an embedded
// struct's in its place (the order encoding/json and YAML write them).
func settingKeys(t *testing.T, typ reflect.Type) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Anonymous {
			require.Empty(t, f.Tag.Get("json"), "an embedded config must stay inline in JSON")
			require.Equal(t, ",inline", f.Tag.Get("yaml"), "an embedded config must stay inline in YAML")
			keys = append(keys, settingKeys(t, f.Type)...)
			continue
		}
		keys = append(keys, f.Tag.Get("json"))
	}
	return keys
}

// Every setting, embedded ones included, has a snake_case json tag, the same yaml tag and a
// key of its own, so the file format stays one flat mapping.
func TestConfigTagsAgree(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	typ := reflect.TypeFor[Config]()
	var walk func(typ reflect.Type)
	walk = func(typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			j, y := f.Tag.Get("json"), f.Tag.Get("yaml")
			require.NotEmpty(t, j, f.Name)
			require.Equal(t, j, y, f.Name)
			require.Regexp(t, `^[a-z][a-z0-9_]*$`, j, f.Name)
			require.False(t, seen[j], "duplicate key %s", j)
			seen[j] = true
		}
	}
	walk(typ)
	require.Len(t, settingKeys(t, typ), len(seen))
}

func TestConfigJSONRoundTripIsFlatAndOrdered(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.PDDisaggregation = true
	port := 9001
	seed := int64(42)
	c.Prefill = []router.PrefillWorker{{URL: "http://a:1", BootstrapPort: &port}, {URL: "http://b:1"}}
	c.Seed = &seed
	c.APIKey = "secret"
	raw, err := json.Marshal(c)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"bootstrap_port":null`)
	require.True(t, strings.HasPrefix(string(raw), `{"host":"0.0.0.0","port":30000,"worker_urls":null,"pd_disaggregation":true,`), string(raw))
	require.True(t, strings.HasSuffix(string(raw), `"tls_cert_path":"","tls_key_path":""}`), string(raw))
	require.Contains(t, string(raw), `"tenants":null,"seed":42,"worker_url_allow":null,`,
		"the embedded routing settings print in their place, in their own order")
	require.Equal(t, settingKeys(t, reflect.TypeFor[Config]()), jsonKeys(t, raw), "one flat object in declaration order")
	y, err := yaml.Marshal(c)
	require.NoError(t, err)
	var yflat yaml.Node
	require.NoError(t, yaml.Unmarshal(y, &yflat))
	var ykeys []string
	for i, n := range yflat.Content[0].Content {
		if i%2 == 0 {
			ykeys = append(ykeys, n.Value)
		}
	}
	require.Equal(t, settingKeys(t, reflect.TypeFor[Config]()), ykeys, "YAML prints in declaration order too")
	var back Config
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, c, back)

	// A partial file over the defaults keeps the other defaults.
	partial := DefaultConfig()
	require.NoError(t, json.Unmarshal([]byte(`{"cache_threshold":0.5,"port":8000}`), &partial))
	require.Equal(t, 0.5, partial.CacheThreshold)
	require.Equal(t, 8000, partial.Port)
	require.Equal(t, 64, partial.BalanceAbsThreshold)

	require.Equal(t, "<redacted>", c.Redacted().APIKey)
	require.Equal(t, "secret", c.APIKey, "Redacted copies")
}

// jsonKeys returns the keys of the JSON object raw in the order they appear.
func jsonKeys(t *testing.T, raw []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		keys = append(keys, tok.(string))
		var v json.RawMessage
		require.NoError(t, dec.Decode(&v))
	}
	return keys
}

// One seed: Config.Seed seeds the server (no second seed option); nil draws one at random,
// which Seed reports for the log.
func TestConfigSeedIsTheServersSeed(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Seed = new(int64(7))
	s, err := New(Options{Config: c})
	require.NoError(t, err)
	require.Equal(t, int64(7), s.Seed())

	c.Seed = nil
	a, err := New(Options{Config: c})
	require.NoError(t, err)
	b, err := New(Options{Config: c})
	require.NoError(t, err)
	require.GreaterOrEqual(t, a.Seed(), int64(0))
	require.NotEqual(t, a.Seed(), b.Seed(), "a random seed per server (a 2^-63 chance to fail)")
}

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smg's tracing flags are serve's own now (no longer refused), with the sampling ratio and
// service name beside them, and the settings file takes the same keys.
func TestTraceFlags(t *testing.T) {
	cfg, ignored, err := parseServe(t, "--worker-urls", "http://a:1", "--enable-trace", "--otlp-traces-endpoint", "otel-collector:4318",
		"--trace-sampling-ratio", "0.25", "--trace-service-name", "router-eu")
	require.NoError(t, err)
	assert.Empty(t, ignored)
	require.NoError(t, cfg.Validate())
	assert.True(t, cfg.EnableTrace)
	assert.Equal(t, "otel-collector:4318", cfg.OTLPTracesEndpoint)
	assert.Equal(t, 0.25, cfg.TraceSamplingRatio)
	assert.Equal(t, "router-eu", cfg.TraceServiceName)

	cfg, _, err = parseServe(t, "--worker-urls", "http://a:1")
	require.NoError(t, err)
	assert.False(t, cfg.EnableTrace, "off by default")
	assert.Equal(t, "localhost:4318", cfg.OTLPTracesEndpoint)

	cfg, _, err = parseServe(t, "--enable-trace", "--otlp-traces-endpoint", "otel-collector")
	require.NoError(t, err)
	require.ErrorContains(t, cfg.Validate(), "--otlp-traces-endpoint")

	path := filepath.Join(t.TempDir(), "trace.yaml")
	require.NoError(t, os.WriteFile(path, []byte("enable_trace: true\notlp_traces_endpoint: https://tempo.example:4318/v1/traces\ntrace_sampling_ratio: 0.1\n"), 0o644))
	fileCfg, _, err := loadConfigFile(path)
	require.NoError(t, err)
	require.NoError(t, fileCfg.Validate())
	assert.True(t, fileCfg.EnableTrace)
	assert.Equal(t, "https://tempo.example:4318/v1/traces", fileCfg.OTLPTracesEndpoint)
	assert.Equal(t, 0.1, fileCfg.TraceSamplingRatio)
}

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
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

// serve's shutdown exports the spans still batched: after SIGTERM's drain, before it exits.
// The batcher's own delay (5 s) is longer than the test, so the spans the receiver holds when
// serve has returned came with the flush.
func TestServeFlushesTracesOnShutdown(t *testing.T) {
	var mu sync.Mutex
	var names []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		mu.Unlock()
	}))
	defer rcv.Close()
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"text":"ok","meta_info":{}}`))
	}))
	defer worker.Close()
	base, stop, done := startServe(t, "--worker-urls", worker.URL, "--enable-trace",
		"--otlp-traces-endpoint", strings.TrimPrefix(rcv.URL, "http://"))
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hello"}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	stop() // what SIGTERM does
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"POST /generate", "regular"}, names)
}

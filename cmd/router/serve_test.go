package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/server"
)

func TestServePrintConfig(t *testing.T) {
	out, err := run(t, strings.Fields(`serve --pd-disaggregation --policy random --prefill http://127.0.0.1:30001 none
		--decode http://127.0.0.1:30002 --host 127.0.0.1 --port 58887 --log-level debug --api-key s3cret --print-config`)...)
	require.NoError(t, err)
	for _, want := range []string{"pd_disaggregation: true", "policy: random", "url: http://127.0.0.1:30001",
		"bootstrap_port: null", "port: 58887", "log_level: debug", "cache_threshold: 0.3", "api_key: <redacted>"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "s3cret")
}

func TestServeConfigFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tuned.yaml")
	require.NoError(t, os.WriteFile(path, []byte("pd_disaggregation: true\npolicy: cache_aware\ncache_threshold: 0.7\nbalance_abs_threshold: 8\n"), 0o644))
	out, err := run(t, "serve", "--config", path, "--prefill", "http://p:1", "--decode", "http://d:1", "--balance-rel-threshold", "2", "--print-config")
	require.NoError(t, err)
	assert.Contains(t, out, "cache_threshold: 0.7")
	assert.Contains(t, out, "balance_abs_threshold: 8")
	assert.Contains(t, out, "balance_rel_threshold: 2")
	assert.Contains(t, out, "url: http://p:1")
}

func TestServeBadCombinationsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--prefill", "http://p:1", "--print-config"}, "--prefill needs --pd-disaggregation"},
		{[]string{"serve", "--cache-threshold", "1.7", "--print-config"}, "--cache-threshold 1.7 is outside [0,1]"},
		{[]string{"serve", "--policy", "nope", "--print-config"}, "--policy"},
		{[]string{"serve", "--no-such-flag"}, "no-such-flag"},
		{[]string{"serve", "stray"}, `unexpected argument "stray"`},
		{[]string{"serve", "--config", "/nonexistent.yaml"}, "--config"},
	} {
		_, err := run(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

// An sgl-router flag pdrouter does not implement stops serve with an error naming it (running
// silently without it is worse); --allow-ignored-flags turns the error into a warning.
func TestServeRefusesIgnoredSGLangFlags(t *testing.T) {
	_, _, err := runWithStderr(t, "serve", "--log-dir", "/tmp/x", "--enable-igw", "--print-config")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sgl-router flags pdrouter does not implement: --log-dir (log files")
	assert.Contains(t, err.Error(), "--allow-ignored-flags")

	_, out, err := runWithStderr(t, "serve", "--log-dir", "/tmp/x", "--enable-igw", "--print-config", "--allow-ignored-flags")
	require.NoError(t, err)
	assert.Contains(t, out, "warning: ignoring sgl-router flags pdrouter does not implement: --log-dir (log files")

	// Discovery and TLS flags are implemented now: not ignored.
	_, _, err = runWithStderr(t, "serve", "--service-discovery", "--selector", "app=sglang", "--ca-cert-paths", "/tmp/ca.pem", "--print-config")
	require.NoError(t, err)
}

// TestServeEndToEnd runs the real command in-process on port 0 in front of two recording
// workers, sends a PD request, then stops it with a cancelled context.
func TestServeEndToEnd(t *testing.T) {
	worker := func() *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte(`{"text":"ok","meta_info":{}}`))
		}))
	}
	p, d := worker(), worker()
	defer p.Close()
	defer d.Close()
	dlog := filepath.Join(t.TempDir(), "decisions.jsonl")

	pr, pw := io.Pipe()
	cmd := newRootCmd()
	var stdout bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"serve", "--pd-disaggregation", "--prefill", p.URL, "9001", "--decode", d.URL,
		"--host", "127.0.0.1", "--port", "0", "--prometheus-host", "127.0.0.1", "--prometheus-port", "0",
		"--seed", "7", "--decision-log", dlog})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()

	addr := regexp.MustCompile(`router listening on (http://\S+) \(metrics on (http://\S+)\)`)
	sc := bufio.NewScanner(pr)
	var base, metrics string
	for sc.Scan() {
		if m := addr.FindStringSubmatch(sc.Text()); m != nil {
			base, metrics = m[1], m[2]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.NotEmpty(t, base, "serve never printed its address")

	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hello"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, `{"text":"ok","meta_info":{}}`, string(body))

	// RFC 9112 §6.3: with Content-Length and Transfer-Encoding, chunked wins.
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	requireConflictingFramingChunkedWins(t, c)

	mresp, err := http.Get(metrics)
	require.NoError(t, err)
	mbody, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	assert.Contains(t, string(mbody), `pdrouter_requests_total{code="200",route="/generate"} 3`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after cancellation")
	}
	raw, err := os.ReadFile(dlog)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"seq":1`)
	assert.Contains(t, string(raw), `"route":"/generate"`)
}

// requireConflictingFramingChunkedWins sends a request with both Content-Length (too short)
// and Transfer-Encoding: chunked on c, then a plain one, and checks that both are answered 200:
// net/http frames by Transfer-Encoding (RFC 9112 §6.3), so the connection stays in step.
func requireConflictingFramingChunkedWins(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := io.WriteString(c, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"text\":\"hello\"}\r\n0\r\n\r\n"+
		"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\":\"hi\"}")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "response %d", i)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "response %d: %s", i, body)
	}
}

// startServe runs `router serve args…` in-process and returns its base URL, a stop function
// (the SIGTERM path: cancel the command's context) and the command's result channel.
func startServe(t *testing.T, args ...string) (base string, stop context.CancelFunc, done <-chan error) {
	base, _, stop, done = startServeMetrics(t, args...)
	return base, stop, done
}

// startServeMetrics is startServe that also returns the /metrics URL.
func startServeMetrics(t *testing.T, args ...string) (base, metrics string, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(pw)
	cmd.SetArgs(append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--prometheus-host", "127.0.0.1", "--prometheus-port", "0"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- cmd.ExecuteContext(ctx); pw.Close() }()
	addr := regexp.MustCompile(`router listening on (http://\S+) \(metrics on (http://\S+)\)`)
	sc := bufio.NewScanner(pr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := addr.FindStringSubmatch(sc.Text()); m != nil {
			base, metrics = m[1], m[2]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if base == "" {
		err := <-ch
		t.Fatalf("serve never printed its address: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Cleanup(cancel)
	return base, metrics, cancel, ch
}

// SIGTERM with a stream in flight: the stream completes, new requests are refused, the
// process exits.
func TestServeGracefulShutdown(t *testing.T) {
	gate := make(chan struct{})
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"text\":\"a\"}\n\n")
		w.(http.Flusher).Flush()
		<-gate
		_, _ = io.WriteString(w, "data: {\"text\":\"ab\"}\n\ndata: [DONE]\n\n")
	}))
	defer worker.Close()
	base, stop, done := startServe(t, "--worker-urls", worker.URL, "--shutdown-timeout-secs", "20")

	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"x","stream":true}`))
	require.NoError(t, err)
	rd := bufio.NewReader(resp.Body)
	first, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "data: {\"text\":\"a\"}\n", first)

	stop() // what SIGTERM does
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := http.Get(base + "/health")
		if err != nil {
			break // the listener is closed: new requests are refused
		}
		c.Body.Close()
		require.True(t, time.Now().Before(deadline), "listener still accepting after shutdown began")
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "\ndata: {\"text\":\"ab\"}\n\ndata: [DONE]\n\n", string(rest), "the in-flight stream completed")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit")
	}
}

// The API key can come from a file or the environment, so it stays out of ps; it is never
// printed.
func TestServeAPIKeyFromFileOrEnv(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("s3cret-from-file\n"), 0o600))
	cfg := server.DefaultConfig()
	require.NoError(t, apiKeyFrom(&cfg, false, keyFile))
	assert.Equal(t, "s3cret-from-file", cfg.APIKey)

	t.Setenv(apiKeyEnv, "s3cret-from-env")
	cfg = server.DefaultConfig()
	require.NoError(t, apiKeyFrom(&cfg, false, ""))
	assert.Equal(t, "s3cret-from-env", cfg.APIKey)
	cfg = server.DefaultConfig()
	cfg.APIKey = "flag"
	require.NoError(t, apiKeyFrom(&cfg, true, ""))
	assert.Equal(t, "flag", cfg.APIKey, "--api-key wins over the environment")
	assert.ErrorContains(t, apiKeyFrom(&cfg, true, keyFile), "--api-key-file and --api-key")

	out, err := run(t, "serve", "--api-key-file", keyFile, "--print-config")
	require.NoError(t, err)
	assert.Contains(t, out, "api_key: <redacted>")
	assert.NotContains(t, out, "s3cret")
}

// With --log-json every line serve writes is a JSON object: the ignored-flags warning, the
// listening line, the access log and the logger's own lines.
func TestServeLogJSONCoversEveryLine(t *testing.T) {
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"text":"ok","meta_info":{}}`))
	}))
	defer worker.Close()
	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"serve", "--worker-urls", worker.URL, "--host", "127.0.0.1", "--port", "0",
		"--prometheus-host", "127.0.0.1", "--prometheus-port", "0", "--log-json", "--access-log", "-", "--log-dir", "/tmp/x", "--allow-ignored-flags"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()

	// The pipe is drained by its own goroutine: serve logs on the request path and a
	// synchronous pipe nobody reads would block it.
	linec := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			linec <- sc.Text()
		}
		close(linec)
	}()
	var lines []string
	base := ""
	for l := range linec {
		lines = append(lines, l)
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "router listening" {
			base, _ = m["url"].(string)
			break
		}
	}
	require.NotEmpty(t, base, "no JSON listening line in %q", lines)
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
	require.NoError(t, err)
	resp.Body.Close()
	for l := range linec {
		lines = append(lines, l)
		if strings.Contains(l, `"msg":"access"`) {
			break
		}
	}
	cancel()
	require.NoError(t, <-done)
	for l := range linec {
		lines = append(lines, l)
	}
	require.NotEmpty(t, lines)
	var msgs []string
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "not JSON: %q", l)
		msgs = append(msgs, fmt.Sprint(m["msg"]))
	}
	assert.Contains(t, strings.Join(msgs, "|"), "ignoring sgl-router flags")
	assert.Contains(t, msgs, "access")
	assert.Contains(t, msgs, "worker registered")
}

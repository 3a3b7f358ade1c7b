//go:build integration

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	redactUser   = "alice"
	redactSecret = "s3cretPassw0rd"
)

// credWorker is an SGLang stand-in (dp_size 2) that serves only requests carrying
// alice:s3cret as Basic auth — what Go's client sends for a URL's user info — and counts the
// others. mode "ok" answers; "fail" answers inference with 500 and resets /generate and
// /flush_cache connections (transport errors; Go's text of the latter quotes the URL).
type credWorker struct {
	srv     *httptest.Server
	mu      sync.Mutex
	refused int
	served  int
}

func startCredWorker(t *testing.T, mode string) *credWorker {
	t.Helper()
	cw := &credWorker{}
	cw.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if u, p, ok := r.BasicAuth(); !ok || u != redactUser || p != redactSecret {
			cw.mu.Lock()
			cw.refused++
			cw.mu.Unlock()
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		reset := func() bool { // a transport error: Go's text of it quotes the URL
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return true
				}
			}
			return false
		}
		switch r.URL.Path {
		case "/flush_cache":
			if mode == "fail" && reset() {
				return
			}
			return
		case "/health", "/health_generate":
			return
		case "/get_server_info":
			_, _ = w.Write([]byte(`{"dp_size":2,"model_path":"m","disaggregation_mode":"null"}`))
			return
		case "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		cw.mu.Lock()
		cw.served++
		cw.mu.Unlock()
		if mode == "fail" {
			if r.URL.Path == "/generate" && reset() {
				return
			}
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(`{"text":"ok","meta_info":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	t.Cleanup(cw.srv.Close)
	return cw
}

func (cw *credWorker) url() string {
	return strings.Replace(cw.srv.URL, "http://", "http://"+redactUser+":"+redactSecret+"@", 1)
}

func (cw *credWorker) counts() (served, refused int) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.served, cw.refused
}

// buildRouterBinary builds this command into a temporary directory, without default.pgo's
// profile-guided optimisation: the same program, from the package builds the other tests
// already made (with the profile, every package would compile again, ~50 s of CPU).
func buildRouterBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "router")
	out, err := exec.Command("go", "build", "-pgo=off", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A real `router serve` process with credentialed worker URLs (user name and password):
// requests reach the workers with the credentials as Basic auth, and after a run through every
// route that prints workers — successes, a failing worker (5xx and a reset connection), a
// worker that does not answer, GET and DELETE by URL, listings, /get_router_config, /metrics,
// SIGTERM — neither the secret nor the user name is in stdout, stderr, the decision log, the
// access log, a response or /metrics. `serve --print-config` hides them too.
func TestIntegrationServeRedactsCredentials(t *testing.T) {
	bin := buildRouterBinary(t)
	good, bad := startCredWorker(t, "ok"), startCredWorker(t, "fail")
	deadSrv := httptest.NewServer(http.NotFoundHandler())
	dead := strings.Replace(deadSrv.URL, "http://", "http://"+redactUser+":"+redactSecret+"@", 1)
	deadSrv.Close()

	dir := t.TempDir()
	dlogPath, accessPath := filepath.Join(dir, "decisions.jsonl"), filepath.Join(dir, "access.log")
	metricsPort := freeLoopbackPort(t)
	args := []string{"serve", "--host", "127.0.0.1", "--port", "0", "--prometheus-host", "127.0.0.1",
		"--prometheus-port", fmt.Sprint(metricsPort), "--log-level", "debug", "--seed", "1",
		"--policy", "round_robin", "--dp-aware", "--retry-max-retries", "1", "--retry-initial-backoff-ms", "1",
		"--decision-log", dlogPath, "--access-log", accessPath,
		"--worker-urls", good.url(), bad.url()}

	printed, err := exec.Command(bin, append(args, "--print-config")...).CombinedOutput()
	require.NoError(t, err, "%s", printed)
	require.Contains(t, string(printed), "http://***@127.0.0.1:")

	cmd := exec.Command(bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderrPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var stderr bytes.Buffer
	stderrDone := make(chan struct{})
	listening := make(chan string, 1)
	go func() {
		defer close(stderrDone)
		re := regexp.MustCompile(`router listening on (http://\S+)`)
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-listening:
	case <-time.After(60 * time.Second):
		t.Fatal("router serve did not start")
	}

	var responses strings.Builder
	do := func(method, path, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&responses, "%s %s → %d\n", method, redactedPathForLog(path), resp.StatusCode)
		for k, v := range resp.Header {
			fmt.Fprintf(&responses, "%s: %s\n", k, strings.Join(v, ","))
		}
		responses.Write(raw)
		responses.WriteString("\n")
		return resp.StatusCode
	}

	// Wait until both workers take traffic (their first probes pass within a second).
	deadline := time.Now().Add(20 * time.Second)
	for do(http.MethodGet, "/readiness", "") != http.StatusOK {
		require.True(t, time.Now().Before(deadline), "router never ready: %s", stderr.String())
		time.Sleep(50 * time.Millisecond)
	}
	statuses := map[int]int{}
	for i := range 8 {
		statuses[do(http.MethodPost, "/generate", fmt.Sprintf(`{"text":"x%d"}`, i))]++
		statuses[do(http.MethodPost, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"y%d","max_tokens":1}`, i))]++
	}
	assert.Positive(t, statuses[http.StatusOK], "the credentialed worker served: %v", statuses)
	assert.Greater(t, len(statuses), 1, "some requests failed on the failing worker: %v", statuses)
	served, refused := good.counts()
	assert.Positive(t, served)
	assert.Zero(t, refused, "every request reached the worker with its Basic auth")
	badServed, badRefused := bad.counts()
	assert.Positive(t, badServed, "the failing worker was tried")
	assert.Zero(t, badRefused)

	for _, path := range []string{"/workers", "/get_loads", "/list_workers", "/get_router_config", "/readiness",
		"/health_generate", "/v1/models", "/workers/" + url.PathEscape(good.url()), "/workers/" + url.PathEscape(good.url()+"@1")} {
		do(http.MethodGet, path, "")
	}
	assert.Equal(t, http.StatusPartialContent, do(http.MethodPost, "/flush_cache", ""), "the failing worker's flush failed")
	assert.Equal(t, http.StatusBadGateway, do(http.MethodPost, "/workers", `{"url":"`+dead+`"}`), "a dead worker: its error names it")
	assert.Equal(t, http.StatusConflict, do(http.MethodPost, "/workers", `{"url":"`+good.url()+`"}`))
	assert.Equal(t, http.StatusAccepted, do(http.MethodDelete, "/workers/"+bad.url(), ""), "DELETE by raw URL")
	assert.Equal(t, http.StatusNotFound, do(http.MethodDelete, "/workers/"+url.PathEscape(bad.url()), ""), "gone")
	assert.Equal(t, http.StatusNotFound, do(http.MethodPost, "/remove_worker?url="+url.QueryEscape(dead), ""))

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), "pdrouter_")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-stderrDone:
	case <-time.After(60 * time.Second):
		t.Fatal("router serve did not stop on SIGTERM")
	}
	_ = cmd.Wait()

	dlog, err := os.ReadFile(dlogPath)
	require.NoError(t, err)
	access, err := os.ReadFile(accessPath)
	require.NoError(t, err)
	outputs := map[string]string{"print-config": string(printed), "stdout": stdout.String(), "stderr": stderr.String(),
		"decision log": string(dlog), "access log": string(access), "responses": responses.String(), "metrics": string(metrics)}
	for name, out := range outputs {
		assert.NotContains(t, out, redactSecret, "%s holds the secret", name)
		assert.NotContains(t, out, redactUser, "%s holds the user name", name)
	}
	// The workers are still named, without their credentials.
	for _, name := range []string{"decision log", "access log", "responses", "metrics", "stderr"} {
		assert.Contains(t, outputs[name], "***@127.0.0.1:", name)
	}
	assert.Contains(t, string(access), "DELETE /workers/http://***@127.0.0.1:")
	var cfg struct {
		WorkerURLs []string `json:"worker_urls"`
	}
	i := strings.Index(responses.String(), `{"host"`)
	require.GreaterOrEqual(t, i, 0)
	require.NoError(t, json.NewDecoder(strings.NewReader(responses.String()[i:])).Decode(&cfg))
	assert.Equal(t, []string{strings.Replace(good.srv.URL, "://", "://***@", 1), strings.Replace(bad.srv.URL, "://", "://***@", 1)}, cfg.WorkerURLs)
}

// redactedPathForLog keeps the test's own record of what it asked free of the credentials it
// sent (only the router's answers are under test).
func redactedPathForLog(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if q, err := url.QueryUnescape(p); err == nil {
		p = q
	}
	return strings.ReplaceAll(strings.ReplaceAll(p, redactSecret, "SECRET"), redactUser, "USER")
}

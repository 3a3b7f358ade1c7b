//go:build integration

package server

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startUvicorn runs testdata/uvicorn_worker.py under uvicorn (Debian's python3-uvicorn and
// python3-fastapi, installed by make uvicorn, which make test-integration runs) and returns its
// URL. Without them the test ends as testutil.NeedTool says: a skip naming the target in a
// plain go test, a failure under make.
func startUvicorn(t *testing.T) string {
	t.Helper()
	py := testutil.Python(t, "uvicorn", "uvicorn", "fastapi")
	port := testutil.FreePort(t, "127.0.0.1")
	cmd := exec.Command(py, "-m", "uvicorn", "--app-dir", "testdata", "uvicorn_worker:app",
		"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--log-level", "warning")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "python3 -m uvicorn (apt-get install python3-uvicorn python3-fastapi; make test-integration does)")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	// A Python process takes a moment to import FastAPI; bounded polling is its only signal.
	ok := assert.Eventually(t, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
	require.True(t, ok, "uvicorn did not start:\n%s", out.String())
	return url
}

// The inference legs' client (legClient: the h1 transport for http://) against the server
// stack SGLang runs on: streamed and plain responses byte for byte, hundreds of requests on
// reused connections from concurrent clients, and a 413 uvicorn sends before the body is read.
func TestIntegrationUvicornUpstream(t *testing.T) {
	url := startUvicorn(t)
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{url}
	cfg.Policy = router.PolicyRoundRobin
	cfg.DisableRetries = true
	tr := startRouter(t, cfg)

	// Streamed: every event relayed as uvicorn sent it, chunked encoding and all.
	status, _, body := tr.post(t, "/generate", `{"text":"hi","stream":true,"sampling_params":{"max_new_tokens":50}}`, nil)
	require.Equal(t, http.StatusOK, status, body)
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "data: {\"text\": \"%s\", \"meta_info\": {\"completion_tokens\": %d}}\n\n", strings.Repeat("t", i), i)
	}
	want.WriteString("data: [DONE]\n\n")
	assert.Equal(t, want.String(), body)

	// Concurrent clients, plain and streamed, on the pooled connections.
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				stream := i%2 == 0
				b := fmt.Sprintf(`{"text":"c%d-%d","stream":%v,"sampling_params":{"max_new_tokens":%d}}`, c, i, stream, 1+i%7)
				resp, err := http.Post(tr.srv.URL+"/generate", "application/json", strings.NewReader(b))
				if err != nil {
					errs <- err.Error()
					continue
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || (stream && !strings.HasSuffix(string(got), "data: [DONE]\n\n")) ||
					(!stream && !strings.Contains(string(got), `"text":"`+strings.Repeat("t", 1+i%7)+`"`)) {
					errs <- fmt.Sprintf("%d %q", resp.StatusCode, got)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var failures []string
	for e := range errs {
		failures = append(failures, e)
	}
	assert.Empty(t, failures, "400 requests through uvicorn")

	// The app answers 413 without reading a 4 MiB body: the client gets the 413, not a 502.
	status, _, body = tr.post(t, "/generate", `{"text":"`+strings.Repeat("x", 4<<20)+`"}`, nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	assert.Contains(t, body, "request too large")

	// And the pool recovers: the next request works.
	status, _, body = tr.post(t, "/generate", `{"text":"after"}`, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

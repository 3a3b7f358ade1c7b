package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
)

// sseServer answers every chat request with three tokens, usage and [DONE], immediately; it
// counts /flush_cache calls and records the Authorization header it saw.
func sseServer(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path == "/flush_cache" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\" t%d\"}}]}\n\n", i)
		}
		io := `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":3}}}` + "\n\ndata: [DONE]\n\n"
		fmt.Fprint(w, io)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auth...)
	}
}

func TestBenchCommand(t *testing.T) {
	srv, auth := sseServer(t)
	dir := filepath.Join(t.TempDir(), "on")
	out, err := run(t, "bench", "--url", srv.URL, "--workload", "random", "--num-prompts", "6",
		"--input-len", "8", "--output-len", "3", "--concurrency", "1,2", "--out", dir, "--quiet",
		"--header", "Authorization: Bearer k", "--slo", "ttft=1000,tpot=1000", "--flush-cache")
	require.NoError(t, err)
	assert.Contains(t, out, "bench  workload=random  seed=1")
	assert.Regexp(t, `(?m)^c1\s+6\s+0\s`, out)
	assert.Regexp(t, `(?m)^c2\s+6\s+0\s`, out)
	assert.Contains(t, out, "good")
	res, recs, err := reports.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, res.Levels, 2)
	assert.Len(t, recs, 12)
	seen := auth()
	for _, a := range seen {
		assert.Equal(t, "Bearer k", a)
	}
	assert.Len(t, seen, 16, "12 requests, the flush between the levels, the two GETs describing the target and /v1/models (no --model)")

	// router report renders what bench wrote.
	md, err := run(t, "report", dir, "--format", "md")
	require.NoError(t, err)
	assert.Contains(t, md, "| c2 | 6 | 0 |")
}

func TestBenchCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, `"url" not set`},
		{[]string{"bench", "--url", "http://127.0.0.1:1", "--slo", "ttft"}, "--slo"},
		{[]string{"bench", "--url", "http://127.0.0.1:1", "--header", "nocolon"}, "--header"},
		{[]string{"bench", "--url", "http://127.0.0.1:1", "--concurrency", "0"}, "--concurrency"},
		{[]string{"bench", "--url", "ftp://x"}, "--url"},
		{[]string{"bench", "--url", "127.0.0.1:30000"}, `--url "127.0.0.1:30000" must start with http:// or https:// (e.g. http://127.0.0.1:30000)`},
	} {
		_, err := run(t, tc.args...)
		assert.ErrorContains(t, err, tc.want, strings.Join(tc.args, " "))
	}
}

// A run whose requests all fail exits 1 and names the cause on stderr, after the table;
// --max-error-rate 1 accepts it. A --url nothing answers at exits 1 at once, naming it.
func TestBenchCommandFailedRequestsExitNonZero(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 1, execute([]string{"bench", "--url", deadURL, "--requests", "3"}, &stdout, &stderr))
	assert.Empty(t, stdout.String(), "no table of zeros")
	assert.True(t, strings.HasPrefix(stderr.String(), "router: bench: --url "+deadURL+": nothing answers there"), stderr.String())
	assert.Contains(t, stderr.String(), "connection refused")

	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"invalid api key","type":"unauthorized","code":401}}`)
	}))
	t.Cleanup(unauthorized.Close)
	for _, tc := range []struct{ url, kind, cause string }{
		{unauthorized.URL, "http_401 ×3", "invalid api key"},
	} {
		args := []string{"bench", "--url", tc.url, "--workload", "random", "--num-prompts", "3",
			"--input-len", "8", "--output-len", "3"}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 1, execute(args, &stdout, &stderr), tc.url)
		assert.Regexp(t, `(?m)^c1\s+3\s+3\s`, stdout.String())
		assert.Contains(t, stderr.String(), "router: bench: 1 level(s) failed more than --max-error-rate 0")
		assert.Contains(t, stderr.String(), "level c1: 3 of 3 requests failed (100.0%)")
		assert.Contains(t, stderr.String(), tc.kind+", first: ")
		assert.Contains(t, stderr.String(), tc.cause)
		assert.Equal(t, 1, strings.Count(stderr.String(), tc.cause), "the cause once, not also as an example line")

		stdout.Reset()
		stderr.Reset()
		assert.Equal(t, 0, execute(append(args, "--max-error-rate", "1"), &stdout, &stderr), stderr.String())
	}
}

// bench --requests beyond the workload draws more conversations (and says so); a custom
// --dataset-path sends its prompts with their output lengths.
func TestBenchCommandRequestsAndDataset(t *testing.T) {
	srv, _ := sseServer(t)
	out, stderr, err := runWithStderr(t, "bench", "--url", srv.URL, "--workload", "multiturn", "--conversations", "2",
		"--turns", "2", "--system-prompt-len", "8", "--question-len", "4", "--output-len", "3", "--requests", "7", "--concurrency", "2")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^c2\s+7\s+0\s`, out, "--requests 7 recorded, not the 4 two conversations hold")
	assert.Contains(t, stderr, "bench: --requests 7 (+ --warmup 0): the multiturn workload holds 2 conversations × 2 turns; drawing 4 conversations")
	assert.NotContains(t, stderr, "ran out")

	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt": "Say hello to the router.", "output_len": 5}
{"prompt": "Count to three.", "output_len": 7}
`), 0o644))
	dir := filepath.Join(t.TempDir(), "ds")
	out, err = run(t, "bench", "--url", srv.URL, "--workload", "custom", "--dataset-path", path, "--out", dir, "--quiet")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^c1\s+2\s+0\s`, out)
	res, _, err := reports.ReadDir(dir)
	require.NoError(t, err)
	assert.JSONEq(t, strconv.Quote(path), string(res.Meta.Workload.Params["dataset_path"]))
}

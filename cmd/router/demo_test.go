package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemoHelpExplainsIt(t *testing.T) {
	out, err := run(t, "demo", "--help")
	require.NoError(t, err)
	for _, want := range []string{"fakeworker PD cluster", "2 prefill + 2 decode", "DP-attention", "cache_aware, --dp-aware",
		"router bench", "router sim", "P50/P95 TTFT and TPOT", "HTML report", "127.0.0.1", "Ctrl-C",
		"--out", "--concurrency", "--requests", "--profile", "--speedup", "--seed", "--net-latency"} {
		assert.Contains(t, out, want)
	}
	root, err := run(t, "--help")
	require.NoError(t, err)
	assert.Contains(t, root, "demo")
}

// TestDemoRuns runs `router demo` on instant workers with a few requests per level.
func TestDemoRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := run(t, "demo", "--profile", "instant", "--concurrency", "1,2", "--requests", "6", "--out", dir)
	require.NoError(t, err, out)
	for _, want := range []string{"TTFT p50 ms", "TPOT p95 ms", "c1", "c2", "routing decisions", "results in " + dir} {
		assert.Contains(t, out, want)
	}
	for _, f := range []string{"report.html", "comparison.txt", "live/results.json", "sim/results.json"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.NoError(t, err, f)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--speedup", "0"}, "--speedup 0"},
		{[]string{"demo", "--profile", "nope"}, "--profile"},
		{[]string{"demo", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"demo", "stray"}, "stray"},
	} {
		_, err := run(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

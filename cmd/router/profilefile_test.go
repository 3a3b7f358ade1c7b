package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every preset printed by profiles --show reads back as the same profile.
func TestProfileShowRoundTrips(t *testing.T) {
	dir := t.TempDir()
	for _, p := range engine.Presets() {
		out, err := run(t, "fakeworker", "profiles", "--show", p.Name)
		require.NoError(t, err, p.Name)
		assert.Contains(t, out, "# prefill: fixed seconds per step", p.Name)
		path := filepath.Join(dir, p.Name+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
		got, err := loadProfileFile(path)
		require.NoError(t, err, "%s:\n%s", p.Name, out)
		assert.Equal(t, p, got, p.Name)
	}
}

// A profile file runs in sim (recorded in results.json) and is refused with file and line
// when a key is unknown or a value is wrong.
func TestProfileFileInSimAndErrors(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "fakeworker", "profiles", "--show", "llama3-8b-h100")
	require.NoError(t, err)
	slow := strings.Replace(strings.Replace(out, "name: llama3-8b-h100", "name: my-gpu", 1), "a0: ", "a0: 1e-3 #", 1)
	path := filepath.Join(dir, "my-gpu.yaml")
	require.NoError(t, os.WriteFile(path, []byte(slow), 0o600))
	_, err = run(t, "sim", "--profile", path, "--concurrency", "2", "--requests", "8", "--out", filepath.Join(dir, "run"), "--format", "json")
	require.NoError(t, err)
	res, err := reports.ReadResults(filepath.Join(dir, "run"))
	require.NoError(t, err)
	assert.Contains(t, string(res.Meta.Cluster), `"profile":"my-gpu"`)
	assert.Contains(t, string(res.Meta.Cluster), `"a0":0.001`)

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\na0: 0.001\nmax_total_tokens: 1000\nbogus: 1\n"), 0o600))
	_, err = run(t, "sim", "--profile", bad, "--requests", "4")
	require.ErrorContains(t, err, "line 4: field bogus not found")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\na0: -1\na1: 1e-5\nmax_total_tokens: 1000\n"), 0o600))
	_, err = run(t, "fakeworker", "--profile", bad)
	require.ErrorContains(t, err, "a0 = -1 must be a finite number ≥ 0")
}

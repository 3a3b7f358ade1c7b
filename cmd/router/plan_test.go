package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// planSmall is a plan that runs in about a second under -race: llama3-8b on H100s, 120 random
// requests at 20 req/s, 4 GPUs.
var planSmall = []string{"sim", "plan", "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "4",
	"--workload", "random", "--input-len", "1024", "--output-len", "64", "--rate", "20", "--requests", "120",
	"--slo-ttft-ms", "200", "--slo-tpot-ms", "15", "--verify-seeds", "2", "--parallel", "2"}

// The command end to end: the ranked table on stdout (the same bytes at the same seed), progress
// on stderr, the winner's settings file as serve reads it, and an overlay kustomize renders into
// the base router reading those settings plus SGLang prefill and decode Deployments of the
// winner's counts and GPUs.
func TestSimPlanWritesSettingsAndOverlay(t *testing.T) {
	dir := t.TempDir()
	settings, overlayDir := filepath.Join(dir, "plan.yaml"), filepath.Join(dir, "overlay")
	args := append(append([]string{}, planSmall...), "--vary", "policy=cache_aware,round_robin",
		"--write-config", settings, "--overlay", overlayDir, "--overlay-base", "../../deploy/k8s/base")
	out, stderr, err := runWithStderr(t, args...)
	require.NoError(t, err, stderr)
	t.Log("\n" + out)
	assert.Contains(t, out, "TTFT p90 ms")
	assert.Contains(t, stderr, "sim plan: clusters 1/")
	assert.Contains(t, stderr, "sim plan: verify ")
	m := regexp.MustCompile(`winner: (\d+)×tp(\d+) \+ (\d+)×tp(\d+) \(policy=(\w+)\), (\d+) GPUs`).FindStringSubmatch(out)
	require.Len(t, m, 7, out)
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	np, ptp, nd, dtp, policy := num(m[1]), num(m[2]), num(m[3]), num(m[4]), m[5]

	cfg, _, err := loadConfigFile(settings)
	require.NoError(t, err)
	assert.True(t, cfg.PDDisaggregation)
	assert.Equal(t, policy, cfg.Policy)

	again, err := run(t, planSmall...)
	require.NoError(t, err)
	plain, err := run(t, planSmall...)
	require.NoError(t, err)
	assert.Equal(t, plain, again, "same flags and seed: the same table")

	r := checkRendering(t, overlayDir, "pdrouter-plan")
	assert.Equal(t, 1, r.kinds["ConfigMap"])
	router := r.router(t)
	rargs := router.Spec.Template.Spec.Containers[0].Args
	assert.Equal(t, []string{"--config", "/etc/pdrouter/settings.yaml"}, rargs[len(rargs)-2:])
	vols := router.Spec.Template.Spec.Volumes
	require.Len(t, vols, 1)
	require.NotNil(t, vols[0].ConfigMap)
	assert.True(t, strings.HasPrefix(vols[0].ConfigMap.Name, "pdrouter-settings-"), "the generated ConfigMap, by its hashed name")
	for _, d := range r.deployments {
		if d.Name == "pdrouter" {
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		args := strings.Join(c.Args, " ")
		gpus := c.Resources.Limits["nvidia.com/gpu"]
		switch d.Name {
		case "sglang-prefill":
			assert.EqualValues(t, np, *d.Spec.Replicas)
			assert.Contains(t, args, "--disaggregation-mode prefill --tp-size "+strconv.Itoa(ptp))
			assert.Equal(t, int64(ptp), gpus.Value())
			assert.Equal(t, "8998", d.Spec.Template.Annotations["sglang.ai/bootstrap-port"])
		case "sglang-decode":
			assert.EqualValues(t, nd, *d.Spec.Replicas)
			assert.Contains(t, args, "--disaggregation-mode decode --tp-size "+strconv.Itoa(dtp))
			assert.Equal(t, int64(dtp), gpus.Value())
		default:
			t.Errorf("unexpected Deployment %s", d.Name)
		}
		assert.Contains(t, args, "--model-path meta-llama/Llama-3.1-8B-Instruct")
	}
	assert.Len(t, r.deployments, 3)
	raw, err := os.ReadFile(filepath.Join(overlayDir, "router-settings.yaml"))
	require.NoError(t, err)
	body, err := os.ReadFile(settings)
	require.NoError(t, err)
	assert.Equal(t, string(body), string(raw), "the overlay carries the settings file")
	for _, o := range kustomizeBuild(t, overlayDir) {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			assert.Equal(t, string(body), cm.Data["settings.yaml"])
		}
	}
}

// Flags the plan chooses, or that mean another thing here, are refused by name.
func TestSimPlanRefusesFlagsItChooses(t *testing.T) {
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--prefill", "2"}, "--prefill is what the plan chooses"},
		{[]string{"--tp-size", "2"}, "--tp-size is what the plan chooses with --model-path"},
		{[]string{"--slo", "ttft=100"}, "--slo-ttft-ms"},
		{[]string{"--slo-percentile", "p80"}, "--slo-percentile \"p80\""},
		{[]string{"--shard", "0/2"}, "--shard 0/2 needs --out"},
		{[]string{"--overlay", t.TempDir(), "--overlay-base", "/nonexistent/base"}, "--overlay-base /nonexistent/base is not a directory"},
	} {
		_, err := run(t, append(append([]string{}, planSmall...), tc.extra...)...)
		assert.ErrorContains(t, err, tc.want, tc.extra)
	}
}

// plan --shard writes the sweep's shard files; --merge with the same flags ranks them as the
// whole plan does.
func TestSimPlanShardsAndMerge(t *testing.T) {
	dir := t.TempDir()
	want, err := run(t, planSmall...)
	require.NoError(t, err)
	var dirs []string
	for i := range 2 {
		d := filepath.Join(dir, "shard-"+strconv.Itoa(i))
		out, err := run(t, append(append([]string{}, planSmall...), "--shard", strconv.Itoa(i)+"/2", "--out", d)...)
		require.NoError(t, err)
		assert.Contains(t, out, "plan shard "+strconv.Itoa(i)+"/2 written to")
		dirs = append(dirs, d)
	}
	got, err := run(t, append(append(append([]string{}, planSmall...), "--merge"), dirs...)...)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// --hourly-from-trace plans each window of a trace at the rate its timestamps give.
func TestSimPlanHourlyFromTrace(t *testing.T) {
	var b strings.Builder
	for i := range 40 { // 10 requests in the first minute, 30 in the second
		ms := i * 6000
		if i >= 10 {
			ms = 60000 + (i-10)*2000
		}
		b.WriteString(`{"timestamp": ` + strconv.Itoa(ms) + `, "input_length": 800, "output_length": 30, "hash_ids": [` + strconv.Itoa(i%2) + `]}` + "\n")
	}
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(b.String()), 0o644))
	out, stderr, err := runWithStderr(t, "sim", "plan", "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "4",
		"--workload", "mooncake", "--api", "completions", "--trace-file", trace, "--hourly-from-trace", "--hour", "1m",
		"--slo-ttft-ms", "300", "--slo-tpot-ms", "20", "--verify-seeds", "1")
	require.NoError(t, err, stderr)
	t.Log("\n" + out)
	assert.Contains(t, stderr, "plan: the trace's rate per 1m0s: [0.16666666666666666 0.5] req/s")
	assert.Regexp(t, `(?m)^\s+0\s+0\.1666\d*\s+2\s+1×tp1\s+1×tp1`, out)
	assert.Regexp(t, `(?m)^\s+1\s+0\.5\s+\d+\s`, out)
	assert.Contains(t, out, "prefill servers by hour: ")
}

// A model given by its config.json plans like its built-in card: the same table.
func TestSimPlanModelConfig(t *testing.T) {
	card, err := run(t, planSmall...)
	require.NoError(t, err)
	args := append([]string{}, planSmall...)
	for i, a := range args {
		if a == "--model-path" {
			args[i+1] = "llama3-8b" // the name the table shows
			args = append(args, "--model-config", filepath.Join("..", "..", "sim", "engine", "testdata", "hfconfig", "llama3-8b.json"))
		}
	}
	fromConfig, err := run(t, args...)
	require.NoError(t, err)
	assert.Equal(t, card, fromConfig)
	_, err = run(t, append(args, "--tp-size", "2")...)
	assert.ErrorContains(t, err, "--tp-size is what the plan chooses")
}

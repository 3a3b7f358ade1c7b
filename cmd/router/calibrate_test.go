package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// A calibrated profile's fitted range (fit:) and its overhead fields are written with their
// comments and read back unchanged; a fit range with min above max is refused.
func TestProfileFileRoundTripsFit(t *testing.T) {
	p, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	p.Name, p.HostOverhead, p.EagerOverhead = "fitted", 0.0021, 0.0005
	p.Fit = &engine.FitRange{PromptTokensMin: 520, PromptTokensMax: 4100, BatchPerRankMax: 12, Residual: 0.0375}
	y, err := profileYAML(p)
	require.NoError(t, err)
	assert.Contains(t, string(y), "# calibrate: the range this profile was fitted on")
	assert.Contains(t, string(y), "batch_per_rank_max: 12 # most requests in flight per decode rank in a fitted level")
	path := filepath.Join(t.TempDir(), "fitted.yaml")
	require.NoError(t, os.WriteFile(path, y, 0o600))
	got, err := loadProfileFile(path)
	require.NoError(t, err)
	assert.Equal(t, p, got)

	p.Fit.PromptTokensMin = 5000
	y, err = profileYAML(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, y, 0o600))
	_, err = loadProfileFile(path)
	assert.ErrorContains(t, err, "prompt_tokens_min 5000, prompt_tokens_max 4100")
}

// writeFakeBenchRun writes what router bench would have written for a run measured on the
// simulator with truth: results.json (tool bench, meta.replay, meta.workers) and
// requests.jsonl.
func writeFakeBenchRun(t *testing.T, dir string, cl sim.Cluster, rc router.Config, truth engine.Profile, w workloads.Params, l workloads.LoadParams, workers []reports.WorkerInfo) {
	t.Helper()
	cl.Profile, cl.Profiles = "truth", map[string]engine.Profile{"truth": truth}
	seed := int64(w.Seed)
	rc.Seed = &seed
	res, err := sim.Run(sim.Config{Cluster: cl, Router: rc, Workload: w, Load: l})
	require.NoError(t, err)
	rp, err := json.Marshal(workloads.Replay{Workload: w, Load: l})
	require.NoError(t, err)
	out := res.Results
	out.Meta.Tool, out.Meta.Replay, out.Meta.Workers, out.Meta.Label = reports.ToolBench, rp, workers, filepath.Base(dir)
	target := "http://router"
	out.Meta.Target = &target
	for i := range out.Levels {
		out.Levels[i].Sim = nil
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, reports.WriteResults(dir, out))
	f, err := os.Create(filepath.Join(dir, reports.RequestsFile))
	require.NoError(t, err)
	rw := reports.NewRecordWriter(f)
	for i := range res.Records {
		require.NoError(t, rw.Write(&res.Records[i]))
	}
	require.NoError(t, f.Close())
}

// router sim calibrate takes the engine arguments the runs recorded (the decode servers' KV
// capacity, far below the base's), lists the levels, holds out the busiest one, prints its
// error, and writes a profile carrying the capacity and the fitted range. A run without
// recorded workers gets a warning saying the arguments are not the deployment's.
func TestSimCalibrateUsesRecordedServerArgs(t *testing.T) {
	base, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	truth := sim.Fit{Prefill: 1.3, PrefillFixed: base.A0, Decode: 0.8, DecodeFixed: base.B0, PDOverhead: 0.03, T0: base.T0}.Apply(base)
	truth.MaxTotalTokens = 12000
	cl := sim.Cluster{Prefill: 1, Decode: 1, Args: engine.ServerArgs{MaxTotalTokens: 12000}}
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	workers := []reports.WorkerInfo{
		{URL: "http://***@p:1", Role: "prefill", ServerInfo: json.RawMessage(`{"disaggregation_mode":"prefill","max_total_num_tokens":12000,"dp_size":1,"chunked_prefill_size":8192}`)},
		{URL: "http://d:1", Role: "decode", ServerInfo: json.RawMessage(`{"disaggregation_mode":"decode","max_total_num_tokens":12000,"dp_size":1}`)},
	}
	dir := t.TempDir()
	var runs []string
	for i, c := range []int{2, 6, 16} {
		w := workloads.DefaultParams()
		w.Seed = uint64(i + 1)
		w.Conversations, w.Turns, w.SystemPromptLen, w.QuestionLen, w.OutputLen = 24, 3, 512, 512, 32
		l := workloads.DefaultLoadParams()
		l.Concurrency, l.Requests = []int{c}, 48
		d := filepath.Join(dir, "run"+string(rune('a'+i)))
		writeFakeBenchRun(t, d, cl, rc, truth, w, l, workers)
		runs = append(runs, d)
	}
	fitted := filepath.Join(dir, "fitted.yaml")
	out, stderr, err := runWithStderr(t, append(append([]string{"sim", "calibrate"}, runs...),
		"--prefill", "1", "--decode", "1", "--base-profile", "llama3-8b-h100", "--max-evals", "80", "--out", fitted)...)
	require.NoError(t, err, stderr)
	t.Log(out)
	assert.Contains(t, out, "engine arguments: prefill servers, as recorded: max_total_num_tokens 12000, chunked_prefill_size 8192")
	assert.Contains(t, out, "engine arguments: decode servers, as recorded: max_total_num_tokens 12000")
	assert.Contains(t, out, "  3  runc/c16")
	assert.Contains(t, out, "held out\n")
	assert.Contains(t, out, "held-out level runc/c16, predicted by the fit: ttft_p50 ")
	p, err := loadProfileFile(fitted)
	require.NoError(t, err)
	assert.Equal(t, 12000, p.MaxTotalTokens, "the recorded KV capacity, not the base's")
	require.NotNil(t, p.Fit)
	assert.Positive(t, p.Fit.PromptTokensMax)

	// --holdout none fits every level; a level that does not exist is an error; runs without
	// recorded workers warn.
	out, _, err = runWithStderr(t, append(append([]string{"sim", "calibrate"}, runs...),
		"--prefill", "1", "--decode", "1", "--max-evals", "20", "--holdout", "none", "--out", fitted)...)
	require.NoError(t, err)
	assert.NotContains(t, out, "held-out level")
	_, _, err = runWithStderr(t, append(append([]string{"sim", "calibrate"}, runs...), "--holdout", "c99", "--out", fitted)...)
	assert.ErrorContains(t, err, `--holdout "c99": no such level`)
	bare := filepath.Join(dir, "bare")
	w := workloads.DefaultParams()
	w.Conversations, w.Turns, w.OutputLen = 8, 2, 8
	l := workloads.DefaultLoadParams()
	l.Concurrency, l.Requests = []int{2, 4}, 16
	writeFakeBenchRun(t, bare, cl, rc, truth, w, l, nil)
	out, _, err = runWithStderr(t, "sim", "calibrate", bare, "--prefill", "1", "--decode", "1", "--max-evals", "10", "--out", fitted)
	require.NoError(t, err)
	assert.Contains(t, out, "warning: no run recorded its workers' /get_server_info")
}

// The recorded dp_size and enable_dp_attention set the simulated cluster's unless the flags
// gave them or the servers disagree.
func TestApplyRecordedParallelism(t *testing.T) {
	tr := true
	servers := []sim.ServerInfo{{DPSize: 4, DPAttention: &tr}, {DPSize: 4, DPAttention: &tr}}
	newFS := func(args ...string) (*pflag.FlagSet, *sim.Cluster) {
		fs := pflag.NewFlagSet("", pflag.ContinueOnError)
		cl := &sim.Cluster{}
		fs.IntVar(&cl.DPSize, "dp-size", 1, "")
		fs.BoolVar(&cl.DPAttention, "dp-attention", false, "")
		fs.String("cluster", "", "")
		require.NoError(t, fs.Parse(args))
		return fs, cl
	}
	fs, cl := newFS()
	notes := applyRecordedParallelism(fs, cl, servers)
	assert.Equal(t, sim.Cluster{DPSize: 4, DPAttention: true}, *cl)
	assert.Equal(t, []string{"dp_size 4, as recorded", "enable_dp_attention true, as recorded"}, notes)

	fs, cl = newFS("--dp-size", "2", "--dp-attention=false")
	assert.Empty(t, applyRecordedParallelism(fs, cl, servers))
	assert.Equal(t, sim.Cluster{DPSize: 2}, *cl, "the flags win")

	fs, cl = newFS()
	notes = applyRecordedParallelism(fs, cl, []sim.ServerInfo{{DPSize: 4}, {DPSize: 2}})
	assert.Equal(t, sim.Cluster{DPSize: 1}, *cl)
	assert.Equal(t, []string{"the servers report different dp_size: --dp-size stays as given"}, notes)

	fs, cl = newFS("--cluster", "c.yaml")
	assert.Empty(t, applyRecordedParallelism(fs, cl, servers), "a --cluster file describes the servers")
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// SGLang's model, parallelism and engine arguments are flags of sim, sim sweep and fakeworker
// alike, under SGLang's names, and their --help teaches them.
func TestEngineFlagsOnEveryModelCommand(t *testing.T) {
	root := newRootCmd()
	names := []string{"model-path", "gpu", "tp-size", "dp-size", "ep-size", "enable-dp-attention", "chunked-prefill-size",
		"max-running-requests", "max-total-tokens", "page-size", "cuda-graph-max-bs", "mem-fraction-static", "schedule-conservativeness"}
	for _, path := range [][]string{{"sim"}, {"sim", "sweep"}, {"fakeworker"}, {"fakeworker", "cluster"}} {
		c, _, err := root.Find(path)
		require.NoError(t, err)
		help := helpOf(t, c)
		for _, n := range names {
			fl := c.Flags().Lookup(n)
			if assert.NotNil(t, fl, "%v --%s", path, n) {
				assert.Contains(t, help, "--"+n, "%v --help", path)
			}
		}
		// The old spelling still parses, and --help teaches the new one only.
		old := c.Flags().Lookup("dp-attention")
		require.NotNil(t, old, "%v --dp-attention", path)
		assert.True(t, old.Hidden)
		assert.NotContains(t, help, "      --dp-attention ")
	}
	sim, _, _ := root.Find([]string{"sim"})
	for _, n := range []string{"prefill-tp-size", "decode-dp-size", "decode-ep-size", "prefill-chunked-prefill-size", "decode-max-running-requests"} {
		assert.NotNil(t, sim.Flags().Lookup(n), n)
	}
	assert.Contains(t, sim.Long, "--model-path MODEL --gpu GPU")
}

func helpOf(t *testing.T, c *cobra.Command) string {
	var b strings.Builder
	c.SetOut(&b)
	require.NoError(t, c.Help())
	return b.String()
}

func parseSim(t *testing.T, args ...string) (*simFlags, *pflag.FlagSet) {
	fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	f := bindSimFlags(fs)
	require.NoError(t, fs.Parse(args))
	return f, fs
}

func TestSimEngineFlagsResolve(t *testing.T) {
	f, fs := parseSim(t, "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--tp-size", "2", "--dp-size", "2",
		"--enable-dp-attention", "--prefill-tp-size", "4", "--decode-ep-size", "2",
		"--chunked-prefill-size", "4096", "--page-size", "16", "--decode-max-running-requests", "64", "--prefill-schedule-conservativeness", "2")
	cfg, err := f.resolve(fs, "test")
	require.NoError(t, err)
	cl := cfg.Cluster
	assert.Equal(t, "llama3-8b", cl.ModelPath)
	assert.Equal(t, "h100-sxm", cl.GPU)
	assert.Equal(t, 2, cl.TPSize)
	assert.Equal(t, 2, cl.DPSize)
	assert.True(t, cl.DPAttention)
	assert.Equal(t, 4, cl.PrefillTPSize)
	assert.Equal(t, 2, cl.DecodeEPSize)
	assert.Empty(t, cl.Profile, "no preset with --model-path")
	assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: 4096, PageSize: 16}, cl.Args)
	require.NotNil(t, cl.DecodeArgs)
	assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: 4096, PageSize: 16, MaxRunningRequests: 64}, *cl.DecodeArgs,
		"a pool's flags lay over every server's")
	require.NotNil(t, cl.PrefillArgs)
	assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: 4096, PageSize: 16, ScheduleConservativeness: 2}, *cl.PrefillArgs)

	// The old spelling of --enable-dp-attention.
	f, fs = parseSim(t, "--dp-attention", "--dp-size", "2")
	cfg, err = f.resolve(fs, "test")
	require.NoError(t, err)
	assert.True(t, cfg.Cluster.DPAttention)
	assert.Equal(t, "llama3-8b-h100", cfg.Cluster.WithDefaults(true).Profile, "the default preset without --model-path")
}

// A cluster file keyed with SGLang's names merges with the flags: engine arguments field by
// field, enable_dp_attention as dp_attention.
func TestSimClusterFileEngineArgs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, os.WriteFile(path, []byte("model_path: llama3-8b\ngpu: h200-sxm\nenable_dp_attention: true\ndp_size: 2\ntp_size: 2\n"+
		"engine_args:\n  page_size: 16\n  max_total_tokens: 100000\ndecode_engine_args:\n  max_running_requests: 8\n"), 0o644))
	f, fs := parseSim(t, "--cluster", path, "--chunked-prefill-size", "2048", "--decode-page-size", "32")
	cfg, err := f.resolve(fs, "test")
	require.NoError(t, err)
	cl := cfg.Cluster
	assert.True(t, cl.DPAttention)
	assert.Equal(t, "h200-sxm", cl.GPU)
	assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: 2048, PageSize: 16, MaxTotalTokens: 100000}, cl.Args)
	require.NotNil(t, cl.DecodeArgs)
	assert.Equal(t, engine.ServerArgs{MaxRunningRequests: 8, PageSize: 32}, *cl.DecodeArgs, "the file's pool arguments, with the pool's flag over them")

	// The same run from flags alone, --enable-dp-attention overriding the file's false.
	require.NoError(t, os.WriteFile(path, []byte("dp_attention: false\ndp_size: 2\n"), 0o644))
	f, fs = parseSim(t, "--cluster", path, "--enable-dp-attention")
	cfg, err = f.resolve(fs, "test")
	require.NoError(t, err)
	assert.True(t, cfg.Cluster.DPAttention)
}

func TestEngineFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--profile", "llama3-8b-h100"}, "--model-path and --profile"},
		{[]string{"sim", "--model-path", "llama3-8b"}, "needs --gpu"},
		{[]string{"sim", "--model-path", "nope", "--gpu", "h100-sxm"}, "--model-path"},
		{[]string{"sim", "--chunked-prefill-size", "0"}, "--chunked-prefill-size 0 must be > 0"},
		{[]string{"sim", "--decode-max-running-requests", "-1"}, "--decode-max-running-requests -1"},
		{[]string{"sim", "--mem-fraction-static", "1.5", "--model-path", "llama3-8b", "--gpu", "h100-sxm"}, "--mem-fraction-static 1.5 must be in (0, 1]"},
		{[]string{"sim", "--mem-fraction-static", "0.8"}, "--mem-fraction-static needs --model-path"},
		{[]string{"sim", "--kv-cache-dtype", "fp8_e4m3"}, "--kv-cache-dtype needs --model-path"},
		{[]string{"sim", "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--kv-cache-dtype", "fp4"}, `--kv-cache-dtype "fp4" is not modelled`},
		{[]string{"sim", "--model-path", "llama3-8b", "--gpu", "h100-sxm", "--speculative-algorithm", "EAGLE3"}, "--speculative-accept-length 0 must be ≥ 1"},
		{[]string{"fakeworker", "--port", "0", "--kv-cache-dtype", "fp8_e4m3"}, "--kv-cache-dtype needs --model-path"},
		{[]string{"sim", "--prefill-tp-size", "0"}, "--prefill-tp-size 0"},
		{[]string{"sim", "--profile", "llama3-70b-h100-tp8", "--tp-size", "4"}, "--tp-size 4 shapes only a --model-path engine"},
		{[]string{"sim", "--decode-ep-size", "8"}, "--decode-ep-size 8 shapes only a --model-path engine"},
		{[]string{"fakeworker", "--port", "0", "--profile", "llama3-8b-h100", "--tp-size", "2"}, "--tp-size 2 shapes only a --model-path engine"},
		{[]string{"sim", "sweep", "--vary", "policy=random", "--cuda-graph-max-bs", "-3"}, "--cuda-graph-max-bs -3"},
		{[]string{"fakeworker", "--port", "0", "--gpu", "h100-sxm", "--model-path", "llama3-8b", "--profile", "instant"}, "--gpu (with --model-path) and --profile"},
		{[]string{"fakeworker", "--port", "0", "--gpu", "h100-sxm"}, "--gpu h100-sxm needs --model-path"},
		{[]string{"fakeworker", "--port", "0", "--page-size", "0"}, "--page-size 0 must be > 0"},
		{[]string{"fakeworker", "--port", "0", "--tp-size", "0"}, "--tp-size 0"},
		{[]string{"fakeworker", "--port", "0", "--gpu", "h100-sxm", "--model-path", "llama3-70b"}, "do not fit"},
	} {
		_, err := run(t, tc.args...)
		if assert.Error(t, err, "%v", tc.args) {
			assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
		}
	}
}

func TestFakeworkerEngineFlagsResolve(t *testing.T) {
	var f fakeworkerFlags
	cmd := &cobra.Command{Use: "fakeworker"}
	f.register(cmd.Flags())
	require.NoError(t, cmd.Flags().Parse([]string{"--model-path", "llama3-8b", "--gpu", "h100-sxm", "--tp-size", "2",
		"--max-total-tokens", "12000", "--cuda-graph-max-bs", "64", "--enable-dp-attention", "--dp-size", "2"}))
	c, err := f.resolve(cmd)
	require.NoError(t, err)
	assert.Equal(t, "h100-sxm", c.GPU)
	assert.Equal(t, 2, c.TPSize)
	assert.Equal(t, 2, c.DPSize)
	assert.True(t, c.DPAttention)
	assert.Equal(t, engine.ServerArgs{MaxTotalTokens: 12000, CUDAGraphMaxBS: 64}, c.Args)
	assert.Empty(t, c.Profile.Name, "the engine is built from the model, not a profile")
	require.NoError(t, c.Validate())
}

// --model-config builds the model from a Hugging Face config.json (a file or a model
// directory), named by --model-path or the config's _name_or_path, in sim and fakeworker; the
// simulated servers are those of the built-in card of the same model.
func TestModelConfigFlag(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "sim", "engine", "testdata", "hfconfig", "llama3-70b.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644))

	simulate := func(args ...string) (sim.Config, sim.ResolvedServer) {
		f, fs := parseSim(t, append(args, "--gpu", "h100-sxm", "--tp-size", "4", "--regular", "1", "--num-prompts", "4")...)
		cfg, err := f.resolve(fs, "test")
		require.NoError(t, err)
		res, err := sim.Run(cfg)
		require.NoError(t, err)
		var meta struct {
			Resolved map[string]sim.ResolvedServer `json:"resolved"`
		}
		require.NoError(t, json.Unmarshal(res.Results.Meta.Cluster, &meta))
		require.Contains(t, meta.Resolved, "regular")
		return cfg, meta.Resolved["regular"]
	}
	cfg, fromConfig := simulate("--model-config", dir)
	assert.Equal(t, "meta-llama/Llama-3.1-70B-Instruct", cfg.Cluster.ModelPath, "named by _name_or_path")
	assert.Contains(t, cfg.Cluster.Models, cfg.Cluster.ModelPath)
	_, fromCard := simulate("--model-path", "llama3-70b")
	assert.InEpsilon(t, fromCard.Args.MaxTotalTokens, fromConfig.Args.MaxTotalTokens, 0.02, "KV pool of the same model")
	assert.Equal(t, fromCard.Args.MaxRunningRequests, fromConfig.Args.MaxRunningRequests)

	f, fs := parseSim(t, "--model-config", filepath.Join(dir, "config.json"), "--model-path", "my-70b", "--gpu", "h100-sxm", "--tp-size", "4")
	cfg, err = f.resolve(fs, "test")
	require.NoError(t, err)
	assert.Equal(t, "my-70b", cfg.Cluster.ModelPath, "--model-path names it")

	var fw fakeworkerFlags
	cmd := &cobra.Command{Use: "fakeworker"}
	fw.register(cmd.Flags())
	require.NoError(t, cmd.Flags().Parse([]string{"--model-config", dir, "--gpu", "h100-sxm", "--tp-size", "4"}))
	c, err := fw.resolve(cmd)
	require.NoError(t, err)
	require.NotNil(t, c.Model)
	assert.Equal(t, "meta-llama/Llama-3.1-70B-Instruct", c.ModelPath, "the id the worker reports")
	require.NoError(t, c.Validate())

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--model-config", filepath.Join(dir, "nope.json"), "--gpu", "h100-sxm"}, "--model-config: open"},
		{[]string{"sim", "--model-config", dir, "--profile", "llama3-8b-h100"}, "--model-config and --profile"},
		{[]string{"sim", "--model-config", dir}, "needs --gpu"},
		{[]string{"fakeworker", "--port", "0", "--model-config", dir}, "--model-config " + dir + " needs --gpu"},
	} {
		_, err := run(t, tc.args...)
		if assert.Error(t, err, "%v", tc.args) {
			assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
		}
	}
}

package sim

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// A model on a GPU: each pool's servers get the profile built for their own parallelism and
// SGLang's defaults for the unset engine arguments; the router addresses each pool's ranks;
// results.json records what every pool ran with.
func TestClusterModelOnGPUPerPool(t *testing.T) {
	cfg := baseConfig()
	cfg.Router.DPAware = true
	cfg.Cluster = Cluster{Prefill: 1, Decode: 1, ModelPath: "llama3-8b", GPU: engine.H100SXM.Name,
		PrefillDPSize: 2, DecodeTPSize: 2, DecodeDPSize: 4,
		Args: engine.ServerArgs{ScheduleConservativeness: 0.5}, DecodeArgs: &engine.ServerArgs{MaxRunningRequests: 64}}
	x, err := newSim(cfg)
	require.NoError(t, err)
	require.Len(t, x.servers, 2)
	pre, dec := x.servers[0], x.servers[1]
	assert.Equal(t, 2, pre.cfg.DPSize)
	assert.Equal(t, 4, dec.cfg.DPSize)

	wantPre, wantArgs, err := engine.BuildServer("", engine.Llama3Dense8B, engine.H100SXM, engine.Parallelism{TP: 2, DP: 2}, engine.ServerArgs{ScheduleConservativeness: 0.5})
	require.NoError(t, err)
	assert.Equal(t, wantPre.Name, pre.prof.Name)
	assert.Equal(t, wantArgs.ChunkedPrefillSize, pre.cfg.ChunkedPrefillSize)
	assert.Equal(t, wantArgs.MaxTotalTokens, pre.cfg.MaxTotalTokens)
	assert.Equal(t, wantArgs.CUDAGraphMaxBS, pre.cfg.CUDAGraphMaxBS)
	assert.InDelta(t, 0.5, pre.cfg.ScheduleConservativeness, 1e-12)
	assert.Equal(t, 256, pre.cfg.CUDAGraphMaxBS, "SGLang's tp_size 1 on an 80 GB GPU")

	// Decode: 4 replicas of TP2 (8 GPUs); DecodeArgs replace Args for the pool.
	wantDec, _, err := engine.BuildServer("", engine.Llama3Dense8B, engine.H100SXM, engine.Parallelism{TP: 8, DP: 4}, engine.ServerArgs{})
	require.NoError(t, err)
	assert.Equal(t, wantDec.Name, dec.prof.Name)
	assert.Equal(t, 64, dec.cfg.MaxRunningRequests)
	assert.Greater(t, dec.cfg.MaxTotalTokens, pre.cfg.MaxTotalTokens, "TP2 ranks hold more KV than TP1 ranks")

	var ranks [3]int
	for _, ti := range x.reps[0].rt.Targets() {
		ranks[ti.Role]++
	}
	assert.Equal(t, 2, ranks[router.Prefill])
	assert.Equal(t, 4, ranks[router.Decode])

	// Decode on another GPU: its pool's profile and defaults follow that GPU.
	h := cfg
	h.Cluster.DecodeGPU = engine.H200SXM.Name
	xh, err := newSim(h)
	require.NoError(t, err)
	wantH, _, err := engine.BuildServer("", engine.Llama3Dense8B, engine.H200SXM, engine.Parallelism{TP: 8, DP: 4}, engine.ServerArgs{})
	require.NoError(t, err)
	assert.Equal(t, wantH.Name, xh.servers[1].prof.Name)
	assert.Equal(t, wantPre.Name, xh.servers[0].prof.Name)

	res := mustRun(t, cfg)
	var meta struct {
		Resolved map[string]ResolvedServer `json:"resolved"`
		TPSize   int                       `json:"tp_size"`
	}
	require.NoError(t, json.Unmarshal(res.Results.Meta.Cluster, &meta))
	assert.Equal(t, 1, meta.TPSize)
	d := meta.Resolved["decode"]
	assert.Equal(t, ResolvedServer{Profile: wantDec.Name, TPSize: 2, DPSize: 4, EPSize: 1, Args: d.Args}, d)
	assert.Equal(t, 64, d.Args.MaxRunningRequests)
	assert.Equal(t, dec.cfg.MaxTotalTokens, d.Args.MaxTotalTokens)
	assert.Greater(t, d.Args.MemFractionStatic, 0.5)
	assert.Equal(t, 2, meta.Resolved["prefill"].DPSize)
}

// Presets keep the engine's defaults for unset arguments; given ones are SGLang's flags, so
// under DP attention the chunked prefill size is the server's, divided among its ranks.
func TestClusterPresetArgsPerRank(t *testing.T) {
	cfg := baseConfig()
	cfg.Cluster = Cluster{Prefill: 1, Decode: 1, DPSize: 4, DPAttention: true, Profile: "qwen3-30b-a3b-h100-dp8",
		Args: engine.ServerArgs{ChunkedPrefillSize: 16384, PageSize: 16}}
	x, err := newSim(cfg)
	require.NoError(t, err)
	assert.Equal(t, 4096, x.servers[0].cfg.ChunkedPrefillSize)
	assert.Equal(t, 16, x.servers[0].cfg.PageSize)
	assert.Equal(t, engine.DefaultMaxRunningRequests, x.servers[0].cfg.MaxRunningRequests)
	assert.Equal(t, "qwen3-30b-a3b-h100-dp8", x.servers[0].prof.Name)
}

func TestClusterModelFlagsErrors(t *testing.T) {
	for _, tc := range []struct {
		cl   Cluster
		want string
	}{
		{Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", Profile: "llama3-8b-h100"}, "--model-path and --profile"},
		{Cluster{ModelPath: "llama3-8b"}, "--model-path llama3-8b needs --gpu"},
		{Cluster{GPU: "h100-sxm"}, "--gpu, --prefill-gpu and --decode-gpu need --model-path"},
		{Cluster{ModelPath: "no-such-model", GPU: "h100-sxm"}, "--model-path"},
		{Cluster{ModelPath: "llama3-8b", GPU: "no-such-gpu"}, "--gpu"},
		{Cluster{ModelPath: "llama3-70b", GPU: "h100-sxm"}, "do not fit"},
		{Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", TPSize: 2, DPSize: 4, DPAttention: true}, "--dp-size 4 must be ≥ 1 and divide --tp-size 2"},
		{Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", EPSize: -1}, "--ep-size -1"},
		{Cluster{Profile: "llama3-70b-h100-tp8", TPSize: 4}, "--tp-size 4 shapes only a --model-path engine"},
		{Cluster{PrefillEPSize: 8}, "--prefill-ep-size 8 shapes only a --model-path engine"},
		{Cluster{Args: engine.ServerArgs{ChunkedPrefillSize: -1}}, "--chunked-prefill-size -1"},
		{Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", DecodeArgs: &engine.ServerArgs{MemFractionStatic: 2}}, "--decode-mem-fraction-static 2"},
		{Cluster{DecodeArgs: &engine.ServerArgs{MemFractionStatic: 0.8}}, "--mem-fraction-static needs --model-path"},
	} {
		err := tc.cl.Validate(true)
		if assert.Error(t, err, "%+v", tc.cl) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	assert.ErrorContains(t, Cluster{Regular: 1, PrefillTPSize: 2}.Validate(false), "need PD mode")
	assert.ErrorContains(t, Cluster{Regular: 1, ModelPath: "llama3-8b", GPU: "h100-sxm", DecodeGPU: "h20"}.Validate(false), "need PD mode")
	assert.ErrorContains(t, Cluster{ModelPath: "llama3-8b", GPU: "h100-sxm", DecodeGPU: "nope"}.Validate(true), "--decode-gpu")
	assert.ErrorContains(t, Cluster{DecodeGPU: "h20"}.Validate(true), "need --model-path")
	assert.NoError(t, Cluster{ModelPath: "llama3-70b", GPU: "h100-sxm", TPSize: 4}.Validate(true))
}

// Engine arguments, SGLang's sizes and the model are sweep axes.
func TestSweepEngineArgAxes(t *testing.T) {
	base := baseConfig()
	base.Cluster = Cluster{Args: engine.ServerArgs{PageSize: 16}}
	pts, err := Grid(base, []Vary{
		{Key: "chunked_prefill_size", Values: []string{"2048", "4096"}},
		{Key: "decode-max-running-requests", Values: []string{"32"}},
		{Key: "enable_dp_attention", Values: []string{"true"}},
		{Key: "tp_size", Values: []string{"4"}},
		{Key: "gpu", Values: []string{"h200-sxm"}},
	})
	require.NoError(t, err)
	require.Len(t, pts, 2)
	for i, want := range []int{2048, 4096} {
		cl := pts[i].Config.Cluster
		assert.Equal(t, want, cl.Args.ChunkedPrefillSize)
		require.NotNil(t, cl.DecodeArgs)
		assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: want, PageSize: 16, MaxRunningRequests: 32}, *cl.DecodeArgs,
			"the pool's arguments start from every server's")
		assert.True(t, cl.DPAttention)
		assert.Equal(t, 4, cl.TPSize)
		assert.Equal(t, "h200-sxm", cl.GPU)
	}
	assert.Nil(t, base.Cluster.DecodeArgs, "the base is not modified")
	_, err = Grid(base, []Vary{{Key: "page_size", Values: []string{"x"}}})
	assert.ErrorContains(t, err, "--vary page_size=x")
}

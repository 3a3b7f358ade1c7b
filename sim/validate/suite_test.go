package validate

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

var update = flag.Bool("update", false, "rewrite docs/validation.md's published-results table from the suite (TestREADMETable) and sim/engine/fitted.go from the headline fit (TestHeldOutCrossValidated)")

// suite runs the embedded suite once for every test that needs it.
var suite = sync.OnceValues(func() ([]SetReport, error) {
	sets, err := Embedded()
	if err != nil {
		return nil, err
	}
	return Run(sets), nil
})

func TestRunSetUnknownModelAndGPUGiveNotExpressibleRows(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{"name": "x", "model": "org/Nope-1B", "gpu": "TPU-v9",
	  "workload": {"dataset": "random", "input_len": 10, "output_len": 10},
	  "levels": [{"load": {"request_rate": 1}, "figures": {"output_tok_s": 5, "ttft_ms_mean": 3}}]}`), "x.json")
	require.NoError(t, err)
	rep := RunSet(s)
	require.Len(t, rep.Results, 2, "one row per figure, none dropped")
	for _, r := range rep.Results {
		assert.Equal(t, "not expressible yet: unknown model org/Nope-1B, unknown GPU TPU-v9", r.Note)
		assert.False(t, r.Pass)
		assert.True(t, math.IsNaN(r.Ratio))
	}
	assert.Equal(t, 2, Count(rep.Results).NotComputed)
	assert.False(t, Count(rep.Results).OK())
}

func TestRunSetServingLevelOnAKnownModel(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{"name": "tiny", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100",
	  "tp": 1, "dp": 1, "ep": 1, "dp_attention": false, "pd": null, "server_args": {"chunked_prefill_size": 4096},
	  "workload": {"dataset": "random", "input_len": 512, "output_len": 32, "range_ratio": 1},
	  "levels": [{"load": {"request_rate": "inf", "num_prompts": 64},
	    "figures": {"input_tok_s": 1000, "output_tok_s": 100, "total_tok_s": 1100, "request_throughput_req_s": 3, "itl_ms_median": 10}}]}`), "tiny.json")
	require.NoError(t, err)
	rep := RunSet(s)
	require.Len(t, rep.Results, 5)
	got := map[string]Result{}
	for _, r := range rep.Results {
		require.False(t, math.IsNaN(r.Ratio), "%s: %s", r.Figure, r.Note)
		assert.Equal(t, "llama3-8b", r.Model)
		assert.Equal(t, "h100-sxm", r.GPU)
		got[r.Figure] = r
	}
	// Fixed lengths (range ratio 1): input and output rates keep the 512:32 ratio, and
	// requests/s is output tokens/s over 32.
	assert.InEpsilon(t, 16.0, got["input_tok_s"].Simulated/got["output_tok_s"].Simulated, 1e-9)
	assert.InEpsilon(t, got["output_tok_s"].Simulated/32, got["request_throughput_req_s"].Simulated, 1e-9)
	assert.InEpsilon(t, got["input_tok_s"].Simulated+got["output_tok_s"].Simulated, got["total_tok_s"].Simulated, 1e-9)
	again := RunSet(s)
	assert.Equal(t, rep.Results, again.Results, "deterministic")
}

// A run that did not ignore EOS publishes fewer output tokens than num_prompts × output_len;
// load.output_tokens gives their total and the workload generates that mean: 12 of 32 tokens
// at range ratio 1 (every request 12), L = 2·mean at range ratio 0 (uniform in [1, L]).
func TestOutputTokensPinTheMeanOutputLength(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{"name": "eos", "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100",
	  "tp": 1, "workload": {"dataset": "random", "input_len": 512, "output_len": 32, "range_ratio": 1},
	  "levels": [{"load": {"concurrency": 8, "num_prompts": 64, "output_tokens": 768},
	    "figures": {"input_tok_s": 1000, "output_tok_s": 100, "request_throughput_req_s": 3}}]}`), "eos.json")
	require.NoError(t, err)
	got := map[string]float64{}
	for _, r := range RunSet(s).Results {
		require.False(t, math.IsNaN(r.Ratio), "%s: %s", r.Figure, r.Note)
		got[r.Figure] = r.Simulated
	}
	assert.InEpsilon(t, 512.0/12, got["input_tok_s"]/got["output_tok_s"], 1e-9)
	assert.InEpsilon(t, got["output_tok_s"]/12, got["request_throughput_req_s"], 1e-9)

	w := workloads.Params{Workload: workloads.WorkloadRandom, OutputLen: 1000, NumPrompts: 500}
	var notes []string
	require.NoError(t, pinTokens(&w, Level{Load: map[string]any{"output_tokens": 310000.0}}, &notes))
	assert.InDelta(t, 1240, w.OutputLen, 40, "uniform in [1, ~1240]: mean ~620")
	assert.InEpsilon(t, 310000, drawn(w, false), 1e-3, "the level's own draw sums to the total")
	assert.Len(t, notes, 1)
	// Ten prompts (a concurrency-1 level): the draw's sum, not the distribution's mean, is pinned.
	w = workloads.Params{Workload: workloads.WorkloadRandom, Seed: 1, InputLen: 8000, OutputLen: 1000, NumPrompts: 10}
	require.NoError(t, pinTokens(&w, Level{Load: map[string]any{"input_tokens": 41941.0, "output_tokens": 4220.0}}, &notes))
	assert.InEpsilon(t, 41941, drawn(w, true), 2e-3)
	assert.InEpsilon(t, 4220, drawn(w, false), 2e-3)
	// A generated ShareGPT level's lengths are scaled to the totals.
	w = workloads.DefaultParams()
	w.Workload, w.NumPrompts = workloads.WorkloadShareGPT, 100
	require.NoError(t, pinTokens(&w, Level{Load: map[string]any{"input_tokens": 33179.0, "output_tokens": 21249.0}}, &notes))
	var in, out float64
	p := workloads.DefaultLoadParams().LevelParams(w, 0)
	for i := range p.NumPrompts {
		a, b := workloads.ShareGPTScaled(p, i)
		in, out = in+float64(a), out+float64(b)
	}
	assert.InEpsilon(t, 33179, in, 2e-3)
	assert.InEpsilon(t, 21249, out, 2e-3)
	w.Workload = workloads.WorkloadMultiTurn
	assert.Error(t, pinTokens(&w, Level{Load: map[string]any{"output_tokens": 310000.0}}, &notes), "multiturn has no pinned lengths")
	w.Workload, w.DatasetPath = workloads.WorkloadShareGPT, "sharegpt.json"
	assert.Error(t, pinTokens(&w, Level{Load: map[string]any{"input_tokens": 310000.0}}, &notes), "a dataset's lengths are its own")
}

func TestServerArgsFollowSGLangUnderDPAttention(t *testing.T) {
	t.Parallel()
	var notes []string
	raw := map[string]any{"chunked_prefill_size": 524288.0, "max_running_requests": 8192.0, "max_total_tokens": 131072.0,
		"cuda_graph_bs": []any{1.0, 256.0, 64.0}, "mem_fraction_static": "0.85 (inferred)", "page_size": nil}
	a := serverArgs(raw, &notes)
	assert.Equal(t, engine.ServerArgs{ChunkedPrefillSize: 524288, MaxRunningRequests: 8192, MaxTotalTokens: 131072,
		CUDAGraphMaxBS: 256, MemFractionStatic: 0.85}, a, "as given; cuda graph max from the list")
	assert.Equal(t, []string{`server arg mem_fraction_static = "0.85 (inferred)" read as 0.85`}, notes)
	_, r, err := engine.BuildServer("x", engine.DeepSeekV3, engine.H100SXM, engine.Parallelism{TP: 32, DP: 32, EP: 32, DPAttention: true}, a)
	require.NoError(t, err)
	assert.Equal(t, 16384, r.ChunkedPrefillSize, "the chunk per DP rank, as SGLang divides it")
	assert.Equal(t, 256, r.MaxRunningRequests, "the running budget per DP rank")
}

func TestPickVariantTakesTheLevelsKind(t *testing.T) {
	t.Parallel()
	m := map[string]any{"mem_fraction_static": "0.85 online (default); 0.88 offline (set)", "tp_size": 4.0}
	on := pickVariant(m, false).(map[string]any)
	off := pickVariant(m, true).(map[string]any)
	assert.Equal(t, "0.85 online (default)", on["mem_fraction_static"])
	assert.Equal(t, "0.88 offline (set)", off["mem_fraction_static"])
	assert.Equal(t, 4.0, off["tp_size"])
	assert.Equal(t, "0.85 online (default); 0.88 offline (set)", m["mem_fraction_static"], "input untouched")
}

func TestSteadyRateLeavesOutTheFirstStep(t *testing.T) {
	t.Parallel()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ends := []time.Time{at(3), at(1), at(2), at(1), at(3), at(2)}
	r, err := steadyRate(ends, 10)
	require.NoError(t, err)
	assert.InDelta(t, 20.0, r, 1e-9, "4 requests × 10 tokens over the 2 s after the first step")
	_, err = steadyRate([]time.Time{at(1), at(1)}, 10)
	assert.Error(t, err)
}

func TestByPresetMatchesModelAndGPU(t *testing.T) {
	t.Parallel()
	rs := []Result{
		{Set: "a", Level: "r4", Figure: "itl_ms_median", Ratio: 0.9, Band: 0.15, Pass: true, Model: "llama3-8b", GPU: "a100-sxm"},
		{Set: "a", Level: "r8", Figure: "itl_ms_median", Ratio: 0.78, Band: 0.15, Pass: false, Model: "llama3-8b", GPU: "a100-sxm"},
		{Set: "b", Level: "c1", Figure: "output_tok_s", Ratio: 1.1, Band: 0.15, Pass: true, Model: "llama3-70b", GPU: "h100-sxm"},
		{Set: "c", Level: "x", Figure: "output_tok_s", Ratio: math.NaN(), Band: 0.15, Note: "not expressible yet: unknown model k"},
	}
	by := summarizeByPreset(rs)
	a := by["llama3-8b-a100"]
	assert.Equal(t, []string{"a"}, a.Sets)
	assert.Equal(t, 2, a.Figures)
	assert.Equal(t, 1, a.Outside)
	assert.InDelta(t, 0.22, a.WorstError, 1e-9)
	assert.Equal(t, "a", a.WorstSet)
	assert.Equal(t, "r8 itl_ms_median", a.WorstFigure)
	assert.Equal(t, []string{"b"}, by["llama3-70b-h100-tp8"].Sets, "the model on the GPU, whatever the parallelism")
	assert.NotContains(t, by, "llama3-8b-h100", "another GPU: unvalidated")
	assert.NotContains(t, by, "llama3-70b-a100-tp8")
	for name, s := range by {
		assert.NotContains(t, s.Sets, "c", "%s: an unresolved set validates nothing", name)
	}
}

// TestPublishedSuite runs the embedded suite: every published figure gives exactly one row,
// computed or saying why not, and the table prints (go test -v). The bands are the gate of
// `make test` (router sim validate), not of this test.
func TestPublishedSuite(t *testing.T) {
	skipUnderRace(t)
	t.Parallel()
	reps, err := suite()
	require.NoError(t, err)
	sets, err := Embedded()
	require.NoError(t, err)
	require.Len(t, reps, len(sets))
	for i, s := range sets {
		n := 0
		for _, lv := range s.Levels {
			n += len(lv.Figures)
		}
		require.Len(t, reps[i].Results, n, s.Name)
		for _, r := range reps[i].Results {
			if math.IsNaN(r.Ratio) {
				assert.True(t, strings.HasPrefix(r.Note, notExpressible) || r.Note != "", "%s %s %s: a row not computed says why", r.Set, r.Level, r.Figure)
				continue
			}
			assert.Greater(t, r.Simulated, 0.0, "%s %s %s", r.Set, r.Level, r.Figure)
			assert.False(t, math.IsInf(r.Simulated, 0))
		}
	}
	var b bytes.Buffer
	require.NoError(t, WriteTable(&b, reps))
	t.Logf("\n%s\n%s", b.String(), Count(Results(reps)))
}

// The table of docs/validation.md ("How close to real SGLang", once a section of README.md,
// hence the name) is the suite's markdown output, between the markers; `go test ./sim/validate
// -run TestREADMETable -update` rewrites it.
func TestREADMETable(t *testing.T) {
	skipUnderRace(t)
	t.Parallel()
	reps, err := suite()
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, WriteMarkdown(&b, reps))
	const path = "../../docs/validation.md"
	readme, err := os.ReadFile(path)
	require.NoError(t, err)
	re := regexp.MustCompile(`(?s)(<!-- validate:begin[^>]*-->\n)(.*?)(<!-- validate:end -->)`)
	m := re.FindSubmatchIndex(readme)
	require.NotNil(t, m, "docs/validation.md has no <!-- validate:begin --> … <!-- validate:end --> block")
	var rs []Result
	for _, r := range reps {
		rs = append(rs, r.Results...)
	}
	byPreset, err := json.MarshalIndent(summarizeByPreset(rs), "", "  ")
	require.NoError(t, err)
	byPreset = append(byPreset, '\n')
	if *update {
		out := append(append(append([]byte{}, readme[:m[3]]...), b.Bytes()...), readme[m[6]:]...)
		require.NoError(t, os.WriteFile(path, out, 0o644))
		require.NoError(t, os.WriteFile("validated.json", byPreset, 0o644))
		return
	}
	assert.Equal(t, b.String(), string(readme[m[4]:m[5]]),
		"docs/validation.md's table is stale: go test ./sim/validate -run TestREADMETable -update")
	assert.Equal(t, string(byPreset), string(validatedJSON),
		"validated.json is stale: go test ./sim/validate -run TestREADMETable -update")
}

func TestResolveModelAndGPU(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"meta-llama/Llama-3.1-8B-Instruct":                 "llama3-8b",
		"meta-llama/Meta-Llama-3.1-8B-Instruct (remark)":   "llama3-8b",
		"Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4":               "qwen2.5-7b-gptq-int4",
		"deepseek-ai/DeepSeek-V3 / DeepSeek-R1 (the blog)": "deepseek-v3",
		"llama3-70b": "llama3-70b",
	} {
		m, err := resolveModel(Set{Model: in})
		require.NoError(t, err, in)
		assert.Equal(t, want, m.Name, in)
	}
	_, err := resolveModel(Set{Model: "org/Unknown-GPTQ-Int4"})
	assert.EqualError(t, err, "unknown model org/Unknown-GPTQ-Int4")
	for in, want := range map[string]string{"A100-80G": "a100-sxm", "H100": "h100-sxm", "H100-80G": "h100-sxm", "H200": "h200-sxm"} {
		g, err := resolveGPU(Set{GPU: in})
		require.NoError(t, err, in)
		assert.Equal(t, want, g.Name, in)
	}
	var notes []string
	assert.Equal(t, lowPrecision, applyPrecision(engine.DeepSeekV3, "low (FP8 attention, NVFP4 MoE)", &notes).Name)
	assert.Len(t, notes, 1)
	assert.Equal(t, engine.DeepSeekV3.Name, applyPrecision(engine.DeepSeekV3, "high (BF16 attention, FP8 MoE)", &notes).Name)
	assert.Equal(t, engine.Llama3Dense8B.Name, applyPrecision(engine.Llama3Dense8B, "bf16", &notes).Name, "the native precision changes nothing")
}

// Issue 25's acceptance: the large-scale EP blog's prefill holds its per-GPU throughput as the
// prefill server grows from EP16 (two nodes) to EP32 (four), within ±15 %.
func TestEPPrefillPerGPUHoldsFrom16To32(t *testing.T) {
	t.Parallel()
	sets, err := Embedded()
	require.NoError(t, err)
	var s Set
	for _, x := range sets {
		if x.Name == "deepseek-v3-h100-pd-ep-96gpu" {
			s = x
		}
	}
	require.NotNil(t, s.PD, "the DeepSeek large-scale EP set")
	model, err := resolveModel(s)
	require.NoError(t, err)
	gpu, err := resolveGPU(s)
	require.NoError(t, err)
	perGPU := map[int]float64{}
	for _, n := range []int{16, 32} {
		x := s
		pd := *s.PD
		pd.Prefill = Pool{Servers: 1, GPUs: n, TP: n, DP: n, EP: n}
		x.PD = &pd
		raw := roleArgs(x, "prefill")
		args := map[string]any{}
		for k, v := range raw {
			args[k] = v
		}
		// The set's chunked_prefill_size is 16,384 tokens per rank at DP32; keep it per rank.
		args["chunked_prefill_size"] = float64(16384 * n)
		x.ServerArgs = map[string]any{"prefill": args, "decode": s.ServerArgs["decode"]}
		var notes []string
		svs, err := servers(x, model, gpu, &notes)
		require.NoError(t, err)
		rate, err := runPrefillPhase(svs[0], 2048, &notes)
		require.NoError(t, err)
		perGPU[n] = rate / float64(n)
	}
	t.Logf("prefill tok/s per GPU: EP16 %.0f, EP32 %.0f", perGPU[16], perGPU[32])
	assert.InEpsilon(t, perGPU[16], perGPU[32], 0.15, "per-GPU prefill throughput EP16 vs EP32")
}

// drawn is the sum of the prompt (input) or output lengths a level of w draws in the sim.
func drawn(w workloads.Params, input bool) float64 {
	p := workloads.DefaultLoadParams().LevelParams(w, 0)
	sum := 0.0
	for i := range p.NumPrompts {
		a, b := workloads.RandomLengths(p, i)
		if input {
			sum += float64(a)
		} else {
			sum += float64(b)
		}
	}
	return sum
}

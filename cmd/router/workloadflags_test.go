package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// parseWorkloadFlags parses args into fresh default structs.
func parseWorkloadFlags(args ...string) (workloads.Params, workloads.LoadParams, *pflag.FlagSet, error) {
	p, l := workloads.DefaultParams(), workloads.DefaultLoadParams()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	addWorkloadFlags(fs, &p, &l)
	if err := fs.Parse(args); err != nil {
		return p, l, fs, err
	}
	return p, l, fs, validateWorkloadFlags(p, l)
}

func TestWorkloadFlagsDefaults(t *testing.T) {
	t.Parallel()
	p, l, fs, err := parseWorkloadFlags()
	require.NoError(t, err)
	assert.Equal(t, workloads.DefaultParams(), p)
	assert.Equal(t, workloads.DefaultLoadParams(), l)
	// every flag documents itself and --help shows the defaults
	fs.VisitAll(func(f *pflag.Flag) { assert.NotEmpty(t, f.Usage, "--%s has no help", f.Name) })
	usage := fs.FlagUsages()
	for _, want := range []string{"--gsp-system-prompt-len int", "(default 2048)", `--api chat|completions|generate`,
		"(default chat)", "--rate R|inf,...", "--arrival string", `(default "poisson")`, "--think-time duration"} {
		assert.Contains(t, usage, want)
	}
}

func TestWorkloadFlagsParse(t *testing.T) {
	t.Parallel()
	p, l, _, err := parseWorkloadFlags(
		"--workload", "gsp", "--api", "generate", "--model", "llama", "--seed", "7",
		"--gsp-num-groups", "8", "--gsp-prompts-per-group", "4", "--gsp-system-prompt-len", "512",
		"--gsp-question-len", "64", "--gsp-output-len", "32", "--gsp-ordered",
		"--turns", "6", "--think-time", "1.5s", "--range-ratio", "0.25", "--ignore-eos=false",
		"--concurrency", "1,2,4", "--rate", "0.5,inf", "--rate", "10",
		"--arrival", "gamma", "--burstiness", "0.5", "--requests", "100", "--duration", "2m",
		"--warmup", "3", "--flush-cache", "--time-scale", "0.5",
	)
	require.NoError(t, err)
	want := workloads.DefaultParams()
	want.Workload, want.API, want.Model, want.Seed = "gsp", workloads.APIGenerate, "llama", 7
	want.GSPNumGroups, want.GSPPromptsPerGroup, want.GSPSystemPromptLen = 8, 4, 512
	want.GSPQuestionLen, want.GSPOutputLen, want.GSPOrdered = 64, 32, true
	want.Turns, want.ThinkTime, want.RangeRatio, want.IgnoreEOS = 6, 1500*time.Millisecond, 0.25, false
	want.TimeScale = 0.5
	assert.Equal(t, want, p)
	assert.Equal(t, workloads.LoadParams{
		Concurrency: []int{1, 2, 4}, Rates: []float64{0.5, math.Inf(1), 10}, Arrival: "gamma",
		Burstiness: 0.5, Requests: 100, Duration: 2 * time.Minute, Warmup: 3, FlushCache: true,
	}, l)
}

func TestWorkloadFlagsReject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"turns zero", []string{"--turns", "0"}, "workloads: --turns 0 must be ≥ 1"},
		{"unknown api", []string{"--api", "grpc"}, `"--api"`},
		{"unknown workload", []string{"--workload", "lmsys-chat"}, "--workload"},
		{"rate zero", []string{"--rate", "0"}, `"--rate"`},
		{"rate garbage", []string{"--rate", "fast"}, `"--rate"`},
		{"concurrency garbage", []string{"--concurrency", "x"}, `"--concurrency"`},
		{"concurrency zero", []string{"--concurrency", "0"}, "--concurrency 0 must be ≥ 1"},
		{"burstiness", []string{"--arrival", "gamma", "--burstiness", "-1"}, "--burstiness -1"},
		{"arrival", []string{"--arrival", "uniform"}, "--arrival"},
		{"trace without file", []string{"--workload", "mooncake"}, "--trace-file"},
		{"time scale", []string{"--time-scale", "0"}, "--time-scale 0"},
		{"range ratio", []string{"--range-ratio", "2"}, "--range-ratio 2"},
		{"think time", []string{"--think-time", "soon"}, `"--think-time"`},
		{"duration", []string{"--duration", "-1s"}, "--duration -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := parseWorkloadFlags(tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestWorkloadFlagsBesideRouterSeed(t *testing.T) {
	t.Parallel()
	p, l := workloads.DefaultParams(), workloads.DefaultLoadParams()
	fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	var routerSeed uint64
	fs.Uint64Var(&routerSeed, "seed", 0, "router seed")
	require.NotPanics(t, func() { addWorkloadFlags(fs, &p, &l) })
	require.NoError(t, fs.Parse([]string{"--seed", "9", "--turns", "2"}))
	assert.Equal(t, uint64(9), routerSeed)
	assert.Equal(t, 2, p.Turns)
}

// --requests beyond what a generated workload holds draws more of it (same shape, same seed);
// a workload that already holds enough, --requests 0, a trace or a dataset file is left alone.
func TestFitRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		args      []string
		grown     func(workloads.Params) int
		want      int
		noteparts []string
	}{
		{"multiturn", []string{"--requests", "500", "--warmup", "10"}, func(p workloads.Params) int { return p.Conversations },
			128, []string{"--requests 500 (+ --warmup 10)", "64 conversations × 4 turns", "drawing 128 conversations"}},
		{"multiturn enough", []string{"--requests", "256"}, func(p workloads.Params) int { return p.Conversations }, 64, nil},
		{"no bound", nil, func(p workloads.Params) int { return p.Conversations }, 64, nil},
		{"gsp", []string{"--workload", "gsp", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "4", "--requests", "9"},
			func(p workloads.Params) int { return p.GSPNumGroups }, 3, []string{"drawing 3 groups of 4"}},
		{"lsp", []string{"--workload", "long-system-prompt", "--lsp-prompts", "5", "--requests", "7"},
			func(p workloads.Params) int { return p.LSPPrompts }, 7, []string{"7 long-system-prompt requests instead of 5"}},
		{"hotspot", []string{"--workload", "hotspot", "--hs-requests", "5", "--requests", "7"},
			func(p workloads.Params) int { return p.HSRequests }, 7, []string{"drawing 7 hotspot requests instead of --hs-requests 5"}},
		{"hotspot enough", []string{"--workload", "hotspot", "--requests", "7"}, func(p workloads.Params) int { return p.HSRequests }, 4000, nil},
		{"random", []string{"--workload", "random", "--num-prompts", "5", "--requests", "7", "--warmup", "1"},
			func(p workloads.Params) int { return p.NumPrompts }, 8, []string{"drawing 8 random prompts instead of --num-prompts 5"}},
		{"sharegpt", []string{"--workload", "sharegpt", "--num-prompts", "5", "--requests", "6"},
			func(p workloads.Params) int { return p.NumPrompts }, 6, []string{"6 sharegpt prompts"}},
		{"dataset", []string{"--workload", "custom", "--dataset-path", "x.jsonl", "--num-prompts", "5", "--requests", "6"},
			func(p workloads.Params) int { return p.NumPrompts }, 5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, l, _, err := parseWorkloadFlags(tc.args...)
			require.NoError(t, err)
			note := fitRequests(&p, l)
			assert.Equal(t, tc.want, tc.grown(p))
			if tc.noteparts == nil {
				assert.Empty(t, note)
			}
			for _, part := range tc.noteparts {
				assert.Contains(t, note, part)
			}
			require.NoError(t, p.Validate())
			if tc.noteparts != nil {
				held := p.ConversationCount()
				if p.Workload == workloads.WorkloadMultiTurn {
					held *= p.Turns
				}
				assert.GreaterOrEqual(t, held, l.Requests+l.Warmup, "the grown workload holds the requests")
			}
		})
	}
}

// router sim reads --dataset-path through the shared workload flags, like bench: every
// usable record becomes one request of the level.
func TestSimDatasetPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt": "Explain prefix caching in two sentences.", "output_len": 16}
{"prompt": "List the planets of the solar system.", "output_len": 24}
{"prompt": "x"}
`), 0o644))
	dir := filepath.Join(t.TempDir(), "out")
	_, err := run(t, "sim", "--workload", "custom", "--dataset-path", path, "--concurrency", "2", "--out", dir)
	require.NoError(t, err)
	res, recs, err := reports.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, res.Levels, 1)
	assert.Equal(t, 2, res.Levels[0].Requests, "the 1-token prompt is skipped")
	var outs []int
	for _, r := range recs {
		outs = append(outs, r.OutputTokens)
	}
	assert.ElementsMatch(t, []int{16, 24}, outs)
	assert.JSONEq(t, strconv.Quote(path), string(res.Meta.Workload.Params["dataset_path"]))

	_, err = run(t, "sim", "--workload", "custom", "--concurrency", "2")
	assert.ErrorContains(t, err, "--workload custom needs --dataset-path")
}

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

package workloads

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultParams().Validate())
	for _, tc := range []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"turns", func(p *Params) { p.Turns = 0 }, "workloads: --turns 0 must be ≥ 1"},
		{"workload", func(p *Params) { p.Workload = "nope" }, "--workload \"nope\""},
		{"api", func(p *Params) { p.API = "grpc" }, "--api \"grpc\""},
		{"trace file", func(p *Params) { p.Workload = WorkloadMooncake }, "--trace-file is required"},
		{"time scale", func(p *Params) { p.TimeScale = 0 }, "--time-scale 0 must be > 0"},
		{"range ratio", func(p *Params) { p.RangeRatio = 1.5 }, "--range-ratio 1.5 is outside [0,1]"},
		{"think time", func(p *Params) { p.ThinkTime = -time.Second }, "--think-time -1s"},
		{"conversations", func(p *Params) { p.Conversations = -1 }, "--conversations -1 must be ≥ 1"},
		{"system prompt len", func(p *Params) { p.SystemPromptLen = -1 }, "--system-prompt-len -1 must be ≥ 0"},
		{"shared system prompts", func(p *Params) { p.SharedSystemPrompts = 0 }, "--shared-system-prompts 0"},
		{"output len", func(p *Params) { p.OutputLen = 0 }, "--output-len 0"},
		{"gsp groups", func(p *Params) { p.GSPNumGroups = 0 }, "--gsp-num-groups 0"},
		{"lsp prompts", func(p *Params) { p.LSPPrompts = 0 }, "--lsp-prompts 0"},
		{"input len", func(p *Params) { p.InputLen = 0 }, "--input-len 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.edit(&p)
			require.Error(t, p.Validate())
			assert.Contains(t, p.Validate().Error(), tc.want)
			_, err := NewSource(p)
			require.Error(t, err, "NewSource validates")
		})
	}
	p := DefaultParams()
	p.RangeRatio = math.NaN()
	require.ErrorContains(t, p.Validate(), "--range-ratio")
}

func TestLoadParams(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultLoadParams().Validate(false))
	for _, tc := range []struct {
		name    string
		edit    func(*LoadParams)
		isTrace bool
		want    string
	}{
		{"concurrency", func(l *LoadParams) { l.Concurrency = []int{1, 0} }, false, "--concurrency 0 must be ≥ 1"},
		{"rate", func(l *LoadParams) { l.Rates = []float64{-2} }, false, "--rate -2 must be > 0"},
		{"arrival", func(l *LoadParams) { l.Arrival = "weibull" }, false, "--arrival \"weibull\""},
		{"trace arrival needs a trace", func(l *LoadParams) { l.Arrival = ArrivalTrace }, false, "--arrival trace needs"},
		{"trace arrival takes no rate", func(l *LoadParams) { l.Arrival, l.Rates = ArrivalTrace, []float64{1} }, true, "takes no --rate"},
		{"burstiness", func(l *LoadParams) { l.Burstiness = 0 }, false, "--burstiness 0 must be > 0"},
		{"requests", func(l *LoadParams) { l.Requests = -1 }, false, "--requests -1"},
		{"warmup", func(l *LoadParams) { l.Warmup = -1 }, false, "--warmup -1"},
		{"duration", func(l *LoadParams) { l.Duration = -time.Second }, false, "--duration -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLoadParams()
			tc.edit(&l)
			require.ErrorContains(t, l.Validate(tc.isTrace), tc.want)
		})
	}
}

func TestLevels(t *testing.T) {
	t.Parallel()
	l := DefaultLoadParams()
	assert.Equal(t, []Level{{Label: "c1", Concurrency: 1}}, l.Levels(false))
	assert.Equal(t, []Level{{Label: "trace", Arrival: ArrivalTrace}}, l.Levels(true))
	l.Concurrency = []int{1, 4}
	l.Rates = []float64{2.5, math.Inf(1)}
	l.Arrival = ArrivalGamma
	levels := l.Levels(false)
	var labels []string
	for _, lv := range levels {
		labels = append(labels, lv.Label)
	}
	assert.Equal(t, []string{"c1", "c4", "r2.5", "burst"}, labels)
	assert.Nil(t, levels[0].Arrivals(l, 1, 0), "closed loop has no arrival process")
	assert.IsType(t, &renewal{}, levels[2].Arrivals(l, 1, 0))
	assert.Equal(t, Burst{Limit: 7}, levels[3].Arrivals(l, 1, 7))
	l.Arrival = ArrivalConstant
	assert.Equal(t, Constant{Rate: 2.5}, l.Levels(false)[2].Arrivals(l, 1, 0))
}

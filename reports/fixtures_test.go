package reports

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Hand-written fixtures shared by the golden, round-trip, schema and table tests.

func str(s string) *string { return &s }

const (
	prefill0 = "http://10.0.0.1:30000"
	prefill1 = "http://10.0.0.2:30000"
	decode0  = "http://10.0.0.3:30001"
)

// fixtureRecords is a small bench run over three levels: c2 (closed loop: a 1-token reply, a
// TPOT-less success), r0.5 (Poisson: queueing, a timeout and two 503s) and burst.
func fixtureRecords() []Record {
	pd := func(p string) Targets { return Targets{Prefill: str(p), Decode: str(decode0)} }
	return []Record{
		{Level: "c2", ID: "c2-0", StartMs: 0, TTFTMs: new(120.0), TPOTMs: TPOT(120, 420, 4), E2EMs: 420,
			ITLMs: []float64{100, 90, 110}, InputTokens: 2100, OutputTokens: 4, CachedTokens: 0, Targets: pd(prefill0)},
		{Level: "c2", ID: "c2-1", StartMs: 3.5, TTFTMs: new(80.0), TPOTMs: TPOT(80, 80, 1), E2EMs: 80,
			InputTokens: 2100, OutputTokens: 1, CachedTokens: 2048, Targets: pd(prefill1)},
		{Level: "c2", ID: "c2-2", StartMs: 420.25, TTFTMs: new(60.0), TPOTMs: TPOT(60, 300, 5), E2EMs: 300,
			ITLMs: []float64{55, 65, 60, 60}, InputTokens: 2200, OutputTokens: 5, CachedTokens: 2048, Targets: pd(prefill0)},
		{Level: "c2", ID: "c2-3", StartMs: 500, TTFTMs: new(95.0), TPOTMs: TPOT(95, 395, 3), E2EMs: 395,
			ITLMs: []float64{150, 150}, InputTokens: 2150, OutputTokens: 3, CachedTokens: 1024, Targets: pd(prefill1)},

		{Level: "r0.5", ID: "r0.5-0", StartMs: 0, QueueMs: new(0.5), TTFTMs: new(150.0), TPOTMs: TPOT(150, 450, 4), E2EMs: 450,
			ITLMs: []float64{100, 100, 100}, InputTokens: 512, OutputTokens: 4, CachedTokens: 0, Targets: pd(prefill0)},
		{Level: "r0.5", ID: "r0.5-1", StartMs: 1800, QueueMs: new(2.0), TTFTMs: new(90.0), E2EMs: 30000,
			ITLMs: []float64{40}, InputTokens: 512, OutputTokens: 2, Targets: pd(prefill1),
			Error: FormatError(ErrKindTimeout, "no [DONE] within 30s")},
		{Level: "r0.5", ID: "r0.5-2", StartMs: 2500, QueueMs: new(1.0), E2EMs: 12.5, InputTokens: 512,
			Targets: Targets{Prefill: str(prefill0)}, Error: FormatError(HTTPErrorKind(503), "prefill unavailable")},
		{Level: "r0.5", ID: "r0.5-3", StartMs: 4100, QueueMs: new(0.0), E2EMs: 9, InputTokens: 512,
			Error: FormatError(HTTPErrorKind(503), "")},

		{Level: "burst", ID: "burst-0", StartMs: 0, QueueMs: new(0.25), TTFTMs: new(300.0), TPOTMs: TPOT(300, 500, 3), E2EMs: 500,
			ITLMs: []float64{100, 100}, InputTokens: 1000, OutputTokens: 3, CachedTokens: 500, Targets: Targets{Regular: str(prefill0)}},
		{Level: "burst", ID: "burst-1", StartMs: 0.5, QueueMs: new(0.75), TTFTMs: new(310.0), TPOTMs: TPOT(310, 610, 4), E2EMs: 610,
			ITLMs: []float64{100, 100, 100}, InputTokens: 1000, OutputTokens: 4, CachedTokens: 0, Targets: Targets{Regular: str(prefill1)}},
	}
}

// byLevel returns the records of one level.
func byLevel(recs []Record, label string) []Record {
	var out []Record
	for _, r := range recs {
		if r.Level == label {
			out = append(out, r)
		}
	}
	return out
}

// fixtureResults aggregates fixtureRecords into a bench run with an SLO.
func fixtureResults(t testing.TB) *Results {
	t.Helper()
	recs := fixtureRecords()
	wl, err := NewWorkload("gsp", map[string]any{
		"gsp_num_groups": 2, "gsp_prompts_per_group": 4, "gsp_system_prompt_len": 2048,
		"gsp_question_len": 128, "gsp_output_len": 4, "range_ratio": 1.0, "api": "chat",
	})
	require.NoError(t, err)
	slo := &SLO{TTFTMs: 100, TPOTMs: 120}
	c2, r05, burst := ClosedLoop(2), OpenLoop(0.5, ArrivalPoisson), Burst()
	c2.Duration, r05.Duration, burst.Duration = 1200*time.Millisecond, 32*time.Second, 610*time.Millisecond
	var levels []Level
	for _, info := range []LevelInfo{c2, r05, burst} {
		info.SLO = slo
		l, err := Aggregate(info, byLevel(recs, info.Label))
		require.NoError(t, err)
		levels = append(levels, l)
	}
	started := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	return &Results{
		Schema: SchemaVersion,
		Meta: Meta{
			Tool: ToolBench, Version: "v0.1.0", Seed: 42, Workload: wl,
			Target:  str("http://127.0.0.1:8080"),
			Router:  json.RawMessage(`{"mode":"pd","policy":"cache_aware","cache_threshold":0.5}`),
			Started: &started,
		},
		Levels: levels,
	}
}

// fixtureSimResults is a simulator run: no target, no start time, cluster set, sim metrics.
func fixtureSimResults(t testing.TB) *Results {
	t.Helper()
	recs := byLevel(fixtureRecords(), "c2")
	info := ClosedLoop(2)
	info.Duration = 1200 * time.Millisecond
	info.Sim = &SimStats{PredictedMatchRate: 0.6, LoadSpread: 0.25,
		QueueDelayMs: Summarize([]float64{0, 1.5, 3, 12})}
	l, err := Aggregate(info, recs)
	require.NoError(t, err)
	wl, err := NewWorkload("multiturn", struct {
		Conversations int     `json:"conversations"`
		Turns         int     `json:"turns"`
		ThinkTime     string  `json:"think_time"`
		RangeRatio    float64 `json:"range_ratio"`
	}{8, 3, "0s", 1})
	require.NoError(t, err)
	return &Results{
		Schema: SchemaVersion,
		Meta: Meta{
			Tool: ToolSim, Version: "v0.1.0", Seed: 7, Workload: wl,
			Cluster: json.RawMessage(`{"prefill":2,"decode":1,"dp_size":4,"profile":"llama3-8b-h100"}`),
			Router:  json.RawMessage(`{"mode":"pd","policy":"cache_aware","cache_threshold":0.5}`),
		},
		Levels: []Level{l},
	}
}

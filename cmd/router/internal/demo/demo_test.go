package demo

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

func level(label string, ttft50, ttft95, tpot50, tpot95 float64) reports.Level {
	return reports.Level{Label: label, Requests: 10, TTFTMs: reports.Stats{P50: ttft50, P95: ttft95},
		TPOTMs: reports.Stats{P50: tpot50, P95: tpot95}}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	live := &reports.Results{Levels: []reports.Level{level("c1", 20, 40, 5, 6), level("c4", 30, 60, 5, 6), level("c9", 1, 1, 1, 1)}}
	simulated := &reports.Results{Levels: []reports.Level{level("c4", 33, 48, 5.5, 6), level("c1", 19, 40, 5, 6.6)}}
	simulated.Levels[0].Errors = 2
	rows := Compare(live, simulated)
	require.Len(t, rows, 2, "c9 has no simulated level")
	assert.Equal(t, "c1", rows[0].Label, "live order")
	assert.Equal(t, "c4", rows[1].Label)
	assert.Equal(t, 2, rows[1].SimErrs)
	for _, tc := range []struct {
		row    int
		metric string
		want   float64
	}{
		{0, "TTFT p50", -5},  // 19 vs 20
		{0, "TTFT p95", 0},   // equal
		{0, "TPOT p95", 10},  // 6.6 vs 6
		{1, "TTFT p50", 10},  // 33 vs 30
		{1, "TTFT p95", -20}, // 48 vs 60
		{1, "TPOT p50", 10},  // 5.5 vs 5
	} {
		f, ok := rows[tc.row].figure(tc.metric)
		require.True(t, ok, tc.metric)
		assert.InDelta(t, tc.want, f.DiffPct(), 1e-9, "%s %s", rows[tc.row].Label, tc.metric)
	}
	_, ok := rows[0].figure("E2E p50")
	assert.False(t, ok)
	assert.True(t, math.IsNaN(Figure{Live: 0, Sim: 3}.DiffPct()), "no live figure, no error")
}

func TestRenderComparison(t *testing.T) {
	t.Parallel()
	rows := Compare(&reports.Results{Levels: []reports.Level{level("c1", 20, 40, 5, 6)}},
		&reports.Results{Levels: []reports.Level{level("c1", 22, 30, 5, 0)}})
	rows[0].LiveErrs = 1
	var b bytes.Buffer
	require.NoError(t, RenderComparison(&b, rows))
	out := b.String()
	for _, want := range []string{"TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms", "TPOT p95 ms", "live", "sim", "diff",
		"10 (1 errs)", "20.0", "22.0", "+10.0%", "-25.0%", "+0.0%", "-100.0%"} {
		assert.Contains(t, out, want)
	}
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3, "two header lines and one row")
}

func TestReadDecisions(t *testing.T) {
	t.Parallel()
	log := `{"seq":1,"id":"a","rid":"r","room":7,"route":"/v1/chat/completions","prefill":{"worker":"http://p:1","index":1,"rank":3},"decode":{"worker":"http://d:1","index":0,"rank":null},"regular":null,"reason":"cache_miss","match_rate":0}
{"seq":2,"id":"b","rid":"s","room":0,"route":"/generate","prefill":null,"decode":null,"regular":{"worker":"http://r:1","index":2,"rank":0},"reason":"cache_hit","match_rate":null}
`
	ds, err := ReadDecisions(strings.NewReader(log))
	require.NoError(t, err)
	require.Len(t, ds, 2)
	assert.Equal(t, Decision{Seq: 1, Prefill: Pick{true, 1, 3}, Decode: Pick{true, 0, -1}, Reason: "cache_miss", Room: 7}, ds[0])
	assert.Equal(t, "seq 2 prefill - decode - regular 2@0 reason cache_hit", ds[1].String())
	assert.Equal(t, "0", ds[0].Decode.String())

	other := append([]Decision(nil), ds...)
	other[1].Regular.Rank = 1
	assert.True(t, SameDecision(ds[0], other[0]))
	assert.False(t, SameDecision(ds[1], other[1]))
	assert.Equal(t, 1, CommonPrefix(ds, other))
	assert.Equal(t, 2, CommonPrefix(ds, ds))
	other[0].Room = 99
	assert.True(t, SameDecision(ds[0], other[0]), "rooms are not part of a decision")

	_, err = ReadDecisions(strings.NewReader("{\"seq\":1}\nnot json\n"))
	require.ErrorContains(t, err, "decision log line 2")
}

func TestScenarioValidateNamesTheFlag(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultScenario().Validate())
	for _, tc := range []struct {
		name string
		edit func(*Scenario)
		want string
	}{
		{"no prefill", func(s *Scenario) { s.Prefill = 0 }, "--prefill 0"},
		{"dp size", func(s *Scenario) { s.DPSize = 0 }, "--dp-size 0"},
		{"speedup", func(s *Scenario) { s.Speedup = 0 }, "--speedup 0"},
		{"profile", func(s *Scenario) { s.Profile = "gpt-9" }, "--profile"},
		{"concurrency", func(s *Scenario) { s.Load.Concurrency = []int{0} }, "--concurrency 0"},
		{"policy", func(s *Scenario) { s.Policy = "nope" }, "--policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := DefaultScenario()
			tc.edit(&sc)
			require.ErrorContains(t, sc.Validate(), tc.want)
		})
	}
}

func TestScenarioBuildsMatchingRuns(t *testing.T) {
	t.Parallel()
	sc := DefaultScenario()
	sc.Seed = 9
	cfg := sc.SimConfig("v")
	assert.Equal(t, 2, cfg.Cluster.Prefill)
	assert.Equal(t, 4, cfg.Cluster.DPSize)
	assert.True(t, cfg.Cluster.DPAttention)
	assert.Equal(t, sc.Profile, cfg.Cluster.Profile)
	assert.Equal(t, sc.Speedup, cfg.Cluster.Speedup)
	assert.True(t, cfg.Router.PDDisaggregation)
	assert.True(t, cfg.Router.DPAware)
	assert.Equal(t, "cache_aware", cfg.Router.Policy)
	require.NotNil(t, cfg.Router.Seed)
	assert.Equal(t, int64(9), *cfg.Router.Seed)
	assert.Equal(t, uint64(9), cfg.Workload.Seed, "the workload follows the scenario's seed")
	wc, err := sc.WorkerConfig()
	require.NoError(t, err)
	assert.Equal(t, 4, wc.DPSize)
	assert.True(t, wc.DPAttention)
	assert.Equal(t, sc.Profile, wc.Profile.Name)
	assert.Equal(t, sc.Speedup, wc.Speedup)
}

// quickScenario is the demo shape with instant workers and a handful of requests.
func quickScenario() Scenario {
	sc := DefaultScenario()
	sc.Profile = "instant"
	sc.Workload.Conversations, sc.Workload.Turns, sc.Workload.OutputLen = 4, 2, 4
	sc.Load.Concurrency, sc.Load.Requests, sc.Load.Warmup = []int{1, 2}, 6, 2
	return sc
}

// waitGoroutines polls until the goroutine count is back to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left running (was %d):\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunWritesEverythingAndStopsEverything runs the whole demo on constant-time workers at
// speedup 10 (10 ms to the first token, 2 ms a token), engine load reports off: with them, how
// many reports land between two requests is the machine's timing, live, and the decisions at
// concurrency 1 differed (6 of 8 alike beside CPU hogs). Not on instant workers: there a
// decode stream often ends before prefill's answer reaches the router, which commits on the
// first event (SPEC §1.4), so the next request could find prefill still in flight where the
// simulator's prefill leg has ended (4 runs in 40 beside CPU hogs decided alike on only 4–6).
func TestRunWritesEverythingAndStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	out := filepath.Join(t.TempDir(), "demo")
	var stdout, stderr bytes.Buffer
	sc := quickScenario()
	sc.Profile, sc.Speedup = "constant", 10
	sc.LoadReports = 0
	o, err := Run(context.Background(), Config{Scenario: sc, Out: out, Stdout: &stdout, Stderr: &stderr, Version: "test"})
	require.NoError(t, err)
	assert.Equal(t, out, o.Out)
	require.Len(t, o.Rows, 2)
	for _, r := range o.Rows {
		assert.Equal(t, 6, r.LiveRequests, r.Label)
		assert.Equal(t, 6, r.SimRequests, r.Label)
		assert.Zero(t, r.LiveErrs, r.Label)
		assert.Zero(t, r.SimErrs, r.Label)
	}
	assert.Equal(t, 16, o.Decisions, "(2 warm-up + 6) requests at each of 2 levels")
	assert.GreaterOrEqual(t, o.SameDecisions, 8, "concurrency 1 decides alike")
	for _, f := range []string{ReportFile, ComparisonFile, LiveDecisionsFile, SimDecisionsFile,
		filepath.Join(LiveDir, reports.ResultsFile), filepath.Join(LiveDir, reports.RequestsFile),
		filepath.Join(SimDir, reports.ResultsFile), filepath.Join(SimDir, reports.RequestsFile)} {
		fi, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err, f)
		assert.Positive(t, fi.Size(), f)
	}
	html, err := os.ReadFile(filepath.Join(out, ReportFile))
	require.NoError(t, err)
	assert.Contains(t, string(html), "live vs sim")
	assert.Contains(t, stdout.String(), "TTFT p50 ms")
	assert.Contains(t, stdout.String(), "c2")
	assert.Contains(t, stderr.String(), "router serve --pd-disaggregation --prefill http://127.0.0.1:")
	assert.Contains(t, stdout.String(), "results in "+out)
	waitGoroutines(t, before)
}

// TestRunCancelled cancels the demo while the bench runs: Run returns the cancellation and
// every worker, the router and the bench have stopped.
func TestRunCancelled(t *testing.T) {
	before := runtime.NumGoroutine()
	sc := quickScenario()
	sc.Profile = "constant" // 100 ms to the first token, 20 ms per token: slow enough to interrupt
	sc.Load.Requests = 1000
	sc.Workload.Conversations = 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &notifyWriter{seen: "demo: router bench", hit: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Config{Scenario: sc, Out: t.TempDir(), Stderr: stderr})
		done <- err
	}()
	select {
	case <-stderr.hit:
	case err := <-done:
		t.Fatalf("the demo ended before its bench started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the bench never started")
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop after cancellation")
	}
	waitGoroutines(t, before)
}

// notifyWriter closes hit once seen has been written.
type notifyWriter struct {
	seen string
	hit  chan struct{}
	buf  bytes.Buffer
	once bool
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.once && strings.Contains(w.buf.String(), w.seen) {
		w.once = true
		close(w.hit)
	}
	return len(p), nil
}

// The parity line states what agreement is expected (all of a one-client first level) and
// says whether it was met, and why the rest may differ.
func TestParityLine(t *testing.T) {
	l := workloads.DefaultLoadParams()
	l.Concurrency, l.Requests, l.Warmup = []int{1, 4, 16}, 128, 16
	ok := ParityLine(l, 148, 432)
	assert.Contains(t, ok, "agree on the first 148 of 432")
	assert.Contains(t, ok, "at least the first 144, all of level c1")
	assert.Contains(t, ok, "— ok.")
	assert.Contains(t, ok, "the rest may differ")
	bad := ParityLine(l, 100, 432)
	assert.Contains(t, bad, "NOT MET")
	assert.Contains(t, bad, "at decision 101")
	all := ParityLine(l, 432, 432)
	assert.NotContains(t, all, "the rest may differ")
	l.Concurrency = []int{4}
	assert.Contains(t, ParityLine(l, 3, 432), "no fixed number")
}

func TestDistributionLine(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	rec := func(level string, ttft, tpot float64) reports.Record {
		return reports.Record{Level: level, TTFTMs: ms(ttft), TPOTMs: ms(tpot)}
	}
	live := []reports.Record{rec("c1", 10, 5), rec("c1", 20, 5), rec("c4", 30, 6)}
	sim := []reports.Record{rec("c1", 10, 5), rec("c1", 20, 5), rec("c4", 40, 7)}
	line := DistributionLine(live, sim, []Row{{Label: "c1"}, {Label: "c4"}})
	assert.Contains(t, line, "c1 TTFT 0.00, TPOT 0.00; c4 TTFT 1.00, TPOT 1.00")
}

// figure returns the figure of the metric called name ("TTFT p50", …); ok is false for an
// unknown name.
func (r Row) figure(name string) (f Figure, ok bool) {
	for i, m := range Metrics {
		if m.Name == name && i < len(r.Figures) {
			return r.Figures[i], true
		}
	}
	return Figure{}, false
}

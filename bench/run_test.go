package bench

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// smallConfig is a quick multiturn run against url: 3 conversations of 2 turns, 4 output
// tokens, short prompts.
func smallConfig(url string) Config {
	p := workloads.DefaultParams()
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 3, 2, 16, 8, 4
	l := workloads.DefaultLoadParams()
	l.Concurrency = []int{2}
	return Config{URL: url, Workload: p, Load: l, RequestTimeout: 20 * time.Second}
}

func TestRunClosedLoopAPIs(t *testing.T) {
	t.Parallel()
	for _, api := range []workloads.API{workloads.APIChat, workloads.APICompletions, workloads.APIGenerate} {
		t.Run("api="+string(api), func(t *testing.T) {
			t.Parallel()
			f := &fakeSSE{}
			srv := startFake(t, f)
			cfg := smallConfig(srv.URL)
			cfg.Workload.API = api
			cfg.Out = t.TempDir()
			res := runOK(t, cfg)
			require.Len(t, res.Levels, 1)
			l := res.Levels[0]
			assert.Equal(t, "c2", l.Label)
			assert.Equal(t, 6, l.Requests)
			assert.Zero(t, l.Errors, l.ErrorsByKind)
			require.NotNil(t, l.CacheHitRate)

			got, recs, err := reports.ReadDir(cfg.Out)
			require.NoError(t, err)
			assert.Equal(t, res.Levels, got.Levels)
			require.Len(t, recs, 6)
			for _, r := range recs {
				assert.Nil(t, r.Error)
				assert.Equal(t, 4, r.OutputTokens, r.ID)
				assert.Equal(t, 10, r.InputTokens, r.ID)
				assert.Equal(t, 4, r.CachedTokens, r.ID)
				require.NotNil(t, r.TTFTMs)
				require.NotNil(t, r.TPOTMs)
				assert.Len(t, r.ITLMs, 3)
				assert.Nil(t, r.QueueMs)
				assert.Regexp(t, `^multiturn-[0-2]/[01]$`, r.ID)
			}
			// Every second turn carries the reply the server actually sent to the first.
			withReply := 0
			for _, b := range f.requests() {
				if strings.Contains(string(b), " w0 w1 w2 w3") {
					withReply++
				}
			}
			assert.Equal(t, 3, withReply)
		})
	}
}

func TestRunOpenLoop(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	cfg.Load.Concurrency = nil
	cfg.Load.Rates = []float64{200}
	cfg.Load.Arrival = workloads.ArrivalConstant
	res := runOK(t, cfg)
	require.Len(t, res.Levels, 1)
	l := res.Levels[0]
	assert.Equal(t, "r200", l.Label)
	assert.Equal(t, 6, l.Requests, "3 arrivals, each with its second turn")
	assert.Zero(t, l.Errors)
	require.NotNil(t, l.QueueMs)
	assert.Equal(t, int64(6), f.hits.Load())
}

func TestRunBurstAndRequestsBound(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	cfg.Workload.Workload = workloads.WorkloadRandom
	cfg.Workload.NumPrompts, cfg.Workload.InputLen = 50, 16
	cfg.Load.Concurrency = []int{1, 3}
	cfg.Load.Rates = []float64{inf()}
	cfg.Load.Requests = 7
	res := runOK(t, cfg)
	var labels []string
	for _, l := range res.Levels {
		labels = append(labels, l.Label)
		assert.Equal(t, 7, l.Requests, l.Label)
		assert.Zero(t, l.Errors, l.Label)
	}
	assert.Equal(t, []string{"c1", "c3", "burst"}, labels)
}

// As in the simulator, the first --warmup requests of each level are its workload's first
// requests, sent but not recorded; --flush-cache flushes between levels.
func TestRunWarmupAndFlush(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	cfg.Load.Concurrency = []int{1, 2, 3}
	cfg.Load.Warmup = 2
	cfg.Load.FlushCache = true
	cfg.Out = t.TempDir()
	res := runOK(t, cfg)
	require.Len(t, res.Levels, 3)
	for _, l := range res.Levels {
		assert.Equal(t, 4, l.Requests, "6 requests in the workload, 2 of them warm-up")
	}
	assert.Equal(t, int64(3*6), f.hits.Load())
	assert.Equal(t, int64(2), f.flushes.Load())
	recs, err := reports.ReadRecords(cfg.Out)
	require.NoError(t, err)
	require.Len(t, recs, 12)
	assert.Less(t, recs[0].StartMs, 5.0, "c1: times count from the first recorded request")

	// With --requests, warm-up comes on top.
	cfg.Load.Requests = 3
	cfg.Out = ""
	res = runOK(t, cfg)
	for _, l := range res.Levels {
		assert.Equal(t, 3, l.Requests)
	}
}

// A --url nothing answers at fails the run before its first level, naming the URL and the
// cause (not after a table of zeros).
func TestRunNamesAnUnreachableTarget(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://u:secret@" + ln.Addr().String()
	ln.Close()
	cfg := smallConfig(url)
	cfg.Out = t.TempDir()
	res, err := Run(context.Background(), cfg)
	require.Error(t, err)
	assert.Nil(t, res)
	assert.Contains(t, err.Error(), "bench: --url http://***@"+ln.Addr().String()+": nothing answers there")
	assert.Contains(t, err.Error(), "connection refused")
	assert.NotContains(t, err.Error(), "secret")
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fake    *fakeSSE
		timeout time.Duration
		kind    string
		msg     string
	}{
		{name: "500", fake: &fakeSSE{Status: 500}, kind: "http_500", msg: "fake failure 500"},
		{name: "503", fake: &fakeSSE{Status: 503}, kind: "http_503", msg: "fake failure 503"},
		{name: "cut", fake: &fakeSSE{CutAfter: 2}, kind: reports.ErrKindStreamCut, msg: "before [DONE] after 2 events"},
		{name: "no-done", fake: &fakeSSE{NoDone: true}, kind: reports.ErrKindStreamCut, msg: "before [DONE]"},
		{name: "hang", fake: &fakeSSE{Hang: true}, timeout: 200 * time.Millisecond, kind: reports.ErrKindTimeout, msg: "within 200ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := smallConfig(startFake(t, tc.fake).URL)
			cfg.Load.Concurrency = []int{2}
			if tc.timeout > 0 {
				cfg.RequestTimeout = tc.timeout
			}
			cfg.Out = t.TempDir()
			res, err := Run(context.Background(), cfg)
			// Every request failed: the run fails, naming the level, the kind and its first message.
			var rateErr *ErrorRateError
			require.ErrorAs(t, err, &rateErr)
			assert.Contains(t, err.Error(), "level c2: 3 of 3 requests failed")
			assert.Contains(t, err.Error(), tc.kind+" ×3, first: "+tc.kind+": ")
			assert.Contains(t, err.Error(), tc.msg)
			l := res.Levels[0]
			// A failed first turn ends its conversation: 3 conversations, 3 failed requests.
			assert.Equal(t, 3, l.Requests)
			assert.Equal(t, 3, l.Errors)
			assert.Equal(t, map[string]int{tc.kind: 3}, l.ErrorsByKind)
			recs, err := reports.ReadRecords(cfg.Out)
			require.NoError(t, err)
			require.Len(t, recs, 3)
			assert.Contains(t, *recs[0].Error, tc.kind+": ")
			assert.Contains(t, *recs[0].Error, tc.msg)
		})
	}
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{Hang: true}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	go func() {
		for f.hits.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	res, err := Run(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, res.Levels, 1)
	assert.Equal(t, map[string]int{reports.ErrKindCanceled: 2}, res.Levels[0].ErrorsByKind)
}

func TestRunDuration(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{ITL: time.Millisecond}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	cfg.Workload.Conversations, cfg.Workload.Turns = 100000, 3
	cfg.Load.Duration = 150 * time.Millisecond
	res := runOK(t, cfg)
	l := res.Levels[0]
	assert.Positive(t, l.Requests)
	assert.Less(t, l.Requests, 300000)
	assert.Zero(t, l.Errors)
}

func TestSLOGoodput(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	slo, err := ParseSLO("ttft=60000,tpot=60000")
	require.NoError(t, err)
	cfg.SLO = slo
	res := runOK(t, cfg)
	require.NotNil(t, res.Levels[0].Goodput)
	assert.Equal(t, 1.0, *res.Levels[0].Goodput)
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "--url is required"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://x" }, "want http://host:port"},
		{"no scheme", func(c *Config) { c.URL = "127.0.0.1:30000" },
			`bench: --url "127.0.0.1:30000" must start with http:// or https:// (e.g. http://127.0.0.1:30000)`},
		{"no scheme, host only", func(c *Config) { c.URL = "localhost" }, "must start with http:// or https://"},
		{"bad workload", func(c *Config) { c.Workload.Turns = 0 }, "--turns"},
		{"bad load", func(c *Config) { c.Load.Concurrency = []int{0} }, "--concurrency 0"},
		{"twice", func(c *Config) { c.Load.Concurrency = []int{4, 2, 4} }, "level c4 appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := smallConfig("http://127.0.0.1:1")
			tc.edit(&cfg)
			_, err := Run(context.Background(), cfg)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseSLO(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want *reports.SLO
		err  string
	}{
		{in: "ttft=200,tpot=50", want: &reports.SLO{TTFTMs: 200, TPOTMs: 50}},
		{in: "ttft=200ms", want: &reports.SLO{TTFTMs: 200}},
		{in: "e2e=1000", want: &reports.SLO{E2EMs: 1000}},
		{in: "", err: "is empty"},
		{in: "ttft=-1", err: "not KEY=MS"},
		{in: "itl=5", err: "unknown objective"},
	} {
		got, err := ParseSLO(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	require.NoError(t, ParseHeader(h, "Authorization: Bearer x"))
	require.NoError(t, ParseHeader(h, "x-a:b"))
	assert.Equal(t, "Bearer x", h.Get("Authorization"))
	assert.Equal(t, "b", h.Get("X-A"))
	assert.Error(t, ParseHeader(h, "nocolon"))
	assert.Error(t, ParseHeader(h, ": v"))
}

func TestPacer(t *testing.T) {
	t.Parallel()
	p := Pacer{Arrivals: workloads.Constant{Rate: 10, Limit: 3}, Nominal: 10}
	for _, tc := range []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
		stop    bool
	}{
		{0, 0, 0, false}, // first arrival at once
		{50 * time.Millisecond, 1, 50 * time.Millisecond, false},   // second due at 100ms
		{250 * time.Millisecond, 2, -50 * time.Millisecond, false}, // late: send now
		{time.Second, 3, 0, true},                                  // limit reached
	} {
		wait, stop := p.Pace(tc.elapsed, tc.hits)
		assert.Equal(t, tc.wait, wait)
		assert.Equal(t, tc.stop, stop)
	}
	assert.Equal(t, 10.0, p.Rate(0))
}

func TestRunThinkTimeAndProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"closed", func(c *Config) {}},
		{"open", func(c *Config) {
			c.Load.Concurrency, c.Load.Rates, c.Load.Arrival = nil, []float64{1000}, workloads.ArrivalConstant
		}},
	} {
		t.Run("loop="+tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSSE{}
			srv := startFake(t, f)
			cfg := smallConfig(srv.URL)
			cfg.Workload.ThinkTime = 30 * time.Millisecond
			tc.edit(&cfg)
			var prog strings.Builder
			cfg.Progress = &prog
			cfg.Out = t.TempDir()
			res := runOK(t, cfg)
			l := res.Levels[0]
			assert.Equal(t, 6, l.Requests)
			assert.Zero(t, l.Errors)
			assert.Contains(t, prog.String(), l.Label+": 6 reqs  0 errs")
			// Every conversation thinks once between its two turns.
			assert.GreaterOrEqual(t, l.DurationS, 0.03)
			recs, err := reports.ReadRecords(cfg.Out)
			require.NoError(t, err)
			late := 0
			for _, r := range recs {
				if r.StartMs >= 30 {
					late++
				}
			}
			assert.GreaterOrEqual(t, late, 3, "second turns wait the think time")
		})
	}
}

// Errors within --max-error-rate do not fail the run; their examples go to the progress output.
func TestRunErrorExamplesOnProgress(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{Status: 503}
	srv := startFake(t, f)
	for _, limit := range []float64{-1, 1} {
		cfg := smallConfig(srv.URL)
		cfg.MaxErrorRate = limit
		var prog strings.Builder
		cfg.Progress = &prog
		runOK(t, cfg)
		assert.Contains(t, prog.String(), "c2: e.g. http_503: fake failure 503")
	}
}

// The error rate is compared per level: a level at exactly the limit passes, above it fails.
func TestCheckErrorRate(t *testing.T) {
	t.Parallel()
	res := &reports.Results{Levels: []reports.Level{
		{Label: "c1", Requests: 10, Errors: 1, ErrorsByKind: map[string]int{"http_500": 1}},
		{Label: "c4", Requests: 10},
	}}
	ex := map[string]map[string]string{"c1": {"http_500": "http_500: boom"}}
	assert.NoError(t, checkErrorRate(res, 0.1, ex))
	assert.NoError(t, checkErrorRate(res, -1, ex))
	err := checkErrorRate(res, 0.05, ex)
	var rateErr *ErrorRateError
	require.ErrorAs(t, err, &rateErr)
	require.Len(t, rateErr.Levels, 1)
	assert.Equal(t, "c1", rateErr.Levels[0].Label)
	assert.Contains(t, err.Error(), "http_500 ×1, first: http_500: boom")
	_, err = Run(context.Background(), Config{URL: "http://127.0.0.1:1", MaxErrorRate: 2,
		Workload: workloads.DefaultParams(), Load: workloads.DefaultLoadParams()})
	assert.ErrorContains(t, err, "--max-error-rate 2")
}

// Not on a terminal, progress is whole lines: one for the warm-up and one per level, never a
// carriage-return redraw. On a terminal the bar is labelled warm-up while it lasts.
func TestRunProgressLines(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{TTFT: 5 * time.Millisecond}
	srv := startFake(t, f)
	cfg := smallConfig(srv.URL)
	cfg.Load.Concurrency = []int{1, 2}
	cfg.Load.Warmup = 2
	var prog strings.Builder
	cfg.Progress = &prog
	runOK(t, cfg)
	out := prog.String()
	assert.NotContains(t, out, "\r")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Regexp(t, `^c1 warm-up: 2 requests done in `, lines[0])
	assert.Regexp(t, `^c1: \d+ reqs  0 errs  `, lines[1])
	assert.Regexp(t, `^c2 warm-up: 2 requests done in `, lines[2])
	assert.Regexp(t, `^c2: \d+ reqs  0 errs  `, lines[3])

	var tty strings.Builder
	p := &progress{w: &tty, tty: true, label: "c4", total: 8, start: time.Now()}
	p.draw(levelCounts{warm: 1, warmTotal: 4})
	assert.Contains(t, tty.String(), "c4 warm-up [=======                       ] 1/4 reqs")
	tty.Reset()
	p.draw(levelCounts{warm: 4, warmTotal: 4, done: 8})
	assert.Contains(t, tty.String(), "c4     [==============================] 8/8 reqs")
}

func TestRunTrace(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{}
	srv := startFake(t, f)
	p := workloads.DefaultParams()
	p.Workload, p.TraceFile, p.TimeScale = workloads.WorkloadMooncake, "../../shared/traces/synthetic_trace.jsonl", 0.0001
	l := workloads.DefaultLoadParams()
	l.Requests = 12
	res := runOK(t, Config{URL: srv.URL, Workload: p, Load: l})
	require.Len(t, res.Levels, 1)
	lv := res.Levels[0]
	assert.Equal(t, "trace", lv.Label)
	assert.Equal(t, 12, lv.Requests)
	assert.Zero(t, lv.Errors, lv.ErrorsByKind)
	require.NotNil(t, lv.QueueMs)
}

// Everything a run starts has stopped when Run returns (idle connections closed, attackers,
// clients and progress done). Not parallel: it counts goroutines.
func TestRunLeavesNoGoroutines(t *testing.T) {
	f := &fakeSSE{}
	srv := startFake(t, f)
	before := runtime.NumGoroutine()
	for _, edit := range []func(*Config){
		func(c *Config) {},
		func(c *Config) { c.Load.Concurrency, c.Load.Rates = nil, []float64{500} },
	} {
		cfg := smallConfig(srv.URL)
		cfg.Progress = io.Discard
		edit(&cfg)
		runOK(t, cfg)
	}
	srv.CloseClientConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before)
}

// A run records what it ran against: the label, the command line, and the target's
// /get_server_info when it answers one (a 404 for /get_router_config records nothing).
func TestRunRecordsTarget(t *testing.T) {
	t.Parallel()
	srv := startFake(t, &fakeSSE{})
	cfg := smallConfig(srv.URL)
	cfg.Label, cfg.Command = "threshold-0.3", []string{"bench", "--url", srv.URL}
	cfg.Out = t.TempDir()
	runOK(t, cfg)
	res, err := reports.ReadResults(cfg.Out)
	require.NoError(t, err)
	assert.Equal(t, "threshold-0.3", res.Meta.Label)
	assert.Equal(t, cfg.Command, res.Meta.Command)
	assert.JSONEq(t, `{"dp_size":2,"model_path":"fake"}`, string(res.Meta.ServerInfo))
	assert.Nil(t, res.Meta.Router)
	run, err := reports.ReadRun(cfg.Out, false)
	require.NoError(t, err)
	assert.Equal(t, "threshold-0.3", run.Name, "the label names the run in reports")
}

// Each level draws conversations of its own: no prompt of level 2 was sent in level 1, with
// or without --flush-cache; --same-conversations replays level 1's.
func TestRunLevelsDrawFreshConversations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		flush, same bool
	}{{"fresh", false, false}, {"fresh+flush", true, false}, {"same", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSSE{}
			srv := startFake(t, f)
			cfg := smallConfig(srv.URL)
			cfg.Load.Concurrency = []int{1, 2}
			cfg.Load.FlushCache, cfg.Load.SameConversations = tc.flush, tc.same
			runOK(t, cfg)
			bodies := f.requests()
			require.Len(t, bodies, 12, "3 conversations of 2 turns per level")
			first, second := map[string]bool{}, map[string]bool{}
			for i, b := range bodies {
				var req struct {
					Messages []struct{ Content string } `json:"messages"`
				}
				require.NoError(t, json.Unmarshal(b, &req))
				last := req.Messages[len(req.Messages)-1].Content // the turn's question
				if i < 6 {
					first[last] = true
				} else {
					second[last] = true
				}
			}
			shared := 0
			for q := range second {
				if first[q] {
					shared++
				}
			}
			if tc.same {
				assert.Equal(t, first, second, "--same-conversations replays level 1")
			} else {
				assert.Zero(t, shared, "level 2 sends none of level 1's questions")
			}
		})
	}
}

// --scrape-metrics samples the SGLang gauges of the given /metrics during the run into
// metrics.jsonl, and results.json carries the replay parameters.
func TestScrapeMetricsAndReplay(t *testing.T) {
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n"+
			"sglang:num_running_reqs{model_name=\"m\",dp_rank=\"0\"} 3\nsglang:token_usage{model_name=\"m\",dp_rank=\"0\"} 0.25\n"+
			"sglang:other 7\nsglang:gen_throughput{model_name=\"m\"} 1234.5\n")
	}))
	defer metrics.Close()
	srv := startFake(t, &fakeSSE{})
	dir := t.TempDir()
	cfg := smallConfig(srv.URL)
	cfg.Out, cfg.ScrapeMetrics, cfg.ScrapeInterval = dir, []string{metrics.URL}, time.Millisecond
	res := runOK(t, cfg)
	b, err := os.ReadFile(filepath.Join(dir, MetricsFile))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "at least one scrape (three series)")
	var s Sample
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &s))
	assert.Equal(t, Sample{TMs: s.TMs, URL: metrics.URL + "/metrics", Metric: "sglang:num_running_reqs",
		Labels: map[string]string{"model_name": "m", "dp_rank": "0"}, Value: 3}, s)
	assert.NotContains(t, string(b), "sglang:other")
	assert.Contains(t, string(b), `"metric":"sglang:gen_throughput","labels":{"model_name":"m"},"value":1234.5`)

	var rp workloads.Replay
	require.NoError(t, json.Unmarshal(res.Meta.Replay, &rp))
	assert.Equal(t, cfg.Workload, rp.Workload)
	assert.Equal(t, cfg.Load, rp.Load)

	cfg.Out = ""
	_, err = Run(context.Background(), cfg)
	require.ErrorContains(t, err, "--scrape-metrics needs --out")
}

// Not on a terminal, a level writes a heartbeat line every HeartbeatInterval: requests done
// (of the expected total), errors and the P50 TTFT so far; the warm-up's count while it lasts.
// The clock is injected: ticks between heartbeats write nothing.
func TestProgressHeartbeat(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	c := levelCounts{warmTotal: 2}
	ttft, have := 0.0, false
	p := &progress{w: &out, label: "c16", total: 500, start: t0, lastBeat: t0,
		count: func() levelCounts { return c }, p50TTFT: func() (float64, bool) { return ttft, have },
		now: func() time.Time { return now }}

	now = t0.Add(9 * time.Second)
	p.tick()
	assert.Empty(t, out.String(), "no heartbeat before 10 s")
	now = t0.Add(10 * time.Second)
	p.tick()
	assert.Equal(t, "c16 warm-up: 0/2 requests  10s\n", out.String())

	out.Reset()
	c = levelCounts{warm: 2, warmTotal: 2, done: 120, errs: 3}
	ttft, have = 45.25, true
	now = t0.Add(15 * time.Second)
	p.tick()
	assert.Regexp(t, `^c16 warm-up: 2 requests done in `, out.String(), "the warm-up line when it ends")
	out.Reset()
	now = t0.Add(20 * time.Second)
	p.tick()
	assert.Equal(t, "c16: 120/500 reqs  3 errs  P50 TTFT 45.2 ms  20s\n", out.String())
	out.Reset()
	now = t0.Add(29 * time.Second)
	p.tick()
	assert.Empty(t, out.String(), "the next heartbeat is 10 s after the last")

	// On a terminal the bar carries the counts: no heartbeat lines.
	var tty strings.Builder
	q := &progress{w: &tty, tty: true, label: "c1", start: t0, lastBeat: t0,
		count: func() levelCounts { return c }, now: func() time.Time { return t0.Add(time.Minute) }}
	q.tick()
	assert.NotContains(t, tty.String(), "P50 TTFT")
}

// The heartbeat's P50 TTFT is the median of the level's successful requests so far.
func TestLevelP50TTFT(t *testing.T) {
	t.Parallel()
	l := &levelRun{}
	_, ok := l.p50TTFT()
	assert.False(t, ok)
	bad := "http_503: x"
	for _, v := range []float64{40, 10, 30, 1000} {
		l.records = append(l.records, reports.Record{TTFTMs: new(v)})
	}
	l.records = append(l.records, reports.Record{TTFTMs: new(1.0), Error: &bad})
	ms, ok := l.p50TTFT()
	require.True(t, ok)
	assert.Equal(t, 35.0, ms)
}

// Without --model (DiscoverModel) requests carry the model the target's /v1/models lists
// first, and results.json records it; a target that lists none leaves the default and the
// progress output says so.
func TestRunDiscoversModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, served, want, progress string
	}{
		{"listed", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "model meta-llama/Llama-3.1-8B-Instruct (from the target's /v1/models)"},
		{"not listed", "", "default", "model default: GET /v1/models answered 404 Not Found (pass --model)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeSSE{Model: tc.served}
			srv := startFake(t, f)
			cfg := smallConfig(srv.URL)
			cfg.DiscoverModel = true
			var prog strings.Builder
			cfg.Progress = &prog
			res := runOK(t, cfg)
			assert.Contains(t, prog.String(), tc.progress)
			assert.JSONEq(t, strconv.Quote(tc.want), string(res.Meta.Workload.Params["model"]))
			bodies := f.requests()
			require.NotEmpty(t, bodies)
			for _, b := range bodies {
				var body struct{ Model string }
				require.NoError(t, json.Unmarshal(b, &body))
				assert.Equal(t, tc.want, body.Model)
			}
		})
	}
}

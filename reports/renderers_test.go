package reports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sweepRun is a deterministic closed-loop sweep c1, c4, c16 of the multiturn workload; scale
// stretches its latencies (the "off" run is slower than the "on" run), records included.
func sweepRun(t testing.TB, name string, scale float64) Run {
	t.Helper()
	wl, err := NewWorkload("multiturn", map[string]any{"conversations": 16, "turns": 2})
	require.NoError(t, err)
	// The two runs differ in one router setting, which a comparison names.
	threshold := map[string]string{"off": "1", "on": "0.3"}[name]
	if threshold == "" {
		threshold = "0.5"
	}
	r := &Results{Schema: SchemaVersion, Meta: Meta{Tool: ToolBench, Version: "v0.1.0", Seed: 1,
		Workload: wl, Target: str("http://127.0.0.1:30000"),
		Router: json.RawMessage(`{"policy":"cache_aware","cache_threshold":` + threshold + `}`)}}
	var all []Record
	for li, n := range []int{1, 4, 16} {
		info := ClosedLoop(n)
		info.Duration = time.Duration(2+li) * time.Second
		info.SLO = &SLO{TTFTMs: 150}
		var recs []Record
		for i := range 8 {
			ttft := scale * float64(40+20*li*li+3*i)
			e2e := ttft + scale*float64(7*(10+li+i%3))
			rec := Record{Level: info.Label, ID: fmt.Sprintf("%s-%d", info.Label, i), StartMs: float64(100 * i),
				TTFTMs: new(ttft), E2EMs: e2e, ITLMs: []float64{scale * 10, scale * float64(10+li)},
				InputTokens: 1000, OutputTokens: 8, CachedTokens: 100 * li}
			rec.TPOTMs = TPOT(ttft, e2e, rec.OutputTokens)
			if li == 2 && i == 7 {
				rec.Error = FormatError(HTTPErrorKind(503), "overloaded")
				rec.TTFTMs, rec.TPOTMs, rec.ITLMs = nil, nil, nil
			}
			recs = append(recs, rec)
		}
		l, err := Aggregate(info, recs)
		require.NoError(t, err)
		r.Levels = append(r.Levels, l)
		all = append(all, recs...)
	}
	return Run{Name: name, Results: r, Records: all}
}

func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file   string
		format Format
		res    *Results
	}{
		{"results.md", FormatMarkdown, fixtureResults(t)},
		{"sim_results.md", FormatMarkdown, fixtureSimResults(t)},
		{"results.csv", FormatCSV, fixtureResults(t)},
		{"sim_results.csv", FormatCSV, fixtureSimResults(t)},
		{"render.json", FormatJSON, fixtureResults(t)},
	} {
		t.Run("file="+tc.file, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			require.NoError(t, Render(&buf, tc.format, tc.res))
			golden(t, tc.file, buf.Bytes())
		})
	}
}

func TestRenderJSONIsResultsJSON(t *testing.T) {
	t.Parallel()
	r := fixtureResults(t)
	var a, b bytes.Buffer
	require.NoError(t, RenderJSON(&a, r))
	require.NoError(t, EncodeResults(&b, r))
	assert.Equal(t, b.String(), a.String())
	back, err := DecodeResults(&a)
	require.NoError(t, err)
	assert.Equal(t, r.Levels, back.Levels)
}

func TestCompareGolden(t *testing.T) {
	t.Parallel()
	off, on := sweepRun(t, "off", 1.5), sweepRun(t, "on", 1)
	for _, tc := range []struct {
		file   string
		format Format
	}{
		{"compare.txt", FormatTable},
		{"compare.md", FormatMarkdown},
		{"compare.csv", FormatCSV},
		{"compare.json", FormatJSON},
	} {
		t.Run("file="+tc.file, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			require.NoError(t, RenderCompare(&buf, tc.format, off, on))
			golden(t, tc.file, buf.Bytes())
		})
	}
}

func TestRunsGolden(t *testing.T) {
	t.Parallel()
	runs := []Run{sweepRun(t, "off", 1.5), sweepRun(t, "on", 1)}
	for _, tc := range []struct {
		file   string
		format Format
	}{
		{"runs.txt", FormatTable},
		{"runs.csv", FormatCSV},
		{"runs.json", FormatJSON},
	} {
		t.Run("file="+tc.file, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			require.NoError(t, RenderRuns(&buf, tc.format, runs))
			golden(t, tc.file, buf.Bytes())
		})
	}
}

func TestCompareImprovement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		a, b  float64
		lower bool
		want  *float64
	}{
		{"latency halved", 200, 100, true, new(50.0)},
		{"latency doubled", 100, 200, true, new(-100.0)},
		{"throughput up", 10, 15, false, new(50.0)},
		{"equal", 5, 5, true, new(0.0)},
		{"zero baseline", 0, 5, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, Improvement(tc.a, tc.b, tc.lower))
		})
	}
}

func TestComparePairsByLabel(t *testing.T) {
	t.Parallel()
	a, b := sweepRun(t, "a", 1), sweepRun(t, "b", 1)
	b.Results.Levels = append(b.Results.Levels[1:2], b.Results.Levels[2])
	b.Results.Levels[1].Label, b.Results.Levels[1].Concurrency = "c32", new(32)
	c := Compare(a, b)
	var got []string
	for _, l := range c.Levels {
		got = append(got, fmt.Sprintf("%s:%t/%t", l.Label, l.A != nil, l.B != nil))
	}
	assert.Equal(t, []string{"c1:true/false", "c4:true/true", "c16:true/false", "c32:false/true"}, got)
	var buf bytes.Buffer
	require.NoError(t, RenderCompare(&buf, FormatTable, a, b))
	for i, line := range strings.Split(buf.String(), "\n") {
		if i > 0 {
			assert.LessOrEqual(t, utf8.RuneCountInString(line), 100, "line %d: %q", i+1, line)
		}
	}
	assert.Contains(t, buf.String(), "impr")
}

func TestRunName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"runs/on/results.json": "on", "runs/off": "off", "runs/off/": "off", "base.json": "base", "x": "x",
	} {
		assert.Equal(t, want, RunName(in), in)
	}
}

func TestReadRun(t *testing.T) {
	t.Parallel()
	run := sweepRun(t, "x", 1)
	dir := t.TempDir()
	require.NoError(t, WriteDir(dir, run.Results, run.Records))
	for _, path := range []string{dir, dir + "/results.json"} {
		got, err := ReadRun(path, true)
		require.NoError(t, err)
		assert.Len(t, got.Records, len(run.Records))
		assert.Equal(t, filepath.Base(dir), got.Name)
		bare, err := ReadRun(path, false)
		require.NoError(t, err)
		assert.Nil(t, bare.Records)
		assert.Equal(t, run.Results.Levels, got.Results.Levels)
	}
}

// refAttr matches the attributes that make a browser fetch something.
var refAttr = regexp.MustCompile(`(?i)\b(src|href|xlink:href|srcset|action|data|poster)\s*=\s*"([^"]*)"`)

// externalRefs returns what in page could load from elsewhere: any "://" (the target URL,
// which is data, removed first), reference attributes other than data: and #fragment
// values, CSS url() and @import.
func externalRefs(page, target string) []string {
	page = strings.ReplaceAll(page, target, "")
	var bad []string
	if strings.Contains(page, "://") {
		i := strings.Index(page, "://")
		bad = append(bad, page[max(0, i-20):min(len(page), i+40)])
	}
	for _, m := range refAttr.FindAllStringSubmatch(page, -1) {
		if !strings.HasPrefix(m[2], "data:") && !strings.HasPrefix(m[2], "#") {
			bad = append(bad, m[0])
		}
	}
	for _, css := range []string{"url(", "@import"} {
		if strings.Contains(page, css) {
			bad = append(bad, css)
		}
	}
	return bad
}

func TestHTMLSelfContained(t *testing.T) {
	t.Parallel()
	runs := []Run{sweepRun(t, "off", 1.5), sweepRun(t, "on", 1)}
	var buf bytes.Buffer
	require.NoError(t, RenderCompare(&buf, FormatHTML, runs[0], runs[1]))
	page := buf.String()
	assert.Empty(t, externalRefs(page, "http://127.0.0.1:30000"))
	assert.NotContains(t, page, "<script")
	// Compared, the two runs' CDFs share one chart.
	for _, id := range []string{"ttft-p95", "tpot-p95", "ttft-cdf"} {
		assert.Contains(t, page, `<figure id="`+id+`">`)
	}
	assert.Equal(t, 3, strings.Count(page, "<svg"))
	// The comparison is long: one row per level and metric.
	assert.Contains(t, page, "<th>level</th><th>metric</th><th>off</th><th>on</th><th>impr</th>")
	assert.Contains(t, page, `<tr class="first"><td>c4</td><td>TTFT p50 ms</td>`)
	assert.Contains(t, page, "<td></td><td>TTFT p95 ms</td>")
	// The level tables carry the means beside the percentiles.
	assert.Contains(t, page, `<th colspan="4">TTFT ms</th>`)
	assert.Contains(t, page, "<th>p99</th><th>mean</th>")

	// Shown side by side (no comparison), each run keeps its own CDF chart.
	buf.Reset()
	require.NoError(t, RenderHTML(&buf, runs, NoCompare))
	page = buf.String()
	for _, id := range []string{"ttft-cdf-0", "ttft-cdf-1"} {
		assert.Contains(t, page, `<figure id="`+id+`">`)
	}
	assert.NotContains(t, page, "<th>impr</th>")
}

// A run with open-loop levels only charts against the rate; one without records has no CDF.
func TestHTMLOpenLoopRun(t *testing.T) {
	t.Parallel()
	r := fixtureResults(t) // c2, r0.5, burst: concurrency wins when present
	var buf bytes.Buffer
	require.NoError(t, RenderRuns(&buf, FormatHTML, []Run{{Name: "x", Results: r}}))
	assert.Contains(t, buf.String(), "concurrency (clients)")
	assert.NotContains(t, buf.String(), "ttft-cdf-")

	r.Levels = r.Levels[1:2] // r0.5 only
	buf.Reset()
	require.NoError(t, RenderRuns(&buf, FormatHTML, []Run{{Name: "x", Results: r}}))
	assert.Contains(t, buf.String(), "rate (requests/s)")
	assert.Equal(t, 2, strings.Count(buf.String(), "<svg"))
	assert.Empty(t, externalRefs(buf.String(), "http://127.0.0.1:8080"))
}

// DiffSettings names exactly the recorded settings that differ, nested ones by dotted key,
// with "-" for a side that lacks one, ignores the server's changing state (internal_states,
// the load snapshot) and writes the cluster's nanosecond durations as durations.
func TestDiffSettings(t *testing.T) {
	t.Parallel()
	a, b := sweepRun(t, "off", 1).Results, sweepRun(t, "on", 1).Results
	assert.Equal(t, []SettingDiff{{Key: "router.cache_threshold", A: "1", B: "0.3"}}, DiffSettings(a, b))
	assert.Empty(t, DiffSettings(a, a))
	b2 := *b
	b2.Meta.Seed = 7
	b2.Meta.Cluster = json.RawMessage(`{"prefill":{"count":2,"profile":"h100"},"ttft":100000000,` +
		`"net_latency":100000,"link_gbps":400,"itl":"x"}`)
	b2.Meta.ServerInfo = json.RawMessage(`{"dp_size":8,"internal_states":[{"last_gen_throughput":12.5}],` +
		`"load":[{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":0,"num_tokens":4096}],"watchdog_timeout":300}`)
	assert.Equal(t, []SettingDiff{
		{Key: "cluster.itl", A: "-", B: "x"},
		{Key: "cluster.link_gbps", A: "-", B: "400"},
		{Key: "cluster.net_latency", A: "-", B: "100µs"},
		{Key: "cluster.prefill.count", A: "-", B: "2"},
		{Key: "cluster.prefill.profile", A: "-", B: "h100"},
		{Key: "cluster.ttft", A: "-", B: "100ms"},
		{Key: "router.cache_threshold", A: "1", B: "0.3"},
		{Key: "seed", A: "1", B: "7"},
		{Key: "server_info.dp_size", A: "-", B: "8"},
		{Key: "server_info.watchdog_timeout", A: "-", B: "300"}, // SGLang's seconds: not the cluster's nanoseconds
	}, DiffSettings(a, &b2))
}

// niceTicks labels every axis range at round steps with 4 to 7 labels, in order, each label
// distinct (the TTFT P95 axis once showed two), and none with float noise ("0.30000000000000004").
func TestNiceTicks(t *testing.T) {
	t.Parallel()
	for _, r := range [][2]float64{{0, 1}, {0, 135.2}, {0, 1.35}, {0, 0.0042}, {0, 99999}, {12, 13}, {0, 7},
		{0, 250}, {0, 260}, {0, 1012}, {3.5, 41}, {0, 0.3}} {
		var labels []string
		prev := math.Inf(-1)
		for _, tk := range (niceTicks{}).Ticks(r[0], r[1]) {
			assert.Greater(t, tk.Value, prev, "range %v: ticks in order", r)
			prev = tk.Value
			assert.GreaterOrEqual(t, tk.Value, r[0], "range %v", r)
			assert.LessOrEqual(t, tk.Value, r[1]*(1+1e-9), "range %v", r)
			if tk.Label != "" {
				assert.LessOrEqual(t, len(tk.Label), 8, "range %v: label %q", r, tk.Label)
				assert.NotContains(t, labels, tk.Label, "range %v", r)
				labels = append(labels, tk.Label)
			}
		}
		assert.GreaterOrEqual(t, len(labels), 4, "range %v: %v", r, labels)
		assert.LessOrEqual(t, len(labels), 7, "range %v: %v", r, labels)
	}
}

// A live run's /get_server_info and a simulated run's resolved cluster are compared by
// meaning: the same engine setting is one engine.ROLE.SETTING row, listed only when the values
// differ; what only one side records stays one-sided under its own key.
func TestDiffSettingsByMeaning(t *testing.T) {
	t.Parallel()
	live, sim := *sweepRun(t, "live", 1).Results, *sweepRun(t, "sim", 1).Results
	live.Meta.ServerInfo = json.RawMessage(`{"disaggregation_mode":"prefill","dp_size":4,"tp_size":1,"page_size":1,` +
		`"max_total_num_tokens":451647,"chunked_prefill_size":8192,"max_running_requests":4096,"host":"127.0.0.1"}`)
	live.Meta.Router = json.RawMessage(`{"policy":"cache_aware","cache_threshold":0.3,"load_poll_interval_ms":500,"port":30000}`)
	sim.Meta.Router = json.RawMessage(`{"policy":"cache_aware","cache_threshold":0.5,"load_report_interval":"500ms","router_replicas":1}`)
	sim.Meta.Cluster = json.RawMessage(`{"prefill":2,"resolved":{"prefill":{"dp_size":4,"tp_size":2,` +
		`"engine_args":{"page_size":1,"max_total_tokens":451647,"chunked_prefill_size":8192,"max_running_requests":1024}},` +
		`"decode":{"dp_size":4}}}`)
	got := map[string]SettingDiff{}
	for _, d := range DiffSettings(&live, &sim) {
		got[d.Key] = d
	}
	assert.Equal(t, SettingDiff{Key: "engine.prefill.tp_size", A: "1", B: "2"}, got["engine.prefill.tp_size"])
	for _, same := range []string{"engine.prefill.dp_size", "engine.prefill.page_size", "engine.prefill.max_total_num_tokens",
		"engine.prefill.chunked_prefill_size", "server_info.dp_size", "cluster.resolved.prefill.dp_size"} {
		assert.NotContains(t, got, same, "equal by meaning: no row")
	}
	assert.Equal(t, SettingDiff{Key: "engine.decode.dp_size", A: "-", B: "4"}, got["engine.decode.dp_size"], "recorded by the simulation only")
	assert.Equal(t, "4096", got["server_info.max_running_requests"].A, "not the same meaning (all ranks against one): kept apart")
	assert.Equal(t, "1024", got["cluster.resolved.prefill.engine_args.max_running_requests"].B)
	// The router's settings: shared ones by their name, serve's poll interval as sim's.
	assert.Equal(t, SettingDiff{Key: "router.cache_threshold", A: "0.3", B: "0.5"}, got["router.cache_threshold"])
	for _, same := range []string{"router.policy", "router.load_report_interval", "router.load_poll_interval_ms"} {
		assert.NotContains(t, got, same, "equal by meaning: no row")
	}
	assert.Equal(t, SettingDiff{Key: "router.port", A: "30000", B: "-"}, got["router.port"], "serve's own")
	assert.Equal(t, SettingDiff{Key: "router.router_replicas", A: "-", B: "1"}, got["router.router_replicas"], "sim's own")
}

// The text and markdown comparisons list the settings both runs record, with different values,
// and stand for the ones only one run records (a live run's serve listener, a simulation's
// engine model: dozens of rows of "value → -") with one line, as the HTML report folds them.
func TestCompareTextFoldsOneSidedSettings(t *testing.T) {
	t.Parallel()
	live, sim := sweepRun(t, "live", 1), sweepRun(t, "sim", 1)
	live.Results.Meta.Router = json.RawMessage(`{"cache_threshold":0.3,"port":30000,"host":"127.0.0.1"}`)
	sim.Results.Meta.Router = json.RawMessage(`{"cache_threshold":0.5,"router_replicas":1}`)
	var text, md bytes.Buffer
	require.NoError(t, RenderCompare(&text, FormatTable, live, sim))
	require.NoError(t, RenderCompare(&md, FormatMarkdown, live, sim))
	assert.Regexp(t, `settings that differ \(A → B\):\n  router\.cache_threshold  0\.3 → 0\.5\n  3 more settings only one run records \(--format html folds them, --format json lists them\)\n\n`, text.String())
	assert.NotContains(t, text.String(), "router.port")
	assert.Contains(t, md.String(), "| router.cache\\_threshold | 0.3 | 0.5 |")
	assert.Contains(t, md.String(), "\n3 more settings only one run records")
	assert.NotContains(t, md.String(), "router.port")

	// Only one-sided differences: said so, then counted.
	sim.Results.Meta.Router = json.RawMessage(`{"cache_threshold":0.3,"router_replicas":1}`)
	text.Reset()
	require.NoError(t, RenderCompare(&text, FormatTable, live, sim))
	assert.Contains(t, text.String(), "settings: none both runs record differs\n  3 more settings only one run records")
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// simSmall are workload flags for quick runs.
var simSmall = []string{"--workload", "multiturn", "--conversations", "8", "--turns", "2", "--system-prompt-len", "128",
	"--question-len", "32", "--output-len", "16", "--concurrency", "4"}

// The default run stays a quick one. Its cost is asserted as its event count, which the seed
// fixes, not as wall time (this runs under -race on shared machines); the simulator's events/s
// are BenchmarkRun's business.
func TestSimDefaultRunPrintsTable(t *testing.T) {
	out, stderr, err := runWithStderr(t, "sim", "--workload", "multiturn")
	require.NoError(t, err)
	t.Logf("router sim --workload multiturn:\n%s%s", out, stderr)
	m := regexp.MustCompile(`sim: (\d+) events and \d+ requests`).FindStringSubmatch(stderr)
	require.NotNil(t, m, "the speed line on stderr")
	events, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	assert.Less(t, events, 50_000, "the default run's size (12,810 events when this was written)")
	for _, want := range []string{"sim  workload=multiturn  seed=1", "c16", "TTFT ms", "predicted", "load spread", "engine queue ms"} {
		assert.Contains(t, out, want)
	}
}

func TestSimHelpDescribesTheDefaults(t *testing.T) {
	out, err := run(t, "sim", "--help")
	require.NoError(t, err)
	for _, want := range []string{"2 prefill + 2 decode", "llama3-8b-h100", "64 conversations", "--cache-threshold",
		"--balance-abs-threshold", "--dp-aware", "--kill", "--concurrency", "--net-latency", "--speedup", "--write-config"} {
		assert.Contains(t, out, want)
	}
}

// Precise routing over router replicas with delayed events: the KV-event line on stderr, the
// routing layer in meta.router, and byte-identical output for the same flags and seed.
func TestSimKVEventsAndReplicas(t *testing.T) {
	args := append([]string{"sim", "--format", "json", "--kv-events", "on", "--router-replicas", "3",
		"--replica-affinity", "session", "--kv-events-delay", "uniform:0-20ms", "--kv-events-loss", "0.01"}, simSmall...)
	a, stderr, err := runWithStderr(t, args...)
	require.NoError(t, err)
	assert.Contains(t, stderr, "sim: KV events:")
	_, meta := simResults(t, a)
	assert.Equal(t, "on", meta["kv_events"])
	assert.Equal(t, "uniform:0s-20ms", meta["kv_events_delay"])
	assert.EqualValues(t, 3, meta["router_replicas"])
	assert.Equal(t, "session", meta["replica_affinity"])
	b, err := run(t, args...)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	out, err := run(t, "sim", "--help")
	require.NoError(t, err)
	for _, want := range []string{"--kv-events-delay", "exp:MEAN", "--router-replicas", "cache-pressure", "--cp-groups"} {
		assert.Contains(t, out, want)
	}
}

// simResults decodes `router sim --format json` output and its meta.router.
func simResults(t *testing.T, out string) (*reports.Results, map[string]any) {
	t.Helper()
	res, err := reports.DecodeResults(strings.NewReader(out))
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(res.Meta.Router, &meta))
	return res, meta
}

func TestSimJSONDeterministic(t *testing.T) {
	args := append([]string{"sim", "--format", "json"}, simSmall...)
	a, err := run(t, args...)
	require.NoError(t, err)
	b, err := run(t, args...)
	require.NoError(t, err)
	require.Equal(t, a, b)
	c, err := run(t, append(args, "--seed", "7")...)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
	res, err := reports.DecodeResults(strings.NewReader(a))
	require.NoError(t, err)
	assert.Equal(t, reports.ToolSim, res.Meta.Tool)
	require.Len(t, res.Levels, 1)
	assert.Equal(t, 16, res.Levels[0].Requests)
	var cluster map[string]any
	require.NoError(t, json.Unmarshal(res.Meta.Cluster, &cluster))
	assert.EqualValues(t, 2, cluster["prefill"])
}

func TestSimOutDirDecisionLogAndRegularMode(t *testing.T) {
	dir := t.TempDir()
	dlog := filepath.Join(dir, "decisions.jsonl")
	args := append([]string{"sim", "--regular", "3", "--policy", "round_robin", "--out", dir, "--decision-log", dlog}, simSmall...)
	out, err := run(t, args...)
	require.NoError(t, err)
	assert.Contains(t, out, "c4")
	res, recs, err := reports.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, recs, 16)
	assert.Contains(t, string(res.Meta.Router), `"pd_disaggregation":false`)
	require.NotNil(t, recs[0].Targets.Regular)
	assert.Contains(t, *recs[0].Targets.Regular, "http://sim-regular-")
	raw, err := os.ReadFile(dlog)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 16)
	assert.Contains(t, lines[0], `"seq":1,`)
	assert.Contains(t, lines[0], `"regular":{"worker":"http://sim-regular-0:30000","index":0,"rank":null}`)
	assert.Contains(t, lines[0], `"reason":"round_robin"`)
}

func TestSimFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--kill", "http://sim-decode-0:30000"}, "--kill"},
		{[]string{"sim", "--kill", "http://nobody:1@1s"}, "no simulated worker"},
		{[]string{"sim", "--cache-threshold", "2"}, "--cache-threshold"},
		{[]string{"sim", "--dp-size", "0"}, "--dp-size"},
		{[]string{"sim", "--profile", "nope"}, "unknown profile"},
		{[]string{"sim", "--slo", "ttft"}, "--slo"},
		{[]string{"sim", "sweep"}, "--vary"},
		{[]string{"sim", "sweep", "--vary", "nope=1"}, "nope"},
		{[]string{"sim", "--kv-events", "maybe"}, "--kv-events"},
		{[]string{"sim", "--kv-events-delay", "gauss:1ms"}, "--kv-events-delay"},
		{[]string{"sim", "--kv-events-loss", "1.5"}, "--kv-events-loss"},
		{[]string{"sim", "--load-report-interval", "-1s"}, "--load-report-interval"},
		{[]string{"sim", "--load-report-interval", "10us"}, "--load-report-interval"},
		{[]string{"sim", "--load-report-delay", "gauss:1ms"}, "--load-report-delay"},
		{[]string{"sim", "--workload", "hotspot", "--hs-burst", "0"}, "--hs-burst"},
		{[]string{"sim", "--router-replicas", "-1"}, "--router-replicas"},
		{[]string{"sim", "--replica-affinity", "sticky"}, "--replica-affinity"},
		{[]string{"sim", "--workload", "cache-pressure", "--cp-groups", "0"}, "--cp-groups"},
	} {
		_, err := run(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
}

func TestSimConfigFileAndKill(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "in.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("pd_disaggregation: true\npolicy: round_robin\ncache_threshold: 0.5\n"), 0o644))
	written := filepath.Join(dir, "out.yaml")
	args := append([]string{"sim", "--config", cfgPath, "--cache-threshold", "0.6", "--decode", "3",
		"--kill", "http://sim-decode-1:30000@500ms", "--format", "json", "--write-config", written}, simSmall...)
	out, err := run(t, args...)
	require.NoError(t, err)
	res, err := reports.DecodeResults(strings.NewReader(out))
	require.NoError(t, err)
	assert.Contains(t, string(res.Meta.Router), `"policy":"round_robin"`)
	assert.Contains(t, string(res.Meta.Router), `"cache_threshold":0.6`)
	b, err := os.ReadFile(written)
	require.NoError(t, err)
	assert.Contains(t, string(b), "cache_threshold: 0.6")
	assert.Contains(t, string(b), "policy: round_robin")
}

// TestSimSweepWriteConfigThenServe is the tuning loop: sweep on a PD cluster, write the winner,
// and `router serve --config` it with live workers.
func TestSimSweepWriteConfigThenServe(t *testing.T) {
	dir := t.TempDir()
	best := filepath.Join(dir, "best.yaml")
	args := append([]string{"sim", "sweep", "--prefill", "2", "--decode", "2", "--out", dir,
		"--vary", "cache_threshold=0.2,0.8", "--vary", "balance_abs_threshold=1,64", "--vary", "policy=cache_aware,round_robin",
		"--write-config", best}, simSmall...)
	out, err := run(t, args...)
	require.NoError(t, err)
	t.Log(out)
	assert.Contains(t, out, "TTFT p95 ms")
	// The winner is the configuration the last line names (the first ranked row, or the
	// defaults when nothing beats them by more than --tie-margin).
	m := regexp.MustCompile(`wrote the chosen configuration \(cache_threshold=(\S+) balance_abs_threshold=(\S+) policy=(\S+)\)`).FindStringSubmatch(out)
	require.Len(t, m, 4, out)
	winner := m[1:]
	res, _, err := reports.ReadDir(dir)
	require.NoError(t, err)
	assert.Contains(t, string(res.Meta.Router), `"policy":"`+winner[2]+`"`)

	served, err := run(t, "serve", "--config", best, "--prefill", "http://10.0.0.1:30001", "none",
		"--decode", "http://10.0.0.2:30002", "--print-config")
	require.NoError(t, err)
	assert.Contains(t, served, "pd_disaggregation: true")
	assert.Contains(t, served, "cache_threshold: "+winner[0])
	assert.Contains(t, served, "balance_abs_threshold: "+winner[1])
	assert.Contains(t, served, "policy: "+winner[2])
	assert.Contains(t, served, "url: http://10.0.0.1:30001")
	assert.Contains(t, served, "http://10.0.0.2:30002")
}

func TestSimTraceReplaysItsTimestamps(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}
{"timestamp": 500, "input_length": 700, "output_length": 4, "hash_ids": [0, 2]}
{"timestamp": 1000, "input_length": 300, "output_length": 4, "hash_ids": [0]}
`), 0o644))
	out, err := run(t, "sim", "--workload", "mooncake", "--trace-file", trace, "--format", "json")
	require.NoError(t, err)
	res, err := reports.DecodeResults(strings.NewReader(out))
	require.NoError(t, err)
	require.Len(t, res.Levels, 1)
	assert.Equal(t, "trace", res.Levels[0].Label)
	assert.Equal(t, 3, res.Levels[0].Requests)
	assert.Greater(t, res.Levels[0].DurationS, 1.0, "the last request starts at 1 s")
}

func TestSimSchedulePolicyFlag(t *testing.T) {
	_, err := run(t, "sim", "--schedule-policy", "bogus")
	require.EqualError(t, err, `--schedule-policy "bogus" is not lpm or fcfs`)
	for _, p := range []string{"lpm", "fcfs"} {
		out, err := run(t, "sim", "--schedule-policy", p, "--conversations", "4", "--turns", "2", "--concurrency", "2", "--disable-overlap-schedule")
		require.NoError(t, err, p)
		assert.Contains(t, out, "c2")
	}
}

// --decode-radix-cache: multi-turn conversations find their history on the decode server, so
// transfers shrink and TTFT with them.
func TestSimDecodeRadixCache(t *testing.T) {
	args := []string{"sim", "--conversations", "8", "--turns", "4", "--concurrency", "4", "--format", "json",
		"--link-gbps", "1", "--policy", "cache_aware"}
	ttft := func(extra ...string) float64 {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, execute(append(args, extra...), &stdout, &stderr), stderr.String())
		out := stdout.String()
		var res struct {
			Levels []struct {
				TTFT struct{ P50 float64 } `json:"ttft_ms"`
			} `json:"levels"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		require.Len(t, res.Levels, 1)
		return res.Levels[0].TTFT.P50
	}
	off, on := ttft(), ttft("--decode-radix-cache")
	assert.Less(t, on, off*0.9, "TTFT P50 with the decode radix cache %.1f ms, without %.1f ms", on, off)
}

// Warnings name what weakens a level's figures: more clients than conversations, and
// percentiles on fewer than 100 requests.
func TestSimWarnsAboutWeakLevels(t *testing.T) {
	_, stderr, err := runWithStderr(t, "sim", "--concurrency", "4,128", "--requests", "50")
	require.NoError(t, err)
	assert.Contains(t, stderr, "warning: level c128: the workload has 64 conversations for 128 clients, so at most 64 requests run at once")
	assert.Contains(t, stderr, "warning: level c4: its percentiles rest on 50 successful requests (fewer than 100")
	_, stderr, err = runWithStderr(t, "sim", "--concurrency", "4", "--requests", "128")
	require.NoError(t, err)
	assert.NotContains(t, stderr, "warning")
}

func TestSimReportsItsSpeed(t *testing.T) {
	_, stderr, err := runWithStderr(t, "sim", "--requests", "128")
	require.NoError(t, err)
	assert.Regexp(t, `sim: \d+ events and \d+ requests in [0-9.]+ s of wall time: \d+ events/s, \d+ requests/s`, stderr)
}

// A 24-point sweep prints a line per finished point (stderr is not a terminal here) and its
// ranking names the ties: eviction_interval_secs does not change a short run, so each
// configuration ties with its twin.
func TestSimSweepProgressAndTies(t *testing.T) {
	args := append([]string{"sim", "sweep", "--vary", "cache_threshold=0.1,0.5,0.9", "--vary", "balance_abs_threshold=1,64",
		"--vary", "policy=cache_aware,round_robin", "--vary", "eviction_interval_secs=100,200"}, simSmall...)
	out, stderr, err := runWithStderr(t, args...)
	require.NoError(t, err)
	assert.Equal(t, 24, strings.Count(stderr, "sim sweep: point "), stderr)
	assert.Contains(t, stderr, "sim sweep: point 24/24 done (")
	assert.Contains(t, out, "ranked by p95-ttft: each configuration's worst level")
	assert.Regexp(t, `(?m)^ +1= `, out)
	assert.Regexp(t, `tie at rank 1: \S+.*eviction_interval_secs=100 \| .*eviction_interval_secs=200`, out)
}

// A sweep whose points tie within --tie-margin keeps the defaults and says so (eviction
// changes nothing in a short run, so every point ties); its best configuration's margins over
// the runner-up and the defaults are printed.
func TestSimSweepKeepsTheDefaultsOnATie(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "chosen.yaml")
	args := append([]string{"sim", "sweep", "--vary", "eviction_interval_secs=60,120,240", "--write-config", cfg}, simSmall...)
	out, err := run(t, args...)
	require.NoError(t, err)
	assert.Regexp(t, `best: eviction_interval_secs=60 \(worst P95 TTFT ms [0-9.]+\); runner-up eviction_interval_secs=120 by 0\.0 %; the defaults \(eviction_interval_secs=120\) by 0\.0 %`, out)
	assert.Contains(t, out, "no configuration beats the defaults by more than --tie-margin 2 %: keeping the defaults (eviction_interval_secs=120)")
	assert.Contains(t, out, "wrote the chosen configuration (eviction_interval_secs=120)")
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.Contains(t, string(b), "eviction_interval_secs: 120")

	out, err = run(t, append([]string{"sim", "sweep", "--vary", "eviction_interval_secs=60,240"}, simSmall...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "the defaults are not in the grid")
}

// Three shards and a merge rank exactly as one sweep, and write the same config file.
func TestSimSweepShardsMerge(t *testing.T) {
	dir := t.TempDir()
	grid := append([]string{"--vary", "cache_threshold=0.1,0.5,0.9", "--vary", "balance_abs_threshold=1,64",
		"--vary", "policy=cache_aware,round_robin", "--objective", "p99-ttft"}, simSmall...)
	one, err := run(t, append([]string{"sim", "sweep", "--write-config", filepath.Join(dir, "one.yaml")}, grid...)...)
	require.NoError(t, err)
	var shards []string
	for i := range 3 {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d", i))
		shards = append(shards, out)
		msg, err := run(t, append([]string{"sim", "sweep", "--shard", fmt.Sprintf("%d/3", i), "--out", out}, grid...)...)
		require.NoError(t, err)
		assert.Contains(t, msg, fmt.Sprintf("shard %d/3: 4 of 12 points written", i))
	}
	merged, err := run(t, append([]string{"sim", "sweep", "--merge", "--objective", "p99-ttft", "--write-config", filepath.Join(dir, "merged.yaml")}, shards...)...)
	require.NoError(t, err)
	table := func(s string) string { s, _, _ = strings.Cut(s, "\nwrote the chosen"); return s }
	assert.Equal(t, table(one), table(merged))
	a, err := os.ReadFile(filepath.Join(dir, "one.yaml"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "merged.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b))

	_, err = run(t, "sim", "sweep", "--merge", shards[0], shards[2])
	assert.ErrorContains(t, err, "4 of 12 points missing (indexes 1,4,7,10)")
	_, err = run(t, "sim", "sweep", "--shard", "3/3", "--out", dir, "--vary", "policy=round_robin")
	assert.ErrorContains(t, err, "--shard")
	_, err = run(t, "sim", "sweep", "--objective", "goodput", "--vary", "policy=round_robin")
	assert.ErrorContains(t, err, "--objective goodput needs --slo")
}

// A calibrated profile records the ranges it was fitted on; sim warns when a run reaches
// outside them (longer prompts, more requests in flight per rank) and not when it stays in.
func TestSimWarnsOutsideTheFittedRange(t *testing.T) {
	p, err := engine.LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	p.Name = "fitted"
	p.Fit = &engine.FitRange{PromptTokensMin: 50, PromptTokensMax: 300, BatchPerRankMax: 4, Residual: 0.02}
	b, err := json.Marshal(p)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "fitted.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))

	common := []string{"sim", "--profile", path, "--regular", "1", "--workload", "random", "--output-len", "16", "--requests", "64", "--num-prompts", "64"}
	_, stderr, err := runWithStderr(t, append(common, "--input-len", "2000", "--concurrency", "16")...)
	require.NoError(t, err)
	assert.Contains(t, stderr, "warning: profile fitted was fitted on prompts of 50–300 tokens; this run has prompts up to 20")
	assert.Contains(t, stderr, "warning: profile fitted was fitted with up to 4 requests in flight per decode rank; this run reaches 16")

	_, stderr, err = runWithStderr(t, append(common, "--input-len", "200", "--concurrency", "1")...)
	require.NoError(t, err)
	assert.NotContains(t, stderr, "warning: profile fitted")
}

// --requests more than a generated workload holds: sim draws more of it, as bench does; a file
// holds what it holds, and the run records what there is and says why.
func TestSimWarnsWhenTheWorkloadRunsOut(t *testing.T) {
	_, stderr, err := runWithStderr(t, "sim", "--concurrency", "4", "--requests", "500")
	require.NoError(t, err)
	assert.Contains(t, stderr, "sim: --requests 500 (+ --warmup 0): the multiturn workload holds 64 conversations × 4 turns; drawing 125 conversations")
	assert.NotContains(t, stderr, "ran out")

	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt":"a first prompt of some length","output_len":8}
{"prompt":"a second prompt of some other length","output_len":8}
{"prompt":"and a third one, the last","output_len":8}
`), 0o644))
	_, stderr, err = runWithStderr(t, "sim", "--concurrency", "2", "--requests", "10", "--workload", "custom", "--dataset-path", path)
	require.NoError(t, err)
	assert.Contains(t, stderr, "warning: level c2: recorded 3 requests of the --requests 10: the custom workload ran out")
}

// --write-config carries serve's kv_events when the simulation chose KV-event routing (a
// kv_events axis, or --kv-events given), in a single sweep and a merged one alike, and leaves
// serve's default when it did not.
func TestSimWriteConfigKVEvents(t *testing.T) {
	dir := t.TempDir()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return string(b)
	}
	grid := append([]string{"--vary", "kv_events=off,on"}, simSmall...)
	_, err := run(t, append([]string{"sim", "sweep", "--write-config", filepath.Join(dir, "one.yaml")}, grid...)...)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^kv_events: (auto|off)$`, read("one.yaml"))
	var shards []string
	for i := range 2 {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d", i))
		shards = append(shards, out)
		_, err := run(t, append([]string{"sim", "sweep", "--shard", fmt.Sprintf("%d/2", i), "--out", out}, grid...)...)
		require.NoError(t, err)
	}
	_, err = run(t, append([]string{"sim", "sweep", "--merge", "--write-config", filepath.Join(dir, "merged.yaml")}, shards...)...)
	require.NoError(t, err)
	assert.Equal(t, read("one.yaml"), read("merged.yaml"))

	_, err = run(t, append([]string{"sim", "--kv-events", "on", "--write-config", filepath.Join(dir, "on.yaml")}, simSmall...)...)
	require.NoError(t, err)
	assert.Contains(t, read("on.yaml"), "\nkv_events: auto\n")
	_, err = run(t, append([]string{"sim", "--write-config", filepath.Join(dir, "plain.yaml")}, simSmall...)...)
	require.NoError(t, err)
	assert.NotContains(t, read("plain.yaml"), "kv_events")
}

// A run whose routers take a worker out of rotation says so on stderr, naming the worker.
func TestSimNamesBreakersThatOpened(t *testing.T) {
	args := append([]string{"sim", "--decode", "3", "--cb-failure-threshold", "1",
		"--kill", "http://sim-decode-1:30000@500ms"}, simSmall...)
	_, stderr, err := runWithStderr(t, args...)
	require.NoError(t, err)
	assert.Contains(t, stderr, "sim: circuit breakers opened (--cb-failure-threshold failures in a row): http://sim-decode-1:30000 ×1\n")

	_, stderr, err = runWithStderr(t, append([]string{"sim"}, simSmall...)...)
	require.NoError(t, err)
	assert.NotContains(t, stderr, "circuit breakers opened")
}

// Engine load reports are on by default (serve's 500ms poll, 1ms late), recorded in
// meta.router; every worker over --worker-overload-waiting-requests sheds with 503, counted on
// stderr; the sweep varies the interval.
func TestSimLoadReportsAndShedding(t *testing.T) {
	args := append([]string{"sim", "--format", "json"}, simSmall...)
	out, stderr, err := runWithStderr(t, args...)
	require.NoError(t, err)
	assert.Contains(t, stderr, "sim: engine load reports:")
	_, meta := simResults(t, out)
	assert.Equal(t, "500ms", meta["load_report_interval"])
	assert.Equal(t, "1ms", meta["load_report_delay"])

	_, stderr, err = runWithStderr(t, append(args, "--load-report-interval", "0")...)
	require.NoError(t, err)
	assert.NotContains(t, stderr, "engine load reports", "0: no reports")

	hot := []string{"sim", "--format", "json", "--workload", "hotspot", "--hs-requests", "300", "--regular", "2",
		"--rate", "500", "--worker-overload-waiting-requests", "2"}
	out, stderr, err = runWithStderr(t, hot...)
	require.NoError(t, err)
	assert.Regexp(t, `sim: \d+ requests shed with 503 and Retry-After`, stderr)
	res, _ := simResults(t, out)
	assert.NotZero(t, res.Levels[0].ErrorsByKind["http_503"])

	help, err := run(t, "sim", "--help")
	require.NoError(t, err)
	for _, want := range []string{"--load-report-interval", "--load-report-delay", "--worker-overload-waiting-requests", "--hs-burst", "hotspot"} {
		assert.Contains(t, help, want)
	}
	sweep, err := run(t, append([]string{"sim", "sweep", "--vary", "load_report_interval=0,100ms"}, simSmall...)...)
	require.NoError(t, err)
	assert.Contains(t, sweep, "load_report_interval")
}

// The winner: the best unless it beats the defaults by no more than the margin (lower is
// better for latency, higher for throughput); defaults that failed requests are never kept.
func TestChooseWinnerMargins(t *testing.T) {
	vars := []sim.Vary{{Key: "k", Values: []string{"a", "b", "c"}}}
	point := func(i int, score float64, errs int) sim.Ranked {
		res := &reports.Results{Levels: []reports.Level{{Errors: errs}}}
		return sim.Ranked{Point: sim.Point{Index: i, Values: []string{vars[0].Values[i]}, Result: &sim.Result{Results: res}}, Score: score}
	}
	p95, err := sim.ParseObjective(sim.ObjectiveP95TTFT, nil)
	require.NoError(t, err)
	tput, err := sim.ParseObjective(sim.ObjectiveThroughput, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		obj    sim.Objective
		ranked []sim.Ranked
		base   int
		want   int
		line   string
	}{
		{"within the margin", p95, []sim.Ranked{point(0, 100, 0), point(1, 101.5, 0), point(2, 110, 0)}, 1, 1, "the defaults (k=b) by 1.5 %"},
		{"beyond it", p95, []sim.Ranked{point(0, 100, 0), point(2, 101, 0), point(1, 103, 0)}, 1, 0, "runner-up k=c by 1.0 %; the defaults (k=b) by 3.0 %"},
		{"higher is better", tput, []sim.Ranked{point(2, 10, 0), point(1, 9.9, 0)}, 1, 1, "the defaults (k=b) by 1.0 %"},
		{"defaults failed", p95, []sim.Ranked{point(0, 100, 0), point(1, 100, 3)}, 1, 0, "the defaults (k=b) by 0.0 %"},
		{"defaults best", p95, []sim.Ranked{point(1, 100, 0), point(0, 120, 0)}, 1, 0, "runner-up k=a by 20.0 %"},
		{"not in the grid", p95, []sim.Ranked{point(0, 100, 0)}, -1, 0, "the defaults are not in the grid"},
	} {
		var out bytes.Buffer
		assert.Equal(t, tc.want, chooseWinner(&out, vars, tc.ranked, tc.base, tc.obj, 2), tc.name)
		assert.Contains(t, out.String(), tc.line, tc.name)
	}
}

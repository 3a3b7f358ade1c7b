package reports

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./reports -update to create it")
	assert.Equal(t, string(want), string(got), "%s differs; run go test ./reports -update if the change is intended", path)
}

func TestGoldenFiles(t *testing.T) {
	rs, qs := newJSONSchema(t, resultsSchema), newJSONSchema(t, requestsSchema)
	for _, tc := range []struct {
		name    string
		res     *Results
		records []Record
		prefix  string
	}{
		{"bench", fixtureResults(t), fixtureRecords(), ""},
		{"sim", fixtureSimResults(t), byLevel(fixtureRecords(), "c2"), "sim_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out", "run") // WriteDir creates parents
			require.NoError(t, WriteDir(dir, tc.res, tc.records))

			resJSON, err := os.ReadFile(filepath.Join(dir, ResultsFile))
			require.NoError(t, err)
			golden(t, tc.prefix+"results.json", resJSON)
			require.NoError(t, rs.Validate(resJSON))

			reqJSONL, err := os.ReadFile(filepath.Join(dir, RequestsFile))
			require.NoError(t, err)
			if tc.prefix == "" {
				golden(t, "requests.jsonl", reqJSONL)
			}
			require.NoError(t, validateJSONL(qs, reqJSONL))
			assert.Equal(t, len(tc.records), bytes.Count(reqJSONL, []byte("\n")))

			gotRes, gotRecs, err := ReadDir(dir)
			require.NoError(t, err)
			require.Equal(t, tc.res, gotRes)
			require.Equal(t, tc.records, gotRecs)

			// Writing what was read gives the same bytes.
			var again bytes.Buffer
			require.NoError(t, EncodeResults(&again, gotRes))
			assert.Equal(t, string(resJSON), again.String())
		})
	}
	// The golden files on disk (not just the freshly written ones) validate too.
	for _, name := range []string{"results.json", "sim_results.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		require.NoError(t, rs.Validate(b), name)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "requests.jsonl"))
	require.NoError(t, err)
	require.NoError(t, validateJSONL(qs, b))
}

func TestEncodeResultsDeterministic(t *testing.T) {
	t.Parallel()
	var a, b bytes.Buffer
	require.NoError(t, EncodeResults(&a, fixtureResults(t)))
	require.NoError(t, EncodeResults(&b, fixtureResults(t)))
	assert.Equal(t, a.String(), b.String())
	// Map keys come out sorted: errors_by_kind of r0.5.
	assert.Regexp(t, `"errors_by_kind": \{\s+"http_503": 2,\s+"timeout": 1\s+\}`, a.String())
	// SPEC §6 field order.
	s := a.String()
	order := []string{`"schema"`, `"meta"`, `"tool"`, `"version"`, `"seed"`, `"workload"`, `"target"`,
		`"cluster"`, `"router"`, `"started"`, `"levels"`, `"label"`, `"concurrency"`, `"rate"`, `"arrival"`,
		`"requests"`, `"errors"`, `"errors_by_kind"`, `"duration_s"`, `"ttft_ms"`, `"tpot_ms"`, `"itl_ms"`,
		`"e2e_ms"`, `"queue_ms"`, `"throughput"`, `"cache_hit_rate"`, `"goodput"`, `"sim"`}
	last := -1
	for _, k := range order {
		i := strings.Index(s, k)
		require.Greater(t, i, last, "%s out of order", k)
		last = i
	}
}

func TestEncodeResultsNulls(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, EncodeResults(&buf, fixtureSimResults(t)))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	meta := m["meta"].(map[string]any)
	assert.Contains(t, meta, "target")
	assert.Nil(t, meta["target"])
	assert.NotContains(t, meta, "started", "sim output has no started field")
	lvl := m["levels"].([]any)[0].(map[string]any)
	for _, k := range []string{"rate", "arrival", "queue_ms", "goodput"} {
		assert.Contains(t, lvl, k)
		assert.Nil(t, lvl[k], k)
	}
	assert.Equal(t, map[string]any{}, lvl["errors_by_kind"])
}

func TestResultsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    func(r *Results)
		want string
	}{
		{"schema", func(r *Results) { r.Schema = "x" }, `results schema "x"`},
		{"tool", func(r *Results) { r.Meta.Tool = "ab" }, `meta.tool "ab"`},
		{"started in sim", func(r *Results) { r.Meta.Tool = ToolSim }, "meta.started is set in sim results"},
		{"workload name", func(r *Results) { r.Meta.Workload.Name = "" }, "meta.workload.name is empty"},
		{"router not JSON", func(r *Results) { r.Meta.Router = json.RawMessage("{") }, "meta.router is not valid JSON"},
		{"cluster not an object", func(r *Results) { r.Meta.Cluster = json.RawMessage("[1]") }, "meta.cluster is not a JSON object"},
		{"duplicate label", func(r *Results) { r.Levels[1] = r.Levels[0] }, `level "c2" appears twice`},
		{"label vs concurrency", func(r *Results) { r.Levels[0].Concurrency = new(3) }, "concurrency does not match"},
		{"label vs rate", func(r *Results) { r.Levels[1].Rate = new(0.25) }, "rate does not match"},
		{"closed loop with arrival", func(r *Results) { r.Levels[0].Arrival = str(ArrivalPoisson) }, "null rate and arrival"},
		{"open loop arrival", func(r *Results) { r.Levels[1].Arrival = str(ArrivalBurst) }, `arrival "burst"`},
		{"burst arrival", func(r *Results) { r.Levels[2].Arrival = nil }, `arrival "", want "burst"`},
		{"errors above requests", func(r *Results) { r.Levels[0].Errors = 99 }, "99 errors of 4 requests"},
		{"errors_by_kind sum", func(r *Results) { r.Levels[1].ErrorsByKind["timeout"] = 2 }, "adds up to 4, errors is 3"},
		{"NaN", func(r *Results) { r.Levels[0].TTFTMs.P99 = nanValue() }, "ttft_ms.p99 = NaN"},
		{"negative", func(r *Results) { r.Levels[0].Throughput.ReqS = -1 }, "throughput.req_s = -1"},
		{"goodput above 1", func(r *Results) { r.Levels[0].Goodput = new(1.5) }, "goodput 1.5 is above 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := fixtureResults(t)
			require.NoError(t, r.Validate())
			tc.f(r)
			err := r.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Error(t, EncodeResults(io.Discard, r), "EncodeResults validates")
		})
	}
}

func nanValue() float64 { z := 0.0; return z / z }

func TestDecodeResultsRejects(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, EncodeResults(&buf, fixtureSimResults(t)))
	good := buf.String()
	tests := []struct{ name, doc, want string }{
		{"unknown field", strings.Replace(good, `"seed"`, `"sed": 1, "seed"`, 1), `unknown field "sed"`},
		{"trailing data", good + "{}", "data after the JSON document"},
		{"not JSON", "{", "decode results"},
		{"workload without name", strings.Replace(good, `"name": "multiturn"`, `"nam": "multiturn"`, 1), `workload has no "name"`},
		{"invalid values", strings.Replace(good, `"requests": 4`, `"requests": 1`, 1), "4 errors of 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "invalid values" {
				tc.doc = strings.Replace(tc.doc, `"errors": 0`, `"errors": 4`, 1)
			}
			_, err := DecodeResults(strings.NewReader(tc.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestReadResultsPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	want := fixtureSimResults(t)
	require.NoError(t, WriteDir(dir, want, nil))
	for _, p := range []string{dir, filepath.Join(dir, ResultsFile)} {
		got, err := ReadResults(p)
		require.NoError(t, err, p)
		assert.Equal(t, want, got)
	}
	recs, err := ReadRecords(dir)
	require.NoError(t, err)
	assert.Empty(t, recs)
	// WriteResults replaces results.json and leaves requests.jsonl alone.
	require.NoError(t, os.WriteFile(filepath.Join(dir, RequestsFile), []byte("streamed\n"), 0o644))
	want.Meta.Seed = 8
	require.NoError(t, WriteResults(dir, want))
	got, err := ReadResults(dir)
	require.NoError(t, err)
	assert.Equal(t, int64(8), got.Meta.Seed)
	b, err := os.ReadFile(filepath.Join(dir, RequestsFile))
	require.NoError(t, err)
	assert.Equal(t, "streamed\n", string(b))
	_, err = ReadResults(filepath.Join(dir, "missing.json"))
	assert.ErrorContains(t, err, "missing.json")
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2)
}

func TestRecordReaderReportsLine(t *testing.T) {
	t.Parallel()
	good, err := json.Marshal(fixtureRecords()[0])
	require.NoError(t, err)
	g := string(good)
	tests := []struct {
		name, input string
		want        string // "" = no error
		n           int    // records read before the error / in total
	}{
		{"two good lines, no final newline", g + "\n" + g, "", 2},
		{"blank lines skipped", "\n" + g + "\n\n  \n" + g + "\n", "", 2},
		{"bad JSON on line 3", g + "\n" + g + "\n{\"level\":\n", "line 3:", 2},
		{"unknown field on line 2", g + "\n" + strings.Replace(g, `"id"`, `"rid":"x","id"`, 1) + "\n", `line 2: json: unknown field "rid"`, 1},
		{"invalid record on line 1", strings.Replace(g, `"level":"c2"`, `"level":"c0"`, 1), "line 1: reports: record", 0},
		{"two values on one line", g + " " + g, "line 1: more than one JSON value", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rr := NewRecordReader(strings.NewReader(tc.input))
			n := 0
			var err error
			for {
				if _, err = rr.Next(); err != nil {
					break
				}
				n++
			}
			assert.Equal(t, tc.n, n)
			if tc.want == "" {
				assert.Equal(t, io.EOF, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			_, err = DecodeRecords(strings.NewReader(tc.input))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRecordReaderLongLine(t *testing.T) {
	t.Parallel()
	r := fixtureRecords()[0]
	r.ITLMs = make([]float64, 50_000) // ~100 KB line, beyond bufio.Scanner's default
	for i := range r.ITLMs {
		r.ITLMs[i] = float64(i%97) + 0.125
	}
	var buf bytes.Buffer
	require.NoError(t, NewRecordWriter(&buf).Write(&r))
	require.Greater(t, buf.Len(), 64<<10)
	got, err := DecodeRecords(&buf)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, r, got[0])
}

// lineWriter records each Write call, to check that a record is written in one call.
type lineWriter struct {
	mu     sync.Mutex
	writes []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestRecordWriterConcurrent(t *testing.T) {
	t.Parallel()
	var lw lineWriter
	rw := NewRecordWriter(&lw)
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				r := Record{Level: "c8", ID: fmt.Sprintf("g%d-%d", g, i), E2EMs: float64(i), ITLMs: []float64{1, 2}}
				assert.NoError(t, rw.Write(&r))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, goroutines*each, rw.n)
	require.Len(t, lw.writes, goroutines*each)
	for _, w := range lw.writes {
		require.True(t, strings.HasSuffix(w, "\n") && strings.Count(w, "\n") == 1, "one whole line per Write: %q", w)
	}
	recs, err := DecodeRecords(strings.NewReader(strings.Join(lw.writes, "")))
	require.NoError(t, err)
	assert.Len(t, recs, goroutines*each)
}

func TestRecordWriterRejectsInvalid(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	rw := NewRecordWriter(&buf)
	for _, r := range []Record{
		{Level: "c1", ID: "a", E2EMs: nanValue()},
		{Level: "c1", ID: "b", ITLMs: []float64{1, -2}},
		{Level: "x", ID: "c"},
		{Level: "c1", ID: ""},
		{Level: "c1", ID: "d", OutputTokens: -1},
		{Level: "c1", ID: "e", TTFTMs: new(posInf())},
	} {
		assert.Error(t, rw.Write(&r), r.ID)
	}
	assert.Zero(t, buf.Len())
	assert.Zero(t, rw.n)
}

func posInf() float64 { z := 0.0; return 1 / z }

func TestWorkloadJSON(t *testing.T) {
	t.Parallel()
	w, err := NewWorkload("random", map[string]any{"output_len": 256, "input_len": 1024, "range_ratio": 0.5,
		"nested": map[string]any{"b": 1, "a": []int{1, 2}}})
	require.NoError(t, err)
	b, err := json.Marshal(w)
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"random","input_len":1024,"nested":{"a":[1,2],"b":1},"output_len":256,"range_ratio":0.5}`, string(b))
	assert.True(t, strings.HasPrefix(string(b), `{"name":"random","input_len"`), "name first, then sorted params: %s", b)

	var back Workload
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, w, back)
	var n int
	ok, err := back.param("input_len", &n)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1024, n)
	ok, err = back.param("missing", &n)
	assert.NoError(t, err)
	assert.False(t, ok)

	_, err = NewWorkload("x", map[string]any{"name": "y"})
	assert.ErrorContains(t, err, `may not be called "name"`)
	_, err = NewWorkload("x", []int{1})
	assert.ErrorContains(t, err, "want a JSON object")
	w, err = NewWorkload("plain", nil)
	require.NoError(t, err)
	b, err = json.Marshal(w)
	require.NoError(t, err)
	assert.Equal(t, `{"name":"plain"}`, string(b))
}

func TestEncodeResultsStarted(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.NoError(t, EncodeResults(&buf, fixtureResults(t)))
	assert.Contains(t, buf.String(), `"started": "2026-11-22T05:00:00Z"`)
}

// FuzzRecordReader: any input either fails with a line-numbered error or gives records that
// write and read back unchanged.
func FuzzRecordReader(f *testing.F) {
	good, err := json.Marshal(fixtureRecords()[5])
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(good) + "\n")
	f.Add(string(good) + "\n\n{\"level\":\"c1\"}\n")
	f.Add(`{"level":"r0.5","id":"x","start_ms":1e3,"queue_ms":null,"ttft_ms":null,"tpot_ms":null,"e2e_ms":0,"itl_ms":[],"input_tokens":0,"output_tokens":0,"cached_tokens":0,"targets":{"prefill":null,"decode":null,"regular":null},"error":"x"}`)
	f.Add("not json")
	f.Fuzz(func(t *testing.T, input string) {
		recs, err := DecodeRecords(strings.NewReader(input))
		if err != nil {
			require.Contains(t, err.Error(), "line ")
			return
		}
		var buf bytes.Buffer
		w := NewRecordWriter(&buf)
		for i := range recs {
			require.NoError(t, w.Write(&recs[i]))
		}
		back, err := DecodeRecords(&buf)
		require.NoError(t, err)
		require.Equal(t, recs, back)
	})
}

func TestWriteDirInvalidLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := fixtureResults(t)
	r.Meta.Tool = "nope"
	require.ErrorContains(t, WriteDir(dir, r, fixtureRecords()), `meta.tool "nope"`)
	bad := fixtureRecords()
	bad[1].ID = ""
	require.ErrorContains(t, WriteDir(dir, fixtureResults(t), bad), "empty id")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "invalid input leaves no file, temporary or not")
}

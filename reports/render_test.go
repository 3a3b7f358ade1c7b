package reports

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for _, f := range Formats() {
		got, err := ParseFormat(string(f))
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	_, err := ParseFormat("yaml")
	assert.EqualError(t, err, `reports: unknown format "yaml" (want table, md, csv, json, html)`)
}

func TestRenderDispatch(t *testing.T) {
	t.Parallel()
	r := fixtureResults(t)
	var direct, viaRender bytes.Buffer
	require.NoError(t, RenderTable(&direct, r))
	require.NoError(t, Render(&viaRender, FormatTable, r))
	assert.Equal(t, direct.String(), viaRender.String())

	for _, f := range []Format{FormatMarkdown, FormatCSV, FormatJSON, FormatHTML} {
		var buf bytes.Buffer
		assert.NoError(t, Render(&buf, f, r), f)
		assert.NotEmpty(t, buf.String(), f)
	}
	assert.ErrorContains(t, Render(&bytes.Buffer{}, Format("pdf"), r), `unknown format "pdf"`)
}

func TestTableGolden(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]*Results{"table.txt": fixtureResults(t), "sim_table.txt": fixtureSimResults(t)} {
		var buf bytes.Buffer
		require.NoError(t, RenderTable(&buf, r))
		golden(t, name, buf.Bytes())
	}
}

// With realistic worst-case values (5-digit ms, 6-digit request counts and token rates, 4-digit
// error counts, 128 clients, goodput shown) every line of
// the table fits in 120 columns (the means beside the percentiles took it past 100).
func TestTableFits120Columns(t *testing.T) {
	t.Parallel()
	r := fixtureResults(t)
	big := Stats{Mean: 54321, P50: 43210.5, P90: 65432, P95: 76543.2, P99: 98765.4, Max: 99999}
	for i := range r.Levels {
		l := &r.Levels[i]
		l.TTFTMs, l.E2EMs, l.TPOTMs, l.ITLMs = big, big, Stats{P50: 123.4, P95: 999.9}, Stats{P95: 999.9}
		l.Requests, l.Errors = 100000, 9999
		l.ErrorsByKind = map[string]int{"timeout": 9999}
		l.Throughput = Throughput{ReqS: 1234.5, OutputTokS: 987654}
		l.CacheHitRate = new(1.0)
	}
	r.Levels[0].Label, r.Levels[0].Concurrency = "c128", new(128)
	var buf bytes.Buffer
	require.NoError(t, RenderTable(&buf, r))
	for i, line := range strings.Split(buf.String(), "\n") {
		if i == 0 {
			continue // the title line carries the target URL, whatever its length
		}
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 120, "line %d: %q", i+1, line)
	}
}

func TestTableNulls(t *testing.T) {
	t.Parallel()
	r := &Results{Schema: SchemaVersion, Meta: Meta{Tool: ToolSim, Workload: Workload{Name: "random"}}}
	info := ClosedLoop(1)
	info.CacheUnknown = true
	l, err := Aggregate(info, nil)
	require.NoError(t, err)
	r.Levels = []Level{l}
	var buf bytes.Buffer
	require.NoError(t, RenderTable(&buf, r))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	last := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(last, "c1 "), last)
	assert.True(t, strings.HasSuffix(last, " -"), "null cache hit rate prints -: %q", last)
	assert.NotContains(t, buf.String(), "good", "no goodput column without an SLO")
}

// The simulator section splits the cache hits into GPU and host when a level has a host tier,
// and keeps its columns otherwise.
func TestTableHostTier(t *testing.T) {
	t.Parallel()
	r := fixtureSimResults(t)
	var plain bytes.Buffer
	require.NoError(t, RenderTable(&plain, r))
	assert.NotContains(t, plain.String(), "host hit")
	r.Levels[0].Sim.GPUCacheHitRate, r.Levels[0].Sim.HostCacheHitRate = new(0.5), new(0.25)
	require.NoError(t, r.Validate())
	var buf bytes.Buffer
	require.NoError(t, RenderTable(&buf, r))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	assert.Contains(t, lines[len(lines)-2], "gpu hit host hit")
	assert.Contains(t, lines[len(lines)-1], "50.0%    25.0%")
}

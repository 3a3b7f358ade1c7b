package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router/server"
)

// writeRun writes a run of levels c1, c4, c16 to dir/name whose TTFTs scale with scale.
func writeRun(t *testing.T, dir, name string, scale float64) string {
	t.Helper()
	wl, err := reports.NewWorkload("random", nil)
	require.NoError(t, err)
	target := "http://127.0.0.1:30000"
	res := &reports.Results{Schema: reports.SchemaVersion, Meta: reports.Meta{Tool: reports.ToolBench,
		Workload: wl, Target: &target}}
	var all []reports.Record
	for _, n := range []int{1, 4, 16} {
		info := reports.ClosedLoop(n)
		info.Duration = time.Second
		var recs []reports.Record
		for i := range 4 {
			ttft := scale * float64(10*n+i)
			recs = append(recs, reports.Record{Level: info.Label, ID: fmt.Sprintf("%s-%d", info.Label, i),
				TTFTMs: &ttft, E2EMs: ttft + 50, OutputTokens: 6, TPOTMs: reports.TPOT(ttft, ttft+50, 6)})
		}
		l, err := reports.Aggregate(info, recs)
		require.NoError(t, err)
		res.Levels = append(res.Levels, l)
		all = append(all, recs...)
	}
	path := filepath.Join(dir, name)
	require.NoError(t, reports.WriteDir(path, res, all))
	return path
}

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	off, on := writeRun(t, dir, "off", 2), writeRun(t, dir, "on", 1)

	out, err := run(t, "report", "--compare", off, on)
	require.NoError(t, err)
	assert.Contains(t, out, "A=off")
	assert.Contains(t, out, "TTFT p95 ms")
	assert.Contains(t, out, "impr")
	for _, l := range []string{"c1", "c4", "c16"} {
		assert.Regexp(t, `(?m)^`+l+`\s.*\+50\.0%`, out, "level %s shows B's improvement", l)
	}

	out, err = run(t, "report", off, filepath.Join(on, "results.json"), "--format", "csv")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out, "run,level,"), out)
	assert.Equal(t, 7, strings.Count(out, "\n"))

	page := filepath.Join(dir, "cmp.html")
	out, err = run(t, "report", "--compare", off, on, "--format", "html", "--out", page)
	require.NoError(t, err)
	assert.Empty(t, out)
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	assert.Equal(t, 3, strings.Count(string(b), "<svg"), "TTFT P95, TPOT P95 and both runs' CDFs on one chart")
	assert.Contains(t, string(b), `<figure id="ttft-cdf">`)
}

func TestReportCommandErrors(t *testing.T) {
	dir := t.TempDir()
	off := writeRun(t, dir, "off", 1)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "requires at least 1 arg"},
		{[]string{"report", "--compare", off}, "exactly two files"},
		{[]string{"report", off, "--format", "pdf"}, `unknown format "pdf"`},
		{[]string{"report", filepath.Join(dir, "missing")}, "no such file"},
	} {
		_, err := run(t, tc.args...)
		assert.ErrorContains(t, err, tc.want, strings.Join(tc.args, " "))
	}
}

// Two bench runs through router serve with different cache thresholds: report --compare
// names that setting (from each router's /get_router_config) and nothing else of the router.
func TestCompareNamesTheSettingThatDiffers(t *testing.T) {
	worker, _ := sseServer(t)
	dir := t.TempDir()
	for _, th := range []string{"0.3", "0.7"} {
		cfg := server.DefaultConfig()
		cfg.WorkerURLs = []string{worker.URL}
		cfg.CacheThreshold, _ = strconv.ParseFloat(th, 64)
		cfg.Seed = new(int64(1))
		s, err := server.New(server.Options{Config: cfg})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, s.Start(ctx))
		front := httptest.NewServer(s.Handler())
		_, err = run(t, "bench", "--url", front.URL, "--workload", "random", "--num-prompts", "4",
			"--input-len", "8", "--output-len", "3", "--quiet", "--out", filepath.Join(dir, "t"+th), "--label", "threshold-"+th)
		front.Close()
		cancel()
		s.Wait()
		require.NoError(t, err)
	}
	out, err := run(t, "report", "--compare", filepath.Join(dir, "t0.3"), filepath.Join(dir, "t0.7"))
	require.NoError(t, err)
	assert.Contains(t, out, "A=threshold-0.3")
	assert.Regexp(t, `settings that differ \(A → B\):\n  router\.cache_threshold  0\.3 → 0\.7\n  target  +http://\S+ → http://\S+\n\n`, out)
}

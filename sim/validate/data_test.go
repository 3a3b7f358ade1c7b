package validate

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNumReadsNumbersLeniently(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   any
		want float64
		ok   bool
	}{
		{4.0, 4, true},
		{"8", 8, true},
		{"inf", math.Inf(1), true},
		{"PARALLELISM_SIZE (inferred 32)", 32, true},
		{"0.85 online (default at TP 4, not set)", 0.85, true},
		{"not stated", 0, false},
		{nil, 0, false},
		{true, 0, false},
		{map[string]any{"a": 1.0}, 0, false},
	} {
		got, ok := Num(c.in)
		assert.Equal(t, c.ok, ok, "%v", c.in)
		if c.ok {
			assert.Equal(t, c.want, got, "%v", c.in)
		}
	}
}

func TestParseIsLenientAndKeepsNotes(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{
	  "model": "org/Model-X (remark)", "gpu": "H100", "gpus_per_server": null,
	  "tp": "4", "dp": null, "ep": "inferred 2", "dp_attention": true,
	  "pd": {"prefill": {"servers": "several", "gpus": 8, "tp": 8}, "decode": {"servers": 1, "nodes": 2}},
	  "workload": {"dataset": "random"},
	  "levels": [
	    {"load": {"request_rate": "inf"}, "figures": {"output_tok_s": "1,234", "ttft_ms_mean": null, "itl_ms_median": 7.5, "duration_s": "n/a"}},
	    "garbage"
	  ]}`), "dir/some-set.json")
	require.NoError(t, err)
	assert.Equal(t, "some-set", s.Name, "name from the file")
	assert.Equal(t, 4, s.TP)
	assert.Zero(t, s.DP, "null is not stated")
	assert.Equal(t, 2, s.EP)
	assert.Zero(t, s.GPUsPerServer)
	require.NotNil(t, s.PD)
	assert.Equal(t, Pool{GPUs: 8, TP: 8}, s.PD.Prefill, "an unreadable count is 0")
	assert.Equal(t, Pool{Servers: 1, Nodes: 2}, s.PD.Decode)
	require.Len(t, s.Levels, 1, "a level that is not an object is skipped")
	// "1,234" reads as its first number (1) — noted, so the data file can be fixed.
	assert.Equal(t, []Figure{{"itl_ms_median", 7.5}, {"output_tok_s", 1}}, s.Levels[0].Figures, "sorted; null and text skipped")
	assert.Contains(t, s.Parse, "name missing: taken from the file name")
	assert.Contains(t, s.Parse, `ep = "inferred 2" read as 2`)
	assert.Contains(t, s.Parse, "levels[0].figures.ttft_ms_mean = <nil>: not a number, skipped")
	assert.Contains(t, s.Parse, "levels[0].figures.duration_s = n/a: not a number, skipped")
	assert.Contains(t, s.Parse, "levels[1] is not an object: skipped")
}

func TestParseRejectsBrokenFiles(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`{"name": "x", "levels": [`), "x.json")
	assert.ErrorContains(t, err, "x.json")
	_, err = Parse([]byte(`{"name": "x", "levels": []}`), "x.json")
	assert.ErrorContains(t, err, "no levels")
}

func TestEmbeddedSetsAllParse(t *testing.T) {
	t.Parallel()
	sets, err := Embedded()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(sets), 7, "the four sets of issue 25 and at least three more")
	names := map[string]bool{}
	for _, s := range sets {
		names[s.Name] = true
		assert.NotEmpty(t, s.SourceURL, s.Name)
		for _, lv := range s.Levels {
			assert.NotEmpty(t, lv.Figures, "%s %s", s.Name, levelLabel(lv))
			for _, f := range lv.Figures {
				assert.Greater(t, f.Value, 0.0, "%s %s", s.Name, f.Name)
			}
		}
	}
	for _, n := range []string{"llama31-8b-a100-sharegpt-v030", "llama31-70b-h100-tp4-sharegpt-v030",
		"llama31-8b-h100-random8k-pr1060", "deepseek-v3-h100-pd-ep-96gpu"} {
		assert.True(t, names[n], "issue 25's set %s", n)
	}
}

// A set's source is the repository or site that published it: every page of one GitHub
// repository (a README, a PR, a pinned blob) is one source, any other URL its host, and a set
// without a URL is a source of its own.
func TestSourceIsThePublishingRepositoryOrSite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"https://github.com/sgl-project/sglang/pull/4880", "sgl-project/sglang"},
		{"https://github.com/sgl-project/sglang/blob/main/benchmark/benchmark_vllm_060/README.md", "sgl-project/sglang"},
		{"https://github.com/dstackai/benchmarks/tree/06c957a/comparison/pd_ratio", "dstackai/benchmarks"},
		{"https://lmsys.org/blog/2025-05-05-large-scale-ep/", "lmsys.org"},
		{"https://github.com/sgl-project", "github.com"},
		{"", "my-set"},
		{"not a url", "my-set"},
	} {
		assert.Equal(t, c.want, Set{Name: "my-set", SourceURL: c.url}.Source(), "%q", c.url)
	}
}

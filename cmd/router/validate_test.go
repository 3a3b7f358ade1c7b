package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim/validate"
)

func TestSimValidateGatesOnBands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A figure far outside its band (1 tok/s published) and a model the simulator cannot express.
	known := filepath.Join(dir, "known.json")
	require.NoError(t, os.WriteFile(known, []byte(`{"name": "known", "source_url": "x",
	  "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100", "tp": 1, "dp": 1, "ep": 1,
	  "workload": {"dataset": "random", "input_len": 256, "output_len": 16, "range_ratio": 1},
	  "levels": [{"load": {"request_rate": "inf", "num_prompts": 32}, "figures": {"output_tok_s": 1}}]}`), 0o644))
	unknown := filepath.Join(dir, "unknown.json")
	require.NoError(t, os.WriteFile(unknown, []byte(`{"name": "unknown", "model": "org/Nope", "gpu": "H100",
	  "workload": {"dataset": "random", "input_len": 256, "output_len": 16},
	  "levels": [{"load": {"request_rate": 1}, "figures": {"output_tok_s": 1}}]}`), 0o644))

	var out, errOut bytes.Buffer
	assert.Equal(t, 1, execute([]string{"sim", "validate", known, unknown}, &out, &errOut), "outside the band and not expressible: exit 1")
	assert.Contains(t, out.String(), "SET")
	assert.Contains(t, out.String(), "OUTSIDE", "1 tok/s published: the sim is far above")
	assert.Contains(t, out.String(), "not expressible yet: unknown model org/Nope")
	assert.Contains(t, out.String(), "validate: 2 figures of 2 sets: 0 within band, 1 outside, 1 not computed")
	assert.Contains(t, errOut.String(), "1 figures outside their band, 1 not computed")

	out.Reset()
	errOut.Reset()
	assert.Equal(t, 0, execute([]string{"sim", "validate", "--no-fail", "--markdown", unknown}, &out, &errOut), errOut.String())
	assert.True(t, strings.HasPrefix(out.String(), "| set | level | figure |"), out.String())

	out.Reset()
	assert.Equal(t, 0, execute([]string{"sim", "validate", "--help"}, &out, &errOut))
	assert.Contains(t, out.String(), "Adding a set")
	assert.Contains(t, out.String(), "--fit-metrics")

	// A fit flag with an unknown value fails before anything runs, naming the flag.
	for flag, want := range map[string]string{
		"--fit-metrics=latency": `--fit-metrics: no metric "latency" (one of ttft, tpot, throughput, e2e)`,
		"--fit-fields=Warp":     `--fit-fields: no constant "Warp"`,
	} {
		errOut.Reset()
		assert.Equal(t, 1, execute([]string{"sim", "validate", flag, known}, &out, &errOut), flag)
		assert.Contains(t, errOut.String(), want, flag)
	}
}

// The per-set lines of validate --cross: a set's medians built-in → cross-validated, "-" where
// it has no TTFT figure.
func TestWritePerSetShowsBuiltinAndCrossValidated(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	var out bytes.Buffer
	writePerSet(&out, []validate.SetMedians{
		{Set: "dstack-x", Builtin: validate.MedianErrors{N: 30, All: 0.065, TTFT: 0.24, TTFTRatio: 1.09}, Cross: validate.MedianErrors{N: 30, All: 0.081, TTFT: 0.254, TTFTRatio: 1.1}},
		{Set: "ep-phase", Builtin: validate.MedianErrors{N: 4, All: 0.032, TTFT: nan, TTFTRatio: nan}, Cross: validate.MedianErrors{N: 4, All: 0.032, TTFT: nan, TTFTRatio: nan}},
	})
	assert.Contains(t, out.String(), "built-in → cross-validated")
	assert.Regexp(t, `dstack-x +30 +6\.5% → 8\.1% +24\.0% → 25\.4% +1\.09 → 1\.10`, out.String())
	assert.Regexp(t, `ep-phase +4 +3\.2% → 3\.2% +- → - +- → -`, out.String())
}

// The per-source lines of validate --cross: a source's sets and figures, its medians left out
// set by set → as a whole, "-" where it has no TTFT figure.
func TestWritePerSourceShowsSetAndSourceLeftOut(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	var out bytes.Buffer
	writePerSource(&out, []validate.SourceMedians{
		{Source: "sgl-project/sgl-cookbook", Sets: make([]string, 8), BySet: validate.MedianErrors{N: 247, All: 0.098, TTFT: 0.227, TPOT: 0.079, Throughput: 0.083, TTFTRatio: 0.92},
			BySource: validate.MedianErrors{N: 247, All: 0.231, TTFT: 0.59, TPOT: 0.193, Throughput: 0.213, TTFTRatio: 0.48}},
		{Source: "lmsys.org", Sets: make([]string, 4), BySet: validate.MedianErrors{N: 13, All: 0.039, TTFT: nan, TPOT: nan, Throughput: 0.039, TTFTRatio: nan},
			BySource: validate.MedianErrors{N: 13, All: 0.039, TTFT: nan, TPOT: nan, Throughput: 0.039, TTFTRatio: nan}},
	})
	assert.Contains(t, out.String(), "each set left out → the whole source left out")
	assert.Regexp(t, `sgl-project/sgl-cookbook +8 +247 +9\.8% → 23\.1% +22\.7% → 59\.0% +7\.9% → 19\.3% +8\.3% → 21\.3% +0\.92 → 0\.48`, out.String())
	assert.Regexp(t, `lmsys\.org +4 +13 +3\.9% → 3\.9% +- → - +- → - +3\.9% → 3\.9% +- → -`, out.String())
}

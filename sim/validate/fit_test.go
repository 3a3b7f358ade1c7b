package validate

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// The fit finds a constant it was started away from: H100's compute share made 0.3 (the
// built-in 0.5 fits llama31-8b-h100-random8k-pr1060, a prefill-bound set), it comes back
// within 10 % of 0.5 and the set's figures move into their bands, while the other constants,
// which the set hardly sees, stay near their start.
func TestFitRecoversAKnownEfficiency(t *testing.T) {
	skipUnderRace(t)
	sets, err := Embedded()
	require.NoError(t, err)
	var set Set
	for _, s := range sets {
		if s.Name == "llama31-8b-h100-random8k-pr1060" {
			set = s
		}
	}
	require.NotEmpty(t, set.Name)
	g := engine.H100SXM
	g.ComputeEfficiency = 0.3
	grp := &gpuGroup{gpu: g, sets: []Set{set}}
	for _, f := range FitFields {
		if v := f.get(g); v > 0 {
			grp.fields = append(grp.fields, f)
			grp.x0 = append(grp.x0, math.Log(v))
		}
	}
	before := grp.eval(grp.x0)
	x, evals, _, err := grp.fit(false, func(string) {})
	require.NoError(t, err)
	fitted := grp.apply(x)
	t.Logf("%d runs: compute share %.3f, memory share %.3f", evals, fitted.ComputeEfficiency, fitted.MemoryEfficiency)
	assert.InEpsilon(t, 0.5, fitted.ComputeEfficiency, 0.1, "compute share recovered")
	inBand := func(rs []Result) (n int) {
		for _, r := range rs {
			if r.Pass {
				n++
			}
		}
		return n
	}
	after := grp.eval(x)
	assert.Greater(t, inBand(after), inBand(before))
	assert.InEpsilon(t, g.MemoryEfficiency, fitted.MemoryEfficiency, 0.2, "a constant the set hardly sees stays near its start")
	for i, f := range grp.fields {
		v := math.Exp(x[i])
		assert.True(t, v >= f.Lo-1e-12 && v <= f.Hi+1e-12, "%s %g within [%g, %g]", f.Name, v, f.Lo, f.Hi)
	}
}

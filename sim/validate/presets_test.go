package validate

import (
	"math"
	"sort"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// summarizeByPreset maps each engine preset to the sets that validate it: those whose model card and
// GPU are the preset's (engine.PresetSetup), whatever its parallelism. Presets no set validates
// are absent (an "unvalidated roofline").
func summarizeByPreset(rs []Result) map[string]Summary {
	out := map[string]Summary{}
	for _, p := range engine.Presets() {
		if p.Constant {
			continue
		}
		var sum Summary
		sets := map[string]bool{}
		for _, r := range rs {
			if r.Model == "" || !presetMatches(p.Name, r.Model, r.GPU) {
				continue
			}
			sets[r.Set] = true
			sum.Figures++
			if math.IsNaN(r.Ratio) {
				sum.NotComputed++
				continue
			}
			if !r.Pass {
				sum.Outside++
			}
			if e := math.Abs(r.Ratio - 1); e > sum.WorstError || sum.WorstSet == "" {
				sum.WorstError, sum.WorstSet, sum.WorstFigure = e, r.Set, r.Level+" "+r.Figure
			}
		}
		if len(sets) == 0 {
			continue
		}
		for s := range sets {
			sum.Sets = append(sum.Sets, s)
		}
		sort.Strings(sum.Sets)
		out[p.Name] = sum
	}
	return out
}

// presetMatches reports whether preset is built from model on gpu (catalog names): the same
// card and GPU, whatever the parallelism. A card's precision variant is another card (the NVFP4
// DeepSeek-V3 validates only the presets built from it).
func presetMatches(preset, model, gpu string) bool {
	m, g, ok := engine.PresetSetup(preset)
	return ok && m.Name == model && g.Name == gpu
}

// servers builds the servers of a set (one unified, or prefill and decode), with the level's
// precision applied to the model card.
func servers(s Set, m engine.ModelCard, g engine.GPU, notes *[]string) ([]server, error) {
	return serversFor(s, m, g, "", notes)
}

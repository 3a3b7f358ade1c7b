package validate

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/reports"
)

// heldoutDir holds published SGLang measurements kept out of the suite (heldout/README.md):
// data for issue 40's wider suite and its leave-one-out validation. They are read from disk
// with Load, as 'router sim validate FILE...' reads them; Embedded never sees them.
const heldoutDir = "heldout"

var datePattern = regexp.MustCompile(`^\d{4}-\d{2}(-\d{2})?$`)

// knownFigure reports whether the suite can compute a figure of this name (LevelFigure, the
// function validate uses), so a misspelt figure cannot land as a silently skipped row.
func knownFigure(name string) bool {
	_, ok := LevelFigure(reports.Level{}, name, Scale{GPUs: 1, Nodes: 1, AllNodes: 1})
	return ok
}

func TestKnownFigureTellsTheVocabularyFromTypos(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"ttft_ms_mean", "tpot_ms_p99", "itl_ms_median", "e2e_ms_mean", "duration_s",
		"request_throughput_req_s", "output_tok_s", "total_tok_s_per_gpu", "input_tok_s_per_node"} {
		assert.True(t, knownFigure(n), n)
	}
	for _, n := range []string{"ttft_mean_ms", "ttft_ms_p95", "output_tokens_s", "output_tok_s_per_rack", "concurrency"} {
		assert.False(t, knownFigure(n), n)
	}
}

func TestHeldoutSetsParseWithRequiredFields(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join(heldoutDir, "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 12, "issue 40's held-out sets")
	sets, err := Load(paths...)
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(heldoutDir, "README.md"))
	require.NoError(t, err)
	published, err := Embedded()
	require.NoError(t, err)
	inSuite := map[string]bool{}
	for _, s := range published {
		inSuite[s.Name] = true
	}
	for _, s := range sets {
		base := strings.TrimSuffix(filepath.Base(s.File), ".json")
		assert.Equal(t, base, s.Name, "name is the file name")
		assert.False(t, inSuite[s.Name], "%s is also in published/: a held-out set must stay out of the suite", s.Name)
		assert.True(t, strings.Contains(string(readme), "`"+s.Name+"`"), "heldout/README.md does not list %s", s.Name)
		assert.True(t, strings.HasPrefix(s.SourceURL, "https://"), "%s source_url", s.Name)
		assert.Regexp(t, datePattern, s.Date, "%s date", s.Name)
		for field, v := range map[string]string{"model": s.Model, "gpu": s.GPU, "precision": s.Precision, "notes": s.Notes} {
			assert.NotEmpty(t, v, "%s %s", s.Name, field)
		}
		assert.NotEmpty(t, str(s.Workload["dataset"]), "%s workload.dataset", s.Name)
		for _, n := range s.Parse { // a string read as its number (an inferred value with its reason) is fine
			assert.Contains(t, n, " read as ", "%s: a field that does not read: %s", s.Name, n)
		}
		for _, lv := range s.Levels {
			lbl := s.Name + " " + levelLabel(lv)
			assert.NotEmpty(t, lv.Load, "%s load", lbl)
			assert.NotEmpty(t, lv.Notes, "%s notes: where the figures were read", lbl)
			assert.NotEmpty(t, lv.Figures, lbl)
			for _, f := range lv.Figures {
				assert.True(t, knownFigure(f.Name), "%s: unknown figure %s (vocabulary: published/README.md)", lbl, f.Name)
				assert.True(t, f.Value > 0 && !math.IsInf(f.Value, 0), "%s %s = %g", lbl, f.Name, f.Value)
			}
		}
	}
}

package sim

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Runs that share a Conversations give the results of runs that generate their own, PD and
// regular, multiturn (a turn's prompt holds the previous reply), also when they run at once on
// the same remembered levels (under -race: the shared ids and texts are only read); a budget
// too small for a level leaves it unremembered and the results the same.
func TestConversationsGiveTheSameResults(t *testing.T) {
	t.Parallel()
	pd := baseConfig()
	regular := baseConfig()
	regular.Router.PDDisaggregation = false
	for name, cfg := range map[string]Config{"pd": pd, "regular": regular} {
		want := encode(t, mustRun(t, cfg))
		conv := &Conversations{}
		cfg.Conversations = conv
		got := make([][]byte, 3)
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := Run(cfg)
				if assert.NoError(t, err) {
					got[i] = encode(t, res)
				}
			}()
		}
		wg.Wait()
		for i := range got {
			assert.Equal(t, string(want), string(got[i]), "%s: run %d with remembered conversations", name, i)
		}
		require.Len(t, conv.m, 1, name)
		assert.Positive(t, conv.used, name)
		cfg.Conversations = &Conversations{Budget: 1}
		assert.Equal(t, string(want), string(encode(t, mustRun(t, cfg))), "%s: over the budget", name)
		assert.Empty(t, cfg.Conversations.m, "%s: a level past the budget is not remembered", name)
	}
}

package workloads

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShareGPTLengthsMatchPublishedMeans(t *testing.T) {
	t.Parallel()
	const n = 20000
	var sumIn, sumOut float64
	for i := range n {
		in, out := ShareGPTLengths(1, i)
		require.GreaterOrEqual(t, in, 4)
		require.GreaterOrEqual(t, out, 4)
		require.LessOrEqual(t, in, 1024)
		require.LessOrEqual(t, in+out, 2048)
		sumIn += float64(in)
		sumOut += float64(out)
	}
	assert.InEpsilon(t, shareGPTMeanPrompt, sumIn/n, 0.03, "mean prompt tokens")
	assert.InEpsilon(t, shareGPTMeanOutput, sumOut/n, 0.03, "mean output tokens")
}

func TestShareGPTSourceIsDeterministicAndCountsTokens(t *testing.T) {
	t.Parallel()
	for _, api := range []API{APICompletions, APIGenerate} {
		t.Run(string(api), func(t *testing.T) {
			t.Parallel()
			testShareGPTSource(t, api)
		})
	}
}

func testShareGPTSource(t *testing.T, api API) {
	p := DefaultParams()
	p.Workload, p.API, p.NumPrompts, p.Seed = WorkloadShareGPT, api, 20, 7
	read := func() []Turn {
		src, err := NewSource(p)
		require.NoError(t, err)
		var turns []Turn
		for {
			s, err := src.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			tr, ok := s.Next("")
			require.True(t, ok)
			turns = append(turns, tr)
		}
		return turns
	}
	a, b := read(), read()
	require.Len(t, a, 20)
	assert.Equal(t, a, b, "same seed, same requests")
	for i, tr := range a {
		in, out := ShareGPTLengths(7, i)
		text, err := RenderPrompt(p.API, tr.Body)
		require.NoError(t, err)
		assert.Equal(t, in, Count(text), "request %d prompt tokens", i)
		assert.Equal(t, out, tr.MaxTokens, "request %d output tokens", i)
	}
	assert.Equal(t, 20, p.ConversationCount())
	assert.Equal(t, 20, p.Summary()["num_prompts"])
}

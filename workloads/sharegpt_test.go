package workloads

import (
	"io"
	"math"
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

// --sharegpt-prompt-scale and --sharegpt-output-scale multiply the drawn lengths (rounded, at
// least 1), and must be positive.
func TestShareGPTScaledMultipliesTheDrawnLengths(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.Workload = WorkloadShareGPT
	for i := range 50 {
		in, out := ShareGPTLengths(p.Seed, i)
		a, b := ShareGPTScaled(p, i)
		assert.Equal(t, [2]int{in, out}, [2]int{a, b}, "scale 1: the drawn lengths")
	}
	p.ShareGPTPromptScale, p.ShareGPTOutputScale = 1.5, 0.001
	in, out := ShareGPTLengths(p.Seed, 3)
	a, b := ShareGPTScaled(p, 3)
	assert.Equal(t, int(math.Round(1.5*float64(in))), a)
	assert.Equal(t, max(int(math.Round(0.001*float64(out))), 1), b)
	assert.NoError(t, p.Validate())
	p.ShareGPTOutputScale = 0
	assert.ErrorContains(t, p.Validate(), "--sharegpt-output-scale")
}

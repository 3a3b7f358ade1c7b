package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cost model times work with the server's own step functions: a lone request's time to
// its first token on an idle unified server is PrefillTime (its host path and chunked prefill
// steps), and its next tokens come one DecodeStepTime apart.
func TestCostModelMatchesTheServer(t *testing.T) {
	t.Parallel()
	p, err := LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cfg := Config{Role: RoleUnified, Profile: p, ChunkedPrefillSize: 2048, DisableOverlap: true}
	m, err := NewCostModel(cfg)
	require.NoError(t, err)
	s, err := New(cfg)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prompt := make([]uint32, 5000) // three chunks
	for i := range prompt {
		prompt[i] = uint32(i + 1)
	}
	s.Submit(t0, Req{Room: 1, Rank: -1, Prompt: prompt, MaxNew: 3})
	var tokens []time.Time
	for range 1000 {
		at, ok := s.NextEvent()
		if !ok {
			break
		}
		for _, o := range s.Advance(at) {
			if o.Kind == KindToken {
				tokens = append(tokens, o.At)
			}
		}
	}
	require.Len(t, tokens, 3)
	assert.Equal(t, m.PrefillTime(5000, 0), tokens[0].Sub(t0))
	step := tokens[2].Sub(tokens[1])
	assert.InDelta(t, float64(m.DecodeStepTime(1, 5002)), float64(step), float64(step)/50, "one decode step of one request")
	assert.Equal(t, time.Duration(0), m.QueueTime(0))
	assert.InDelta(t, float64(m.PrefillTime(2048, 0)-m.PrefillTime(0, 0)), float64(m.QueueTime(2048)), float64(time.Microsecond), "a queued full chunk")
	assert.Equal(t, s.Config().MaxTotalTokens, m.MaxTotalTokens())
}

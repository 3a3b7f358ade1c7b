package engine

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SetSpeedup changes a running server's speed for the steps that begin after it: a lone
// request submitted after SetSpeedup(0.5) reaches its first token in twice the model's time,
// and one submitted after SetSpeedup(1) again in the model's time.
func TestSetSpeedupSlowsLaterSteps(t *testing.T) {
	t.Parallel()
	p, err := LookupProfile("llama3-8b-h100")
	require.NoError(t, err)
	cfg := Config{Role: RoleUnified, Profile: p, DisableOverlap: true}
	m, err := NewCostModel(cfg)
	require.NoError(t, err)
	s, err := New(cfg)
	require.NoError(t, err)
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		assert.Error(t, s.SetSpeedup(bad), "speedup %g", bad)
	}
	now := epoch
	ttft := func(room uint64) time.Duration {
		prompt := make([]uint32, 3000)
		for i := range prompt {
			prompt[i] = uint32(room)<<16 + uint32(i)
		}
		start := now
		s.Submit(now, Req{Room: room, Rank: -1, Prompt: prompt, MaxNew: 1})
		var first time.Time
		for range 1000 {
			at, ok := s.NextEvent()
			if !ok {
				break
			}
			now = at
			for _, o := range s.Advance(at) {
				if o.Kind == KindToken && o.Room == room {
					first = o.At
				}
			}
		}
		require.False(t, first.IsZero())
		return first.Sub(start)
	}
	model := m.PrefillTime(3000, 0)
	assert.Equal(t, model, ttft(1))
	require.NoError(t, s.SetSpeedup(0.5))
	assert.InDelta(t, float64(2*model), float64(ttft(2)), 10, "twice slower")
	require.NoError(t, s.SetSpeedup(1))
	assert.Equal(t, model, ttft(3))
}

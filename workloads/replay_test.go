package workloads

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplayRoundTrip(t *testing.T) {
	p, l := DefaultParams(), DefaultLoadParams()
	p.Conversations, p.Seed = 12, 9
	l.Rates, l.Requests, l.Warmup = []float64{2.5, math.Inf(1)}, 100, 4
	b, err := json.Marshal(Replay{p, l})
	require.NoError(t, err)
	var back Replay
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, Replay{p, l}, back)
}

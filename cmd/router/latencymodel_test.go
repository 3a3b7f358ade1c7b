package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
)

// serve's --latency-profile gives predicted_latency the preset's engine model per role, as
// router sim resolves it; without one serve.New names the flag; a wrong name is an error.
func TestLatencyModels(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.PDDisaggregation, cfg.Policy = true, router.PolicyPredictedLatency
	m, err := latencyModels(cfg)
	require.NoError(t, err)
	assert.Nil(t, m, "no profile: serve.New names --latency-profile")

	cfg.LatencyProfile = "llama3-8b-h100"
	m, err = latencyModels(cfg)
	require.NoError(t, err)
	require.Len(t, m, 2)
	pre, dec := m[router.Prefill], m[router.Decode]
	require.NotNil(t, pre)
	require.NotNil(t, dec)
	// An 8B model on an H100: a 4,096-token prompt in tens of ms, a batch-32 step in ms.
	assert.Greater(t, pre.PrefillTime(4096, 0), 20*time.Millisecond)
	assert.Less(t, pre.PrefillTime(4096, 0), 500*time.Millisecond)
	assert.Less(t, pre.PrefillTime(512, 3584), pre.PrefillTime(4096, 0), "a cached prefix is not prefilled")
	assert.Greater(t, dec.DecodeStepTime(32, 32*2048), dec.DecodeStepTime(1, 2048))
	assert.Greater(t, dec.TransferTime(4096), dec.TransferTime(0))
	assert.Equal(t, 1024, dec.MaxRunningRequests())

	cfg.LatencyProfile = "no-such-profile"
	_, err = latencyModels(cfg)
	assert.ErrorContains(t, err, "--latency-profile: engine: unknown profile")

	cfg.Policy = router.PolicyCacheAware
	m, err = latencyModels(cfg)
	require.NoError(t, err)
	assert.Nil(t, m, "no role routed by predicted_latency")
}

package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// A decode server too small for its load holds requests in its preallocation queue past the
// prefill's bootstrap timeout (30 s), so the prefill leg fails "in KVPoll.Bootstrapping"
// while the decode is still silent (its own deadline starts only at preallocation, as
// SGLang's). router.PDBlame charges that failure to the decode, as serve does: the decode's
// breaker opens, the prefills' never do. (Before, the sim charged the prefill that reported
// the timeout, or — when the decode's deadline also ran from submission and both legs failed
// together — nobody.)
func TestSimChargesBootstrapTimeoutsToTheSilentDecode(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg.Cluster.Prefill, cfg.Cluster.Decode = 2, 1
	cfg.Cluster.DecodeArgs = &engine.ServerArgs{MaxTotalTokens: 10000}
	p := &cfg.Workload
	p.Conversations, p.Turns, p.SystemPromptLen, p.QuestionLen, p.OutputLen = 64, 1, 64, 1500, 3000
	cfg.Load.Concurrency = []int{32}
	cfg.Router.CBFailureThreshold = 1
	res, err := Run(cfg)
	require.NoError(t, err)
	t.Logf("breaker opens: %v; errors %v", res.Stats.BreakerOpens, last(res).ErrorsByKind)
	assert.Positive(t, res.Stats.BreakerOpens[WorkerURL(router.Decode, 0)], "the silent decode is charged")
	for i := range 2 {
		assert.Zero(t, res.Stats.BreakerOpens[WorkerURL(router.Prefill, i)], "prefill %d reported its peer's silence", i)
	}
}

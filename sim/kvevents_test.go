package sim

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/kvindex"
)

// regularConfig is a small regular-mode run: multiturn at concurrency 8 on 4 servers.
func regularConfig() Config {
	cfg := baseConfig()
	cfg.Router.PDDisaggregation = false
	cfg.Cluster.Regular = 4
	return cfg
}

func TestKVEventsIndexFollowsTheEngines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pd   bool
	}{{"regular", false}, {"pd", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := regularConfig()
			if tc.pd {
				cfg = baseConfig()
			}
			cfg.Routing = Routing{KVEvents: "on"}
			res := mustRun(t, cfg)
			kv := res.Stats.KV
			assert.Positive(t, kv.Batches)
			assert.Equal(t, kv.Batches, kv.Delivered, "one replica, no loss: every batch delivered once")
			assert.Zero(t, kv.Lost+kv.Gaps)
			l := res.Results.Levels[0]
			require.NotNil(t, l.CacheHitRate)
			// The index knows what the engines hold: the router predicts the hits they make.
			assert.InDelta(t, *l.CacheHitRate, l.Sim.PredictedMatchRate, 0.03,
				"engine hit rate %.3f vs predicted %.3f", *l.CacheHitRate, l.Sim.PredictedMatchRate)
			var meta map[string]any
			require.NoError(t, json.Unmarshal(res.Results.Meta.Router, &meta))
			assert.Equal(t, "on", meta["kv_events"])
			assert.EqualValues(t, 1, meta["router_replicas"])
		})
	}
}

func TestKVEventsOffLeavesTheRunAsBefore(t *testing.T) {
	t.Parallel()
	base := mustRun(t, regularConfig())
	cfg := regularConfig()
	cfg.Routing = Routing{Replicas: 1, ReplicaAffinity: AffinityRoundRobin, KVEvents: "off"}
	same := mustRun(t, cfg)
	assert.Equal(t, base.Results.Levels, same.Results.Levels)
	assert.Zero(t, same.Stats.KV)
}

func TestReplicasAndDelaysAreDeterministic(t *testing.T) {
	t.Parallel()
	cfg := regularConfig()
	cfg.Routing = Routing{KVEvents: "on", Replicas: 3, KVEventsDelay: Delay{Kind: "exp", Mean: 10 * time.Millisecond},
		KVEventsLoss: 0.01}
	a, b := mustRun(t, cfg), mustRun(t, cfg)
	assert.Equal(t, string(encode(t, a)), string(encode(t, b)))
	assert.Equal(t, a.Records, b.Records)
	assert.Equal(t, a.Stats.KV, b.Stats.KV)
	// Every replica receives or loses every batch (those still in flight at the end excepted).
	assert.LessOrEqual(t, a.Stats.KV.Delivered+a.Stats.KV.Lost, 3*a.Stats.KV.Batches)
	assert.Greater(t, a.Stats.KV.Delivered+a.Stats.KV.Lost, 3*a.Stats.KV.Batches*9/10)
	assert.Len(t, a.Stats.Targets, 3*4, "each replica reports its own view of the 4 targets")
}

// TestKVEventsDropTheTreeNoPickConsults checks that on a feed that loses nothing each replica
// drops a role's tree once every target of the role has heard from its engine (no pick
// consults it again: sim/kvevents.go kvFeed.unheard), keeps the tree of a role whose targets
// stay silent (decode servers without a radix cache route on the tree), and keeps every tree
// when batches can be lost. That the drop changes no record is checked against the build
// before it (docs/performance.md). predicted_latency's match rates come from the same tree and
// index, and drop the same way.
func TestKVEventsDropTheTreeNoPickConsults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy string
		loss   float64
	}{{router.PolicyCacheAware, 0}, {router.PolicyCacheAware, 0.01}, {router.PolicyPredictedLatency, 0}} {
		loss := c.loss
		cfg := baseConfig()
		cfg.Router.Policy = c.policy
		cfg.Routing = Routing{KVEvents: "on", Replicas: 2, KVEventsLoss: loss}
		x, err := newSim(cfg)
		require.NoError(t, err)
		require.NoError(t, x.run())
		for i, rep := range x.reps {
			pre, ok := rep.rt.TreeStats(router.Prefill)
			require.True(t, ok)
			dec, ok := rep.rt.TreeStats(router.Decode)
			require.True(t, ok)
			if c.policy == router.PolicyCacheAware { // predicted_latency picks the pair on the prefill role's tree
				assert.Positive(t, dec.Nodes, "loss %v replica %d: the silent decode targets route on the tree", loss, i)
			}
			if loss == 0 {
				assert.Zero(t, pre.Nodes, "replica %d: every prefill target heard: its tree was dropped", i)
			} else {
				assert.Positive(t, pre.Nodes, "replica %d: a lossy feed can make a target stale: the tree stays", i)
			}
		}
	}
}

func TestKVEventsLossMakesTargetsStale(t *testing.T) {
	t.Parallel()
	cfg := regularConfig()
	cfg.Routing = Routing{KVEvents: "on", KVEventsLoss: 0.5}
	res := mustRun(t, cfg)
	kv := res.Stats.KV
	assert.Positive(t, kv.Lost)
	assert.Positive(t, kv.Gaps)
	// No flush, no restart: nothing rebuilds a target after its gap (no replay endpoint).
	assert.Equal(t, 4, kv.StaleTargets)
}

func TestSessionAffinityKeepsAConversationOnOneReplica(t *testing.T) {
	t.Parallel()
	x := &sim{cfg: Config{Routing: Routing{ReplicaAffinity: AffinitySession}}, reps: make([]*replica, 4)}
	seen := map[int]bool{}
	for i := range 64 {
		s := "multiturn-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		r := x.pickReplica(s)
		assert.Equal(t, r, x.pickReplica(s), "the same session, the same replica")
		seen[r] = true
	}
	assert.Len(t, seen, 4, "sessions spread over every replica")
	x.cfg.Routing.ReplicaAffinity = AffinityRoundRobin
	for i := range 8 {
		assert.Equal(t, i%4, x.pickReplica("s"), "round robin ignores the session")
	}
}

func TestParseDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Delay
		bad  bool
	}{
		{in: "0", want: Delay{}},
		{in: "10ms", want: Delay{Fixed: 10 * time.Millisecond}},
		{in: "exp:10ms", want: Delay{Kind: "exp", Mean: 10 * time.Millisecond}},
		{in: "uniform:0-20ms", want: Delay{Kind: "uniform", Hi: 20 * time.Millisecond}},
		{in: "uniform:5ms-1s", want: Delay{Kind: "uniform", Lo: 5 * time.Millisecond, Hi: time.Second}},
		{in: "uniform:20ms-5ms", bad: true}, // reversed bounds
		{in: "uniform:5-20ms", bad: true},   // a bound without unit
		{in: "-1ms", bad: true},
		{in: "gauss:1ms", bad: true},
		{in: "10", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDelay(tc.in)
			if tc.bad {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.in, "the error quotes the text (pflag names the flag)")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			back, err := ParseDelay(got.String())
			require.NoError(t, err)
			assert.Equal(t, got, back, "String round-trips")
			var j Delay
			b, _ := json.Marshal(got)
			require.NoError(t, json.Unmarshal(b, &j))
			assert.Equal(t, got, j, "JSON round-trips")
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	u := Delay{Kind: "uniform", Lo: time.Millisecond, Hi: 2 * time.Millisecond}
	e := Delay{Kind: "exp", Mean: 10 * time.Millisecond}
	var sum int64
	for range 10000 {
		d := u.draw(rng)
		require.True(t, d >= int64(time.Millisecond) && d <= int64(2*time.Millisecond))
		sum += e.draw(rng)
	}
	assert.InDelta(t, float64(10*time.Millisecond), float64(sum)/10000, float64(time.Millisecond), "exp's mean")
}

func TestSweepVariesTheRoutingLayer(t *testing.T) {
	t.Parallel()
	vars := []Vary{{Key: "kv-events", Values: []string{"approximate", "precise"}},
		{Key: "router_replicas", Values: []string{"1", "4"}},
		{Key: "kv_events_delay", Values: []string{"0", "10ms", "exp:100ms"}},
		{Key: "cache_threshold", Values: []string{"0.5"}}}
	pts, err := Grid(regularConfig(), vars)
	require.NoError(t, err)
	require.Len(t, pts, 12)
	last := pts[11].Config
	assert.True(t, last.Routing.PreciseOn())
	assert.Equal(t, 4, last.Routing.Replicas)
	assert.Equal(t, Delay{Kind: "exp", Mean: 100 * time.Millisecond}, last.Routing.KVEventsDelay)
	assert.InDelta(t, 0.5, last.Router.CacheThreshold, 1e-12)
	assert.Equal(t, Delay{Fixed: 10 * time.Millisecond}, pts[1].Config.Routing.KVEventsDelay)
	assert.False(t, pts[0].Config.Routing.PreciseOn())

	_, err = Grid(regularConfig(), []Vary{{Key: "replica_affinity", Values: []string{"session", "sticky"}}})
	require.NoError(t, err, "values are checked when the point runs")
	_, err = Run(func() Config { c := regularConfig(); c.Routing.ReplicaAffinity = "sticky"; return c }())
	require.ErrorContains(t, err, "--replica-affinity")
}

// TestKVSubSequenceParity runs the KV-event sequence parity table (router/kvindex's
// testdata/seqparity.json, which serve's stream.handle runs too: router/kvevents
// TestStreamSequenceParity) through a replica's kvSub.deliver. The simulator has no replay
// endpoint, so every row gives its no-replay outcome; the table's "sim" column says per row
// how that relates to serve's.
func TestKVSubSequenceParity(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../router/kvindex/testdata/seqparity.json")
	require.NoError(t, err)
	var table struct {
		Rows []struct {
			Name  string
			Live  []int64
			Clear []int64
			Want  map[string]kvParityOutcome // by variant; the simulator's is "no_replay"
		}
	}
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Rows)
	clearEv := []kvindex.PathEvent{{Kind: kvindex.AllBlocksCleared}}
	for _, row := range table.Rows {
		want, ok := row.Want["no_replay"]
		require.True(t, ok, "%q has no no_replay outcome", row.Name)
		t.Run(row.Name+"/no_replay", func(t *testing.T) {
			t.Parallel()
			ix := kvindex.NewPathIndex(kvindex.Config{})
			st := &kvStream{name: "t", page: 1}
			sub := kvSub{id: ix.Target("t")}
			var stats KVStats
			var got kvParityOutcome
			for i, seq := range row.Live {
				// Live batch i stores block i: a one-token page of its own.
				b := &kvBatch{st: st, seq: seq, cleared: slices.Contains(row.Clear, seq)}
				if b.cleared {
					b.events = append(b.events, clearEv...)
				}
				b.events = append(b.events, kvindex.PathEvent{Kind: kvindex.BlockStored, Path: []uint32{uint32(i + 1)}, New: 1})
				before := stats.Delivered
				sub.deliver(ix, b, clearEv, Epoch, &stats)
				if stats.Delivered > before {
					got.Applied = append(got.Applied, seq)
				}
			}
			got.Stale, got.Gaps, got.Blocks = ix.Stale(sub.id), int(stats.Gaps), ix.Blocks(sub.id)
			assert.Equal(t, want, got)
			assert.Equal(t, got.Stale, sub.seq.Stale(), "the index is told what the tracker says")
		})
	}
}

// kvParityOutcome is what a subscriber ends a row of the sequence parity table with.
type kvParityOutcome struct {
	Applied []int64
	Stale   bool
	Gaps    int
	Blocks  int
}

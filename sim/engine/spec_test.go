package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// specProfile is testProfile, its steps 20 ms, with a draft model whose forward costs 1 ms.
func specProfile() Profile {
	p := testProfile()
	p.B0 = 0.02
	d := Profile{Name: "test-draft", B0: 0.001}
	p.Draft = &d
	return p
}

// Speculative decoding: each step gives a request AcceptLength tokens on average (2.5: 2, 3,
// 2, 3, …) in one chunk, every token is reported once and in order, the step costs the
// target's verify over the draft tokens plus the draft forwards and the verify overhead, and a
// request finishes with exactly its max new tokens.
func TestSpeculativeStepsAcceptTokensInChunks(t *testing.T) {
	run := func(spec Spec) (tokens []Output, e2e time.Duration) {
		s := newServer(t, Config{Role: RoleUnified, Profile: specProfile(), Spec: spec})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 101})
		c.runAll()
		fin := c.of(1, KindFinished)
		require.Len(t, fin, 1)
		assert.Equal(t, 101, fin[0].Usage.CompletionTokens)
		return c.of(1, KindToken), fin[0].At.Sub(at(0))
	}
	plain, plainE2E := run(Spec{})
	spec, specE2E := run(Spec{Algorithm: SpecEAGLE, NumSteps: 3, EagleTopK: 1, DraftTokens: 4, AcceptLength: 2.5})
	require.Len(t, spec, 101)
	instants := map[time.Time]int{}
	for i, o := range spec {
		assert.Equal(t, i, o.Index)
		instants[o.At]++
	}
	// The first token comes from prefill; 100 more in 40 steps of 2 and 3.
	assert.Len(t, instants, 41)
	for at, n := range instants {
		if at != spec[0].At {
			assert.Contains(t, []int{2, 3}, n)
		}
	}
	distinct := map[time.Time]bool{}
	for _, o := range plain {
		distinct[o.At] = true
	}
	assert.Len(t, distinct, 101, "one token per step without speculation")

	// A step: verify of 4 tokens (B0 + B1 + B2·ctx of the profile, no weights term), 3 draft
	// forwards and an extend of ⌈2.5⌉ = 3 tokens at 1 ms each, the verify overhead, and the
	// scheduler's per-request CPU time without the overlap scheduler.
	p := specProfile()
	ctx := 150 // the context at token 50 and a bit
	step := p.verifyTime(1, 4, ctx) + 4*time.Millisecond + seconds(SpecVerifyOverhead) + seconds(NoOverlapHostPerRequest)
	var gap time.Duration // the first step boundary after token 50
	for i := 51; gap == 0; i++ {
		gap = spec[i].At.Sub(spec[i-1].At)
	}
	assert.InDelta(t, float64(step), float64(gap), float64(50*time.Microsecond), "one speculative step")
	assert.Less(t, specE2E, plainE2E, "2.5 tokens per step for a step under 2.5 plain ones")
}

// With Req.Gaps the sink counts one gap per chunk: what bench_serving's ITL sees.
func TestSpeculativeGapsPerChunk(t *testing.T) {
	s := newServer(t, Config{Role: RoleUnified, Profile: specProfile(),
		Spec: Spec{Algorithm: SpecEAGLE, NumSteps: 3, EagleTopK: 1, DraftTokens: 4, AcceptLength: 2.5}})
	c := &cluster{t: t, single: s, check: true}
	g := &gapCounts{}
	s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 101, Gaps: g})
	c.runAll()
	var n int64
	for _, k := range g.m {
		n += k
	}
	assert.EqualValues(t, 40, n, "100 tokens after the first in 40 chunks")
}

// Speculative decoding keeps every invariant (KV accounting with the draft tokens' reservation,
// retraction, aborts, kills) under the chaos schedule, PD and unified.
func TestSpeculativeConservationUnderChaos(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			outs, submitted := chaosWith(t, seed, false, true, 0, func(c *Config) {
				c.Profile = specProfile()
				c.Spec = Spec{Algorithm: SpecEAGLE3, NumSteps: 3, EagleTopK: 2, DraftTokens: 6, AcceptLength: 2.7}
			})
			finished := 0
			for _, o := range outs {
				if o.Kind == KindFinished {
					finished++
				}
			}
			assert.Positive(t, finished)
			assert.NotEmpty(t, submitted[2])
		})
	}
}

// BuildServer fills SGLang's speculative defaults by architecture and builds the draft; what
// cannot be modelled is refused with SGLang's flag names.
func TestBuildServerSpeculative(t *testing.T) {
	_, r, err := BuildServer("", Llama3Dense8B, H100SXM, Parallelism{TP: 1}, ServerArgs{Spec: Spec{Algorithm: "eagle3", AcceptLength: 4}})
	require.NoError(t, err)
	assert.Equal(t, Spec{Algorithm: SpecEAGLE3, NumSteps: 5, EagleTopK: 4, DraftTokens: 8, AcceptLength: 4}, r.Spec)
	assert.Equal(t, SpecMaxRunningRequests, r.MaxRunningRequests, "SGLang's default under EAGLE")
	p, r, err := BuildServer("", DeepSeekV3, H200SXM, Parallelism{TP: 8, DP: 8, EP: 8, DPAttention: true}, ServerArgs{Spec: Spec{Algorithm: SpecNEXTN, AcceptLength: 2.5}})
	require.NoError(t, err)
	assert.Equal(t, Spec{Algorithm: SpecNEXTN, NumSteps: 3, EagleTopK: 1, DraftTokens: 4, AcceptLength: 2.5}, r.Spec)
	require.NotNil(t, p.Draft)
	assert.Equal(t, SpecDraftOverhead, p.Draft.B0)
	assert.Positive(t, p.Draft.ExpertM0, "NextN's draft layer is a mixture of experts")
	_, r, err = BuildServer("", Llama3Dense8B, H100SXM, Parallelism{}, ServerArgs{Spec: Spec{Algorithm: SpecEAGLE, NumSteps: 4, EagleTopK: 1, AcceptLength: 3}})
	require.NoError(t, err)
	assert.Equal(t, 5, r.Spec.DraftTokens, "top-k 1: a chain of steps + 1")

	// EAGLE-3's reduced vocabulary makes a draft forward cheaper than EAGLE-2's.
	p2, _, err := BuildServer("", Llama3Dense8B, H100SXM, Parallelism{}, ServerArgs{Spec: Spec{Algorithm: SpecEAGLE, AcceptLength: 3}})
	require.NoError(t, err)
	p3, _, err := BuildServer("", Llama3Dense8B, H100SXM, Parallelism{}, ServerArgs{Spec: Spec{Algorithm: SpecEAGLE3, AcceptLength: 3}})
	require.NoError(t, err)
	assert.Greater(t, p2.Draft.DecodeTime(4, 0), p3.Draft.DecodeTime(4, 0))

	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Algorithm: "MEDUSA", AcceptLength: 2}, `--speculative-algorithm "MEDUSA" is not modelled`},
		{Spec{Algorithm: SpecEAGLE}, "--speculative-accept-length 0 must be ≥ 1"},
		{Spec{Algorithm: SpecEAGLE, NumSteps: 2, AcceptLength: 3.5}, "exceeds what a step can accept"},
		{Spec{NumSteps: 3}, "need --speculative-algorithm"},
	} {
		_, _, err := BuildServer("", Llama3Dense8B, H100SXM, Parallelism{}, ServerArgs{Spec: tc.spec})
		if assert.Error(t, err, "%+v", tc.spec) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	_, err = New(Config{Role: RoleUnified, Profile: testProfile(), Spec: Spec{Algorithm: SpecEAGLE, AcceptLength: 2, NumSteps: 3, EagleTopK: 1, DraftTokens: 4}})
	assert.ErrorContains(t, err, "needs a --model-path engine")
}

// The published batch-1 runs the speculative constants come from, and one they were not fitted
// to (MT-bench, output tok/s at concurrency 1 ≈ 1 / TPOT):
//   - sglang PR #4247 (2025-03), Llama 3.1 8B on one H100: EAGLE-3 361.70 tok/s at 5 steps
//     (accept length 4.68), 378.57 at 8 steps (5.39); EAGLE-2 230.08 at 8 steps (3.76) — the
//     fit: SpecDraftOverhead from the step difference, SpecVerifyOverhead from the first;
//   - sglang PR #4716 (2025-03), Llama 3.3 70B on 8 H100s (TP 8), EAGLE-3 at 8 steps, top-k 8,
//     64 draft tokens, --cuda-graph-max-bs 1: 234.54 tok/s at 5.88 — held out.
//
// The model's plain decode at batch 1 is slower than those runs' (8B: 126 tok/s against the
// SGLang docs' 158.34; 70B TP 8: 67 against 88.61; issue 40's small-batch gap), so the ratios
// below carry that error too.
func TestSpeculativePublishedBatchOne(t *testing.T) {
	tps := func(m ModelCard, tp, graphBS int, spec Spec) float64 {
		p, r, err := BuildServer("", m, H100SXM, Parallelism{TP: tp}, ServerArgs{CUDAGraphMaxBS: graphBS, Spec: spec})
		require.NoError(t, err)
		s := newServer(t, r.Apply(Config{Role: RoleUnified, Profile: p}))
		c := &cluster{t: t, single: s}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 200), MaxNew: 501})
		c.runAll()
		toks := c.of(1, KindToken)
		require.Len(t, toks, 501)
		return 500 / toks[500].At.Sub(toks[0].At).Seconds()
	}
	for _, tc := range []struct {
		name      string
		m         ModelCard
		tp, graph int
		spec      Spec
		published float64
		band      float64
	}{
		{"8b-eagle3-5steps", Llama3Dense8B, 1, 0, Spec{Algorithm: SpecEAGLE3, NumSteps: 5, AcceptLength: 4.68}, 361.70, 0.15},
		{"8b-eagle3-8steps", Llama3Dense8B, 1, 0, Spec{Algorithm: SpecEAGLE3, NumSteps: 8, AcceptLength: 5.39}, 378.57, 0.15},
		{"8b-eagle2-8steps", Llama3Dense8B, 1, 0, Spec{Algorithm: SpecEAGLE, NumSteps: 8, AcceptLength: 3.76}, 230.08, 0.15},
		{"70b-tp8-eagle3-held-out", Llama3Dense70B, 8, 1, Spec{Algorithm: SpecEAGLE3, NumSteps: 8, EagleTopK: 8, DraftTokens: 64, AcceptLength: 5.88}, 234.54, 0.20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tps(tc.m, tc.tp, tc.graph, tc.spec)
			t.Logf("sim %.1f tok/s, published %.2f: ×%.2f", got, tc.published, got/tc.published)
			assert.InEpsilon(t, tc.published, got, tc.band)
		})
	}
}

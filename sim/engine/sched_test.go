package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the SGLang scheduler and memory rules (host overhead, new-token-ratio admission,
// retraction, CUDA-graph padding, KV streaming with link contention, in-batch sharing), each
// on a case small enough to check by hand.

// A lone request's TTFT grows by exactly Profile.HostOverhead, on a unified server and on a
// prefill server (whose Handshake comes at once).
func TestHostOverheadDelaysTTFT(t *testing.T) {
	t.Parallel()
	const host = 0.0125 // s
	for _, role := range []Role{RoleUnified, RolePrefill} {
		first := func(h float64) time.Time {
			p := testProfile()
			p.HostOverhead = h
			s := newServer(t, Config{Role: role, Profile: p})
			c := &cluster{t: t, check: true}
			if role == RoleUnified {
				c.single = s
			} else {
				c.prefill = s
			}
			s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 100), MaxNew: 4})
			if role == RolePrefill {
				s.Handshake(at(0), 1)
			}
			c.runAll()
			if role == RolePrefill {
				return c.of(1, KindTransferDone)[0].FirstToken
			}
			return c.firstToken(1).At
		}
		base, delayed := first(0), first(host)
		assert.Equal(t, seconds(host), delayed.Sub(base), role.String())
		assert.Equal(t, at(testProfile().PrefillTime(100, 100*50)), base, "zero keeps today's timing")
	}
}

// PaddedBatch follows SGLang's captured sizes: 1 replays the graph of 1, 9 the graph of 12,
// 257 runs eagerly above --cuda-graph-max-bs 256; a max that is not itself a captured size
// (100) caps the graphs at the largest captured size below it (96).
func TestPaddedBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b, max, want int
		graph        bool
	}{
		{1, 256, 1, true},
		{9, 256, 12, true},
		{257, 256, 257, false},
		{256, 256, 256, true},
		{13, 256, 16, true},
		{300, 512, 304, true},
		{500, 512, 512, true},
		{96, 100, 96, true},
		{97, 100, 97, false},
		{9, 0, 9, false}, // no CUDA-graph modelling
	} {
		got, graph := PaddedBatch(tc.b, tc.max)
		assert.Equal(t, tc.want, got, "b=%d max=%d", tc.b, tc.max)
		assert.Equal(t, tc.graph, graph, "b=%d max=%d", tc.b, tc.max)
	}
}

// firstDecodeStep runs n rooms (10-token prompts) on a decode server and returns the length of
// their first decode step: from the first token (emitted as they join) to the second.
func firstDecodeStep(t *testing.T, cfg Config, n int) time.Duration {
	t.Helper()
	cfg.Role = RoleDecode
	s := newServer(t, cfg)
	for i := range n {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(i)*100, 10), MaxNew: 3})
	}
	var toks []Output
	for i := 0; i < 1000 && s.Live() > 0; i++ {
		next, ok := s.NextEvent()
		require.True(t, ok)
		for _, o := range s.Advance(next) {
			switch o.Kind {
			case KindPreallocated:
				s.KVArrived(next, o.Room, 0)
			case KindToken:
				if o.Room == 0 {
					toks = append(toks, o)
				}
			}
		}
	}
	require.Len(t, toks, 3)
	return toks[1].At.Sub(toks[0].At)
}

// A decode step of 9 requests with --cuda-graph-max-bs 256 is timed as a batch of 12 over the
// real context; with a max of 8 it runs eagerly: 9 rows plus EagerOverhead. Without the knob
// it is today's step.
func TestCUDAGraphStepTime(t *testing.T) {
	t.Parallel()
	p := testProfile()
	p.EagerOverhead = 0.002
	ctx := 9 * (10 + 1) // each room: 10 prompt tokens + its first token
	assert.Equal(t, p.DecodeTime(9, ctx), firstDecodeStep(t, Config{Profile: p}, 9))
	assert.Equal(t, p.DecodeTime(12, ctx), firstDecodeStep(t, Config{Profile: p, CUDAGraphMaxBS: 256}, 9))
	assert.Equal(t, p.DecodeTime(9, ctx)+seconds(0.002), firstDecodeStep(t, Config{Profile: p, CUDAGraphMaxBS: 8}, 9))
}

package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --enable-mixed-chunk: while a long prompt is prefilled in chunks, a running request gets a
// token in every chunk's step (without it, it waits for the prompt's last chunk), and each
// chunk is one token shorter per running request.
func TestMixedChunkDecodesDuringPrefill(t *testing.T) {
	run := func(mixed bool) (decodeTokensDuringPrefill int) {
		s := newServer(t, Config{Role: RoleUnified, Profile: testProfile(), ChunkedPrefillSize: 1000, MixedChunk: mixed})
		c := &cluster{t: t, single: s, check: true}
		s.Submit(at(0), Req{Room: 1, Rank: -1, Prompt: prompt(0, 50), MaxNew: 400})
		c.runUntil(at(100 * time.Millisecond)) // room 1 is decoding
		s.Submit(c.now, Req{Room: 2, Rank: -1, Prompt: prompt(1_000_000, 5000), MaxNew: 2})
		c.runAll()
		first := c.of(2, KindToken)[0].At // room 2's prefill ends
		for _, o := range c.of(1, KindToken) {
			if o.At.After(at(100*time.Millisecond)) && !o.At.After(first) {
				decodeTokensDuringPrefill++
			}
		}
		fin := c.of(1, KindFinished)
		require.Len(t, fin, 1)
		assert.Equal(t, 400, fin[0].Usage.CompletionTokens)
		return decodeTokensDuringPrefill
	}
	plain, mixed := run(false), run(true)
	t.Logf("room 1's tokens during room 2's prefill: %d unmixed, %d mixed", plain, mixed)
	// Unmixed, room 1 decodes only in the step already under way when room 2 arrives and the
	// one the overlap scheduler formed before room 2 was received (Server.enqueue); mixed, also
	// once in each of the six steps that prefill 5,000 tokens in chunks of 1,000 − 1.
	assert.Equal(t, 2, plain)
	assert.Equal(t, plain+6, mixed)
}

// Mixed chunks keep every invariant under the chaos schedule.
func TestMixedChunkConservationUnderChaos(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			outs, _ := chaosWith(t, seed, false, true, 0, func(c *Config) { c.MixedChunk = true })
			finished := 0
			for _, o := range outs {
				if o.Kind == KindFinished {
					finished++
				}
			}
			assert.Positive(t, finished)
		})
	}
}

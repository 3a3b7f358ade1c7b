package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeGap runs batch decode rooms of 10-token prompts and returns the gap between room 0's
// second and third tokens (one decode step).
func decodeGap(t *testing.T, batch int, disableOverlap bool) time.Duration {
	t.Helper()
	s := newServer(t, Config{Role: RoleDecode, Profile: testProfile(), DisableOverlap: disableOverlap})
	for i := range batch {
		s.Submit(at(0), Req{Room: uint64(i), Rank: -1, Prompt: prompt(uint32(100*i), 10), MaxNew: 3})
	}
	for _, o := range s.Advance(at(0)) {
		require.Equal(t, KindPreallocated, o.Kind)
		s.KVArrived(at(0), o.Room, 0)
	}
	c := &cluster{t: t, decode: s, check: true}
	c.runAll()
	toks := c.of(0, KindToken)
	require.Len(t, toks, 3)
	return toks[2].At.Sub(toks[1].At)
}

// Without the overlap scheduler a decode step also waits for the scheduler's CPU work on every
// running request: 20 µs each, so 100 rooms add 2 ms and 10 rooms 0.2 ms to the step; with it
// (the default) the work hides behind the GPU step.
func TestNoOverlapChargesHostWorkPerRequest(t *testing.T) {
	for _, batch := range []int{10, 100} {
		with, without := decodeGap(t, batch, false), decodeGap(t, batch, true)
		// testProfile: B0 5 ms + B1 10 µs per request + B2 per context token (prompt 10 + 2 generated).
		want := time.Duration(float64(time.Second) * (0.005 + 1e-5*float64(batch) + 1e-8*float64(12*batch)))
		require.InDelta(t, float64(want), float64(with), 2, "batch %d with the overlap scheduler", batch)
		require.Equal(t, time.Duration(batch)*20*time.Microsecond, without-with, "batch %d without it", batch)
	}
}

package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Without the overlap scheduler a decode step also waits for the scheduler's CPU work on every
// running request: 20 µs each, so 100 rooms add 2 ms and 10 rooms 0.2 ms to the step; with it
// (the default) the work hides behind the GPU step.
func TestNoOverlapChargesHostWorkPerRequest(t *testing.T) {
	for _, batch := range []int{10, 100} {
		with := decodeStepGap(t, Config{Profile: testProfile()}, batch, 10, 3)
		without := decodeStepGap(t, Config{Profile: testProfile(), DisableOverlap: true}, batch, 10, 3)
		// testProfile: B0 5 ms + B1 10 µs per request + B2 per context token (prompt 10 + 2 generated).
		want := time.Duration(float64(time.Second) * (0.005 + 1e-5*float64(batch) + 1e-8*float64(12*batch)))
		require.InDelta(t, float64(want), float64(with), 2, "batch %d with the overlap scheduler", batch)
		require.Equal(t, time.Duration(batch)*20*time.Microsecond, without-with, "batch %d without it", batch)
	}
}

// The scheduler's CPU time per decode step (Profile.DecodeHost) hides behind the GPU's step
// under the overlap scheduler — the step takes the longer of the two — and adds to it without
// it: 2 ms of CPU beside a ~5.1 ms GPU step costs nothing with the overlap scheduler and 2 ms
// without; 8 ms of CPU is the step with it, 8 ms more without it.
func TestOverlapHidesTheSchedulersStepTime(t *testing.T) {
	const batch = 10
	gpu := time.Duration(float64(time.Second) * (0.005 + 1e-5*batch + 1e-8*12*batch)) // testProfile's step (prompt 10 + 2 generated)
	for _, host := range []time.Duration{2 * time.Millisecond, 8 * time.Millisecond} {
		p := testProfile()
		p.DecodeHost = host.Seconds()
		with := decodeStepGap(t, Config{Profile: p}, batch, 10, 3)
		without := decodeStepGap(t, Config{Profile: p, DisableOverlap: true}, batch, 10, 3)
		require.InDelta(t, float64(max(gpu, host)), float64(with), 2, "CPU %s with the overlap scheduler", host)
		require.InDelta(t, float64(gpu+host+batch*20*time.Microsecond), float64(without), 2, "CPU %s without it", host)
		require.Equal(t, max(gpu, host), p.DecodeTime(batch, 12*batch).Round(time.Nanosecond), "DecodeTime is the overlapped step")
	}
}

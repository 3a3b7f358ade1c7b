package reports

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLabels(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{ConcurrencyLabel(1), "c1"},
		{ConcurrencyLabel(128), "c128"},
		{RateLabel(2), "r2"},
		{RateLabel(0.5), "r0.5"},
		{RateLabel(12.25), "r12.25"},
		{RateLabel(100), "r100"},
		{RateLabel(1e-7), "r0.0000001"},
		{RateLabel(1.0 / 3), "r0.3333333333333333"},
		{ClosedLoop(4).Label, "c4"},
		{OpenLoop(0.5, ArrivalGamma).Label, "r0.5"},
		{Burst().Label, "burst"},
		{Trace().Label, "trace"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.got)
	}
}

func TestCheckLabel(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"c1", "c64", "r2", "r0.5", "r10.05", "burst", "trace", RateLabel(1e21)} {
		assert.NoError(t, checkLabel(ok), ok)
	}
	for _, bad := range []string{"", "c0", "c01", "c-1", "c1.5", "r", "r0", "r2.0", "r2.50", "r.5", "r1e-07", "r-1", "Burst", "c4 ", "warmup"} {
		assert.Error(t, checkLabel(bad), bad)
	}
}

func TestLevelInfoShapes(t *testing.T) {
	t.Parallel()
	for _, li := range []LevelInfo{ClosedLoop(8), OpenLoop(4, ArrivalPoisson), OpenLoop(0.25, ArrivalConstant), Burst(), Trace()} {
		assert.NoError(t, checkShape(li.Label, li.Concurrency, li.Rate, li.Arrival), li.Label)
	}
	assert.Error(t, checkShape("r4", nil, new(4.0), str(ArrivalTrace)))
	assert.Error(t, checkShape("trace", new(1), nil, str(ArrivalTrace)))
	assert.Error(t, checkShape("c1", new(1), new(1.0), nil))
}

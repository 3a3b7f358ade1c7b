package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPresets(t *testing.T) {
	t.Parallel()
	names := PresetNames()
	for _, want := range []string{"llama3-8b-h100", "llama3-70b-h100-tp8", "qwen3-30b-a3b-h20", "instant", "constant"} {
		assert.Contains(t, names, want)
	}
	lines := strings.Split(strings.TrimSuffix(FormatPresets(), "\n"), "\n")
	require.Len(t, lines, len(names))
	for i, l := range lines {
		assert.True(t, strings.HasPrefix(l, names[i]+" "), "line %q starts with its name", l)
	}
	_, err := LookupProfile("gpt-5")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"gpt-5"`)
	assert.Contains(t, err.Error(), "llama3-8b-h100")

	c, err := LookupProfile("constant")
	require.NoError(t, err)
	assert.Equal(t, DefaultTTFT, c.TTFT)
	assert.True(t, c.Constant)
}

// TestRooflineNumbers checks the presets against well-known orders of magnitude.
func TestRooflineNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		kvBytes            float64
		minITL, maxITL     time.Duration // batch 1, short context
		minCap, maxCap     int
		min8kTTFT, max8kTT time.Duration
	}{
		{"llama3-8b-h100", 131072, 5 * time.Millisecond, 9 * time.Millisecond, 350_000, 500_000, 150 * time.Millisecond, 600 * time.Millisecond},
		{"llama3-70b-h100-tp8", 327680, 6 * time.Millisecond, 15 * time.Millisecond, 1_000_000, 1_600_000, 150 * time.Millisecond, 800 * time.Millisecond},
		{"qwen3-30b-a3b-h20", 98304, 15 * time.Millisecond, 30 * time.Millisecond, 150_000, 350_000, 200 * time.Millisecond, 1200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := preset(t, tc.name)
			assert.InDelta(t, tc.kvBytes, p.KVBytesPerToken, 0.5)
			itl := p.DecodeTime(1, 1000)
			assert.True(t, itl >= tc.minITL && itl <= tc.maxITL, "ITL %s", itl)
			assert.True(t, p.MaxTotalTokens >= tc.minCap && p.MaxTotalTokens <= tc.maxCap, "capacity %d", p.MaxTotalTokens)
			ttft := p.PrefillTime(8192, 8192*4096)
			assert.True(t, ttft >= tc.min8kTTFT && ttft <= tc.max8kTT, "8k prefill %s", ttft)
			assert.Contains(t, p.Source, "datasheet")
		})
	}
	_, err := Roofline("x", Llama3Dense70B, H100SXM, 1)
	require.Error(t, err, "70B BF16 does not fit on one H100")
	assert.Contains(t, err.Error(), "do not fit")
	_, err = Roofline("x", Llama3Dense8B, H100SXM, 0)
	assert.ErrorContains(t, err, "tensor-parallel size 0")
}

func TestProfileTimes(t *testing.T) {
	t.Parallel()
	p := testProfile()
	assert.Equal(t, 5*time.Millisecond+10*time.Microsecond+10*time.Microsecond, p.DecodeTime(1, 1000))
	assert.Equal(t, time.Millisecond, p.TransferTime(1000, 0), "no bandwidth: setup only")
	assert.Zero(t, Profile{}.PrefillTime(0, 0))
}

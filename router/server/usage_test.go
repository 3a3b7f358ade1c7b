package server

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCachedRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		obj  string
		want float64
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":25}}}`, 0.25, true},
		{`{"text":"x","meta_info":{"prompt_tokens":8,"cached_tokens":6}}`, 0.75, true},
		{`{"usage":{"prompt_tokens":100}}`, 0, false},
		{`{"meta_info":{"prompt_tokens":0,"cached_tokens":0}}`, 0, false},
		{`not json "cached_tokens"`, 0, false},
	} {
		got, ok := cachedRatio([]byte(tc.obj))
		assert.Equal(t, tc.ok, ok, tc.obj)
		assert.InDelta(t, tc.want, got, 1e-12, tc.obj)
	}
}

//go:build integration

package engine

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/workloads"
)

// sharedTrace finds shared/traces/name in the nearest ancestor of the working directory that
// has it (shared/ sits beside the repository root).
func sharedTrace(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		p := filepath.Join(dir, "shared", "traces", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "shared/traces/%s not found above the working directory", name)
		dir = parent
	}
}

// TestIntegrationMooncakeLRU replays the Mooncake conversation trace, one request at a time,
// into one rank's cache of each size (page size 1, hit counted in tokens at admission, before
// the prompt is inserted) and compares the hit ratio with the LRU curve of
// shared/traces/README.md.
func TestIntegrationMooncakeLRU(t *testing.T) {
	path := sharedTrace(t, "conversation_trace.jsonl")
	rd, err := workloads.OpenMooncake(path, 1)
	require.NoError(t, err)
	defer rd.Close()

	curve := []struct {
		capacity int
		want     float64 // README, percent
	}{
		{1_000_000, 5.3},
		{3_000_000, 13.6},
		{10_000_000, 28.5},
		{50_000_000, 36.4},
	}
	servers := make([]*Server, len(curve))
	for i, c := range curve {
		servers[i] = newServer(t, Config{Role: RoleUnified, Profile: Instant(), PageSize: 1, MaxTotalTokens: c.capacity})
	}
	cached := make([]int64, len(curve))
	var input int64
	now := epoch
	var ids []uint32
	n := 0
	for {
		q, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		ids = q.AppendPromptIDs(ids[:0])
		require.Len(t, ids, q.InputLength)
		input += int64(len(ids))
		n++
		for i, s := range servers {
			s.Submit(now, Req{Room: uint64(n), Rank: -1, Prompt: ids, MaxNew: 1})
			outs := s.Advance(now)
			require.Len(t, outs, 2, "instant: one token and the finish")
			require.Equal(t, KindFinished, outs[1].Kind)
			cached[i] += int64(outs[1].Usage.CachedTokens)
		}
		now = now.Add(time.Millisecond)
	}
	require.Equal(t, 12031, n, "conversation trace rows")
	for i, c := range curve {
		got := 100 * float64(cached[i]) / float64(input)
		t.Logf("capacity %d tokens: hit %.1f %% (README %.1f %%)", c.capacity, got, c.want)
		assert.InDelta(t, c.want, got, 2, "capacity %d", c.capacity)
		l := servers[i].Loads(time.Time{})[0]
		assert.LessOrEqual(t, l.KVTokens, c.capacity)
	}
}

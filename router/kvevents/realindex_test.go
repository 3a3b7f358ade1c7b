package kvevents

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/router/kvindex"
)

// TestRealIndex feeds a real kvindex.Index through New (the fake index stands in for it in the
// other tests). While kvindex's methods are still the skeleton's stubs it skips; once they land
// it runs.
func TestRealIndex(t *testing.T) {
	ix := kvindex.New(kvindex.Config{})
	if stub := func() (stub bool) {
		defer func() {
			if r := recover(); r != nil {
				stub = strings.Contains(fmtAny(r), "not implemented")
				if !stub {
					panic(r)
				}
			}
		}()
		ix.Target("probe")
		return false
	}(); stub {
		t.Skip("kvindex.Index is still a stub on this branch")
	}
	s := New(ix, fastOpts(nil))
	defer s.Close()
	p := newTestPub(t, "", "kv", false)
	require.NoError(t, s.Add(Endpoint{Target: target, Pub: p.addr, Topic: "kv"}))
	p.waitSubscribed()
	p.publish(0, false, stored(11, 12, 13))
	p.publish(1, false, removed(13))
	require.Eventually(t, func() bool { return lastSeq(s, target) == 1 }, waitWithin, pollEvery, "seq 1")
	id := ix.Target(target)
	got := ix.MatchOrStale(nil, []kvindex.Hash{11, 12, 13}, []kvindex.TargetID{id}, time.Now())
	assert.Equal(t, []int{2}, got)
	assert.False(t, ix.Stats(id).Stale)

	p.publish(3, false, stored(14)) // gap, no replay
	require.Eventually(t, func() bool { return lastSeq(s, target) == 3 }, waitWithin, pollEvery, "seq 3")
	assert.True(t, ix.Stats(id).Stale)
	s.Remove(target)
}

func fmtAny(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

package router

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
)

// Under cache_aware, a worker back in rotation takes the requests that match the other
// worker's cache while it carries less than the mean load (reason warm_up); once its cache
// holds the shared prefix too, the hits go to the less loaded of the two, so both end with
// their share. With --cache-warmup-secs 0 (sgl-router's rule) it takes none of them, every
// prompt sharing a prefix cached on the other and the loads within the balance thresholds. At
// start, when both joined together, nothing changes: the hits stay on the cache.
func TestCacheAwareWarmUpGivesAReturningWorkerItsShare(t *testing.T) {
	t.Parallel()
	const a, b = "http://a:1", "http://b:1"
	prefix := strings.Repeat("You are a helpful assistant. ", 20)
	for _, warm := range []int{30, 0} {
		t.Run(fmt.Sprintf("cache_warmup_secs=%d", warm), func(t *testing.T) {
			clk := testutil.NewManualClock(epoch)
			cfg := DefaultConfig()
			cfg.CacheWarmupSecs = warm
			r, err := New(cfg, clk, rand.New(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			require.NoError(t, r.AddWorker(WorkerSpec{URL: a, Role: Regular}))
			require.NoError(t, r.AddWorker(WorkerSpec{URL: b, Role: Regular}))
			n := 0
			route := func(count int) (map[string]int, map[Reason]int) {
				t.Helper()
				to, why := map[string]int{}, map[Reason]int{}
				for range count { // kept in flight: the loads grow
					d, err := r.Route(&Request{Text: fmt.Sprintf("%s question %d", prefix, n)})
					require.NoError(t, err)
					n++
					to[d.Regular.URL()]++
					why[d.Reason]++
				}
				return to, why
			}
			to, _ := route(10)
			assert.Equal(t, map[string]int{a: 10}, to, "at start the hits stay on the cache")

			clk.Advance(time.Minute)
			_, err = r.ObserveFailureProbe(b, false, clk.Now(), "connection refused")
			require.NoError(t, err)
			to, _ = route(10)
			require.Equal(t, map[string]int{a: 10}, to, "b out of rotation")
			clk.Advance(time.Second)
			for range cfg.HealthSuccessThreshold {
				_, err = r.ObserveHealth(b, nil, clk.Now())
				require.NoError(t, err)
			}
			require.Equal(t, WorkerHealthy, r.Workers()[1].State)

			to, why := route(30) // a carries 20
			if warm == 0 {
				assert.Equal(t, map[string]int{a: 30}, to, "sgl-router's rule: b serves nothing")
				return
			}
			// The first hits it takes put its cache on the shared prefix; from then on the
			// hits go to the less loaded of the two caches, and both end with their share.
			assert.Positive(t, why[ReasonWarmUp], "b took hits as it warmed up")
			assert.InDelta(t, 20+to[a], to[b], 1, "both carry the same load: %v", to)

			clk.Advance(time.Duration(warm) * time.Second)
			_, why = route(10)
			assert.Zero(t, why[ReasonWarmUp], "the warm-up is over")
		})
	}
}

// The tree is trimmed by size as it grows, not only at the eviction interval: with
// --max-tree-total-chars 2000 and no Tick, it never holds more.
func TestTreeTrimmedBySizeBetweenEvictions(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.MaxTreeTotalChars = 2000
	r := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://a:1", Role: Regular}))
	require.NoError(t, r.AddWorker(WorkerSpec{URL: "http://b:1", Role: Regular}))
	peak, prev, drops := 0, 0, 0
	var size TreeSize
	for i := range 500 {
		d, err := r.Route(&Request{Text: fmt.Sprintf("prompt %d %s", i, strings.Repeat("x", 40))})
		require.NoError(t, err)
		d.Done(Regular, Success)
		size, _ = r.TreeStats(Regular)
		peak = max(peak, size.Chars)
		if size.Chars < prev {
			drops++
		}
		prev = size.Chars
	}
	assert.LessOrEqual(t, peak, 2000)
	assert.Greater(t, peak, 1500, "trimmed to 90 %, not emptied")
	assert.Positive(t, drops)
	assert.Equal(t, drops, size.Trims, "one trim counted per cut")
}

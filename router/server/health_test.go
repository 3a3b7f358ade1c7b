package server

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHealthCheckerFlipsAtThresholds(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/health", r.URL.Path)
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer sick.Close()
	fine := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer fine.Close()

	cfg := router.DefaultConfig()
	cfg.HealthFailureThreshold, cfg.HealthSuccessThreshold = 2, 2
	clock := testutil.NewManualClock(time.Unix(0, 0))
	r, err := router.New(cfg, clock, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(router.WorkerSpec{URL: sick.URL, Role: router.Regular}))
	require.NoError(t, r.AddWorker(router.WorkerSpec{URL: fine.URL, Role: router.Regular}))

	var mu sync.Mutex
	var flips []bool
	h := &healthChecker{Router: r, Client: http.DefaultClient, Endpoint: "/health", Timeout: 5 * time.Second,
		Interval: time.Hour, Now: clock.Now, OnFlip: func(url string, ok bool) {
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, sick.URL, url)
			flips = append(flips, ok)
		}}
	healthy := func() bool { return r.Workers()[0].Healthy }

	failing.Store(true)
	h.checkAll(context.Background())
	require.True(t, healthy(), "one failure is below the threshold")
	h.checkAll(context.Background())
	require.False(t, healthy())
	require.True(t, r.Workers()[1].Healthy)

	failing.Store(false)
	h.checkAll(context.Background())
	require.False(t, healthy())
	h.checkAll(context.Background())
	require.True(t, healthy())
	require.Equal(t, []bool{false, true}, flips)

	// An unreachable worker fails its probes too.
	sick.Close()
	h.checkAll(context.Background())
	h.checkAll(context.Background())
	require.False(t, healthy())
}

// A configured worker that does not pass its first health probe at start is "starting" in
// every view and takes no traffic; it takes traffic within a second or two of passing, not a
// whole --health-check-interval-secs later.
func TestWorkerStartingUntilItsFirstProbePasses(t *testing.T) {
	var up atomic.Bool
	w := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !up.Load() {
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, `{"text":"ok","meta_info":{}}`)
	}))
	defer w.Close()
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL}
	tr := startRouter(t, cfg)
	infos := tr.s.Router().Workers()
	require.Len(t, infos, 1)
	assert.Equal(t, router.WorkerStarting, infos[0].State)
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, body)
	resp, err := http.Get(tr.srv.URL + "/readiness")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	up.Store(true)
	require.Eventually(t, func() bool { return tr.s.Router().Workers()[0].State == router.WorkerHealthy },
		10*time.Second, 20*time.Millisecond, "probed every second while starting")
	status, _, body = tr.post(t, "/generate", `{"text":"x"}`, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

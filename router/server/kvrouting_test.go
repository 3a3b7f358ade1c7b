package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readinessBody is /readiness's answer.
type readinessBody struct {
	Status   string       `json:"status"`
	KVEvents *kvReadiness `json:"kv_events"`
}

func getReadiness(t *testing.T, tr *testRouter) (int, readinessBody) {
	t.Helper()
	resp, err := http.Get(tr.srv.URL + "/readiness")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b readinessBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	return resp.StatusCode, b
}

// A replica whose KV-event index has not heard from a publishing worker is not ready until it
// does or --kv-events-warmup-secs pass, and says why in /readiness; workers that publish
// nothing hold nothing up.
func TestReadinessWaitsForTheKVEventIndex(t *testing.T) {
	w := newWorker(t, jsonReply(`{"text":"x"}`))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	// The workers' own config: rank 0 publishes on a port where nothing answers yet.
	cfg.KVEventsConfig = fmt.Sprintf(`{"publisher":"zmq","endpoint":"tcp://*:%d","topic":"kv"}`, freePort(t))
	tr := startRouter(t, cfg)

	deadline := time.Now().Add(5 * time.Second) // the subscription is set up in the background
	var code int
	var b readinessBody
	for {
		code, b = getReadiness(t, tr)
		if b.KVEvents != nil && b.KVEvents.Subscriptions == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.NotNil(t, b.KVEvents)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "warming up", b.Status)
	assert.Equal(t, kvReadiness{Subscriptions: 1, Stale: 1, WarmingUp: true, WarmupLeftSecs: b.KVEvents.WarmupLeftSecs}, *b.KVEvents)
	assert.Positive(t, b.KVEvents.WarmupLeftSecs)

	// Once the window is over the replica routes on what it has (the tree, for this worker).
	late := tr.s.kv.readiness(time.Now().Add(time.Duration(cfg.KVEventsWarmupSecs+1) * time.Second))
	assert.False(t, late.WarmingUp)

	// Without --kv-events-config and no kv_events block, a worker publishes nothing: ready.
	plain := DefaultConfig()
	plain.WorkerURLs = []string{newWorker(t, jsonReply(`{"text":"x"}`)).URL()}
	tr2 := startRouter(t, plain)
	deadline = time.Now().Add(5 * time.Second)
	for {
		code, b = getReadiness(t, tr2)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, http.StatusOK, code)
	require.NotNil(t, b.KVEvents)
	assert.Equal(t, kvReadiness{}, *b.KVEvents)
}

package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/pdrouter/pdrouter/router/wire"
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
	cfg.KVEventsConfig = fmt.Sprintf(`{"publisher":"zmq","endpoint":"tcp://*:%d","topic":"kv"}`, testutil.FreePort(t, "127.0.0.1"))
	tr := startRouter(t, cfg)

	waitKVReadiness(t, tr, func(_ int, kv *kvReadiness) bool { return kv != nil && kv.Subscriptions == 1 })
	code, b := getReadiness(t, tr)
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
	waitKVReadiness(t, tr2, func(code int, _ *kvReadiness) bool { return code == http.StatusOK })
	code, b = getReadiness(t, tr2)
	assert.Equal(t, http.StatusOK, code)
	require.NotNil(t, b.KVEvents)
	assert.Equal(t, kvReadiness{}, *b.KVEvents)
}

// Requests are not tokenized (nor their token ids decoded) while no worker's events are
// followed: no target can be fresh, so the index could not use them.
func TestNoPromptIDsWhileNoWorkerIsFollowed(t *testing.T) {
	body, err := wire.Parse(wire.Generate, []byte(`{"input_ids":[7,8,9],"sampling_params":{"max_new_tokens":1}}`))
	require.NoError(t, err)

	plain := DefaultConfig()
	plain.WorkerURLs = []string{newWorker(t, jsonReply(`{"text":"x"}`)).URL()}
	tr := startRouter(t, plain)
	waitKVReadiness(t, tr, func(code int, _ *kvReadiness) bool { return code == http.StatusOK })
	require.NotNil(t, tr.s.kv)
	assert.Nil(t, tr.s.kv.tokens(body), "the worker publishes nothing")

	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{newWorker(t, jsonReply(`{"text":"x"}`)).URL()}
	cfg.KVEventsConfig = fmt.Sprintf(`{"publisher":"zmq","endpoint":"tcp://*:%d","topic":"kv"}`, testutil.FreePort(t, "127.0.0.1"))
	tr = startRouter(t, cfg)
	waitKVReadiness(t, tr, func(_ int, kv *kvReadiness) bool { return kv != nil && kv.Subscriptions == 1 })
	assert.Equal(t, []uint32{7, 8, 9}, tr.s.kv.tokens(body), "a followed worker: the index matches the ids")

	tr.s.kv.workerGone(cfg.WorkerURLs[0])
	assert.Nil(t, tr.s.kv.tokens(body), "the followed worker removed")
}

// waitKVReadiness polls /readiness until done holds (the subscriptions are set up in the
// background and nothing signals their end), for at most 5 s.
func waitKVReadiness(t *testing.T, tr *testRouter, done func(code int, kv *kvReadiness) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, b := getReadiness(t, tr)
		if done(code, b.KVEvents) {
			return
		}
		require.False(t, time.Now().After(deadline), "readiness never got there: %d %+v", code, b.KVEvents)
		time.Sleep(10 * time.Millisecond)
	}
}

package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedCalls maps each routing key to the workers whose /v1/chat/completions calls carried it
// (the tests send it in the body's "key" too: the router forwards no routing-key header).
func keyedCalls(ws []*testWorker) map[string]map[string]bool {
	return keyedCallsTo(ws, "/v1/chat/completions")
}

// keyedCallsTo is keyedCalls for the calls to path.
func keyedCallsTo(ws []*testWorker, path string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, w := range ws {
		for _, c := range w.callsTo(path) {
			k, _ := c.body["key"].(string)
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][w.URL()] = true
		}
	}
	return out
}

// keyWorkers starts n workers answering every chat request alike.
func keyWorkers(t *testing.T, n int) []*testWorker {
	var ws []*testWorker
	for range n {
		ws = append(ws, newWorker(t, jsonReply(`{"id":"x","choices":[]}`)))
	}
	return ws
}

// postKeyed sends turn of a chat with routing key key (in X-SMG-Routing-Key, and in the body's
// "key" and "round" for keyedCalls).
func postKeyed(t *testing.T, tr *testRouter, key string, turn int) {
	t.Helper()
	status, _, body := tr.post(t, "/v1/chat/completions",
		fmt.Sprintf(`{"messages":[{"role":"user","content":"turn %d"}],"key":%q,"round":%d}`, turn, key, turn),
		map[string]string{"X-SMG-Routing-Key": key})
	require.Equal(t, http.StatusOK, status, body)
}

// oneWorkerPerKey requires that each key went to one worker, and returns the workers used.
func oneWorkerPerKey(t *testing.T, byKey map[string]map[string]bool) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for k, workers := range byKey {
		require.Len(t, workers, 1, "key %s went to %v", k, workers)
		for u := range workers {
			used[u] = true
		}
	}
	return used
}

// consistent_hashing: every request of a routing key (smg's X-SMG-Routing-Key) goes to one
// worker through both of two router replicas, and the keys spread over the workers.
func TestRoutingKeyStickyAcrossReplicas(t *testing.T) {
	t.Parallel()
	ws := keyWorkers(t, 4)
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyConsistentHashing
	replicas := []*testRouter{startRouter(t, cfg), startRouter(t, cfg)}
	for k := range 24 {
		for turn := range 4 {
			postKeyed(t, replicas[turn%2], fmt.Sprint("conv-", k), turn)
		}
	}
	byKey := keyedCalls(ws)
	require.Len(t, byKey, 24)
	// The key goes on to the worker, as smg forwards it (SGLang reads it as the request's
	// routing_key).
	for _, w := range ws {
		for _, c := range w.callsTo("/v1/chat/completions") {
			require.Equal(t, c.body["key"], c.header.Get("X-SMG-Routing-Key"))
		}
	}
	assert.GreaterOrEqual(t, len(oneWorkerPerKey(t, byKey)), 3, "24 keys over 4 workers")
	for _, r := range replicas {
		r.requireLoadsZero(t)
	}
}

// PD: prefill and decode are keyed independently (each role's ring), and the key is read from
// the headers --routing-key-headers names.
func TestRoutingKeyPDAndHeaderList(t *testing.T) {
	t.Parallel()
	var prefill, decode []*testWorker
	for range 2 {
		prefill = append(prefill, newWorker(t, jsonReply(`{"ok":true}`)))
		decode = append(decode, newWorker(t, jsonReply(`{"id":"x","choices":[]}`)))
	}
	cfg := pdConfig(prefill, decode, nil)
	cfg.Policy = router.PolicyConsistentHashing
	// No load bound: a prefill leg reports its end after the client has its answer, so a
	// request may still count on its worker when the next is routed, and two left there would
	// spill the key (the bound's own test is the policy's).
	cfg.HashLoadFactor = 0
	cfg.RoutingKeyHeaders = []string{"x-session-id", "x-smg-routing-key"}
	tr := startRouter(t, cfg)
	for k := range 12 {
		for range 3 {
			status, _, _ := tr.post(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"key":"s-%d"}`, k),
				map[string]string{"X-Session-Id": fmt.Sprint("s-", k), "X-SMG-Routing-Key": "ignored: X-Session-Id comes first"})
			require.Equal(t, http.StatusOK, status)
		}
	}
	for _, role := range [][]*testWorker{prefill, decode} {
		byKey := keyedCalls(role)
		require.Len(t, byKey, 12)
		// One key for all (the X-SMG-Routing-Key value) would have put them on one worker.
		assert.Len(t, oneWorkerPerKey(t, byKey), 2, "12 keys over 2 workers")
	}
	tr.requireLoadsZero(t)
}

// manual (smg's): a key sticks to the worker it was assigned; --assignment-mode min_group
// spreads new keys evenly.
func TestRoutingKeyManual(t *testing.T) {
	t.Parallel()
	ws := keyWorkers(t, 3)
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyManual
	cfg.AssignmentMode = router.AssignMinGroup
	tr := startRouter(t, cfg)
	for turn := range 3 {
		for k := range 9 {
			postKeyed(t, tr, fmt.Sprint("k", k), turn)
		}
	}
	byKey := keyedCalls(ws)
	require.Len(t, byKey, 9)
	oneWorkerPerKey(t, byKey)
	for _, w := range ws {
		assert.Len(t, w.callsTo("/v1/chat/completions"), 9, "min_group: three keys a worker")
	}
	tr.requireLoadsZero(t)
}

// Removing one of four workers (DELETE /workers on both replicas) moves only the keys it held,
// to the workers after it on the ring; no key goes to it any more.
func TestRoutingKeyWorkerRemovalMovesOnlyItsKeys(t *testing.T) {
	t.Parallel()
	ws := keyWorkers(t, 4)
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyConsistentHashing
	replicas := []*testRouter{startRouter(t, cfg), startRouter(t, cfg)}
	const keys = 60
	send := func(round int) map[string]string {
		for k := range keys {
			postKeyed(t, replicas[(k+round)%2], fmt.Sprint("k", k), round)
		}
		at := map[string]string{}
		for _, w := range ws {
			for _, c := range w.callsTo("/v1/chat/completions") {
				if c.body["round"] == float64(round) {
					at[c.body["key"].(string)] = w.URL()
				}
			}
		}
		require.Len(t, at, keys)
		return at
	}
	before := send(0)
	gone := ws[1].URL()
	for _, r := range replicas {
		status, out := delJSON(t, r.srv.URL, "/workers/"+url.QueryEscape(gone))
		require.Equal(t, http.StatusAccepted, status, out)
	}
	after := send(1)
	moved := 0
	for k, w := range after {
		require.NotEqual(t, gone, w, "key %s went to the removed worker", k)
		if before[k] == gone {
			moved++
		} else {
			require.Equal(t, before[k], w, "key %s moved though its worker stayed", k)
		}
	}
	t.Logf("%d of %d keys moved (the removed worker's)", moved, keys)
}

// --routing-key-fields: without a routing-key header, the first of the listed body fields the
// request has (a string, or a number as written) is the key; the header wins when sent.
func TestRoutingKeyFromBodyFields(t *testing.T) {
	t.Parallel()
	ws := keyWorkers(t, 4)
	cfg := regularConfig(ws...)
	cfg.Policy = router.PolicyConsistentHashing
	cfg.RoutingKeyFields = []string{"user", "session_id", "metadata.conversation.id"}
	tr := startRouter(t, cfg)
	post := func(body string, hdr map[string]string) {
		status, _, out := tr.post(t, "/v1/chat/completions", body, hdr)
		require.Equal(t, http.StatusOK, status, out)
	}
	for k := range 16 {
		for range 3 {
			post(fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"user":"u%d","key":"u%d"}`, k, k), nil)
			post(fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"session_id":%d,"key":"s%d"}`, k, k), nil)
			post(fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"metadata":{"conversation":{"id":"c%d"}},"key":"c%d"}`, k, k), nil)
		}
	}
	byKey := keyedCalls(ws)
	require.Len(t, byKey, 48)
	assert.GreaterOrEqual(t, len(oneWorkerPerKey(t, byKey)), 3, "48 keys over 4 workers")

	// The header's key wins over the body's: the same user with two header keys that hash to
	// different workers goes to two workers.
	seen := map[string]bool{}
	for k := range 16 {
		post(fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"user":"same","key":"hdr%d"}`, k), map[string]string{"X-SMG-Routing-Key": fmt.Sprint("h", k)})
	}
	for _, w := range ws {
		for _, c := range w.callsTo("/v1/chat/completions") {
			if strings.HasPrefix(c.body["key"].(string), "hdr") {
				seen[w.URL()] = true
			}
		}
	}
	assert.Greater(t, len(seen), 1)
}

// fieldPath: top-level members, dotted paths into nested objects, a top-level name with dots
// first, and nothing through a non-object or a missing member.
func TestFieldPath(t *testing.T) {
	b, err := wire.Parse(wire.Chat, []byte(`{"messages":[{"role":"user","content":"hi"}],"user":"u1","a.b":"flat","a":{"b":{"c":7},"s":"x"},"n":3}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"user", `"u1"`, true},
		{"a.b", `"flat"`, true},
		{"a.b.c", `7`, true},
		{"a.s", `"x"`, true},
		{"a.missing", ``, false},
		{"n.x", ``, false},
		{"a.s.x", ``, false},
		{"nope", ``, false},
	} {
		v, ok := fieldPath(b, tc.path)
		assert.Equal(t, tc.ok, ok, tc.path)
		assert.Equal(t, tc.want, string(v), tc.path)
	}
}

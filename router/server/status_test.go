package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireJSONError checks an OpenAI-style error body with the given status as its code.
func requireJSONError(t *testing.T, status int, body string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	assert.NotEmpty(t, e.Error.Message)
	assert.NotEmpty(t, e.Error.Type)
	assert.Equal(t, status, e.Error.Code)
}

// Every status the router answers by itself carries a valid OpenAI-style JSON error.
func TestErrorStatusesHaveJSONBodies(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	slow := newWorker(t, hangReply(release))
	cfg := regularConfig(slow)
	cfg.APIKey = "k"
	cfg.MaxPayloadSize = 1 << 10
	cfg.MaxConcurrentRequests = 1
	cfg.QueueSize = 1
	cfg.QueueTimeoutSecs = 1
	tr := startRouter(t, cfg)
	auth := map[string]string{"Authorization": "Bearer k"}

	check := func(want int, path, body string, hdr map[string]string) {
		t.Helper()
		status, _, out := tr.post(t, path, body, hdr)
		require.Equal(t, want, status, out)
		requireJSONError(t, want, out)
	}
	check(http.StatusBadRequest, "/generate", `not json`, auth)
	check(http.StatusUnauthorized, "/generate", `{"text":"x"}`, nil)
	check(http.StatusNotFound, "/v2/nothing", `{}`, auth)
	check(http.StatusRequestEntityTooLarge, "/generate", `{"text":"`+strings.Repeat("x", 2<<10)+`"}`, auth)

	// One request holds the only slot; the next waits in the queue until it times out (408);
	// with the queue occupied, a third is refused at once (429).
	go func() { _, _, _ = tr.post(t, "/generate", `{"text":"hold"}`, auth) }()
	waitFor(t, func() bool { return len(slow.callsTo("/generate")) == 1 })
	queued := make(chan struct{})
	var got408 atomic.Int32
	go func() {
		defer close(queued)
		status, _, out := tr.post(t, "/generate", `{"text":"wait"}`, auth)
		if status == http.StatusRequestTimeout {
			requireJSONError(t, status, out)
			got408.Store(1)
		}
	}()
	waitFor(t, func() bool { _, w := tr.s.adm.inUse(); return w == 1 })
	check(http.StatusTooManyRequests, "/generate", `{"text":"x"}`, auth)
	<-queued
	require.Equal(t, int32(1), got408.Load(), "the queued request timed out with 408")

	// 501 and 503 in PD mode, 502 for a dead worker: see the PD tests; here the bodies.
	pd := DefaultConfig()
	pd.PDDisaggregation = true
	trPD := startRouter(t, pd)
	status, _, out := trPD.post(t, "/v1/embeddings", `{}`, nil)
	require.Equal(t, http.StatusNotImplemented, status)
	requireJSONError(t, status, out)
	status, _, out = trPD.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	requireJSONError(t, status, out)

	dead := newWorker(t, jsonReply(`{}`))
	trDead := startRouter(t, noRetries(regularConfig(dead)))
	dead.srv.Close()
	status, _, out = trDead.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusBadGateway, status)
	requireJSONError(t, status, out)
}

// A retry moves to another target; a worker that keeps failing has its breaker opened, is
// skipped, half-opens after the timeout and closes again once it succeeds.
func TestRetriesMoveAndBreakerCycles(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	bad := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		if failing.Load() {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		jsonReply(`{"ok":"bad"}`)(w, r, c)
	})
	good := newWorker(t, jsonReply(`{"ok":"good"}`))
	cfg := regularConfig(bad, good)
	cfg.Policy = router.PolicyRoundRobin
	cfg.RetryInitialBackoffMs = 1
	cfg.CBFailureThreshold = 2
	cfg.CBSuccessThreshold = 1
	cfg.CBTimeoutDurationSecs = 1
	tr := startRouter(t, cfg)

	for range 4 {
		status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, `{"ok":"good"}`, body, "a failed attempt on bad is retried on good")
	}
	require.Len(t, bad.callsTo("/generate"), 2, "bad's breaker opened after 2 failures: skipped since")
	require.Equal(t, router.BreakerOpen, tr.s.Router().Workers()[0].Breaker)

	// After the breaker timeout it half-opens, gets traffic again and closes on success.
	failing.Store(false)
	waitFor(t, func() bool { return tr.s.Router().Workers()[0].Breaker == router.BreakerHalfOpen })
	seen := map[string]bool{}
	for range 4 {
		_, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
		seen[body] = true
	}
	require.True(t, seen[`{"ok":"bad"}`], "bad serves again")
	require.Equal(t, router.BreakerClosed, tr.s.Router().Workers()[0].Breaker)
	tr.requireLoadsZero(t)
}

// Unhealthy workers are skipped and come back when their probes pass again.
func TestUnhealthyWorkersSkippedAndBack(t *testing.T) {
	t.Parallel()
	a := newWorker(t, jsonReply(`{"w":"a"}`))
	b := newWorker(t, jsonReply(`{"w":"b"}`))
	cfg := regularConfig(a, b)
	cfg.Policy = router.PolicyRoundRobin
	cfg.HealthFailureThreshold, cfg.HealthSuccessThreshold = 1, 1
	tr := startRouter(t, cfg)
	r := tr.s.Router()
	_, err := r.ObserveHealth(a.URL(), errors.New("status 503"), time.Now())
	require.NoError(t, err)
	for range 3 {
		_, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
		require.JSONEq(t, `{"w":"b"}`, body)
	}
	_, err = r.ObserveHealth(a.URL(), nil, time.Now())
	require.NoError(t, err)
	seen := map[string]bool{}
	for range 2 {
		_, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
		seen[body] = true
	}
	require.Len(t, seen, 2)
}

package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request that runs out of --request-timeout-secs before any byte reached the client gets a
// 504 with a JSON error (never an empty 200), in PD and in regular mode.
func TestRequestTimeoutBeforeResponseIs504(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"pd", "regular"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			var hung []*testWorker
			if mode == "pd" {
				pw, dw := newWorker(t, hangReply(nil)), newWorker(t, hangReply(nil))
				cfg, hung = pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil), []*testWorker{pw, dw}
			} else {
				w := newWorker(t, hangReply(nil))
				cfg, hung = regularConfig(w), []*testWorker{w}
			}
			cfg.RequestTimeoutSecs = 1
			tr := startRouter(t, cfg)
			start := time.Now()
			status, hdr, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
			t.Logf("%s: answered in %s", mode, time.Since(start))
			require.Equal(t, http.StatusGatewayTimeout, status, body)
			requireJSONError(t, status, body)
			assert.Contains(t, body, "--request-timeout-secs 1")
			assert.NotEmpty(t, hdr.Get("X-Request-Id"))
			for _, w := range hung {
				waitFor(t, func() bool { return w.cancelledCount() == 1 })
			}
			tr.requireLoadsZero(t)
		})
	}
}

// A timeout after the stream started ends it with an error event and [DONE], not silently.
func TestRequestTimeoutMidStream(t *testing.T) {
	t.Parallel()
	pw := newWorker(t, jsonReply(genReply))
	dw := newWorker(t, sseReply([]string{`data: {"text":"a"}`, `data: {"text":"ab"}`}, map[int]<-chan struct{}{1: make(chan struct{})}))
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.RequestTimeoutSecs = 1
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	events := dataEvents(body)
	require.Len(t, events, 3, body)
	assert.JSONEq(t, `{"text":"a"}`, events[0])
	requireJSONError(t, http.StatusGatewayTimeout, events[1])
	assert.Equal(t, "[DONE]", events[2])
	tr.requireLoadsZero(t)
}

// A regular reply cut after its head went out reaches the client as a broken response, not as
// a short 200.
func TestRegularTruncatedReplyIsNotA200(t *testing.T) {
	t.Parallel()
	w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, _ call) {
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Content-Length", "100")
		rw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(rw, `{"text":"par`)
		rw.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(rw).Hijack(); err == nil {
			conn.Close()
		}
	})
	tr := startRouter(t, regularConfig(w))
	resp, err := http.Post(tr.srv.URL+"/generate", "application/json", strings.NewReader(`{"text":"x"}`))
	if err == nil { // the head got out before the abort: the body must then be broken
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	require.Error(t, err, "the client must see the reply broken, never a short 200")
	tr.requireLoadsZero(t)
}

// The response does not wait for a prefill leg that answers late: decode's complete reply is
// enough (the prefill leg finishes on its own and reports its own Done).
func TestPDResponseDoesNotWaitForSlowPrefill(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	pw := newWorker(t, after(release, jsonReply(genReply)))
	dw := newWorker(t, jsonReply(`{"text":"ok"}`))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	status, _, body := tr.post(t, "/generate", `{"text":"x"}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"text":"ok"}`, body)
	// The prefill leg is still in flight and counted.
	loads := tr.s.r.Targets()
	require.Equal(t, int64(1), loads[0].Load, "prefill still running")
	close(release)
	tr.requireLoadsZero(t)
}

// A stream that breaks after [DONE] is complete: no error event, no second [DONE].
func TestStreamBreakAfterDoneIsClean(t *testing.T) {
	t.Parallel()
	w := newWorker(t, func(rw http.ResponseWriter, r *http.Request, _ call) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(rw, "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n")
		rw.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(rw).Hijack(); err == nil {
			conn.Close()
		}
	})
	tr := startRouter(t, regularConfig(w))
	status, _, body := tr.post(t, "/generate", `{"text":"x","stream":true}`, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n", body)
	tr.requireLoadsZero(t)
	assert.Equal(t, router.BreakerClosed, tr.s.r.Workers()[0].Breaker)
}

// PD: decode has answered but its head is held for prefill's answer (logprobs to merge), and
// prefill hangs: the request's deadline ends the wait with a 504, the prefill leg is
// cancelled, and the hang is not charged to the prefill worker (its breaker, opened by a
// single failure here, stays closed): the router's deadline ended it, as it would any leg.
func TestPDRequestTimeoutWhileHeldForPrefill(t *testing.T) {
	t.Parallel()
	pw, dw := newWorker(t, hangReply(nil)), newWorker(t, jsonReply(genReply))
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.RequestTimeoutSecs = 1
	cfg.CBFailureThreshold = 1
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/generate", `{"text":"x","return_logprob":true}`, nil)
	require.Equal(t, http.StatusGatewayTimeout, status, body)
	requireJSONError(t, status, body)
	assert.Contains(t, body, "--request-timeout-secs 1")
	waitFor(t, func() bool { return pw.cancelledCount() == 1 })
	tr.requireLoadsZero(t)
	for _, w := range tr.s.r.Workers() {
		assert.Equal(t, router.BreakerClosed, w.Breaker, w.URL)
	}
}

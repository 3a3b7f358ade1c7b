package server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With --shutdown-delay-secs, cancelling Serve's context first fails /readiness while the
// listener still accepts and serves (each answer closing its connection); the drain starts only
// when the delay ends. The delay's timer is the test's, so nothing waits on the clock. Not
// parallel: it replaces the package's shutdownDelay.
func TestServeShutdownDelayFailsReadinessAndKeepsAccepting(t *testing.T) {
	started, release := make(chan time.Duration, 1), make(chan time.Time)
	prev := shutdownDelay
	shutdownDelay = func(d time.Duration) <-chan time.Time { started <- d; return release }
	t.Cleanup(func() { shutdownDelay = prev })

	w := newWorker(t, jsonReply(genReply))
	cfg := regularConfig(w)
	cfg.ShutdownDelaySecs = 7
	s := startServer(t, cfg)
	base, stop, done := serveOn(t, s)
	get := func(path string) (int, string, bool) {
		t.Helper()
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Close
	}
	code, body, closed := get("/liveness")
	require.Equal(t, http.StatusOK, code, body)
	assert.False(t, closed, "keep-alive before shutdown")

	stop()
	select {
	case d := <-started:
		assert.Equal(t, 7*time.Second, d, "the delay is --shutdown-delay-secs")
	case err := <-done:
		t.Fatalf("Serve returned %v without a delay", err)
	}
	code, body, closed = get("/readiness")
	assert.Equal(t, http.StatusServiceUnavailable, code, "readiness fails during the delay")
	assert.JSONEq(t, `{"status":"shutting down"}`, body)
	assert.True(t, closed, "keep-alives off: the client reconnects elsewhere")
	// A new connection is still accepted and a request routed.
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(genBody))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.JSONEq(t, genReply, string(b))
	assert.True(t, resp.Close)
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v before the delay ended", err)
	default:
	}

	close(release)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the delay and the drain")
	}
	_, err = net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second)
	assert.Error(t, err, "the listener is closed after the drain")
}

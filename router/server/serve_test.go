package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveOn starts s.Serve on a loopback listener and returns its base URL, the function that
// cancels Serve's context, and Serve's result.
func serveOn(t *testing.T, s *Server) (base string, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := make(chan error, 1)
	go func() { ch <- s.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), cancel, ch
}

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Seed = new(int64(1))
	s, err := New(Options{Config: cfg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { cancel(); s.Wait() })
	return s
}

// Cancelling Serve's context stops it accepting, lets the request in flight finish, and Serve
// returns nil once it has.
func TestServeDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	w := newWorker(t, arrivedThen(arrived, after(release, jsonReply(genReply))))
	s := startServer(t, regularConfig(w))
	base, stop, done := serveOn(t, s)

	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(genBody))
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{resp.StatusCode, string(b), err}
	}()
	<-arrived
	stop()
	// New connections are refused once the listener is closed (polled: Shutdown runs on
	// Serve's goroutine).
	addr := strings.TrimPrefix(base, "http://")
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond, "the listener closes")
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}
	close(release)
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.status, r.body)
	assert.JSONEq(t, genReply, r.body)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

// With --shutdown-timeout-secs 0 the drain ends at once: Serve closes the connection of the
// request in flight and returns nil.
func TestServeDrainTimeoutClosesConnections(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	w := newWorker(t, arrivedThen(arrived, after(release, jsonReply(genReply))))
	cfg := regularConfig(w)
	cfg.ShutdownTimeoutSecs = 0
	s := startServer(t, cfg)
	base, stop, done := serveOn(t, s)
	failed := make(chan error, 1)
	go func() {
		resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(genBody))
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-arrived
	stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return at the drain timeout")
	}
	assert.Error(t, <-failed, "the request's connection was closed")
}

package h1

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Request.Cancel ends its exchange as a cancelled context would, at every stage, with its
// cause kept; a context that is never done (context.WithoutCancel) needs no watch; a
// completed exchange's connection is pooled as usual.
func TestH1RequestCancel(t *testing.T) {
	srv, tr := heldServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.WithoutCancel(context.Background())
	cause := errors.New("the other leg failed")
	do := func(path string, c *Cancel) (*http.Response, error) {
		resp, _, err := tr.Do(ctx, &Request{Method: http.MethodPost, URL: srv.URL, Path: path, Body: []byte("{}"), Cancel: c})
		return resp, err
	}

	// Cancelled before it is sent: nothing goes out.
	var before Cancel
	before.Cancel(cause)
	_, err := do("/head", &before)
	require.ErrorIs(t, err, context.Canceled)
	assert.Same(t, cause, before.Cause())

	// Waiting for the head.
	var head Cancel
	errc := make(chan error, 1)
	go func() {
		_, err := do("/head", &head)
		errc <- err
	}()
	head.Cancel(cause)
	assert.ErrorIs(t, <-errc, context.Canceled)

	// Reading the body: not pooled after.
	var mid Cancel
	resp, err := do("/body", &mid)
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "first", string(buf[:n]))
	go mid.Cancel(nil)
	_, err = io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, mid.Cause(), context.Canceled, "nil cause: context.Canceled")
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, pooled(tr, host), "a cancelled connection is not pooled")

	// A completed exchange: pooled, and a later Cancel touches nothing.
	var done Cancel
	resp, err = do("/done", &done)
	require.NoError(t, err)
	assert.Equal(t, "first", readAll(t, resp))
	assert.Len(t, pooled(tr, host), 1)
	done.Cancel(cause)
	assert.Len(t, pooled(tr, host), 1)
	resp, err = do("/done", nil)
	require.NoError(t, err)
	assert.Equal(t, "first", readAll(t, resp))
}

// Release recycles the transport's own responses (the next exchange may get the same one,
// zeroed) and only closes the fallback's.
func TestH1Release(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Worker", r.URL.Path)
		_, _ = io.WriteString(w, "ok"+r.URL.Path)
	})
	tr := newTransport(3 * time.Second)
	t.Cleanup(tr.CloseIdleConnections)
	for _, path := range []string{"/a", "/b", "/c"} {
		resp, _, err := tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL, Path: path, Body: []byte("{}")})
		require.NoError(t, err)
		assert.Equal(t, path, resp.Header.Get("X-Worker"))
		assert.Equal(t, "ok"+path, readAll(t, resp))
		Release(resp)
	}
	// Released before its body was read: the connection is closed, not pooled.
	host := strings.TrimPrefix(srv.URL, "http://")
	n := len(pooled(tr, host))
	resp, _, err := tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL, Path: "/d", Body: []byte("{}")})
	require.NoError(t, err)
	Release(resp)
	assert.Len(t, pooled(tr, host), n-1)

	closed := false
	fb := &http.Response{StatusCode: 200, Body: closeFunc(func() { closed = true })}
	Release(fb)
	assert.True(t, closed)
	assert.Equal(t, 200, fb.StatusCode, "a response not of the transport's is left as it is")
}

// closeFunc is an empty body that runs f when closed.
type closeFunc func()

func (f closeFunc) Read([]byte) (int, error) { return 0, io.EOF }
func (f closeFunc) Close() error             { f(); return nil }

package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingServer is an httptest server that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// h1Do sends a POST through tr and reports whether it went out on a reused connection.
func h1Do(ctx context.Context, tr *Transport, url, body string, hdr http.Header) (*http.Response, bool, error) {
	return tr.Do(ctx, &Request{Method: http.MethodPost, URL: url, Body: []byte(body), Header: hdr})
}

// clientDoer sends through an http.Client (the fallback in these tests).
type clientDoer struct{ *http.Client }

func (c clientDoer) Do(ctx context.Context, r *Request) (*http.Response, bool, error) {
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return nil, false, err
	}
	resp, err := c.Client.Do(req)
	return resp, false, err
}

// newTransport returns a transport with idle connections kept for idle and net/http's
// default client as its fallback.
// pooled, poolHosts and sweepPending read the transport's pool under its lock: its idle sweep
// runs on a timer goroutine and may fire while (or after) a test looks.
func pooled(tr *Transport, host string) []*conn {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*conn(nil), tr.pools[host]...)
}

func poolHosts(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.pools)
}

func sweepPending(tr *Transport) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.sweep != nil
}

// idledSince marks host's pooled connection i idle since at, under the lock.
func idledSince(tr *Transport, host string, i int, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.pools[host][i].idleAt = at
}

func newTransport(idle time.Duration) *Transport {
	return New(idle, clientDoer{http.DefaultClient})
}

func TestH1SendsTheRequestAndReusesTheConnection(t *testing.T) {
	type seen struct {
		host, ua, trace, ctype, body string
		length                       int64
	}
	got := make(chan seen, 10)
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Host, r.UserAgent(), r.Header.Get("Traceparent"), r.Header.Get("Content-Type"), string(b), r.ContentLength}
		if r.URL.Query().Get("stream") == "1" { // chunked
			for i := range 3 {
				_, _ = io.WriteString(w, strings.Repeat("x", i+1))
				w.(http.Flusher).Flush()
			}
			return
		}
		_, _ = io.WriteString(w, "plain") // Content-Length
	})
	tr := newTransport(3 * time.Second)
	hdr := http.Header{"Traceparent": {"00-abc-01"}, "Content-Type": {"application/json"}}
	for i, path := range []string{"/a", "/a?stream=1", "/a", "/a?stream=1"} {
		resp, reused, err := h1Do(context.Background(), tr, srv.URL+path, `{"n":1}`, hdr)
		require.NoError(t, err)
		assert.Equal(t, i > 0, reused, "request %d", i)
		want := "plain"
		if strings.Contains(path, "stream") {
			want = "xxxxxx"
		}
		assert.Equal(t, want, testutil.ReadAll(t, resp))
		s := <-got
		assert.Equal(t, seen{strings.TrimPrefix(srv.URL, "http://"), "pdrouter", "00-abc-01", "application/json", `{"n":1}`, 7}, s)
	}
	assert.Equal(t, int32(1), conns.Load(), "every request after the first reuses the connection")
}

func TestH1ConnectionNotReusedAfterEarlyCloseOrConnectionClose(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, strings.Repeat("y", 10000))
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, srv.URL+"/early", "{}", nil)
	require.NoError(t, err)
	buf := make([]byte, 10)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close()) // 9,990 bytes unread: the connection cannot be reused
	resp, reused, err := h1Do(context.Background(), tr, srv.URL+"/close", "{}", nil)
	require.NoError(t, err)
	assert.False(t, reused)
	assert.Len(t, testutil.ReadAll(t, resp), 10000)
	resp, reused, err = h1Do(context.Background(), tr, srv.URL+"/", "{}", nil)
	require.NoError(t, err)
	assert.False(t, reused, "the worker said Connection: close")
	testutil.ReadAll(t, resp)
	assert.Equal(t, int32(3), conns.Load())
}

// rawWorker accepts connections and hands each to serve after reading a request (head and
// body), request after request.
func rawWorker(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) string {
	return testutil.RawServer(t, func(c net.Conn, br *bufio.Reader, req *http.Request) bool {
		_, _ = io.Copy(io.Discard, req.Body)
		serve(c, br)
		return true
	})
}

func TestH1IdleConnectionClosedByTheWorker(t *testing.T) {
	closed := make(chan struct{}, 4)
	url := rawWorker(t, func(c net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.Close() // keep-alive ends without a Connection: close header
		closed <- struct{}{}
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, url, "{}", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	<-closed
	// Idle long enough to be checked: the close is seen and a new connection is dialled.
	idledSince(tr, strings.TrimPrefix(url, "http://"), 0, time.Now().Add(-time.Second))
	resp, reused, err := h1Do(context.Background(), tr, url, "{}", nil)
	require.NoError(t, err)
	assert.False(t, reused)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	<-closed
	// Reused at once, unchecked: the request fails on a reused connection, which the retry
	// loop retries once (SPEC §1.6).
	_, reused, err = h1Do(context.Background(), tr, url, "{}", nil)
	require.Error(t, err)
	assert.True(t, reused)
}

func TestH1IdleTimeoutRetiresConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	tr := newTransport(3 * time.Second)
	host := strings.TrimPrefix(srv.URL, "http://")
	for range 2 {
		resp, reused, err := h1Do(context.Background(), tr, srv.URL, "{}", nil)
		require.NoError(t, err)
		assert.False(t, reused)
		testutil.ReadAll(t, resp)
		require.Len(t, pooled(tr, host), 1)
		idledSince(tr, host, 0, time.Now().Add(-4*time.Second))
	}
	assert.Equal(t, int32(2), conns.Load())
	// The sweep closes what idled past the timeout, and forgets the host.
	c := pooled(tr, host)[0]
	tr.sweepIdle()
	assert.Zero(t, poolHosts(tr))
	_, err := c.nc.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.False(t, sweepPending(tr), "nothing left to sweep")

	resp, _, err := h1Do(context.Background(), tr, srv.URL, "{}", nil)
	require.NoError(t, err)
	testutil.ReadAll(t, resp)
	assert.True(t, sweepPending(tr), "a pooled connection schedules a sweep")
	tr.CloseIdleConnections()
	assert.Zero(t, poolHosts(tr))
	assert.False(t, sweepPending(tr))
}

func TestH1PoolKeepsAtMostMaxIdle(t *testing.T) {
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release
	})
	tr := newTransport(3 * time.Second)
	tr.maxIdle = 2
	var bodies []io.ReadCloser
	for range 4 {
		resp, _, err := h1Do(context.Background(), tr, srv.URL, "{}", nil)
		require.NoError(t, err)
		bodies = append(bodies, resp.Body)
	}
	close(release)
	for _, b := range bodies {
		_, err := io.ReadAll(b)
		require.NoError(t, err)
	}
	assert.Len(t, pooled(tr, strings.TrimPrefix(srv.URL, "http://")), 2)
}

// heldServer answers /body and /done with "first" (flushed), /done then ends; every other
// answer, and /body's rest, is held until the test ends or the request is cancelled. The
// transport's idle connections close at the end.
func heldServer(t *testing.T) (*httptest.Server, *Transport) {
	hold := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" || r.URL.Path == "/done" {
			_, _ = io.WriteString(w, "first")
			w.(http.Flusher).Flush()
		}
		if r.URL.Path == "/done" {
			return
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})
	tr := newTransport(3 * time.Second)
	// Cleanups run last-registered first: the held handlers are released and the pool closed
	// before the server's Close waits for its connections (a connection the last step leaves
	// open would otherwise keep Close, and the test, waiting forever).
	t.Cleanup(func() {
		close(hold)
		tr.CloseIdleConnections()
	})
	return srv, tr
}

func TestH1CancelUnblocksEveryStage(t *testing.T) {
	srv, tr := heldServer(t)

	// Waiting for the head.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := h1Do(ctx, tr, srv.URL+"/head", "{}", nil)
		errc <- err
	}()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)

	// Reading the body.
	ctx, cancel = context.WithCancel(context.Background())
	resp, _, err := h1Do(ctx, tr, srv.URL+"/body", "{}", nil)
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "first", string(buf[:n]))
	go cancel()
	_, err = io.ReadAll(resp.Body)
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, pooled(tr, strings.TrimPrefix(srv.URL, "http://")), "a cancelled connection is not pooled")

	// Close from another goroutine unblocks a read.
	resp, _, err = h1Do(context.Background(), tr, srv.URL+"/body", "{}", nil)
	require.NoError(t, err)
	_, err = resp.Body.Read(buf)
	require.NoError(t, err)
	// The read blocks (the server holds the body open) until Close from the other goroutine
	// ends it; if Close wins the race the read sees a closed body at once. Either way it
	// returns: a hang here is the failure (the test's deadline).
	go resp.Body.Close()
	_, _ = io.ReadAll(resp.Body)
}

func TestH1Pending(t *testing.T) {
	step := make(chan string)
	url := rawWorker(t, func(c net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for s := range step {
			if s == "" {
				return
			}
			_, _ = io.WriteString(c, s)
		}
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, url, "{}", nil)
	require.NoError(t, err)
	body := resp.Body.(*body)
	read := func(max int) string {
		buf := make([]byte, max)
		n, err := body.Read(buf)
		require.NoError(t, err)
		return string(buf[:n])
	}
	// Two chunks in one write, read one at a time: the second is pending.
	step <- "3\r\nabc\r\n3\r\ndef\r\n"
	assert.Equal(t, "abc", read(3))
	assert.True(t, body.Pending())
	assert.Equal(t, "def", read(3))
	assert.False(t, body.Pending(), "nothing more has arrived")
	// A chunk-size line cut short is not pending: the next read would wait.
	step <- "3\r\nghi\r\n1"
	assert.Equal(t, "ghi", read(3))
	assert.False(t, body.Pending())
	step <- "\r\nj\r\n0\r\n\r\n"
	rest, err := io.ReadAll(body) // the last chunk may come with io.EOF
	require.NoError(t, err)
	assert.Equal(t, "j", string(rest))
	assert.False(t, body.Pending())
	assert.Len(t, pooled(tr, strings.TrimPrefix(url, "http://")), 1, "a complete body returns its connection")
	close(step)
}

func TestH1FallsBackForHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	tr := newTransport(3 * time.Second)
	tr.fallback = clientDoer{srv.Client()} // trusts the test certificate
	resp, _, err := h1Do(context.Background(), tr, srv.URL, "streamed", nil)
	require.NoError(t, err)
	_, isH1 := resp.Body.(*body)
	assert.False(t, isH1)
	assert.Equal(t, "streamed", testutil.ReadAll(t, resp))
}

func TestH1DialErrorIsReturned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	ln.Close()
	_, reused, err := h1Do(context.Background(), newTransport(time.Second), url, "{}", nil)
	require.Error(t, err)
	assert.False(t, reused)
	var op *net.OpError
	assert.True(t, errors.As(err, &op), "%v", err)
}

func TestH1DoSendsJSONAndReportsReuse(t *testing.T) {
	type seen struct{ method, uri, ctype, auth, body, length string }
	got := make(chan seen, 4)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), string(b), r.Header.Get("Content-Length")}
		_, _ = io.WriteString(w, "ok")
	})
	tr := newTransport(3 * time.Second)
	hdr := http.Header{"Content-Type": {"text/plain"}, "Authorization": {"Bearer k"}}
	resp, reused, err := tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL + "/generate?x=1", Body: []byte(`{"a":1}`), Header: hdr})
	require.NoError(t, err)
	assert.False(t, reused)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	assert.Equal(t, seen{"POST", "/generate?x=1", "application/json", "Bearer k", `{"a":1}`, "7"}, <-got)

	resp, reused, err = tr.Do(context.Background(), &Request{Method: http.MethodGet, URL: srv.URL})
	require.NoError(t, err)
	assert.True(t, reused)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	assert.Equal(t, seen{"GET", "/", "", "", "", ""}, <-got)
}

// With NoHeader, a worker's usual head (chunked, a few common fields) gives a response with its
// status and body but no Header map; the next exchange on the connection still gets one.
func TestH1NoHeader(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"a":1}`)
		w.(http.Flusher).Flush() // chunked
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), NoHeader: true})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "201 Created", resp.Status)
	assert.Nil(t, resp.Header)
	assert.Equal(t, `{"a":1}`, testutil.ReadAll(t, resp))

	resp, reused, err := tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}")})
	require.NoError(t, err)
	assert.True(t, reused)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, `{"a":1}`, testutil.ReadAll(t, resp))
	assert.Equal(t, int32(1), conns.Load())
}

// rawHeadWorker hands each connection to serve after reading only the request head (the body
// is left unread); the connection closes when serve returns.
func rawHeadWorker(t *testing.T, serve func(c net.Conn)) string {
	return testutil.RawServer(t, func(c net.Conn, _ *bufio.Reader, _ *http.Request) bool {
		serve(c)
		return false
	})
}

// 100 Continue and 103 Early Hints before the final response are skipped, as net/http does.
func TestH1SkipsInformationalResponses(t *testing.T) {
	url := rawWorker(t, func(c net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, url, "{}", nil)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	// The connection is still in step: a second request on it works.
	resp, reused, err := h1Do(context.Background(), tr, url, "{}", nil)
	require.NoError(t, err)
	assert.True(t, reused)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
}

// A worker that answers 413 before reading an 8 MiB body and closes: the router gets the 413,
// not the write's broken pipe (which it would turn into a 502 and retry).
func TestH1EarlyResponseWhileTheBodyIsWritten(t *testing.T) {
	url := rawHeadWorker(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"error\":\"large\"}")
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			_ = tc.SetLinger(0) // reset: the unread body must not keep the socket alive
		}
	})
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, url, strings.Repeat("x", 8<<20), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Equal(t, `{"error":"large"}`, testutil.ReadAll(t, resp))
	assert.Empty(t, pooled(tr, strings.TrimPrefix(url, "http://")), "the connection is not reused")
}

// Response headers without end are cut at MaxResponseHead, not buffered.
func TestH1ResponseHeadIsBounded(t *testing.T) {
	url := rawWorker(t, func(c net.Conn, _ *bufio.Reader) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for i := 0; i < 2*MaxResponseHead/len(line); i++ {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	})
	_, _, err := h1Do(context.Background(), newTransport(3*time.Second), url, "{}", nil)
	require.ErrorIs(t, err, errResponseHeadTooLarge)
}

// A worker URL with user:pass@ sends the credentials as Authorization: Basic (as net/http
// does) and dials the host alone; a request's own Authorization wins.
func TestH1UserinfoBecomesBasicAuth(t *testing.T) {
	got := make(chan [2]string, 2)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		got <- [2]string{user + ":" + pass, r.Host}
		_, _ = io.WriteString(w, "ok")
	})
	u := strings.Replace(srv.URL, "http://", "http://us%3Aer:p%40ss@", 1)
	tr := newTransport(3 * time.Second)
	resp, _, err := h1Do(context.Background(), tr, u, "{}", nil)
	require.NoError(t, err)
	testutil.ReadAll(t, resp)
	g := <-got
	assert.Equal(t, "us:er:p@ss", g[0])
	assert.Equal(t, strings.TrimPrefix(srv.URL, "http://"), g[1], "no credentials in Host")

	resp, _, err = h1Do(context.Background(), tr, u, "{}", http.Header{"Authorization": {"Bearer client"}})
	require.NoError(t, err)
	testutil.ReadAll(t, resp)
	assert.Equal(t, ":", (<-got)[0], "the request's own Authorization is kept")
}

// Header names and values net/http would refuse are refused before anything is sent, with an
// error naming the header; so are a method that is not a token and a target that would end the
// request line.
func TestH1RejectsInvalidHeaders(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	tr := newTransport(3 * time.Second)
	for _, tc := range []struct {
		name string
		r    Request
		want string
	}{
		{"name with a space", Request{Method: "POST", URL: srv.URL, Header: http.Header{"X Bad": {"v"}}}, `"X Bad"`},
		{"name with a colon", Request{Method: "POST", URL: srv.URL, Header: http.Header{"X-A:b": {"v"}}}, `"X-A:b"`},
		{"empty name", Request{Method: "POST", URL: srv.URL, Header: http.Header{"": {"v"}}}, `""`},
		{"value with CRLF", Request{Method: "POST", URL: srv.URL, Header: http.Header{"Traceparent": {"a\r\nX-Injected: 1"}}}, `"Traceparent"`},
		{"value with NUL", Request{Method: "POST", URL: srv.URL, Header: http.Header{"X-Request-Id": {"a\x00b"}}}, `"X-Request-Id"`},
		{"method", Request{Method: "PO ST", URL: srv.URL}, `"PO ST"`},
		{"target", Request{Method: "POST", URL: srv.URL + "/a b"}, "request target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tr.Do(context.Background(), &tc.r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.Zero(t, conns.Load(), "nothing was sent")

	// A value with a tab inside and spaces around is valid; it is sent trimmed, as net/http does.
	got := make(chan string, 1)
	srv2, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("X-Ok") })
	resp, _, err := tr.Do(context.Background(), &Request{Method: "GET", URL: srv2.URL, Header: http.Header{"X-Ok": {"  a\tb "}}})
	require.NoError(t, err)
	testutil.ReadAll(t, resp)
	assert.Equal(t, "a\tb", <-got)
}

// A query without a path goes out as /?query; a fragment is not sent.
func TestH1RequestTarget(t *testing.T) {
	got := make(chan string, 2)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { got <- r.RequestURI })
	tr := newTransport(3 * time.Second)
	for url, want := range map[string]string{srv.URL + "?x=1": "/?x=1", srv.URL + "/a?b=2#frag": "/a?b=2"} {
		resp, _, err := tr.Do(context.Background(), &Request{Method: "GET", URL: url})
		require.NoError(t, err)
		testutil.ReadAll(t, resp)
		assert.Equal(t, want, <-got)
	}
	// Path is sent as if joined to URL (a worker's base URL and a route).
	for _, c := range []struct{ base, path, want string }{
		{srv.URL, "/generate", "/generate"},
		{srv.URL + "/", "/generate", "//generate"},
		{srv.URL + "/base", "/v1/completions", "/base/v1/completions"},
		{srv.URL + "/base?k=v", "/generate", "/base?k=v/generate"},
		{srv.URL + "/base", "", "/base"},
	} {
		resp, _, err := tr.Do(context.Background(), &Request{Method: "GET", URL: c.base, Path: c.path})
		require.NoError(t, err)
		testutil.ReadAll(t, resp)
		assert.Equal(t, c.want, <-got, "%s + %s", c.base, c.path)
	}
}

// What the transport does not serve goes to the fallback: https://, and a URL without a host.
func TestH1FallbackForURLsItDoesNotServe(t *testing.T) {
	var seen []string
	tr := New(time.Second, doerFunc(func(_ context.Context, r *Request) (*http.Response, bool, error) {
		seen = append(seen, r.URL)
		return nil, false, errors.New("fallback")
	}))
	for _, url := range []string{"https://w:1/generate", "http:///generate", "http://u:p@/x", "HTTP://w:1/"} {
		_, _, err := tr.Do(context.Background(), &Request{Method: "POST", URL: url})
		assert.EqualError(t, err, "fallback", url)
	}
	assert.Equal(t, []string{"https://w:1/generate", "http:///generate", "http://u:p@/x", "HTTP://w:1/"}, seen)
}

type doerFunc func(context.Context, *Request) (*http.Response, bool, error)

func (f doerFunc) Do(ctx context.Context, r *Request) (*http.Response, bool, error) { return f(ctx, r) }

// A context's deadline ends the exchange: a stalled body ends there with
// context.DeadlineExceeded; a connection that finished in time goes back to the pool (it passes
// the liveness check and is reused after that deadline has passed).
func TestH1Deadline(t *testing.T) {
	srv, conns, tr, host := stallingServer(t)

	first, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	resp, _, err := h1Do(first, tr, srv.URL+"/fast", "{}", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	require.Len(t, pooled(tr, host), 1)
	// Once the first exchange's deadline has passed, and idle past peekAfter: reuse runs the
	// liveness check, which the connection passes.
	<-first.Done()
	idledSince(tr, host, 0, time.Now().Add(-2*peekAfter))
	resp, reused, err := h1Do(context.Background(), tr, srv.URL+"/fast", "{}", nil)
	require.NoError(t, err)
	assert.True(t, reused, "the connection came back after its exchange's deadline")
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	assert.EqualValues(t, 1, conns.Load())

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	resp, _, err = h1Do(short, tr, srv.URL+"/stall", "{}", nil)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, pooled(tr, host), "a connection cut at its deadline is not pooled")

	// Past the deadline before the exchange: it fails at once.
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, _, err = h1Do(past, tr, srv.URL+"/fast", "{}", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// stallingServer answers /fast with "ok" and every other path with "first" and then nothing
// until the test ends or the client goes; it returns the server, its connection count, a
// transport and the server's host.
func stallingServer(t *testing.T) (*httptest.Server, *atomic.Int32, *Transport, string) {
	t.Helper()
	hold := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fast" {
			_, _ = io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	tr := newTransport(3 * time.Second)
	t.Cleanup(func() {
		close(hold)
		tr.CloseIdleConnections()
	})
	return srv, conns, tr, strings.TrimPrefix(srv.URL, "http://")
}

// serialize writes a request's head and small body in one allocation of the right size, and
// none into a connection's buffer that holds it already.
func TestSerializeAllocatesOnce(t *testing.T) {
	r := &Request{Method: http.MethodPost, URL: "http://u:p@127.0.0.1:9/", Path: "/generate",
		Header: http.Header{"Traceparent": {"00-" + strings.Repeat("a", 50)}, "X-Request-Id": {"abc"}},
		Pieces: [][]byte{[]byte(`{"text":"`), []byte(strings.Repeat("x", 900)), []byte(`"}`)}}
	tg, ok := parseURL(r.URL)
	require.True(t, ok)
	tg.path = r.Path
	require.NoError(t, validate(r, &tg))
	var head []byte
	allocs := testing.AllocsPerRun(10, func() { head = serialize(nil, r, &tg) })
	assert.Equal(t, 1.0, allocs)
	assert.LessOrEqual(t, cap(head)-len(head), 160+len(tg.auth), "sized to the head, not rounded up to a guess")
	n := len(head)
	allocs = testing.AllocsPerRun(10, func() { head = serialize(head[:0], r, &tg) })
	assert.Zero(t, allocs, "the connection's buffer is reused")
	assert.Len(t, head, n, "the same request (its header lines in map order)")
}

// A Request's Deadline is its connection's: a stalled body ends there with
// context.DeadlineExceeded though ctx never ends; an exchange past it fails at once; the next
// exchange on the connection without a Deadline clears it (the connection is reused, not cut).
func TestH1RequestDeadline(t *testing.T) {
	srv, conns, tr, host := stallingServer(t)
	do := func(path string, dl time.Time) (*http.Response, bool, error) {
		return tr.Do(context.Background(), &Request{Method: http.MethodPost, URL: srv.URL + path, Body: []byte("{}"), Deadline: dl})
	}

	first, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	dl, _ := first.Deadline()
	resp, _, err := do("/fast", dl)
	require.NoError(t, err)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp))
	<-first.Done() // the first exchange's deadline is now past
	resp, reused, err := do("/fast", time.Time{})
	require.NoError(t, err)
	assert.True(t, reused)
	assert.Equal(t, "ok", testutil.ReadAll(t, resp), "the deadline left on the idle connection was cleared")
	assert.EqualValues(t, 1, conns.Load())

	resp, _, err = do("/stall", time.Now().Add(50*time.Millisecond))
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, resp.Body.Close())
	assert.Empty(t, pooled(tr, host), "a connection cut at its deadline is not pooled")

	_, _, err = do("/fast", time.Now().Add(-time.Second))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// fullBacklog listens on loopback with a backlog of one and never accepts; once its queue is
// full, Linux drops further SYNs, so a new connection's dial hangs (SYN retransmits) instead of
// being refused.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: dials that complete (the kernel accepts them into the queue) until one
	// does not within a moment.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("loopback accepted 8 connections beyond a backlog of one: cannot make a hanging dial here")
	return ""
}

// A Request's Deadline bounds its dial too: a worker whose accept queue is full fails the
// exchange with context.DeadlineExceeded at the deadline, not at the dialer's timeout.
func TestH1DeadlineBoundsTheDial(t *testing.T) {
	addr := fullBacklog(t)
	tr := New(time.Minute, nil)
	tr.dialer.Timeout = 0 // only the deadline can end the dial
	done := make(chan error, 1)
	go func() {
		_, _, err := tr.Do(context.Background(), &Request{Method: http.MethodGet, URL: "http://" + addr, Path: "/health",
			Deadline: time.Now().Add(200 * time.Millisecond)})
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the dial ends at the request's deadline: %v", err)
	case <-time.After(time.Minute): // a hang detector, not a timing: the deadline is 200 ms away
		t.Fatal("the dial outlived the request's deadline by a minute")
	}
}

package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// srvGuard bounds every wait of these tests: reaching it is a failure, never the path to
// success.
const srvGuard = 10 * time.Second

// srvRunning is a Server serving a loopback listener.
type srvRunning struct {
	addr string
	done chan struct{} // closed when Serve returned
	err  error         // Serve's error, once done
}

// startSrv serves s on 127.0.0.1 until the test ends (then Close). A nil ErrorLog discards.
func startSrv(t *testing.T, s *Server) *srvRunning {
	t.Helper()
	if s.ErrorLog == nil {
		s.ErrorLog = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &srvRunning{addr: ln.Addr().String(), done: make(chan struct{})}
	go func() { r.err = s.Serve(ln); close(r.done) }()
	t.Cleanup(func() {
		_ = s.Close()
		select {
		case <-r.done:
		case <-time.After(srvGuard):
			t.Error("Serve did not return after Close")
		}
	})
	return r
}

// served waits for Serve to return and gives its error.
func (r *srvRunning) served(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(srvGuard):
		t.Fatal("Serve did not return")
		return nil
	}
}

func handlerSrv(f http.HandlerFunc) *Server { return &Server{Handler: f} }

// srvClient is one raw client connection: request bytes written as they are, answers read
// with http.ReadResponse, so every answer read on it came over this one connection.
type srvClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialSrv(t *testing.T, addr string) *srvClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(srvGuard)) // a hang fails instead of blocking
	return &srvClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *srvClient) send(s string) {
	c.t.Helper()
	_, err := io.WriteString(c.c, s)
	require.NoError(c.t, err)
}

// read reads one answer to a method request and its whole body.
func (c *srvClient) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	require.NoError(c.t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	_ = resp.Body.Close()
	return resp, string(b)
}

// requireClosed checks that the server closed the connection (no further bytes).
func (c *srvClient) requireClosed() {
	c.t.Helper()
	b, err := c.br.ReadByte()
	require.Truef(c.t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"want the connection closed, got byte %q, error %v", b, err)
}

func srvGet(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

// Keep-alive: two requests on one connection are both answered, on that connection.
func TestServerKeepAlive(t *testing.T) {
	t.Parallel()
	remotes := make(chan string, 2)
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		remotes <- r.RemoteAddr
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	c := dialSrv(t, r.addr)
	for _, p := range []string{"/a", "/b"} {
		c.send(srvGet(p))
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, p, body)
		require.False(t, resp.Close)
	}
	assert.Equal(t, c.c.LocalAddr().String(), <-remotes)
	assert.Equal(t, c.c.LocalAddr().String(), <-remotes)
}

// Framing as net/http frames it: a short answer the handler returned from gets a
// Content-Length; a flushed or long (> 2 KiB) undeclared one is chunked and decodes right; a
// declared Content-Length is kept; HEAD and 204 carry no body (the next answer on the
// connection parses, so no stray bytes were sent).
func TestServerFraming(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3000)
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "small")
		case "/flush":
			_, _ = io.WriteString(w, "hi ")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "there")
		case "/big":
			_, _ = io.WriteString(w, big)
		case "/big2": // held, then over 2 KiB: the held part goes first
			_, _ = io.WriteString(w, big[:1000])
			_, _ = io.WriteString(w, big[1000:])
		case "/declared":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = io.WriteString(w, big[:10])
			_, _ = io.WriteString(w, big[10:])
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "dropped")
		}
	}))
	cases := []struct {
		method, path, body string
		chunked            bool
		length             int64
	}{
		{"GET", "/small", "small", false, 5},
		{"GET", "/flush", "hi there", true, -1},
		{"GET", "/big", big, true, -1},
		{"GET", "/big2", big, true, -1},
		{"GET", "/declared", big, false, int64(len(big))},
		{"HEAD", "/small", "", false, -2},
		{"GET", "/nocontent", "", false, -2},
	}
	for _, tc := range cases {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			t.Parallel()
			c := dialSrv(t, r.addr)
			c.send(tc.method + " " + tc.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, body := c.read(tc.method)
			require.Equal(t, tc.body, body)
			if tc.chunked {
				assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
			} else {
				assert.Empty(t, resp.TransferEncoding)
			}
			if tc.length >= -1 {
				assert.Equal(t, tc.length, resp.ContentLength)
			}
			c.send(srvGet("/small")) // the connection is still in step
			_, body = c.read("GET")
			require.Equal(t, "small", body)
		})
	}
}

// The header is taken at WriteHeader, as net/http takes it: changing a value (or the slice
// element a value lives in) or adding one afterwards does not change the answer.
func TestServerHeaderTakenAtWriteHeader(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("X-A", "before")
		vs := []string{"before"}
		h["X-B"] = vs
		w.WriteHeader(http.StatusAccepted)
		h.Set("X-A", "after")
		vs[0] = "after"
		h.Set("X-C", "late")
		_, _ = io.WriteString(w, "ok")
	}))
	c := dialSrv(t, r.addr)
	c.send(srvGet("/"))
	resp, body := c.read("GET")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Equal(t, "ok", body)
	assert.Equal(t, "before", resp.Header.Get("X-A"))
	assert.Equal(t, "before", resp.Header.Get("X-B"))
	assert.Empty(t, resp.Header.Values("X-C"))
}

// A Content-Type is sniffed when the handler set none (from the held bytes, or from the
// write that goes out first when the answer is chunked), one set is kept, and every answer
// has a Date.
func TestServerSniffAndDate(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "<html>")
		case "/long":
			_, _ = io.WriteString(w, "<html>"+strings.Repeat(" ", 3000))
		default:
			_, _ = io.WriteString(w, "<html><body>hi</body></html>")
		}
	}))
	c := dialSrv(t, r.addr)
	for path, want := range map[string]string{
		"/":     "text/html; charset=utf-8",
		"/long": "text/html; charset=utf-8",
		"/json": "application/json",
	} {
		c.send(srvGet(path))
		resp, _ := c.read("GET")
		assert.Equal(t, want, resp.Header.Get("Content-Type"), path)
		_, err := http.ParseTime(resp.Header.Get("Date"))
		assert.NoError(t, err, path)
	}
}

// Expect: 100-continue: the client waits for "100 Continue" before sending its body, which
// the server sends at the handler's first body read; the body then reaches the handler.
func TestServerExpectContinue(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	c := dialSrv(t, r.addr)
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	resp, _ := c.read("POST")
	require.Equal(t, http.StatusContinue, resp.StatusCode)
	c.send("hello")
	resp, body := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "hello", body)
}

// A handler answering an Expect: 100-continue request without reading its body: no 100 is
// sent, and as the connection closes after the answer (the body was never sent), the answer
// says so with Connection: close (RFC 9110 §10.1.1; net/http does), so the client does not
// send its next request on it.
func TestServerExpectContinueUnreadSaysClose(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "no")
	}))
	c := dialSrv(t, r.addr)
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	resp, body := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "no", body)
	assert.True(t, resp.Close, "the answer must carry Connection: close")
	c.requireClosed()
}

// A small body the handler did not read is discarded: the client gets the whole answer and
// the connection serves its next request.
func TestServerUnreadSmallBody(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	c := dialSrv(t, r.addr)
	c.send("POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n" + strings.Repeat("b", 10000))
	resp, body := c.read("POST")
	require.Equal(t, "ok /post", body)
	require.False(t, resp.Close)
	c.send(srvGet("/next"))
	_, body = c.read("GET")
	require.Equal(t, "ok /next", body)
}

// A large declared body the handler did not read (10 MB, of which the client sent 64 KB and
// then waits): the answer says Connection: close and arrives whole, not reset away by the
// unread bytes when the server closes.
func TestServerUnreadLargeBody(t *testing.T) {
	t.Parallel()
	answer := strings.Repeat("a", 100<<10)
	r := startSrv(t, handlerSrv(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, answer)
	}))
	c := dialSrv(t, r.addr)
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" + strings.Repeat("b", 64<<10))
	resp, body := c.read("POST")
	require.Equal(t, 200, resp.StatusCode)
	require.True(t, resp.Close)
	require.Equal(t, len(answer), len(body))
	c.requireClosed()
}

// A request head over 1 MiB is refused with 431, a malformed request line with 400; both
// answers say Connection: close and the connection closes.
func TestServerRefusesBadHeads(t *testing.T) {
	t.Parallel()
	r := startSrv(t, handlerSrv(func(http.ResponseWriter, *http.Request) { t.Error("handler called") }))
	for _, tc := range []struct {
		name, head string
		code       int
	}{
		{"too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", MaxHeaderBytes+8<<10) + "\r\n\r\n", 431},
		{"garbage", "GARBAGE\r\n\r\n", 400},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400}, // RFC 9112 §3.2, as net/http
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialSrv(t, r.addr)
			go func() { _, _ = io.WriteString(c.c, tc.head) }() // the server stops reading at 1 MiB
			resp, err := http.ReadResponse(c.br, nil)
			require.NoError(t, err)
			require.Equal(t, tc.code, resp.StatusCode)
			require.True(t, resp.Close)
			_, _ = io.Copy(io.Discard, resp.Body) // ends at the close (EOF, or a reset for 431)
			c.requireClosed()
		})
	}
}

// clientGone sends request on a server whose handler waits delay, reads the body, then
// waits on its context; it closes the client once the handler waits, and fails unless the
// context is then cancelled.
func clientGone(t *testing.T, watchAfter, delay time.Duration, request string) {
	t.Helper()
	waiting, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	r := startSrv(t, &Server{WatchAfter: watchAfter, Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-time.After(delay)
		_, _ = io.Copy(io.Discard, r.Body)
		close(waiting)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-release:
		}
	})})
	c := dialSrv(t, r.addr)
	c.send(request)
	<-waiting
	require.NoError(t, c.c.Close())
	select {
	case <-cancelled:
	case <-time.After(srvGuard):
		t.Fatal("the request's context was not cancelled after its client went away")
	}
}

// A client that goes away while its handler waits (past WatchAfter, body read) cancels the
// request's context.
func TestServerClientGoneCancels(t *testing.T) {
	t.Parallel()
	clientGone(t, 10*time.Millisecond, 0, srvGet("/"))
}

// The same when the handler read its body only after WatchAfter had passed (a slow upload,
// or a handler that waits for a slot before reading): WatchAfter counts from the body's end,
// so the watcher must still start then. The 50 ms before the body is read is the scenario
// under test (10 × WatchAfter), not a wait for a condition.
func TestServerClientGoneCancelsAfterLateBody(t *testing.T) {
	t.Parallel()
	clientGone(t, 5*time.Millisecond, 50*time.Millisecond, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
}

// Handlers that finish while the watcher fires (WatchAfter 1 ns) are not cancelled, and the
// connection serves request after request.
func TestServerWatcherLeavesFastHandlersAlone(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Int32
	r := startSrv(t, &Server{WatchAfter: time.Nanosecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runtime.Gosched() // let the watcher start its read
		if r.Context().Err() != nil {
			cancelled.Add(1)
		}
		_, _ = io.WriteString(w, r.URL.Path)
	})})
	c := dialSrv(t, r.addr)
	for i := range 50 {
		p := "/" + strconv.Itoa(i)
		c.send(srvGet(p))
		resp, body := c.read("GET")
		require.Equal(t, p, body)
		require.False(t, resp.Close)
	}
	assert.Zero(t, cancelled.Load())
}

// Two requests written back to back in one write are both answered, in order, while the
// first one's handler is held past WatchAfter.
func TestServerPipelined(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	r := startSrv(t, &Server{WatchAfter: time.Nanosecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/1" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, r.URL.Path)
	})})
	c := dialSrv(t, r.addr)
	c.send(srvGet("/1") + srvGet("/2"))
	<-entered
	close(release)
	for _, p := range []string{"/1", "/2"} {
		_, body := c.read("GET")
		require.Equal(t, p, body)
	}
}

// The next request written while a handler is held past WatchAfter (1 ns): the watcher is
// reading the connection and takes its first byte, which must be kept for that request.
// Each round holds request i until request i+1's bytes are written.
func TestServerWatcherKeepsTheNextRequestsByte(t *testing.T) {
	t.Parallel()
	entered, release := make(chan string), make(chan struct{})
	r := startSrv(t, &Server{WatchAfter: time.Nanosecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Path
		<-release
		_, _ = io.WriteString(w, r.URL.Path)
	})})
	c := dialSrv(t, r.addr)
	const rounds = 10
	c.send(srvGet("/r0"))
	for i := range rounds {
		p := "/r" + strconv.Itoa(i)
		require.Equal(t, p, <-entered)
		if i+1 < rounds {
			c.send(srvGet("/r" + strconv.Itoa(i+1)))
		}
		release <- struct{}{}
		resp, body := c.read("GET")
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, p, body)
	}
}

// blockingSrv serves /block by holding the handler until release is called (at the latest
// when the test ends); any other path answers at once.
func blockingSrv(t *testing.T) (s *Server, r *srvRunning, entered chan struct{}, release func()) {
	entered, held := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(held) })
	s = handlerSrv(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			close(entered)
			<-held
		}
		_, _ = io.WriteString(w, "done")
	})
	r = startSrv(t, s)
	t.Cleanup(release)
	return s, r, entered, release
}

// idleAndBusy opens two connections to r: one idle after an answer, one whose request is in
// blockingSrv's handler (entered).
func idleAndBusy(t *testing.T, r *srvRunning, entered <-chan struct{}) (idle, busy *srvClient) {
	t.Helper()
	idle = dialSrv(t, r.addr)
	idle.send(srvGet("/"))
	idle.read("GET")
	busy = dialSrv(t, r.addr)
	busy.send(srvGet("/block"))
	<-entered
	return idle, busy
}

// Shutdown stops accepting (Serve returns http.ErrServerClosed), closes idle connections
// at once, and returns nil only once the request in flight is answered.
func TestServerShutdownWaitsForInFlight(t *testing.T) {
	t.Parallel()
	s, r, entered, release := blockingSrv(t)
	idle, busy := idleAndBusy(t, r, entered)

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), srvGuard)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	require.ErrorIs(t, r.served(t), http.ErrServerClosed)
	idle.requireClosed()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}

	release()
	resp, body := busy.read("GET")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "done", body)
	select {
	case err := <-shut:
		require.NoError(t, err)
	case <-time.After(srvGuard):
		t.Fatal("Shutdown did not return once the request in flight was answered")
	}
	busy.requireClosed()
}

// An answer finished during Shutdown says Connection: close (as net/http's does), since its
// connection closes after it: a client must not send its next request on it.
func TestServerShutdownAnswerSaysClose(t *testing.T) {
	t.Parallel()
	s, r, entered, release := blockingSrv(t)
	busy := dialSrv(t, r.addr)
	busy.send(srvGet("/block"))
	<-entered
	go func() { _ = s.Shutdown(context.Background()) }()
	require.ErrorIs(t, r.served(t), http.ErrServerClosed)
	release()
	resp, _ := busy.read("GET")
	assert.True(t, resp.Close, "the answer must carry Connection: close")
	busy.requireClosed()
}

// Close closes the listener and every connection at once, idle or in flight.
func TestServerClose(t *testing.T) {
	t.Parallel()
	s, r, entered, _ := blockingSrv(t)
	idle, busy := idleAndBusy(t, r, entered)
	require.NoError(t, s.Close())
	require.ErrorIs(t, r.served(t), http.ErrServerClosed)
	idle.requireClosed()
	busy.requireClosed()
}

// SetKeepAlivesEnabled(false): the next answer says Connection: close and the connection
// closes after it. (It is turned off while that request is in flight: turned off between
// two requests, the server may close the connection just as the next request arrives, as
// net/http's may.)
func TestServerSetKeepAlivesEnabled(t *testing.T) {
	t.Parallel()
	s, r, entered, release := blockingSrv(t)
	c := dialSrv(t, r.addr)
	c.send(srvGet("/"))
	resp, _ := c.read("GET")
	require.False(t, resp.Close)
	c.send(srvGet("/block"))
	<-entered
	s.SetKeepAlivesEnabled(false)
	release()
	resp, body := c.read("GET")
	require.Equal(t, "done", body)
	require.True(t, resp.Close)
	c.requireClosed()
}

// lockedBuffer is a log destination the server's goroutines and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A panicking handler closes its connection (mid-answer too, so the client sees the answer
// cut short); http.ErrAbortHandler is not logged, any other panic is.
func TestServerPanic(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	r := startSrv(t, &Server{ErrorLog: slog.New(slog.NewTextHandler(&logs, nil)), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort-mid":
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/abort":
			panic(http.ErrAbortHandler)
		default:
			panic("boom")
		}
	})})

	c := dialSrv(t, r.addr)
	c.send(srvGet("/abort"))
	c.requireClosed()

	c = dialSrv(t, r.addr)
	c.send(srvGet("/abort-mid"))
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	_, err = io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Empty(t, logs.String(), "http.ErrAbortHandler must not be logged")

	c = dialSrv(t, r.addr)
	c.send(srvGet("/boom"))
	c.requireClosed()
	assert.Contains(t, logs.String(), "boom")
	assert.NotContains(t, logs.String(), http.ErrAbortHandler.Error())
}

package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves plain HTTP/1.1 with one goroutine per client connection that reads each
// request, runs the handler and writes its answer itself: the prototype of issue 29 (off by
// default; serve --conn-loop), measured beside net/http's server in BenchmarkProxy.
//
// What it leaves out of net/http's server, and why: net/http starts a goroutine per request
// when the request's body ends, to notice a client going away (it cancels the request's
// context), and at the end of the request hands the connection back from it (a deadline in
// the past, a condition variable). With two or more threads that start and hand-off wake an
// idle thread on the request's critical path. Here a request's context is cancelled by a
// client going away only once the handler has run for [Server.WatchAfter] after the body
// ended: then a goroutine starts reading the connection, as net/http's does from the start.
// A streamed answer notices a client gone at its next write either way.
//
// It is not net/http: no TLS, no HTTP/2, no Hijack, no trailers, no "OPTIONS *" of its own;
// an HTTP/1.0 request is answered and its connection closed; a doubled Host is not refused
// (the first is taken). As net/http: an HTTP/1.1 request without a Host is refused (400);
// request heads are parsed by [http.ReadRequest], bounded at 1 MiB and
// [Server.ReadHeaderTimeout]; up to 256 KiB of a body the handler left unread is read and
// dropped to keep the connection (more, and it closes, drained for 500 ms so the answer is
// not reset away); answers carry a Content-Length when the handler declared one or returned
// having written at most 2 KiB without flushing, are chunked otherwise, and get a Date and a
// sniffed Content-Type when the handler set none; the header is taken at WriteHeader.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds a request's head, from its first byte.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no next request for this long.
	IdleTimeout time.Duration
	// WatchAfter is how long a handler runs after its request's body ended before a goroutine
	// starts watching the connection for the client going away (0: 100 ms).
	WatchAfter time.Duration
	// ErrorLog receives panics in handlers and failed accepts (nil: slog.Default()).
	ErrorLog *slog.Logger

	noKeepAlive atomic.Bool

	mu      sync.Mutex
	closing bool
	lns     map[net.Listener]struct{}
	conns   map[*srvConn]bool // true: idle, between requests
	drained chan struct{}     // closed when closing and the last connection is gone
}

// MaxHeaderBytes bounds a request's line and headers (net/http's DefaultMaxHeaderBytes).
const MaxHeaderBytes = 1 << 20

// maxDiscard is how much of a body the handler left unread is read and dropped to keep its
// connection (net/http's maxPostHandlerReadBytes).
const maxDiscard = 256 << 10

// lingerFor is how long a connection closed with its client perhaps still sending is drained
// first, so its unread bytes do not reset the answer away (net/http's rstAvoidanceDelay).
const lingerFor = 500 * time.Millisecond

// holdMax is how much of an answer is held, before its head is written, in the hope that the
// handler returns and the answer gets a Content-Length (net/http's bufferBeforeChunkingSize).
const holdMax = 2048

func (s *Server) logger() *slog.Logger {
	if s.ErrorLog != nil {
		return s.ErrorLog
	}
	return slog.Default()
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return 100 * time.Millisecond
}

func (s *Server) initLocked() {
	if s.conns == nil {
		s.lns = map[net.Listener]struct{}{}
		s.conns = map[*srvConn]bool{}
		s.drained = make(chan struct{})
	}
}

// SetKeepAlivesEnabled(false) makes every answer from now on close its connection.
func (s *Server) SetKeepAlivesEnabled(on bool) { s.noKeepAlive.Store(!on) }

// Serve accepts connections on ln and serves each on its own goroutine until Shutdown or
// Close, then returns http.ErrServerClosed; otherwise the error that stopped accepting. A
// temporary accept failure (out of file descriptors) is retried after a pause of up to 1 s.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.initLocked()
	if s.closing {
		s.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.logger().Warn("accept failed; retrying", "error", err, "pause", pause)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		sc := newSrvConn(s, c)
		if !s.setIdle(sc, true) {
			_ = c.Close()
			continue
		}
		go sc.serve()
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// setIdle records c between requests (idle; a new connection is too) or serving one; false
// when the server is shutting down and c should close instead.
func (s *Server) setIdle(c *srvConn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = idle
	return true
}

func (s *Server) untrack(c *srvConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.drainedLocked()
}

// drainedLocked closes drained once the server is closing and has no connection left.
func (s *Server) drainedLocked() {
	if s.closing && len(s.conns) == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// stop stops accepting and closes the idle connections (all of them when all is set).
func (s *Server) stop(all bool) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.closing = true
	s.noKeepAlive.Store(true) // answers from now on say Connection: close
	for ln := range s.lns {
		_ = ln.Close()
	}
	for c, idle := range s.conns {
		if idle || all {
			_ = c.c.Close()
		}
	}
	s.drainedLocked()
	return s.drained
}

// Shutdown stops accepting, closes idle connections, and waits for the requests in flight to
// be answered (each connection closes after its answer) or for ctx to be done (its error).
func (s *Server) Shutdown(ctx context.Context) error {
	select {
	case <-s.stop(false):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.stop(true)
	return nil
}

// srvConn is one client connection and everything its requests reuse.
type srvConn struct {
	s      *Server
	c      net.Conn
	remote string
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	w      answer
	body   bodyReader
	hold   []byte // an answer's body held before its head (holdMax)
	head   []byte // an answer's header lines, taken at WriteHeader

	// The watcher (see Server): armed per request, reading the connection once it fires.
	watchT    *time.Timer
	watchDone chan struct{}
	wmu       sync.Mutex
	wEnding   bool               // the request is finishing: the watcher must not start reading
	wReading  bool               // the watcher is in its Read
	wCancel   context.CancelFunc // the request's
	gone      bool               // the watcher saw the client go (read after <-watchDone)
	armed     bool               // the watcher's timer was started for this request
	linger    bool               // close after draining: the client may still be sending
}

var (
	brPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	bwPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

func newSrvConn(s *Server, c net.Conn) *srvConn {
	sc := &srvConn{s: s, c: c, remote: c.RemoteAddr().String(), watchDone: make(chan struct{}, 1)}
	sc.cr = connReader{c: c, remain: math.MaxInt64}
	sc.br = brPool.Get().(*bufio.Reader)
	sc.br.Reset(&sc.cr)
	sc.bw = bwPool.Get().(*bufio.Writer)
	sc.bw.Reset(c)
	sc.watchT = time.AfterFunc(time.Hour, sc.watch)
	sc.watchT.Stop()
	return sc
}

func (c *srvConn) close() {
	c.watchT.Stop()
	if c.linger {
		if cw, ok := c.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = c.c.SetReadDeadline(time.Now().Add(lingerFor))
			_, _ = io.CopyN(io.Discard, c.c, 4<<20)
		}
	}
	_ = c.c.Close()
	c.br.Reset(nil)
	brPool.Put(c.br)
	c.bw.Reset(nil)
	bwPool.Put(c.bw)
	c.s.untrack(c)
}

var errHeadTooLarge = errors.New("request head over 1 MiB")

func (c *srvConn) serve() {
	defer c.close()
	for first := true; ; first = false {
		if c.br.Buffered() == 0 && !c.cr.hasByte {
			wait := c.s.IdleTimeout
			if first {
				wait = c.s.ReadHeaderTimeout
			}
			if wait > 0 {
				_ = c.c.SetReadDeadline(time.Now().Add(wait))
			}
			if _, err := c.br.Peek(1); err != nil {
				return // closed, idle too long, or shut down
			}
		}
		if !c.s.setIdle(c, false) {
			return
		}
		if c.s.ReadHeaderTimeout > 0 {
			_ = c.c.SetReadDeadline(time.Now().Add(c.s.ReadHeaderTimeout))
		}
		c.cr.remain = MaxHeaderBytes
		req, err := http.ReadRequest(c.br)
		hitLimit := c.cr.remain == 0
		c.cr.remain = math.MaxInt64
		if err != nil {
			switch {
			case hitLimit:
				c.refuse(http.StatusRequestHeaderFieldsTooLarge, errHeadTooLarge.Error())
				c.linger = true // the rest of the head may still come: a reset would lose the answer
			case errors.Is(err, io.EOF), isTimeout(err):
			default:
				c.refuse(http.StatusBadRequest, "malformed HTTP request")
			}
			return
		}
		if req.Host == "" && req.ProtoAtLeast(1, 1) && req.Method != http.MethodConnect {
			c.refuse(http.StatusBadRequest, "missing required Host header")
			return
		}
		_ = c.c.SetReadDeadline(time.Time{})
		if !c.serveOne(req) || c.s.noKeepAlive.Load() || !c.s.setIdle(c, true) {
			return
		}
	}
}

// refuse answers a request whose head could not be read, closing the connection after.
func (c *srvConn) refuse(code int, msg string) {
	_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%d %s: %s",
		code, http.StatusText(code), code, http.StatusText(code), msg)
	_ = c.bw.Flush()
}

// serveOne runs the handler for req and finishes its answer; false when the connection must
// close after it.
func (c *srvConn) serveOne(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	c.body.reset(c, req)
	req.Body = &c.body
	w := &c.w
	w.reset(c, req)

	c.wmu.Lock()
	c.wCancel, c.gone = cancel, false
	c.wmu.Unlock()
	c.armed = false
	if c.body.eof {
		c.arm()
	}

	panicked := c.run(w, req)
	// The handler's reads are over (net/http: ErrBodyReadAfterClose); finish's discard reads
	// the rest without arming the watcher.
	c.body.closed.Store(true)

	if c.armed && !c.watchT.Stop() {
		c.wmu.Lock()
		c.wEnding = true
		reading := c.wReading
		c.wmu.Unlock()
		if reading {
			_ = c.c.SetReadDeadline(time.Unix(1, 0)) // ends the watcher's Read now
		}
		<-c.watchDone
		c.wmu.Lock()
		c.wEnding = false
		c.wmu.Unlock()
		_ = c.c.SetReadDeadline(time.Time{})
	}
	cancel()
	if panicked {
		return false
	}
	w.finish()
	c.linger = !c.body.eof && w.err == nil
	return w.err == nil && !w.closeAfter && !c.gone && c.body.eof && !req.Close
}

// arm starts the watcher's timer, once per request, when its body has ended (as net/http
// starts its background read then).
func (c *srvConn) arm() {
	if !c.armed {
		c.armed = true
		c.watchT.Reset(c.s.watchAfter())
	}
}

// run calls the handler, recovering a panic as net/http does (logged unless it is
// http.ErrAbortHandler); true when it panicked.
func (c *srvConn) run(w *answer, req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				c.s.logger().Error("panic serving request", "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
			}
			_ = w.flushPartial()
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return false
}

// watch is the watcher's timer function: unless the request is finishing (or more of the
// client's bytes are already here), it reads the connection until the client goes
// (cancelling the request), sends a byte (kept for the next request), or the request
// finishes (which ends the read with a deadline in the past).
func (c *srvConn) watch() {
	c.wmu.Lock()
	if c.wEnding || !c.body.eofSeen.Load() || c.br.Buffered() > 0 || c.cr.hasByte {
		c.wmu.Unlock()
		c.watchDone <- struct{}{}
		return
	}
	c.wReading = true
	cancel := c.wCancel
	c.wmu.Unlock()
	n, err := c.c.Read(c.cr.b[:])
	c.wmu.Lock()
	c.wReading = false
	if n == 1 {
		c.cr.hasByte = true
	} else if err != nil && !isTimeout(err) {
		c.gone = true
		cancel()
	}
	c.wmu.Unlock()
	c.watchDone <- struct{}{}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connReader is what the connection's bufio.Reader reads: the watcher's byte first, and at
// most remain bytes (the head's bound).
type connReader struct {
	c       net.Conn
	b       [1]byte
	hasByte bool
	remain  int64
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.remain {
		p = p[:r.remain]
	}
	if r.hasByte && len(p) > 0 {
		p[0], r.hasByte = r.b[0], false
		r.remain--
		return 1, nil
	}
	n, err := r.c.Read(p)
	r.remain -= int64(n)
	return n, err
}

// bodyReader is a request's body as the handler sees it: it answers "100 Continue" before
// the first read when the client asked for it, and records the body's end.
type bodyReader struct {
	c         *srvConn
	rc        io.ReadCloser
	continue_ bool // 100 Continue still owed
	eof       bool
	eofSeen   atomic.Bool // eof, for the watcher
	left      int64       // bytes of a declared length not yet read (-1: chunked)
	closed    atomic.Bool // the handler returned: its reads fail
}

func (b *bodyReader) reset(c *srvConn, req *http.Request) {
	b.c, b.rc = c, req.Body
	b.continue_ = req.ProtoAtLeast(1, 1) && strings.EqualFold(req.Header.Get("Expect"), "100-continue")
	b.eof = req.Body == nil || req.Body == http.NoBody
	b.eofSeen.Store(b.eof)
	b.left = req.ContentLength
	b.closed.Store(false)
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *bodyReader) read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.continue_ {
		b.continue_ = false
		if !b.c.w.wroteHead {
			_, _ = b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if err := b.c.bw.Flush(); err != nil {
				return 0, err
			}
		}
	}
	n, err := b.rc.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err == io.EOF {
		b.eof = true
		b.eofSeen.Store(true)
		if !b.closed.Load() { // not finish's discard
			b.c.arm()
		}
	}
	return n, err
}

func (b *bodyReader) Close() error { return nil }

// answer is the handler's http.ResponseWriter.
type answer struct {
	c          *srvConn
	req        *http.Request
	hdr        http.Header
	status     int
	wroteHead  bool
	bodyless   bool  // HEAD, 1xx, 204, 304: no body is sent
	chunked    bool  // the body goes out in chunks
	cl         int64 // the declared Content-Length, or -1
	n          int64 // body bytes the handler wrote
	closeAfter bool
	hasType    bool  // no Content-Type to sniff: the handler set one (or a Content-Encoding)
	hasDate    bool  // the handler set a Date
	err        error // the first write error
}

func (w *answer) reset(c *srvConn, req *http.Request) {
	*w = answer{c: c, req: req, hdr: make(http.Header, 4), cl: -1}
	c.hold = c.hold[:0]
}

func (w *answer) Header() http.Header { return w.hdr }

func (w *answer) WriteHeader(code int) {
	if w.status != 0 || w.wroteHead {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		return // informational answers are not relayed
	}
	w.status = code
	// The header is taken now, as net/http takes it: a handler may change or recycle its
	// values once it has called WriteHeader (the exchange's X-Request-Id does).
	h := w.hdr
	if v := h.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.cl = n
		}
	}
	_, w.hasType = h["Content-Type"] // present, even empty: not sniffed (as net/http)
	if _, enc := h["Content-Encoding"]; enc {
		w.hasType = true
	}
	_, w.hasDate = h["Date"]
	w.closeAfter = strings.EqualFold(h.Get("Connection"), "close")
	head := w.c.head[:0]
	for k, vs := range h {
		switch k {
		case "Transfer-Encoding", "Connection", "Content-Length":
			continue // framing: writeHead's
		}
		if !validHeaderName(k) {
			continue
		}
		for _, v := range vs {
			head = append(head, k...)
			head = append(head, ": "...)
			for i := 0; i < len(v); i++ {
				if b := v[i]; b == '\r' || b == '\n' {
					head = append(head, ' ')
				} else {
					head = append(head, b)
				}
			}
			head = append(head, "\r\n"...)
		}
	}
	w.c.head = head
}

func (w *answer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.req.Method == http.MethodHead {
		return len(p), nil // as net/http: accepted, not sent
	}
	if w.cl >= 0 && w.n+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.n += int64(len(p))
	if !w.wroteHead {
		if w.cl < 0 && len(w.c.hold)+len(p) <= holdMax {
			if w.c.hold == nil {
				w.c.hold = make([]byte, 0, holdMax)
			}
			w.c.hold = append(w.c.hold, p...)
			return len(p), nil
		}
		w.writeHead(false, p)
	}
	w.body(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// body writes p into the connection's buffer, as a chunk when chunked.
func (w *answer) body(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		var b [20]byte
		_, _ = bw.Write(strconv.AppendInt(b[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	if _, err := bw.Write(p); err != nil {
		w.err = err
		return
	}
	if w.chunked {
		_, _ = bw.WriteString("\r\n")
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func bodyAllowed(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// writeHead writes the status line and headers, then the held body. final: the handler has
// returned, so a body not declared is exactly what is held. more is the write that follows
// (sniffed for a Content-Type when nothing is held).
func (w *answer) writeHead(final bool, more []byte) {
	w.wroteHead = true
	req := w.req
	if b := &w.c.body; !b.eof {
		// As net/http: read what is left of a body the handler did not read (up to 256 KiB)
		// before answering, so the connection can serve the next request. More, a body the
		// client waits for "100 Continue" to send, or a handler that said Connection: close,
		// and the connection closes instead.
		if b.continue_ || w.closeAfter || b.left > maxDiscard {
			w.closeAfter = true
		} else if _, err := io.CopyN(io.Discard, readerFunc(b.read), maxDiscard+1); err != io.EOF {
			w.closeAfter = true
		}
	}
	w.bodyless = req.Method == http.MethodHead || !bodyAllowed(w.status)
	if req.Close || !req.ProtoAtLeast(1, 1) || w.c.s.noKeepAlive.Load() {
		w.closeAfter = true
	}
	bw := w.c.bw
	var b [64]byte
	line := append(b[:0], "HTTP/1.1 "...)
	line = strconv.AppendInt(line, int64(w.status), 10)
	line = append(line, ' ')
	line = append(line, http.StatusText(w.status)...)
	line = append(line, "\r\n"...)
	_, _ = bw.Write(line)
	if !w.hasDate {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(time.Now().UTC().AppendFormat(b[:0], http.TimeFormat))
		_, _ = bw.WriteString("\r\n")
	}
	if !w.bodyless {
		if !w.hasType && w.n > 0 {
			sniff := w.c.hold
			if len(sniff) == 0 {
				sniff = more
			}
			_, _ = bw.WriteString("Content-Type: ")
			_, _ = bw.WriteString(http.DetectContentType(sniff))
			_, _ = bw.WriteString("\r\n")
		}
		switch {
		case w.cl >= 0:
			_, _ = bw.WriteString("Content-Length: ")
			_, _ = bw.Write(strconv.AppendInt(b[:0], w.cl, 10))
			_, _ = bw.WriteString("\r\n")
		case final:
			w.cl = int64(len(w.c.hold))
			_, _ = bw.WriteString("Content-Length: ")
			_, _ = bw.Write(strconv.AppendInt(b[:0], w.cl, 10))
			_, _ = bw.WriteString("\r\n")
		case req.ProtoAtLeast(1, 1):
			w.chunked = true
			_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
		default:
			w.closeAfter = true // HTTP/1.0: the body ends when the connection does
		}
	} else if w.cl >= 0 {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(b[:0], w.cl, 10))
		_, _ = bw.WriteString("\r\n")
	}
	if w.closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.Write(w.c.head)
	if _, err := bw.WriteString("\r\n"); err != nil {
		w.err = err
	}
	if !w.bodyless {
		w.body(w.c.hold)
	}
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if b := k[i]; b <= ' ' || b >= 0x7f || b == ':' {
			return false
		}
	}
	return true
}

// Flush sends the head (if not yet sent) and everything written so far.
func (w *answer) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController calls it).
func (w *answer) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.wroteHead {
		w.writeHead(false, nil)
	}
	if w.err != nil {
		return w.err
	}
	if err := w.c.bw.Flush(); err != nil {
		w.err = err
	}
	return w.err
}

// SetReadDeadline and SetWriteDeadline move the connection's deadlines
// (http.ResponseController calls them).
func (w *answer) SetReadDeadline(t time.Time) error  { return w.c.c.SetReadDeadline(t) }
func (w *answer) SetWriteDeadline(t time.Time) error { return w.c.c.SetWriteDeadline(t) }

// finish completes the answer after the handler returned.
func (w *answer) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.wroteHead {
		w.writeHead(true, nil)
	} else if w.chunked && w.err == nil {
		_, _ = w.c.bw.WriteString("0\r\n\r\n")
	}
	if w.cl >= 0 && w.n != w.cl && !w.bodyless {
		w.closeAfter = true // short of its Content-Length: the client must not wait for more
	}
	if err := w.c.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
}

// flushPartial sends what a panicking handler wrote (the connection closes after).
func (w *answer) flushPartial() error {
	if w.wroteHead {
		return w.c.bw.Flush()
	}
	return nil
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// h1Transport is the upstream transport of the inference legs: plain HTTP/1.1 over pooled
// keep-alive connections, the calling goroutine doing every read and write itself.
//
// Why not http.Transport: it runs a read-loop and a write-loop goroutine per connection, so
// one proxied request hands off between goroutines several times, and at moderate load each
// hand-off wakes an idle thread. Here a request is one write, then reads on the handler's
// goroutine until the body ends and the connection goes back to the pool. Owning the read
// buffer also tells the relay when the upstream has nothing more buffered (Pending), the
// moment to flush to the client (SPEC §1.4).
//
// Scope: http:// URLs. Anything else (https) goes to fallback, an http.Transport.
type h1Transport struct {
	dialer   net.Dialer
	idle     time.Duration // an idle connection older than this is closed, not reused
	maxIdle  int           // idle connections kept per host
	fallback clientDoer

	mu    sync.Mutex
	pools map[string][]*h1Conn // host:port → idle connections, most recently used last
	sweep *time.Timer          // closes expired idle connections while any are pooled
}

// h1Conn is one upstream connection.
type h1Conn struct {
	t      *h1Transport
	host   string
	conn   net.Conn
	head   *headCap // bounds the bytes read for a response head
	br     *bufio.Reader
	idleAt time.Time
}

// maxResponseHead bounds a worker's response head (status line and headers), as net/http's
// Transport.MaxResponseHeaderBytes does: a worker streaming headers without end cannot make
// the router buffer them.
const maxResponseHead = 1 << 20

// errResponseHeadTooLarge reports a response head over maxResponseHead.
var errResponseHeadTooLarge = fmt.Errorf("worker response head exceeds %d bytes", maxResponseHead)

// headCap passes reads through, at most left bytes while armed.
type headCap struct {
	r     io.Reader
	armed bool
	left  int
}

func (h *headCap) Read(p []byte) (int, error) {
	if !h.armed {
		return h.r.Read(p)
	}
	if h.left <= 0 {
		return 0, errResponseHeadTooLarge
	}
	if len(p) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= n
	return n, err
}

// peekAfter is how long a connection may idle before it is checked for a close by the worker
// before reuse. A worker closes idle connections after its keep-alive (uvicorn: 5 s); the
// odd one closed sooner fails on reuse and is retried once (SPEC §1.6).
const peekAfter = 100 * time.Millisecond

func newH1Transport(idle time.Duration) *h1Transport {
	return &h1Transport{
		dialer:   net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		idle:     idle,
		maxIdle:  512,
		fallback: clientDoer{&http.Client{Transport: newTransport(idle)}},
		pools:    map[string][]*h1Conn{},
	}
}

// aLongTimeAgo is a deadline that makes blocked reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// reqBufs hold requests being serialized (head and body, one write).
var reqBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// putReqBuf recycles a request buffer unless a large body grew it.
func putReqBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		reqBufs.Put(bp)
	}
}

// do sends one request (body nil: none; otherwise JSON) and returns the response once its head
// has been read, and whether it went out on a reused connection (the doer of the inference
// legs). Reading the body to its end returns the connection to the pool; closing it earlier
// closes the connection. A cancelled context unblocks any read or write, which then fails
// with the context's error.
func (t *h1Transport) do(ctx context.Context, method, url string, body []byte, hdr http.Header) (*http.Response, bool, error) {
	rest, ok := strings.CutPrefix(url, "http://")
	if !ok {
		return t.fallback.do(ctx, method, url, body, hdr)
	}
	host, uri := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, uri = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		// http://user:pass@host: credentials go in Authorization: Basic, as net/http sends
		// them, unless the request carries its own (the client's bearer token wins).
		userinfo := host[:at]
		host = host[at+1:]
		if hdr.Get("Authorization") == "" {
			user, pass, _ := strings.Cut(userinfo, ":")
			if u, err := neturl.PathUnescape(user); err == nil {
				user = u
			}
			if p, err := neturl.PathUnescape(pass); err == nil {
				pass = p
			}
			hdr = hdr.Clone()
			if hdr == nil {
				hdr = http.Header{}
			}
			hdr.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
		}
	}
	ctype := ""
	if body != nil {
		ctype = "application/json"
	}
	return t.exchange(ctx, method, host, uri, hdr, ctype, body)
}

// exchange sends method uri to host (host:port, or host for port 80) with hdr, a Content-Type
// (if not "") and body (nil: none) on a pooled connection, and reads the response head.
func (t *h1Transport) exchange(ctx context.Context, method, host, uri string, hdr http.Header, ctype string, body []byte) (*http.Response, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(strings.Trim(host, "[]"), "80")
	}
	head := serialize(method, host, uri, hdr, ctype, body)
	defer putReqBuf(head)
	c, reused, err := t.get(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, reused, cerr
		}
		return nil, reused, err
	}
	_, werr := c.conn.Write(*head)
	// A worker may answer before it has read the whole body (413, 400) and close: the write
	// then fails, but its response is there to read, as net/http reads it.
	resp, err := c.readHead(method)
	if werr != nil && err != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	keep := !resp.Close && werr == nil
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	resp.Body = &h1Body{c: c, body: resp.Body, stop: stop, ctx: ctx, keep: keep, chunked: chunked}
	return resp, reused, nil
}

// readHead reads the final response head, skipping informational ones (100 Continue, 103
// Early Hints), within maxResponseHead bytes in all.
func (c *h1Conn) readHead(method string) (*http.Response, error) {
	c.head.armed, c.head.left = true, maxResponseHead
	defer func() { c.head.armed = false }()
	for {
		resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
		if err != nil {
			if errors.Is(err, errResponseHeadTooLarge) {
				return nil, errResponseHeadTooLarge
			}
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("unexpected 101 Switching Protocols")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue // informational: no body, the final response follows
		}
		return resp, nil
	}
}

// serialize writes a request's head and body into a pooled buffer.
func serialize(method, host, uri string, hdr http.Header, ctype string, body []byte) *[]byte {
	bp := reqBufs.Get().(*[]byte)
	w := (*bp)[:0]
	w = append(w, method...)
	w = append(w, ' ')
	w = append(w, uri...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, host...)
	w = append(w, "\r\nUser-Agent: pdrouter\r\n"...)
	for k, vs := range hdr {
		switch k {
		case "Host", "Content-Length", "Connection", "Transfer-Encoding", "User-Agent":
			continue
		case "Content-Type":
			if ctype != "" {
				continue
			}
		}
		for _, v := range vs {
			w = append(w, k...)
			w = append(w, ": "...)
			w = append(w, v...)
			w = append(w, "\r\n"...)
		}
	}
	if ctype != "" {
		w = append(w, "Content-Type: "...)
		w = append(w, ctype...)
		w = append(w, "\r\n"...)
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		w = append(w, "Content-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	*bp = append(w, body...)
	return bp
}

// h1Body is a response body on a pooled connection. Close may be called while another
// goroutine reads (it unblocks the read).
type h1Body struct {
	c       *h1Conn
	body    io.ReadCloser
	stop    func() bool
	ctx     context.Context
	keep    bool // the connection may be reused after a complete body
	chunked bool

	mu   sync.Mutex
	done bool // the connection went back to the pool or was closed
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done { // closed while reading
		return n, err
	}
	b.done = true
	// stop reports whether the cancel func had not run: only then is the deadline intact.
	if intact := b.stop(); err == io.EOF && intact && b.keep && b.c.br.Buffered() == 0 {
		b.c.t.put(b.c)
		return n, err
	}
	b.c.conn.Close()
	if err != io.EOF {
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

// Close ends the body; a body not read to its end closes the connection.
func (b *h1Body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		b.stop()
		b.c.conn.Close()
	}
	return nil
}

// Pending reports whether the next Read returns without waiting for the network: the
// connection has already buffered body bytes (for a chunked body, a complete chunk-size line).
// Only the reading goroutine may call it.
func (b *h1Body) Pending() bool {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done { // the connection may already serve another request
		return false
	}
	n := b.c.br.Buffered()
	if n == 0 {
		return false
	}
	if !b.chunked {
		return true
	}
	buf, _ := b.c.br.Peek(n)                    // already buffered: no read
	buf = bytes.TrimPrefix(buf, []byte("\r\n")) // the end of the chunk just read
	return bytes.IndexByte(buf, '\n') >= 0
}

// get returns an idle connection to host that is still open, or dials a new one.
func (t *h1Transport) get(ctx context.Context, host string) (*h1Conn, bool, error) {
	for {
		t.mu.Lock()
		pool := t.pools[host]
		if len(pool) == 0 {
			t.mu.Unlock()
			break
		}
		c := pool[len(pool)-1]
		pool[len(pool)-1] = nil
		t.pools[host] = pool[:len(pool)-1]
		t.mu.Unlock()
		idle := time.Since(c.idleAt)
		if idle < t.idle && (idle < peekAfter || alive(c.conn)) {
			return c, true, nil
		}
		c.conn.Close()
	}
	conn, err := t.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	hc := &headCap{r: conn}
	return &h1Conn{t: t, host: host, conn: conn, head: hc, br: bufio.NewReaderSize(hc, 4<<10)}, false, nil
}

// put returns a connection whose last response was read to its end, and closes connections
// that idled past the timeout.
func (t *h1Transport) put(c *h1Conn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	stale := t.expireLocked(c.host, c.idleAt)
	pool := t.pools[c.host]
	keep := len(pool) < t.maxIdle
	if keep {
		t.pools[c.host] = append(pool, c)
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idle, t.sweepIdle)
		}
	}
	t.mu.Unlock()
	for _, s := range stale {
		s.conn.Close()
	}
	if !keep {
		c.conn.Close()
	}
}

// expireLocked removes host's connections idle for the timeout at now and returns them.
func (t *h1Transport) expireLocked(host string, now time.Time) []*h1Conn {
	pool := t.pools[host]
	expired := 0 // the oldest are first
	for expired < len(pool) && now.Sub(pool[expired].idleAt) >= t.idle {
		expired++
	}
	if len(pool) == 0 {
		delete(t.pools, host)
		return nil
	}
	if expired == 0 {
		return nil
	}
	stale := slices.Clone(pool[:expired])
	pool = append(pool[:0], pool[expired:]...)
	clear(pool[len(pool):cap(pool)])
	if len(pool) == 0 {
		delete(t.pools, host) // also forgets workers that were removed
	} else {
		t.pools[host] = pool
	}
	return stale
}

// sweepIdle closes expired idle connections of every host (a worker that gets no more
// requests, or was removed, still has its connections closed), and runs again while any
// connection is pooled.
func (t *h1Transport) sweepIdle() {
	now := time.Now()
	t.mu.Lock()
	var stale []*h1Conn
	for host := range t.pools {
		stale = append(stale, t.expireLocked(host, now)...)
	}
	t.sweep = nil
	if len(t.pools) > 0 {
		t.sweep = time.AfterFunc(t.idle/2, t.sweepIdle)
	}
	t.mu.Unlock()
	for _, s := range stale {
		s.conn.Close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	pools := t.pools
	t.pools = map[string][]*h1Conn{}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, pool := range pools {
		for _, c := range pool {
			c.conn.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

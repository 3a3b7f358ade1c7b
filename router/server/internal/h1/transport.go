package h1

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
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Request is one request to send.
type Request struct {
	Method string
	URL    string      // http://[user:pass@]host[:port][/path][?query]; userinfo is sent as Basic auth
	Path   string      // appended to URL ("" for none), as if joined: a worker's base URL and a route, without a string per request
	Body   []byte      // nil: none; otherwise sent as JSON with its Content-Length
	Header http.Header // may be nil; Host, Content-Length, Connection, Transfer-Encoding and User-Agent are the transport's
	// Pieces, when not nil, is the body instead of Body (which must then be nil): their
	// concatenation, sent as Body is, without joining them (one writev). Not modified.
	Pieces [][]byte
	// Deadline, when not zero, ends the exchange — sending, the head, the body — at that time:
	// it is the connection's deadline (one per exchange, where a context.WithDeadline per
	// request costs a timer, a context and its registration with its parent), and a read or
	// write cut by it fails with context.DeadlineExceeded. ctx still cancels the exchange.
	Deadline time.Time
	// NoHeader says the caller reads no field of the response's head but its status and
	// framing (a PD prefill leg, whose head is never relayed): a head the fast path parses
	// (head.go) then gets no Header map (nil), which costs a map and its entries per
	// response. A head net/http parses, and the fallback's, still have theirs.
	NoHeader bool
}

// bodyLen is the length of r's body.
func (r *Request) bodyLen() int {
	n := len(r.Body)
	for _, p := range r.Pieces {
		n += len(p)
	}
	return n
}

// Doer sends a request the transport does not serve itself (https://, a URL without a host),
// and returns the response once its head arrived and whether it went out on a reused
// connection.
type Doer interface {
	Do(ctx context.Context, r *Request) (*http.Response, bool, error)
}

// Transport sends requests over pooled HTTP/1.1 connections (see the package doc).
type Transport struct {
	dialer   net.Dialer
	idle     time.Duration // an idle connection older than this is closed, not reused
	maxIdle  int           // idle connections kept per host
	fallback Doer

	mu    sync.Mutex
	pools map[string][]*conn // host:port → idle connections, most recently used last
	sweep *time.Timer        // closes expired idle connections while any are pooled
}

// conn is one upstream connection.
type conn struct {
	t      *Transport
	addr   string
	nc     net.Conn
	head   *headCap // bounds the bytes read for a response head
	br     *bufio.Reader
	idleAt time.Time
	abort  func() // unblocks the connection's reads and writes (a cancelled request), made once
	// wbuf is the connection's write buffer: each exchange serializes its request head (and
	// small body) into it, as net/http's persistConn writes through its own bufio.Writer. It is
	// the connection's alone (one exchange at a time) and is kept only up to keptWriteBuf.
	wbuf []byte
	// deadline is set while the connection carries the Deadline of its last exchange (the
	// next exchange sets or clears it: one call per exchange).
	deadline bool
}

// MaxResponseHead bounds a worker's response head (status line and headers), as net/http's
// Transport.MaxResponseHeaderBytes does: a worker streaming headers without end cannot make
// the router buffer them.
const MaxResponseHead = 1 << 20

// errResponseHeadTooLarge reports a response head over MaxResponseHead.
var errResponseHeadTooLarge = fmt.Errorf("worker response headers exceed %d bytes", MaxResponseHead)

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
// odd one closed sooner fails on reuse, reported as reused, for the caller to retry.
const peekAfter = 100 * time.Millisecond

// New returns a transport whose idle connections live at most idle, sending what it does not
// serve to fallback.
func New(idle time.Duration, fallback Doer) *Transport {
	return &Transport{
		dialer:   net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		idle:     idle,
		maxIdle:  512,
		fallback: fallback,
		pools:    map[string][]*conn{},
	}
}

// aLongTimeAgo is a deadline that makes blocked reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// noStop is the stop of an exchange whose context is never done.
func noStop() bool { return true }

// target is where a request goes, split from its URL.
type target struct {
	host string // the Host header: host[:port] without userinfo
	addr string // the dial address, host:port
	uri  string // the request target: /path?query
	path string // Request.Path, sent after uri (which then has no query)
	bare bool   // the URL had no path: uri is the implied "/"
	auth string // Authorization from the URL's userinfo ("": none)
}

// parseURL splits an http:// URL; ok is false for one the transport does not serve.
func parseURL(url string) (tg target, ok bool) {
	rest, ok := strings.CutPrefix(url, "http://")
	if !ok {
		return tg, false
	}
	tg.host, tg.uri, tg.bare = rest, "/", true
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		tg.host, tg.uri, tg.bare = rest[:i], rest[i:], false
		if tg.uri[0] != '/' {
			tg.uri = "/" + tg.uri
		}
		tg.uri, _, _ = strings.Cut(tg.uri, "#") // a fragment is not sent
	}
	if at := strings.LastIndexByte(tg.host, '@'); at >= 0 {
		// http://user:pass@host: credentials go in Authorization: Basic, as net/http sends
		// them.
		user, pass, _ := strings.Cut(tg.host[:at], ":")
		if u, err := neturl.PathUnescape(user); err == nil {
			user = u
		}
		if p, err := neturl.PathUnescape(pass); err == nil {
			pass = p
		}
		tg.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
		tg.host = tg.host[at+1:]
	}
	if tg.host == "" {
		return tg, false
	}
	tg.addr = tg.host
	if _, _, err := net.SplitHostPort(tg.host); err != nil {
		tg.addr = net.JoinHostPort(strings.Trim(tg.host, "[]"), "80")
	}
	return tg, true
}

// Do sends r and returns the response once its head has been read, and whether it went out
// on a reused connection. Reading the body to its end returns the connection to the pool;
// closing it earlier closes the connection. A cancelled context unblocks any read or write,
// which then fails with the context's error.
func (t *Transport) Do(ctx context.Context, r *Request) (*http.Response, bool, error) {
	url := r.URL
	if r.Path != "" && (r.Path[0] != '/' || strings.ContainsAny(url, "?#")) {
		url += r.Path // joined as written: the path lands where plain concatenation puts it
	}
	tg, ok := parseURL(url)
	if !ok {
		return t.fallbackDo(ctx, *r) // a copy to hand on, so that r does not escape on the path h1 serves
	}
	if len(url) == len(r.URL) {
		tg.path = r.Path
	}
	return t.exchange(ctx, r, &tg)
}

// fallbackDo sends r through the fallback, with a context that ends at r.Deadline (if any)
// until its body is closed or read to its end.
func (t *Transport) fallbackDo(ctx context.Context, r Request) (*http.Response, bool, error) {
	if r.Path != "" {
		r.URL, r.Path = r.URL+r.Path, ""
	}
	if r.Deadline.IsZero() {
		return t.fallback.Do(ctx, &r)
	}
	ctx, cancel := context.WithDeadline(ctx, r.Deadline)
	resp, reused, err := t.fallback.Do(ctx, &r)
	if err != nil {
		cancel()
		return resp, reused, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, reused, nil
}

// cancelBody cancels its request's context once read to its end or closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// exchange sends r to tg on a pooled connection and reads the response head.
func (t *Transport) exchange(ctx context.Context, r *Request, tg *target) (*http.Response, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	timed := !r.Deadline.IsZero()
	if timed && !time.Now().Before(r.Deadline) {
		return nil, false, context.DeadlineExceeded
	}
	if err := validate(r, tg); err != nil {
		return nil, false, err
	}
	c, reused, err := t.get(ctx, tg.addr, r.Deadline)
	if err != nil {
		if timed && ctx.Err() == nil && !time.Now().Before(r.Deadline) {
			return nil, false, context.DeadlineExceeded // the dial ran into the request's deadline
		}
		return nil, false, err
	}
	head := serialize(c.wbuf[:0], r, tg)
	if cap(head) <= keptWriteBuf {
		c.wbuf = head
	} else {
		c.wbuf = nil // a large body's: not kept for every exchange after
	}
	switch {
	case timed:
		_ = c.nc.SetDeadline(r.Deadline)
		c.deadline = true
	case c.deadline: // the last exchange's, left in place when it ended
		_ = c.nc.SetDeadline(time.Time{})
		c.deadline = false
	}
	// A context that ends (cancelled, or at its deadline) unblocks the connection's reads and
	// writes; the exchange then fails with the context's error.
	stop := noStop // a context that is never done (context.WithoutCancel) needs no watch
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, c.abort)
	}
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.nc.Close()
		return nil, reused, exchangeErr(ctx, err, timed)
	}
	var werr error
	if r.bodyLen() > inlineBody {
		bufs := append(make(net.Buffers, 0, 2+len(r.Pieces)), head) // WriteTo consumes its own copy
		if r.Body != nil {
			bufs = append(bufs, r.Body)
		}
		bufs = append(bufs, r.Pieces...)
		_, werr = bufs.WriteTo(c.nc)
	} else {
		_, werr = c.nc.Write(head)
	}
	// A worker may answer before it has read the whole body (413, 400) and close: the write
	// then fails, but its response is there to read, as net/http reads it.
	x, err := c.readHead(r.Method, !r.NoHeader)
	if werr != nil && err != nil {
		return fail(werr)
	}
	if err != nil {
		return fail(err)
	}
	resp := &x.resp
	keep := !resp.Close && werr == nil
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	x.b = body{c: c, body: resp.Body, stop: stop, ctx: ctx, keep: keep, chunked: chunked, timed: timed}
	resp.Body = &x.b
	return resp, reused, nil
}

// readHead reads the final response head, skipping informational ones (100 Continue, 103
// Early Hints), within MaxResponseHead bytes in all. The returned response's Body reads the
// body as its framing says (exchange wraps it). Without header, a head the fast path parses
// gets no Header (Request.NoHeader).
func (c *conn) readHead(method string, header bool) (*response, error) {
	c.head.armed, c.head.left = true, MaxResponseHead
	defer func() { c.head.armed = false }()
	for {
		if x := c.fastHead(method, header); x != nil {
			return x, nil
		}
		resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
		if err != nil {
			if errors.Is(err, errResponseHeadTooLarge) {
				return nil, errResponseHeadTooLarge
			}
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("unexpected 101 Switching Protocols")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue // informational: no body, the final response follows
		}
		return &response{resp: *resp}, nil
	}
}

// skipHeader reports whether a request header is the transport's to write, not the caller's.
func skipHeader(k string) bool {
	switch k {
	case "Host", "Content-Length", "Connection", "Transfer-Encoding", "User-Agent", "Trailer":
		return true
	}
	return false
}

// validate rejects what net/http would refuse to send: a method that is not a token, a
// request target or Host with characters that would end the request line, and header names
// or values that are not valid field names and values (httpguts).
func validate(r *Request, tg *target) error {
	if r.Method == "" || strings.IndexFunc(r.Method, func(c rune) bool { return !httpguts.IsTokenRune(c) }) >= 0 {
		return fmt.Errorf("h1: invalid method %q", r.Method)
	}
	bad := func(c rune) bool { return c <= ' ' || c == 0x7f }
	if strings.IndexFunc(tg.uri, bad) >= 0 || strings.IndexFunc(tg.path, bad) >= 0 {
		return fmt.Errorf("h1: invalid character in request target %q", tg.uri+tg.path)
	}
	if !httpguts.ValidHostHeader(tg.host) {
		return fmt.Errorf("h1: invalid Host %q", tg.host)
	}
	for k, vs := range r.Header {
		if skipHeader(k) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// keptWriteBuf bounds the write buffer a connection keeps between exchanges (a request head
// and a body of a few KiB fit).
const keptWriteBuf = 16 << 10

// serialize appends r's head, and its body unless it is over inlineBody, to w (grown once, to
// the right size, when it is too small) and returns it. r was validated.
func serialize(w []byte, r *Request, tg *target) []byte {
	json := r.Body != nil || r.Pieces != nil
	size := r.bodyLen()
	inline := 0
	if size <= inlineBody {
		inline = size
	}
	// The head's size, so that it takes one allocation: the fixed lines (request line, Host,
	// User-Agent, Authorization, Content-Type, Content-Length and the blank line) in 160
	// bytes beside their variable parts, and each header line.
	n := 160 + len(r.Method) + len(tg.uri) + len(tg.path) + len(tg.host) + len(tg.auth) + inline
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if cap(w)-len(w) < n {
		grown := make([]byte, len(w), len(w)+n)
		copy(grown, w)
		w = grown
	}
	w = append(w, r.Method...)
	w = append(w, ' ')
	w = appendTarget(w, tg)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, tg.host...)
	w = append(w, "\r\nUser-Agent: pdrouter\r\n"...)
	for k, vs := range r.Header {
		if skipHeader(k) || (k == "Content-Type" && json) {
			continue
		}
		for _, v := range vs {
			w = append(w, k...)
			w = append(w, ": "...)
			w = append(w, strings.Trim(v, " \t")...) // as net/http writes values
			w = append(w, "\r\n"...)
		}
	}
	// The URL's credentials, unless the request carries its own (the client's bearer token
	// wins).
	if tg.auth != "" && len(r.Header["Authorization"]) == 0 {
		w = append(w, "Authorization: "...)
		w = append(w, tg.auth...)
		w = append(w, "\r\n"...)
	}
	if json {
		w = append(w, "Content-Type: application/json\r\n"...)
	}
	m := r.Method
	if json || m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch {
		w = append(w, "Content-Length: "...)
		w = strconv.AppendInt(w, int64(size), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	if size <= inlineBody {
		w = append(w, r.Body...)
		for _, p := range r.Pieces {
			w = append(w, p...)
		}
	}
	return w
}

// appendTarget appends tg's request target: the URL's path, then Request.Path (which starts
// with "/"; Do joins the others to the URL).
func appendTarget(w []byte, tg *target) []byte {
	if !tg.bare || tg.path == "" {
		w = append(w, tg.uri...)
	}
	return append(w, tg.path...)
}

// inlineBody is the largest body serialize copies behind the head (one write); a larger one is
// written from the caller's slice after it (one writev), so a request costs no copy of it.
const inlineBody = 64 << 10

// body is a response body on a pooled connection. Close may be called while another
// goroutine reads (it unblocks the read).
type body struct {
	c       *conn
	body    io.ReadCloser
	stop    func() bool
	ctx     context.Context
	keep    bool // the connection may be reused after a complete body
	chunked bool
	timed   bool // the connection carries the request's Deadline

	done bool       // the connection went back to the pool or was closed; under mu
	mu   sync.Mutex // protects done (after it: with the flags together, a response fits 256 bytes)
}

func (b *body) Read(p []byte) (int, error) {
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
	// stop reports whether the context's abort had not run: only then is the connection's
	// deadline intact.
	intact := b.stop()
	if err == io.EOF && intact && b.keep && b.c.br.Buffered() == 0 {
		b.c.t.put(b.c)
		return n, err
	}
	b.c.nc.Close()
	if err != io.EOF {
		err = exchangeErr(b.ctx, err, b.timed)
	}
	return n, err
}

// exchangeErr is the error an exchange that failed with err reports: ctx's when it ended, a
// Deadline's expiry as context.DeadlineExceeded, else err.
func exchangeErr(ctx context.Context, err error, timed bool) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if timed && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// Close ends the body; a body not read to its end closes the connection.
func (b *body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		b.stop()
		b.c.nc.Close()
	}
	return nil
}

// Pending reports whether the next Read returns without waiting for the network: the
// connection has already buffered body bytes (for a chunked body, a complete chunk-size line).
// Only the reading goroutine may call it.
func (b *body) Pending() bool {
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

// get returns an idle connection to addr that is still open, or dials a new one, within
// deadline (unless zero) as well as the dialer's timeout.
func (t *Transport) get(ctx context.Context, addr string, deadline time.Time) (*conn, bool, error) {
	for {
		t.mu.Lock()
		pool := t.pools[addr]
		if len(pool) == 0 {
			t.mu.Unlock()
			break
		}
		c := pool[len(pool)-1]
		pool[len(pool)-1] = nil
		t.pools[addr] = pool[:len(pool)-1]
		t.mu.Unlock()
		idle := time.Since(c.idleAt)
		if idle < t.idle && (idle < peekAfter || alive(c.nc)) {
			return c, true, nil
		}
		c.nc.Close()
	}
	d := t.dialer
	d.Deadline = deadline
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	nc = Raw(nc)
	hc := &headCap{r: nc}
	c := &conn{t: t, addr: addr, nc: nc, head: hc, br: bufio.NewReaderSize(hc, 4<<10)}
	c.abort = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	return c, false, nil
}

// put returns a connection whose last response was read to its end, and closes connections
// that idled past the timeout.
func (t *Transport) put(c *conn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	stale := t.expireLocked(c.addr, c.idleAt)
	pool := t.pools[c.addr]
	keep := len(pool) < t.maxIdle
	if keep {
		t.pools[c.addr] = append(pool, c)
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idle, t.sweepIdle)
		}
	}
	t.mu.Unlock()
	for _, s := range stale {
		s.nc.Close()
	}
	if !keep {
		c.nc.Close()
	}
}

// expireLocked removes addr's connections idle for the timeout at now and returns them.
func (t *Transport) expireLocked(addr string, now time.Time) []*conn {
	pool := t.pools[addr]
	expired := 0 // the oldest are first
	for expired < len(pool) && now.Sub(pool[expired].idleAt) >= t.idle {
		expired++
	}
	if len(pool) == 0 {
		delete(t.pools, addr)
		return nil
	}
	if expired == 0 {
		return nil
	}
	stale := slices.Clone(pool[:expired])
	pool = append(pool[:0], pool[expired:]...)
	clear(pool[len(pool):cap(pool)])
	if len(pool) == 0 {
		delete(t.pools, addr) // also forgets workers that were removed
	} else {
		t.pools[addr] = pool
	}
	return stale
}

// sweepIdle closes expired idle connections of every host (a worker that gets no more
// requests, or was removed, still has its connections closed), and runs again while any
// connection is pooled.
func (t *Transport) sweepIdle() {
	now := time.Now()
	t.mu.Lock()
	var stale []*conn
	for addr := range t.pools {
		stale = append(stale, t.expireLocked(addr, now)...)
	}
	t.sweep = nil
	if len(t.pools) > 0 {
		t.sweep = time.AfterFunc(t.idle/2, t.sweepIdle)
	}
	t.mu.Unlock()
	for _, s := range stale {
		s.nc.Close()
	}
}

// CloseIdleConnections closes every pooled connection (not the fallback's).
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	pools := t.pools
	t.pools = map[string][]*conn{}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, pool := range pools {
		for _, c := range pool {
			c.nc.Close()
		}
	}
}

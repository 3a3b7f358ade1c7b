package server

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// RFC 9112 §6.3: a request with both Content-Length and Transfer-Encoding "ought to be handled
// as an error" — a front proxy that framed it by Content-Length would read the rest of the
// body as another request (request smuggling). net/http cannot be told so: it drops the
// Content-Length before a handler sees the request (transfer.go, fixLength), serves it and
// keeps the connection. So the check runs on the byte stream: [GuardFraming] wraps the
// listener's connections with a reader that follows each HTTP/1.x request head and body as
// net/http will frame them, and when a head carries both fields it adds one header line
// before the head's end, naming the problem with a per-process secret. The handler
// (Server.Handler) answers such a request 400 with Connection: close.
//
// The reader never holds bytes back nor copies them on the way (it reads straight into the
// caller's buffer and scans it in place); it allocates only when it adds a line. It mirrors
// net/http's framing rules exactly where net/http accepts a request, and where net/http
// refuses one (malformed heads, bodies, versions) net/http closes the connection itself, so
// the reader stops following it. Where it is unsure whether net/http refuses, it marks the
// request too, so the handler refuses it and closes: it fails closed.

// framingHeader is the header line the reader adds; its value is framingToken, a space and
// the reason.
const framingHeader = "Pdrouter-Framing-Error"

// Reasons a head is marked.
const (
	framingBoth    = 'B' // Content-Length and Transfer-Encoding
	framingUnclear = 'F' // framing the reader cannot follow: net/http should refuse it first
)

var (
	framingToken   = rand.Text() // not guessable by a client: a header it sends itself is ignored
	framingMarkers = map[byte][]byte{
		framingBoth:    []byte(framingHeader + ": " + framingToken + " B\r\n"),
		framingUnclear: []byte(framingHeader + ": " + framingToken + " F\r\n"),
	}
)

// framingError returns the message for a request the reader marked, or "".
func framingError(r *http.Request) string {
	for _, v := range r.Header[framingHeader] {
		rest, ok := strings.CutPrefix(v, framingToken+" ")
		if !ok {
			continue
		}
		if rest == string(rune(framingBoth)) {
			return "request has both Content-Length and Transfer-Encoding: refused as a request smuggling risk (RFC 9112 §6.3); send one of them"
		}
		return "request body framing (Content-Length, Transfer-Encoding) is malformed"
	}
	return ""
}

// GuardFraming wraps ln so that every request with both Content-Length and Transfer-Encoding
// reaches Server.Handler marked, to be answered 400 and the connection closed (RFC 9112
// §6.3). Serve the router's plain-HTTP listener through it; for HTTPS see [GuardFramingTLS].
func GuardFraming(ln net.Listener) net.Listener { return guardListener{ln} }

type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c}, nil
}

// guardConn is a client connection whose reads pass through a framer.
type guardConn struct {
	net.Conn
	f      framer
	marker []byte // the rest of an added header line, returned before anything else
	held   []byte // bytes read but not yet returned (after an added line), not yet scanned
	err    error  // a read error to return once held is empty
}

func (c *guardConn) Read(p []byte) (int, error) {
	if len(c.marker) > 0 {
		n := copy(p, c.marker)
		c.marker = c.marker[n:]
		return n, nil
	}
	var n int
	var err error
	switch {
	case len(c.held) > 0:
		n = copy(p, c.held)
		c.held = c.held[n:]
	case c.err != nil:
		return 0, c.err
	default:
		n, err = c.Conn.Read(p)
	}
	if n == 0 || c.f.dead {
		return n, err
	}
	at := c.f.scan(p[:n])
	if at < 0 {
		return n, err
	}
	// A marked head ends at p[at]: return what precedes it, then the header line, then the
	// rest (scanned when it is returned).
	c.held = append(bytes.Clone(p[at:n]), c.held...)
	c.err = err
	c.marker = framingMarkers[c.f.reason]
	if at == 0 {
		at = copy(p, c.marker)
		c.marker = c.marker[at:]
	}
	return at, nil
}

// CloseWrite lets net/http half-close the connection before closing it (so a client still
// sending its body reads the response rather than a reset).
func (c *guardConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the TCP connection's sendfile/splice path for responses.
func (c *guardConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// GuardFramingTLS serves TLS with cfg on ln and guards the HTTP/1.x connections as
// [GuardFraming] does. Each handshake runs on its own goroutine, bounded by
// handshakeTimeout, before the connection is handed to net/http: HTTP/2 connections (ALPN
// "h2", which has no such framing ambiguity) as the *tls.Conn net/http serves HTTP/2 on, the
// others guarded (with their TLS state, so Request.TLS stays set). cfg's NextProtos should
// list "h2" and "http/1.1", and the http.Server's TLSConfig should name "h2" too, so that
// Serve sets HTTP/2 up.
func GuardFramingTLS(ln net.Listener, cfg *tls.Config, handshakeTimeout time.Duration) net.Listener {
	l := &tlsGuardListener{inner: ln, cfg: cfg, timeout: handshakeTimeout,
		conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

type tlsGuardListener struct {
	inner   net.Listener
	cfg     *tls.Config
	timeout time.Duration
	conns   chan net.Conn
	errs    chan error
	done    chan struct{}
	once    sync.Once
}

func (l *tlsGuardListener) acceptLoop() {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

func (l *tlsGuardListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.cfg)
	if l.timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(l.timeout))
	}
	if err := tc.Handshake(); err != nil {
		// As net/http does: a client speaking plain HTTP learns why.
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	var out net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		out = &tlsGuardConn{guardConn: guardConn{Conn: tc}, tc: tc}
	}
	select {
	case l.conns <- out:
	case <-l.done:
		_ = out.Close()
	}
}

func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET /", "HEAD ", "POST ", "PUT /", "OPTIO"} {
		if string(hdr) == m {
			return true
		}
	}
	return false
}

func (l *tlsGuardListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *tlsGuardListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.inner.Close()
}

func (l *tlsGuardListener) Addr() net.Addr { return l.inner.Addr() }

// tlsGuardConn is a guarded HTTP/1.x connection over TLS. net/http sets Request.TLS from
// ConnectionState for connections that are not a *tls.Conn.
type tlsGuardConn struct {
	guardConn
	tc *tls.Conn
}

func (c *tlsGuardConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// framer follows the request stream of one connection: each head (request line, header
// fields) and its body (Content-Length bytes, or chunks and trailer), as net/http frames them
// (net/http/request.go readRequest, transfer.go readTransfer, internal/chunked.go).
type framer struct {
	st   uint8
	dead bool // stopped following: net/http refuses what came, and closes

	// head
	spaces   uint8   // spaces seen in the request line
	proto    [9]byte // the request line after its second space
	protoN   uint8
	http11   bool // HTTP/1.1 or later: Transfer-Encoding counts (net/http ignores it in HTTP/1.0)
	fields   bool // a header field line has been seen
	kind     uint8
	nameN    uint8
	cand     uint8 // name candidates while matching: kindCL, kindTE bits
	clFields uint8
	clBad    bool
	clVal    uint64
	teFields uint8
	teBad    bool
	unclear  bool // something net/http refuses (missing colon, fold of the first line, …)
	injected bool // the marker for this head was added: do not add it again
	reason   byte

	// value being read (Content-Length digits, or "chunked")
	vst  uint8 // 0 before, 1 in, 2 after the token
	vbad bool
	val  uint64
	vi   uint8 // bytes of "chunked" matched

	// body
	remain uint64 // Content-Length or chunk bytes left
	hexN   uint8
	lineN  int // bytes of the chunk-size line
}

const (
	stReqLine uint8 = iota
	stLineStart
	stName
	stSkipLine
	stValue
	stHeadCR
	stBody
	stChunkSize
	stChunkWS
	stChunkExt
	stChunkLF
	stChunkData
	stChunkDataCR
	stChunkDataLF
	stTrailerStart
	stTrailerLine
	stTrailerCR
)

const (
	kindOther uint8 = 0
	kindCL    uint8 = 1
	kindTE    uint8 = 2
)

const (
	nameCL = "content-length"
	nameTE = "transfer-encoding"
	// net/http's limit on a chunk-size line (internal/chunked.go maxLineLength).
	maxChunkLine = 4096
)

// scan follows b. It returns -1, or the index in b where a marked head ends (its final empty
// line starts there): b[:i] has been followed, b[i:] has not, and the marker goes before it.
func (f *framer) scan(b []byte) int {
	for i := 0; i < len(b); {
		if f.dead {
			return -1
		}
		c := b[i]
		switch f.st {
		case stReqLine:
			// method SP request-target SP HTTP/x.y: the version is what follows the second
			// space (net/http's parseRequestLine).
			j := bytes.IndexByte(b[i:], '\n')
			seg := b[i:]
			if j >= 0 {
				seg = seg[:j]
			}
			for f.spaces < 2 && len(seg) > 0 {
				k := bytes.IndexByte(seg, ' ')
				if k < 0 {
					seg = nil
					break
				}
				f.spaces++
				seg = seg[k+1:]
			}
			if len(seg) > 0 {
				if int(f.protoN)+len(seg) > len(f.proto) {
					f.dead = true // too long for a version: refused
					return -1
				}
				f.protoN += uint8(copy(f.proto[f.protoN:], seg))
			}
			if j < 0 {
				return -1
			}
			i += j + 1
			f.requestLineDone()
			continue
		case stLineStart:
			if c == ' ' || c == '\t' { // obs-fold: the previous field goes on
				if !f.fields {
					f.unclear = true // net/http refuses a first header line that starts so
				}
				if f.kind == kindOther {
					f.st = stSkipLine
				} else {
					f.st = stValue
				}
				continue
			}
			f.endField()
			if c == '\r' || c == '\n' { // the empty line that ends the head
				if !f.injected {
					if f.reason = f.verdict(); f.reason != 0 {
						f.injected = true
						return i
					}
				}
				if c == '\r' {
					f.st = stHeadCR
					i++
					continue
				}
				i++
				f.headDone()
				continue
			}
			f.fields = true
			if l := c | 0x20; l != 'c' && l != 't' { // neither name: skip the line at once
				f.st = stSkipLine
				continue
			}
			f.st, f.nameN, f.cand = stName, 0, kindCL|kindTE
			continue
		case stName:
			// Match the name against both, any case, while either still fits.
			for ; i < len(b) && f.st == stName; i++ {
				c := b[i]
				switch {
				case c == ':':
					f.startValue()
				case c == '\n': // no colon: refused
					f.unclear = true
					f.st = stLineStart
				default:
					if 'A' <= c && c <= 'Z' {
						c += 'a' - 'A'
					}
					n := int(f.nameN)
					if n >= len(nameCL) || nameCL[n] != c {
						f.cand &^= kindCL
					}
					if n >= len(nameTE) || nameTE[n] != c {
						f.cand &^= kindTE
					}
					if f.cand == 0 {
						f.st = stSkipLine
						i-- // the line is skipped from this byte on
					}
					f.nameN++
				}
			}
		case stSkipLine:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return -1
			}
			i += j + 1
			f.st = stLineStart
		case stValue:
			if c == '\n' {
				f.st = stLineStart
			} else {
				f.valueByte(c)
			}
			i++
		case stHeadCR:
			if c != '\n' {
				f.dead = true // "\r" then something else: refused
				return -1
			}
			i++
			f.headDone()
		case stBody:
			n := uint64(len(b) - i)
			if n >= f.remain {
				i += int(f.remain)
				f.remain = 0
				f.nextRequest()
				continue
			}
			f.remain -= n
			return -1
		case stChunkSize, stChunkWS, stChunkExt:
			// chunk-size [ext] CRLF: hex digits (at most 16), then optional blanks, or ";"
			// and an extension; one CR, just before the LF; under 4096 bytes.
			i++
			f.lineN++
			if f.lineN > maxChunkLine {
				f.dead = true
				return -1
			}
			switch {
			case c == '\r':
				if f.st == stChunkSize && f.hexN == 0 {
					f.dead = true
					return -1
				}
				f.st = stChunkLF
			case f.st == stChunkExt && c != '\n':
			case f.st == stChunkWS && (c == ' ' || c == '\t'):
			case f.st == stChunkSize && f.hexN > 0 && (c == ' ' || c == '\t'):
				f.st = stChunkWS
			case f.st == stChunkSize && f.hexN > 0 && c == ';':
				f.st = stChunkExt
			case f.st == stChunkSize && f.hexN < 16 && hexVal(c) >= 0:
				f.remain = f.remain<<4 | uint64(hexVal(c))
				f.hexN++
			default:
				f.dead = true
				return -1
			}
		case stChunkLF:
			if c != '\n' {
				f.dead = true
				return -1
			}
			i++
			if f.remain == 0 {
				f.st = stTrailerStart
			} else {
				f.st = stChunkData
			}
		case stChunkData:
			n := uint64(len(b) - i)
			if n < f.remain {
				f.remain -= n
				return -1
			}
			i += int(f.remain)
			f.remain = 0
			f.st = stChunkDataCR
		case stChunkDataCR, stChunkDataLF:
			if (f.st == stChunkDataCR && c != '\r') || (f.st == stChunkDataLF && c != '\n') {
				f.dead = true
				return -1
			}
			i++
			if f.st == stChunkDataCR {
				f.st = stChunkDataLF
			} else {
				f.st, f.hexN, f.lineN = stChunkSize, 0, 0
			}
		case stTrailerStart:
			switch c {
			case '\r':
				f.st = stTrailerCR
				i++
			case '\n':
				i++
				f.nextRequest()
			default:
				f.st = stTrailerLine
			}
		case stTrailerLine:
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				return -1
			}
			i += j + 1
			f.st = stTrailerStart
		case stTrailerCR:
			if c != '\n' {
				f.dead = true
				return -1
			}
			i++
			f.nextRequest()
		}
	}
	return -1
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// requestLineDone reads the version (net/http's ParseHTTPVersion: "HTTP/d.d"). A line
// net/http refuses ends the following: net/http answers it and closes the connection.
func (f *framer) requestLineDone() {
	v := f.proto[:f.protoN]
	if len(v) > 0 && v[len(v)-1] == '\r' { // the line ends in CRLF or a bare LF
		v = v[:len(v)-1]
	}
	if f.spaces < 2 || len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9' {
		f.dead = true
		return
	}
	f.http11 = v[5] > '1' || (v[5] == '1' && v[7] >= '1')
	f.st = stLineStart
}

func (f *framer) startValue() {
	switch {
	case f.cand&kindCL != 0 && f.nameN == uint8(len(nameCL)):
		f.kind = kindCL
	case f.cand&kindTE != 0 && f.nameN == uint8(len(nameTE)):
		f.kind = kindTE
	default:
		f.kind = kindOther
		f.st = stSkipLine
		return
	}
	f.st, f.vst, f.vbad, f.val, f.vi = stValue, 0, false, 0, 0
}

// valueByte reads one byte of a Content-Length or Transfer-Encoding value. net/http trims
// blanks around values (a folded line is joined with a space); CR before the LF is the line
// end. A Content-Length is decimal digits below 2^63; a Transfer-Encoding must be "chunked",
// any case.
func (f *framer) valueByte(c byte) {
	if c == ' ' || c == '\t' || c == '\r' {
		if f.vst == 1 {
			f.vst = 2
		}
		return
	}
	if f.vst == 2 {
		f.vbad = true
		return
	}
	f.vst = 1
	if f.kind == kindCL {
		if c < '0' || c > '9' || f.val > (1<<63-1-uint64(c-'0'))/10 {
			f.vbad = true
			return
		}
		f.val = f.val*10 + uint64(c-'0')
		return
	}
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	if f.vi >= uint8(len("chunked")) || "chunked"[f.vi] != c {
		f.vbad = true
		return
	}
	f.vi++
}

// endField records the header field just read (its line is not folded on).
func (f *framer) endField() {
	switch f.kind {
	case kindCL:
		bad := f.vbad || f.vst == 0
		if f.clFields > 0 && f.val != f.clVal {
			bad = true // net/http refuses differing values (and accepts repeated equal ones)
		}
		f.clFields++
		f.clVal = f.val
		f.clBad = f.clBad || bad
	case kindTE:
		f.teFields++
		f.teBad = f.teBad || f.vbad || f.vi != uint8(len("chunked"))
	}
	f.kind = kindOther
}

// verdict is why this head is to be refused, or 0.
func (f *framer) verdict() byte {
	if f.clFields > 0 && f.teFields > 0 {
		return framingBoth
	}
	if f.unclear || f.clBad || (f.http11 && f.teFields > 0 && (f.teFields > 1 || f.teBad)) {
		return framingUnclear
	}
	return 0
}

// headDone starts the body as net/http frames it: Transfer-Encoding chunked wins over
// Content-Length (HTTP/1.1 and later); a head it refuses ends the following.
func (f *framer) headDone() {
	switch {
	case f.unclear || f.clBad || (f.http11 && f.teFields > 0 && (f.teFields > 1 || f.teBad)):
		f.dead = true
	case f.http11 && f.teFields > 0:
		f.st, f.remain, f.hexN, f.lineN = stChunkSize, 0, 0, 0
	case f.clFields > 0 && f.clVal > 0:
		f.st, f.remain = stBody, f.clVal
	default:
		f.nextRequest()
	}
}

// nextRequest expects the next request head.
func (f *framer) nextRequest() { *f = framer{} }

package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/textproto"

	"golang.org/x/net/http/httpguts"
)

// response is one exchange's response and its body readers in one allocation: the head a
// worker normally sends (HTTP/1.1, a final status, plain header lines, chunked or
// Content-Length framing) is parsed here without net/http's per-header strings, reader and
// transfer structs (issue 29: http.ReadResponse cost ~11 allocations per response); anything
// else goes to http.ReadResponse, which therefore decides every case the fast path does not
// take (FuzzReadHead holds both to the same results).
type response struct {
	resp   http.Response
	b      body       // the body the caller reads (set by exchange)
	framed framedBody // the body as its framing says (fast path)
}

// statusOK is Response.Status of a head read without its header (Request.NoHeader) that says
// "200 OK", as workers do.
const statusOK = "200 OK"

// chunkedTE is Response.TransferEncoding of a chunked response (shared: nobody modifies it).
var chunkedTE = []string{"chunked"}

// commonKeys interns the canonical names of the headers workers commonly send, so that their
// keys cost no allocation.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Date", "Server",
		"Connection", "Cache-Control", "Keep-Alive", "X-Request-Id", "X-Accel-Buffering", "Vary",
		"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers",
		"Pragma", "Trailer", "Set-Cookie", "Etag", "Last-Modified", "Location", "Content-Encoding",
		"X-Content-Type-Options", "Retry-After", "Strict-Transport-Security"} {
		m[k] = k
	}
	return m
}()

// maxFastHeaders bounds the header lines of a head the fast path parses (workers send about
// ten); a longer head goes to http.ReadResponse.
const maxFastHeaders = 32

// fastHead parses the response head buffered in c.br if it is one the fast path takes
// (see response), consuming it; nil leaves c.br untouched for http.ReadResponse. Without
// header, the response gets no Header (Request.NoHeader): its lines are checked all the same.
func (c *conn) fastHead(method string, header bool) *response {
	if method == http.MethodHead {
		return nil
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil
	}
	buf, _ := c.br.Peek(c.br.Buffered())
	// The status line: HTTP/1.1, a final status (2xx–5xx) with a body allowed.
	const proto = "HTTP/1.1 "
	if len(buf) < len(proto)+3 || string(buf[:len(proto)]) != proto {
		return nil
	}
	line, rest, ok := crlfLine(buf)
	if !ok {
		return nil
	}
	sc := line[len(proto):]
	if len(sc) < 3 || sc[0] < '2' || sc[0] > '5' || !isDigit(sc[1]) || !isDigit(sc[2]) || (len(sc) > 3 && sc[3] != ' ') {
		return nil
	}
	code := int(sc[0]-'0')*100 + int(sc[1]-'0')*10 + int(sc[2]-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	// The header lines: count them and find the head's end.
	n, end := 0, -1
	for r := rest; ; n++ {
		l, next, ok := crlfLine(r)
		if !ok || n > maxFastHeaders {
			return nil
		}
		if len(l) == 0 {
			end = len(buf) - len(next)
			break
		}
		r = next
	}
	// The header lines, twice: first checked, with the framing read from them; then, once the
	// fast path takes the head, kept. (Not gathered into an array on the way: fastHead's frame
	// is on the stack of every prefill leg's goroutine, which starts small and grows by copying.)
	var cl, te []byte
	nf, ncl, nte := 0, 0, 0
	for l, r, _ := crlfLine(rest); len(l) > 0; l, r, _ = crlfLine(r) {
		name, vs, ve, ok := field(l)
		if !ok {
			return nil
		}
		switch known, ok := commonKey(name); {
		case !ok:
			return nil
		case known == "Connection", known == "Pragma", known == "Trailer":
			return nil // ReadResponse's rules (close, Cache-Control, trailers)
		case known == "Content-Length":
			cl, ncl = l[vs:ve], ncl+1
		case known == "Transfer-Encoding":
			te, nte = l[vs:ve], nte+1
			continue // not kept in Header, as net/http does
		}
		nf++
	}
	x := new(response)
	switch {
	case nte == 1 && ncl == 0 && asciiEqualFold(te, "chunked"):
		x.resp.ContentLength = -1
		x.resp.TransferEncoding = chunkedTE
		x.framed = framedBody{br: c.br, cr: httputil.NewChunkedReader(c.br)}
		x.resp.Body = &x.framed
	case nte == 0 && ncl == 1:
		length, ok := parseLength(cl)
		if !ok {
			return nil
		}
		x.resp.ContentLength = length
		x.framed = framedBody{br: c.br, left: length}
		x.resp.Body = &x.framed
	default:
		return nil // a body to the connection's close, or framing ReadResponse judges
	}
	x.resp.StatusCode = code
	x.resp.Proto, x.resp.ProtoMajor, x.resp.ProtoMinor = "HTTP/1.1", 1, 1
	if !header {
		if x.resp.Status = statusOK; string(sc) != statusOK { // a worker's usual answer costs no copy
			x.resp.Status = string(sc)
		}
		_, _ = c.br.Discard(end)
		return x
	}
	head := string(buf[:end]) // the one copy: status and values are substrings of it
	h := make(http.Header, nf)
	slab := make([]string, nf)
	for l, r, _ := crlfLine(rest); len(l) > 0; l, r, _ = crlfLine(r) {
		name, vs, ve, _ := field(l)
		key, _ := canonicalKey(name)
		if key == "Transfer-Encoding" {
			continue
		}
		at := len(buf) - len(r) - len(l) - 2 // the line's offset in head
		val := head[at+vs : at+ve]
		vv := h[key]
		if vv == nil {
			vv, slab = slab[:1:1], slab[1:]
			vv[0] = val
			h[key] = vv
		} else {
			h[key] = append(vv, val)
		}
	}
	x.resp.Status, x.resp.Header = head[len(proto):len(line)], h
	_, _ = c.br.Discard(end)
	return x
}

// crlfLine splits the first CRLF-ended line off b; ok is false without one, or when the line
// holds another CR or LF or begins with white space (folding), all left to ReadResponse.
func crlfLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 || len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// field splits a header line at its colon: the name, and the value as l[vs:ve] without the
// white space around it; ok is false without a name, or for a value with control characters.
func field(l []byte) (name []byte, vs, ve int, ok bool) {
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return nil, 0, 0, false
	}
	for _, b := range l[colon+1:] {
		if b < ' ' && b != '\t' || b == 0x7f {
			return nil, 0, 0, false
		}
	}
	vs, ve = colon+1, len(l)
	for vs < ve && (l[vs] == ' ' || l[vs] == '\t') {
		vs++
	}
	for ve > vs && (l[ve-1] == ' ' || l[ve-1] == '\t') {
		ve--
	}
	return l[:colon], vs, ve, true
}

// maxKey is the longest header name canonicalised on the stack (longer ones by textproto).
const maxKey = 64

// canonical writes the canonical form of a header name (as textproto canonicalises it) into a
// when it fits (k; nil when it does not); ok is false for a name that is not a token.
func canonical(name []byte, a *[maxKey]byte) (k []byte, ok bool) {
	upper := true
	for i, b := range name {
		if b >= 0x80 || !httpguts.IsTokenRune(rune(b)) {
			return nil, false
		}
		if i >= len(a) {
			continue // checked only
		}
		if upper && 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		} else if !upper && 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		a[i] = b
		upper = b == '-'
	}
	if len(name) > len(a) {
		return nil, true
	}
	return a[:len(name)], true
}

// commonKey returns a header name's canonical form when it is a common one (commonKeys), ""
// for any other; ok is false for a name that is not a token. It allocates nothing.
func commonKey(name []byte) (known string, ok bool) {
	var a [maxKey]byte
	k, ok := canonical(name, &a)
	if k == nil {
		return "", ok
	}
	return commonKeys[string(k)], true
}

// canonicalKey returns the canonical form of a header name (as textproto canonicalises it),
// interned when common; ok is false for a name that is not a token.
func canonicalKey(name []byte) (string, bool) {
	var a [maxKey]byte
	k, ok := canonical(name, &a)
	switch {
	case !ok:
		return "", false
	case k == nil:
		return textproto.CanonicalMIMEHeaderKey(string(name)), true
	}
	if s, ok := commonKeys[string(k)]; ok {
		return s, true
	}
	return string(k), true
}

// asciiEqualFold reports whether s equals t ignoring ASCII case.
func asciiEqualFold(s []byte, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range len(s) {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value: digits only, at most 2^63-1, as net/http
// accepts it (strconv.ParseUint(s, 10, 63)).
func parseLength(s []byte) (int64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var n int64
	for _, b := range s {
		if !isDigit(b) || n > (math.MaxInt64-int64(b-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	return n, true
}

// framedBody reads a body as the head fastHead read frames it: a Content-Length body (cr nil)
// or a chunked one. (One type for both: the response it is part of fits 256 bytes.)
type framedBody struct {
	br   *bufio.Reader
	cr   io.Reader // a chunked body's chunk reader; nil: a Content-Length body of left bytes more
	left int64
	err  error // a chunked body's end once reached (io.EOF, or its error); nil before
}

// Close does nothing: the connection's body (body) owns the connection.
func (f *framedBody) Close() error { return nil }

func (f *framedBody) Read(p []byte) (int, error) {
	if f.cr != nil {
		return f.readChunked(p)
	}
	return f.readFixed(p)
}

// readFixed reads a Content-Length body: io.ErrUnexpectedEOF when the connection ends early,
// io.EOF with the last bytes (net/http's body does the same, so a finished body is seen at its
// last read).
func (f *framedBody) readFixed(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.br.Read(p)
	f.left -= int64(n)
	switch {
	case err == io.EOF && f.left > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && f.left == 0:
		err = io.EOF
	}
	return n, err
}

// errTrailer reports a trailer section that does not end as net/http requires.
var errTrailer = errors.New("h1: malformed trailer after chunked body")

// readChunked reads a chunked body, then its trailer section (read and dropped, as the relay
// never forwards trailers), as net/http's body does.
func (f *framedBody) readChunked(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.cr.Read(p)
	if err == io.EOF {
		f.err = io.EOF
		if terr := readTrailer(f.br); terr != nil {
			f.err = terr
		}
		err = f.err
	} else if err != nil {
		f.err = err
	}
	return n, err
}

// readTrailer consumes the trailer section after a chunked body's last chunk, refusing one
// whose end is not within the read buffer (net/http's guard against endless trailers).
func readTrailer(br *bufio.Reader) error {
	buf, err := br.Peek(2)
	if string(buf) == "\r\n" {
		_, _ = br.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		return err
	}
	for size := 4; ; size++ {
		buf, err := br.Peek(size)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			break
		}
		if err != nil {
			return errTrailer
		}
	}
	if _, err := textproto.NewReader(br).ReadMIMEHeader(); err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawConn is a client connection to the router that writes bytes as given and reads
// responses one after the other.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, tr *testRouter) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(tr.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	_, err := io.WriteString(rc.c, s)
	require.NoError(rc.t, err)
}

// response reads the next response and its whole body.
func (rc *rawConn) response() (*http.Response, string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, nil)
	require.NoError(rc.t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(rc.t, err)
	resp.Body.Close()
	return resp, string(body)
}

// requireClosed asserts the server closed the connection: the next read ends with EOF (a
// connection left open would time out instead).
func (rc *rawConn) requireClosed() {
	rc.t.Helper()
	n, err := rc.br.Read(make([]byte, 1))
	require.Zero(rc.t, n)
	require.True(rc.t, errors.Is(err, io.EOF), "the server closes the connection, got %v", err)
}

const (
	genBody     = `{"text":"hi"}`
	chunkedBody = "d\r\n" + genBody + "\r\n0\r\n\r\n"
)

func clRequest(path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n" + genBody
}

func chunkedRequest(path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody
}

// RFC 9112 §6.3: a request with both Content-Length and Transfer-Encoding is answered 400 with
// the router's JSON error naming the problem, and the connection is closed (a front proxy
// that framed it by Content-Length would otherwise read the rest as another request: request
// smuggling). net/http alone drops the Content-Length, serves the request and keeps the
// connection open. Every spelling net/http accepts is caught: any case, either order, the
// header repeated, a value folded onto the next line (obs-fold), HTTP/1.0.
func TestConflictingFramingRejected(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(w))
	heads := map[string]string{
		"cl then te": "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n",
		"te then cl": "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 13\r\n\r\n",
		"any case":   "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\nTRANSFER-ENCODING: Chunked\r\n\r\n",
		"repeated":   "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n",
		"obs-fold":   "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 13\r\nTransfer-Encoding:\r\n\tchunked\r\n\r\n",
		"bare lf":    "POST /generate HTTP/1.1\nHost: x\nContent-Length: 13\nTransfer-Encoding: chunked\n\n",
		"zero cl":    "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
	}
	for name, head := range heads {
		rc := dialRaw(t, tr)
		rc.send(head + chunkedBody)
		resp, body := rc.response()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), name)
		assert.True(t, resp.Close, "%s: Connection: close", name)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Contains(t, e.Error.Message, "both Content-Length and Transfer-Encoding", name)
		assert.Equal(t, "invalid_request_error", e.Error.Type, name)
		rc.requireClosed()
	}
	// HTTP/1.0, where net/http ignores Transfer-Encoding and reads 13 bytes.
	rc := dialRaw(t, tr)
	rc.send("POST /generate HTTP/1.0\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n" + genBody)
	resp, _ := rc.response()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	rc.requireClosed()
	assert.Zero(t, w.callCount(), "nothing reached the worker")
}

// A valid chunked request and a valid Content-Length request follow each other on one
// keep-alive connection, as do pipelined ones (sent at once, before any response); a
// conflicting request after them is refused and ends the connection.
func TestValidFramingKeepAliveAndPipelined(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(w))

	rc := dialRaw(t, tr)
	for _, req := range []string{chunkedRequest("/generate"), clRequest("/generate"), chunkedRequest("/generate")} {
		rc.send(req)
		resp, body := rc.response()
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.False(t, resp.Close)
		require.JSONEq(t, genReply, body)
	}

	// Pipelined: a GET, bodies that hold a conflicting request head (passed through raw by
	// /v1/embeddings), chunks with extensions, an upper-case size with a blank after it and
	// a trailer, then the conflicting request itself.
	rc = dialRaw(t, tr)
	tricky := "POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	trickyChunked := "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;ext=1\r\n" + tricky[:5] + "\r\n" + strings.ToUpper(strconv.FormatInt(int64(len(tricky)-5), 16)) + " \r\n" +
		tricky[5:] + "\r\n0\r\nX-Trailer: 1\r\n\r\n"
	pipelined := []string{
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		chunkedRequest("/generate"),
		clRequest("/generate"),
		"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(tricky)) + "\r\n\r\n" + tricky,
		trickyChunked,
		clRequest("/generate"),
	}
	rc.send(strings.Join(pipelined, "") + "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkedBody)
	for i := range pipelined {
		resp, body := rc.response()
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
	}
	resp, body := rc.response()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	rc.requireClosed()
	assert.Len(t, w.callsTo("/generate"), 3+3)
	emb := w.callsTo("/v1/embeddings")
	require.Len(t, emb, 2)
	assert.Equal(t, tricky, string(emb[0].raw))
	assert.Equal(t, tricky, string(emb[1].raw), "the chunked body arrived whole")
}

// pieceConn delivers a byte stream at most k bytes per Read.
type pieceConn struct {
	net.Conn
	data []byte
	k    int
}

func (c *pieceConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(c.k, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// framed is one request of a stream: its head (ending with the empty line), its body, and
// the reason the reader marks it for (0: none).
type framed struct {
	head, body string
	reason     byte
}

// withMarkers is what the handler side reads: each marked head with the header line added
// before its empty line.
func withMarkers(reqs []framed) (in, want string) {
	for _, r := range reqs {
		in += r.head + r.body
		if r.reason == 0 {
			want += r.head + r.body
			continue
		}
		end := len(r.head) - 2 // "\r\n"
		if !strings.HasSuffix(r.head, "\r\n") {
			end = len(r.head) - 1 // bare "\n"
		}
		want += r.head[:end] + string(framingMarkers[r.reason]) + r.head[end:] + r.body
	}
	return in, want
}

// readAllVia reads the stream through a guardConn, the connection delivering k bytes and
// the reader asking for m at a time (net/http asks for 4096, its background read for 1).
func readAllVia(in string, k, m int) (string, *guardConn) {
	gc := &guardConn{Conn: &pieceConn{data: []byte(in), k: k}}
	var out []byte
	buf := make([]byte, m)
	for {
		n, err := gc.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return string(out), gc
		}
	}
}

// The reader follows heads and bodies split at every byte, read in any size: it marks exactly
// the conflicting heads (an HTTP/1.1 one is still framed as chunked, as net/http does, so the
// requests after it are followed too) and hands everything else through unchanged.
func TestGuardConnFollowsEverySplit(t *testing.T) {
	t.Parallel()
	reqs := []framed{
		{"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "", 0},
		{"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n", genBody, 0},
		{"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Long: " + strings.Repeat("v", 300) + "\r\n\r\n",
			"5;a=b\r\nhello\r\nA \r\n0123456789\r\n0\r\nX-Trailer: t\r\nY: \r\n\r\n", 0},
		{"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r\nabc\r\n0\r\n\r\n", framingBoth},
		{"POST /generate HTTP/1.1\nHost: x\ncontent-length:\t2\n\n", "{}", 0},
		{"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n  CHUNKED\r\nContent-length: 4\r\n\r\n", "0\r\n\r\n", framingBoth},
		{"POST /generate HTTP/1.0\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", "{}", framingBoth},
		{"POST /generate HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "", 0}, // HTTP/1.0: Transfer-Encoding ignored, no body
		{"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", "x", 0},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", 0},
	}
	in, want := withMarkers(reqs)
	for k := 1; k <= len(in); k++ {
		for _, m := range []int{1, 7, 4096} {
			got, gc := readAllVia(in, k, m)
			if got != want {
				t.Fatalf("pieces of %d read %d at a time:\n got %q\nwant %q", k, m, got, want)
			}
			if gc.f.dead || gc.f.st != stReqLine || gc.f.spaces != 0 {
				t.Fatalf("pieces of %d read %d at a time: not at the next request head: %+v", k, m, gc.f)
			}
		}
	}
}

// Framing net/http refuses (it answers and closes) ends the following; heads the reader is
// unsure of are marked, so that the handler refuses and closes should net/http have served
// them.
func TestGuardConnRefusedFraming(t *testing.T) {
	t.Parallel()
	conflict := framed{"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "0\r\n\r\n", 0}
	cases := map[string]framed{}
	for name, first := range map[string]framed{
		"bad chunk size":       {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "zz\r\n", 0},
		"blank before ext":     {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "5 ;x\r\nhello\r\n0\r\n\r\n", 0},
		"chunk bare LF":        {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "5\nhello\r\n0\r\n\r\n", 0},
		"chunk without CRLF":   {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhelloX\r\n0\r\n\r\n", 0},
		"17 hex digits":        {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", "00000000000000005\r\nhello\r\n0\r\n\r\n", 0},
		"bad version":          {"GET / HTTP/1.1x\r\nHost: x\r\n\r\n", "", 0},
		"no version":           {"GET /\r\nHost: x\r\n\r\n", "", 0},
		"empty line first":     {"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "", 0},
		"bad content-length":   {"POST /g HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n", "", framingUnclear},
		"differing lengths":    {"POST /g HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "x", framingUnclear},
		"empty content-length": {"POST /g HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", "", framingUnclear},
		"huge content-length":  {"POST /g HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n", "", framingUnclear},
		"gzip":                 {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "", framingUnclear},
		"two encodings":        {"POST /g HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "", framingUnclear},
		"folded first line":    {"POST /g HTTP/1.1\r\n Host: x\r\n\r\n", "", framingUnclear},
		"missing colon":        {"POST /g HTTP/1.1\nHost: x\nTransfer\n\n", "", framingUnclear},
	} {
		cases[name] = first
	}
	for name, first := range cases {
		in, want := withMarkers([]framed{first})
		in += conflict.head + conflict.body
		want += conflict.head + conflict.body // not marked: the connection ends before it
		for _, k := range []int{1, 2, 3, 5, len(in)} {
			got, gc := readAllVia(in, k, 4096)
			require.Equal(t, want, got, "%s, pieces of %d", name, k)
			require.True(t, gc.f.dead, "%s, pieces of %d: no longer followed", name, k)
		}
	}
}

// A client cannot forge the mark, and a header of that name without the secret is ignored.
func TestFramingMarkNeedsTheSecret(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(w))
	status, _, body := tr.post(t, "/generate", genBody, map[string]string{framingHeader: "guess B"})
	assert.Equal(t, http.StatusOK, status, body)
}

// What TestGuardConnRefusedFraming assumes of net/http, checked against the router: each of
// those requests gets one answer (net/http's or the router's), never a 200, and the
// connection closes before the request after it is read.
func TestRefusedFramingClosesTheConnection(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(genReply))
	tr := startRouter(t, regularConfig(w))
	for name, head := range map[string]string{
		"bad chunk size":       "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"blank before ext":     "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nd ;x\r\n" + genBody + "\r\n0\r\n\r\n",
		"chunk bare LF":        "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nd\n" + genBody + "\r\n0\r\n\r\n",
		"chunk without CRLF":   "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n" + genBody + "X\r\n0\r\n\r\n",
		"17 hex digits":        "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000000d\r\n" + genBody + "\r\n0\r\n\r\n",
		"bad version":          "GET /health HTTP/1.1x\r\nHost: x\r\n\r\n",
		"no version":           "GET /health\r\nHost: x\r\n\r\n",
		"empty line first":     "\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		"bad content-length":   "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n",
		"differing lengths":    "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
		"empty content-length": "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n",
		"huge content-length":  "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\n",
		"gzip":                 "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
		"two encodings":        "POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"folded first line":    "POST /generate HTTP/1.1\r\n Host: x\r\n\r\n",
		"missing colon":        "POST /generate HTTP/1.1\nHost: x\nTransfer\n\n",
	} {
		rc := dialRaw(t, tr)
		rc.send(head + clRequest("/generate"))
		resp, body := rc.response()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "%s: %s", name, body)
		rc.requireClosed()
	}
	assert.Zero(t, w.callCount(), "nothing reached the worker")
}

// BenchmarkGuardConn measures what the framing guard adds per request: a keep-alive stream of
// typical small chat requests (Content-Length or chunked) read through it in net/http's
// 4096-byte reads, against the same reads without it.
func BenchmarkGuardConn(b *testing.B) {
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:30000\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n"
	body := `{"model":"m","messages":[{"role":"user","content":"hello there, how are you?"}],"stream":true,"max_tokens":16}`
	for _, enc := range []string{"content-length", "chunked"} {
		one := head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if enc == "chunked" {
			one = head + "Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
		}
		stream := []byte(strings.Repeat(one, 256))
		for _, guarded := range []bool{false, true} {
			b.Run("body="+enc+"/guarded="+strconv.FormatBool(guarded), func(b *testing.B) {
				buf := make([]byte, 4096)
				pc := &pieceConn{k: 4096}
				gc := &guardConn{Conn: pc}
				var r io.Reader = pc
				if guarded {
					r = gc
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(one)))
				for b.Loop() {
					if len(pc.data) == 0 {
						pc.data = stream
					}
					for left := len(one); left > 0; {
						n, _ := r.Read(buf[:min(len(buf), left)])
						left -= n
					}
				}
				if gc.f.dead {
					b.Fatal("the guard lost the stream")
				}
			})
		}
	}
}

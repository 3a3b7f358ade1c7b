package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// genBody is a small /generate request body.
const genBody = `{"text":"hi"}`

// RFC 9112 §6.3 as net/http applies it: a request with both Content-Length and
// Transfer-Encoding: chunked is framed by Transfer-Encoding (the Content-Length is dropped).
// The Content-Length here is shorter than the body, so a router that framed by it would read
// `{"te` and answer 400, then read the rest as a second request. The worker gets the chunked
// body, which serve frames itself (a Content-Length of its own, no Transfer-Encoding), and the
// client's connection stays in step: the next request on it is answered too.
func TestConflictingFramingChunkedWins(t *testing.T) {
	t.Parallel()
	type seen struct {
		contentLength    int64
		transferEncoding []string
		header           http.Header
		raw              []byte
	}
	var mu sync.Mutex
	var got []seen
	w := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		mu.Lock()
		got = append(got, seen{r.ContentLength, r.TransferEncoding, c.header, c.raw})
		mu.Unlock()
		jsonReply(genReply)(w, r, c)
	})
	tr := startRouter(t, regularConfig(w))

	c, err := net.Dial("tcp", strings.TrimPrefix(tr.srv.URL, "http://"))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	const body = `{"text":"chunked wins"}`
	chunked := strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
	_, err = io.WriteString(c, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked+
		"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"+genBody)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "response %d", i)
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "response %d: %s", i, out)
		assert.False(t, resp.Close, "response %d: the connection is kept", i)
	}

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2, "both requests reached the worker")
	first := got[0]
	var sent map[string]any
	require.NoError(t, json.Unmarshal(first.raw, &sent), string(first.raw))
	assert.Equal(t, "chunked wins", sent["text"], "the worker got the chunked body, not the Content-Length's 4 bytes")
	assert.Empty(t, first.transferEncoding, "serve frames the upstream request by Content-Length")
	assert.Equal(t, int64(len(first.raw)), first.contentLength, "the Content-Length is serve's, for the body it sends")
	assert.Equal(t, strconv.Itoa(len(first.raw)), first.header.Get("Content-Length"))
	assert.Equal(t, "application/json", first.header.Get("Content-Type"))
}

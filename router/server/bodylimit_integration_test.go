//go:build integration

package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zeros is an endless body of '0's.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// peakRSS is the process's high-water resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// A 600 MB body, announced by Content-Length or sent chunked, is refused with 413 and the
// router process (a real `router serve`, its memory read from /proc) never holds it: its peak
// resident set stays under 100 MB with --max-payload-size 32 MiB.
func TestIntegrationLargeBodiesBoundedMemory(t *testing.T) {
	w := newWorker(t, jsonReply(`{"text":"ok","meta_info":{}}`))
	p := startRouterProc(t, "--worker-urls", w.URL(), "--max-payload-size", strconv.Itoa(32<<20))
	const size = 600 << 20
	base := peakRSS(t, p.pid)

	// Content-Length: refused from the head, before any of the body is sent.
	addr := strings.TrimPrefix(p.url, "http://")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, size)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	// Chunked: counted while read, cut at the limit.
	req, err := http.NewRequest(http.MethodPost, p.url+"/generate", io.LimitReader(zeros{}, size))
	require.NoError(t, err)
	req.ContentLength = -1 // chunked
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err == nil { // the router may close while the client still writes: then the error is the answer
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	}

	// And the router still serves.
	resp, err = http.Post(p.url+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	peak := peakRSS(t, p.pid)
	t.Logf("router peak RSS %.1f MB after a 600 MB Content-Length and a 600 MB chunked body (%.1f MB at start)", float64(peak)/1e6, float64(base)/1e6)
	assert.Less(t, peak, int64(100e6))
}

//go:build integration

package server

// Limits under hostile input (issue 31), against a real `router serve` process whose memory is
// read from /proc (VmHWM): stalled bodies, batch amplification, the cost of one large body,
// the memory budget under concurrent chunked bodies, and the connection cap. Timings are
// bounded relative to a reference measured in the same run.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startRouterProc starts the router built from this tree as `serve` with args (see
// startRouterProcEnv); the integration tests' way in, so it lives under their build tag.
func startRouterProc(tb testing.TB, args ...string) proc {
	tb.Helper()
	return startRouterProcEnv(tb, buildRouter(tb), nil, args...)
}

// discardWorker answers every request with a small JSON reply after reading (and dropping) its
// body, so a test's worker costs nothing whatever the body.
func discardWorker(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"ok","meta_info":{}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// textBody streams `{"text":"aaa…"}` of exactly size bytes without holding it.
type textBody struct {
	size, off int64
}

const textHead, textTail = `{"text":"`, `"}`

func (b *textBody) Read(p []byte) (int, error) {
	if b.off >= b.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && b.off < b.size {
		switch {
		case b.off < int64(len(textHead)):
			p[n] = textHead[b.off]
		case b.off >= b.size-int64(len(textTail)):
			p[n] = textTail[b.off-(b.size-int64(len(textTail)))]
		default:
			p[n] = 'a'
		}
		n++
		b.off++
	}
	return n, nil
}

// metricsURL starts nothing: it names the /metrics of a router started with --prometheus-port port.
func metricsURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/metrics", port) }

// scrape reads one unlabelled series from /metrics.
func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// timedPost posts body on a fresh connection and returns the status and how long it took.
func timedPost(t *testing.T, url, body string) (int, time.Duration) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	start := time.Now()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// A body that stalls after its first byte is answered 408 and its connection closed within
// --body-read-timeout-secs + 1 s (+ a normal request's time measured in the same run).
func TestIntegrationStalledBodyClosed(t *testing.T) {
	w := discardWorker(t)
	const timeout = 2
	p := startRouterProc(t, "--worker-urls", w.URL, "--body-read-timeout-secs", strconv.Itoa(timeout))
	status, ref := timedPost(t, p.url+"/generate", `{"text":"hi"}`)
	require.Equal(t, http.StatusOK, status)

	addr := strings.TrimPrefix(p.url, "http://")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", addr)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(90*time.Second)))
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, eof := rd.ReadByte() // the router closes the connection after the answer
	elapsed := time.Since(start)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.ErrorIs(t, eof, io.EOF)
	bound := timeout*time.Second + time.Second + ref
	t.Logf("stalled body: %d and closed after %s (timeout %ds; bound %s, reference request %s)", resp.StatusCode, elapsed, timeout, bound, ref)
	assert.Less(t, elapsed, bound)
}

// A 3 MB /generate body listing a million empty prompts is answered 400 naming --max-batch-size,
// in PD mode (where each element used to become a rid and a room on both legs), with the
// router's peak RSS up by less than 20 MB; no worker sees it.
func TestIntegrationMillionPromptListRefused(t *testing.T) {
	var calls sync.Map
	worker := func(role string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Only the big body counts: the warm-up's prefill leg may still arrive after the
			// router answered it (both PD legs go at once; the answer is the decode's).
			if n, _ := io.Copy(io.Discard, r.Body); r.URL.Path == "/generate" && n > 1<<20 {
				calls.Store(role, true)
			}
			_, _ = io.WriteString(w, `{"text":"ok","meta_info":{}}`)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	pw, dw := worker("prefill"), worker("decode")
	p := startRouterProc(t, "--pd-disaggregation", "--prefill", pw.URL, "--decode", dw.URL)
	status, _ := timedPost(t, p.url+"/generate", `{"text":"warm up"}`)
	require.Equal(t, http.StatusOK, status)
	base := peakRSS(t, p.pid)

	body := `{"text":[` + strings.TrimSuffix(strings.Repeat(`"",`, 1_000_000), ",") + `]}`
	resp, err := http.Post(p.url+"/generate", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(msg), "--max-batch-size 1024")
	grew := peakRSS(t, p.pid) - base
	t.Logf("%.1f MB body of 1,000,000 prompts: %d, peak RSS +%.1f MB", float64(len(body))/1e6, resp.StatusCode, float64(grew)/1e6)
	assert.Less(t, grew, int64(20e6))
	_, prefillCalled := calls.Load("prefill")
	_, decodeCalled := calls.Load("decode")
	assert.False(t, prefillCalled || decodeCalled, "no worker saw it")
}

// One 500 MB body under --max-payload-size (the default, 512 MiB) costs the router at most
// twice its size (peak RSS growth) in both modes: in PD mode its two legs are pieces of the
// body the router read, not copies (docs/serve.md states the multiple).
func TestIntegrationLargeBodyCost(t *testing.T) {
	const size = 500e6
	for _, mode := range []string{"regular", "pd"} {
		t.Run(mode, func(t *testing.T) {
			w, w2 := discardWorker(t), discardWorker(t)
			args := []string{"--worker-urls", w.URL}
			if mode == "pd" {
				args = []string{"--pd-disaggregation", "--prefill", w.URL, "--decode", w2.URL}
			}
			p := startRouterProc(t, args...)
			status, _ := timedPost(t, p.url+"/generate", `{"text":"warm up"}`)
			require.Equal(t, http.StatusOK, status)
			base := peakRSS(t, p.pid)
			req, err := http.NewRequest(http.MethodPost, p.url+"/generate", &textBody{size: size})
			require.NoError(t, err)
			req.ContentLength = size
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			grew := peakRSS(t, p.pid) - base
			t.Logf("%s: %.0f MB body answered %d in %s; peak RSS +%.0f MB (%.2f× the body)", mode, size/1e6, resp.StatusCode,
				time.Since(start).Round(time.Millisecond), float64(grew)/1e6, float64(grew)/size)
			assert.LessOrEqual(t, float64(grew), 2*size)
		})
	}
}

// chunkedPost sends a chunked body of size bytes on its own connection and returns the status
// answered (0 when the connection broke before an answer).
func chunkedPost(addr string, size int64) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	go func() {
		bw := bufio.NewWriterSize(c, 64<<10)
		fmt.Fprintf(bw, "POST /generate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", addr)
		src := &textBody{size: size}
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				fmt.Fprintf(bw, "%x\r\n", n)
				bw.Write(buf[:n])
				if _, werr := bw.WriteString("\r\n"); werr != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
		bw.WriteString("0\r\n\r\n")
		bw.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Three concurrent 400 MB chunked bodies against a 512 MB budget: counted as they arrive, one
// is read whole and answered, the others 503. The router's peak RSS stays within 1.2 GB: the
// blocks of all three together are bounded by the budget, the refused ones' are given back as
// they are refused, and the accepted body's are given back one by one as they are joined (so
// the join costs one block, not a second copy); without the budget all three would be read
// whole and joined (2.4 GB).
func TestIntegrationConcurrentChunkedBodiesShareBudget(t *testing.T) {
	const size, budget = 400 << 20, 512 << 20
	w := discardWorker(t)
	mport := testutil.FreePort(t, "127.0.0.1")
	p := startRouterProc(t, "--worker-urls", w.URL, "--body-memory-budget", strconv.Itoa(budget),
		"--prometheus-port", strconv.Itoa(mport))
	addr := strings.TrimPrefix(p.url, "http://")
	statuses := make(chan int, 3)
	for range 3 {
		go func() { statuses <- chunkedPost(addr, size) }()
	}
	counts := map[int]int{}
	for range 3 {
		counts[<-statuses]++
	}
	peak := peakRSS(t, p.pid)
	t.Logf("three %d MB chunked bodies, %d MB budget: statuses %v, peak RSS %.0f MB", size>>20, budget>>20, counts, float64(peak)/1e6)
	assert.Equal(t, 1, counts[http.StatusOK], "one accepted")
	assert.Equal(t, 2, counts[http.StatusServiceUnavailable]+counts[0], "the others refused (503, or the connection cut while still sending)")
	assert.LessOrEqual(t, peak, int64(1.2e9))
	assert.Equal(t, float64(budget), scrape(t, metricsURL(mport), "pdrouter_body_budget_bytes"))
	assert.Zero(t, scrape(t, metricsURL(mport), "pdrouter_body_budget_in_use_bytes"))
}

// idleHolderEnv makes the test binary an idle-connection holder (TestMain, holdIdle) instead
// of running tests: "addr|localIP".
const idleHolderEnv = "PDROUTER_TEST_IDLE_HOLDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(idleHolderEnv); spec != "" {
		os.Exit(holdIdle(spec))
	}
	os.Exit(m.Run())
}

// holdIdle is a child process of TestIntegrationConnectionCap: it dials connections to addr
// from localIP (each process has its own source address, so 30,000 connections to one port do
// not run out of ephemeral ports, and its own descriptor table) and holds them idle. Its
// commands, one a line on stdin: "dial N" dials N more and prints "dialled TOTAL"; "close" (or
// EOF) closes them all, prints "closed" and exits.
func holdIdle(spec string) int {
	target, local, ok := strings.Cut(spec, "|")
	if !ok {
		fmt.Fprintln(os.Stderr, "bad", idleHolderEnv, spec)
		return 2
	}
	// IP_BIND_ADDRESS_NO_PORT (Linux): the source port is picked at connect, where only the
	// whole 4-tuple must be unique, rather than by bind, whose search of the port range for
	// one free on this address slows to seconds per socket when thousands are taken.
	const ipBindAddressNoPort = 24
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)},
		Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			})
		}}
	var open []net.Conn
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var count int
		if _, err := fmt.Sscanf(in.Text(), "dial %d", &count); err != nil {
			break
		}
		conns := make(chan net.Conn, count)
		var wg sync.WaitGroup
		const dialers = 50
		for i := range dialers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < count; j += dialers {
					if c, err := d.Dial("tcp", target); err == nil {
						conns <- c
					}
				}
			}()
		}
		wg.Wait()
		close(conns)
		for c := range conns {
			open = append(open, c)
		}
		fmt.Printf("dialled %d\n", len(open))
	}
	for _, c := range open {
		c.Close()
	}
	fmt.Println("closed")
	return 0
}

// idleHolder is one holdIdle child process.
type idleHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startIdleHolder starts a holdIdle child dialling addr from localIP.
func startIdleHolder(t *testing.T, addr, localIP string) *idleHolder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), idleHolderEnv+"="+addr+"|"+localIP)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &idleHolder{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// send writes one command to the holder.
func (h *idleHolder) send(t *testing.T, cmd string) {
	t.Helper()
	_, err := io.WriteString(h.stdin, cmd+"\n")
	require.NoError(t, err)
}

// line reads the holder's next line of output.
func (h *idleHolder) line(t *testing.T) string {
	t.Helper()
	l, err := h.out.ReadString('\n')
	require.NoError(t, err, "idle holder ended")
	return strings.TrimSpace(l)
}

// At --max-connections 10,000, 30,000 idle connections (three processes of 10,000, from
// 127.0.0.2-4: one process may open 20,000 descriptors here, and one source address has
// 28,000 ephemeral ports) fill the cap; the ones over it are closed as they are accepted, and
// so is a fresh connection while the cap is full. Once the idle ones close, a request on a
// fresh connection is served within 1 s (+ a fresh-connection request's time measured in the
// same run before the flood), and /metrics counts the open connections. The holders dial in
// rounds the router has accepted before the next (open + rejected connections reach the number
// dialled), each within half the kernel's accept queue (somaxconn, 4,096 here): a flood faster
// than the router accepts overflows it, and the connections it drops look established to
// their client but reach the router only on the SYN-ACK retries, seconds later.
func TestIntegrationConnectionCap(t *testing.T) {
	const capConns, holders, perHolder = 10000, 3, 10000
	// Each round of dials stays within half the kernel's accept queue.
	raw, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	require.NoError(t, err)
	somaxconn, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	round := max(min(1000, somaxconn/(2*holders)), 1)
	w := discardWorker(t)
	mport := testutil.FreePort(t, "127.0.0.1")
	p := startRouterProc(t, "--worker-urls", w.URL, "--max-connections", strconv.Itoa(capConns),
		"--prometheus-port", strconv.Itoa(mport))
	addr := strings.TrimPrefix(p.url, "http://")
	status, ref := timedPost(t, p.url+"/generate", `{"text":"hi"}`)
	require.Equal(t, http.StatusOK, status)

	hs := make([]*idleHolder, holders)
	for i := range hs {
		hs[i] = startIdleHolder(t, addr, fmt.Sprintf("127.0.0.%d", i+2))
	}
	mu := metricsURL(mport)
	accepted := func() float64 {
		return scrape(t, mu, "pdrouter_open_connections") + scrape(t, mu, "pdrouter_connections_rejected_total")
	}
	dialled := 0
	start := time.Now()
	// The router's 30 s header timeout closes idle connections: the flood must be over well
	// before, or the cap empties again under it.
	deadline := start.Add(20 * time.Second)
	for sent := 0; sent < perHolder; sent += round {
		for _, h := range hs {
			h.send(t, fmt.Sprintf("dial %d", min(round, perHolder-sent)))
		}
		dialled = 0
		for _, h := range hs {
			var n int
			_, err := fmt.Sscanf(h.line(t), "dialled %d", &n)
			require.NoError(t, err)
			dialled += n
		}
		for accepted() < float64(dialled) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		require.GreaterOrEqual(t, accepted(), float64(dialled), "the router accepted every connection dialled within 20 s")
	}
	t.Logf("dialled %d idle connections from %d processes in %s", dialled, holders, time.Since(start).Round(time.Millisecond))
	require.Equal(t, holders*perHolder, dialled)
	assert.Equal(t, float64(capConns), scrape(t, mu, "pdrouter_open_connections"))
	assert.Equal(t, float64(dialled-capConns), scrape(t, mu, "pdrouter_connections_rejected_total"),
		"every connection over the cap closed as accepted")

	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	post := func() (int, error) {
		resp, err := c.Post(p.url+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	_, err = post()
	assert.Error(t, err, "a fresh connection is closed while the cap is full")

	// Free the cap: the holders close their idle connections.
	for _, h := range hs {
		h.send(t, "close")
	}
	for _, h := range hs {
		require.Equal(t, "closed", h.line(t))
	}
	freed := time.Now()
	var served time.Duration
	for try := 0; try < 100000 && served == 0 && time.Since(freed) < 30*time.Second; try++ {
		if status, err := post(); err == nil && status == http.StatusOK {
			served = time.Since(freed)
		} // else closed over the cap while the router still counts closing ones
	}
	bound := time.Second + ref
	t.Logf("cap %d, %d idle: a fresh connection served %s after the cap freed (bound %s = 1 s + reference request %s; margin %s)",
		capConns, dialled, served, bound, ref, bound-served)
	require.NotZero(t, served, "never served")
	assert.Less(t, served, bound)
	for drained := time.Now().Add(20 * time.Second); scrape(t, mu, "pdrouter_open_connections") > 1 && time.Now().Before(drained); {
		time.Sleep(50 * time.Millisecond)
	}
	assert.LessOrEqual(t, scrape(t, mu, "pdrouter_open_connections"), 1.0)
}

package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawPost opens a connection to the router, sends a request head and then body, and returns the
// connection and a reader of it.
func rawPost(t *testing.T, base, head, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n%s", addr, head, body)
	require.NoError(t, err)
	return c, bufio.NewReader(c)
}

// A body that stalls is answered 408 once --body-read-timeout-secs passes, and the connection
// closes after the answer: net/http does not wait for the rest of the body.
func TestStalledBodyAnswered408AndClosed(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(`{"text":"ok"}`))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.BodyReadTimeoutSecs = 1
	tr := startRouter(t, cfg)
	for _, tc := range []struct{ name, head, body string }{
		{"content-length", "Content-Length: 100\r\n", "{"},
		{"chunked", "Transfer-Encoding: chunked\r\n", "1\r\n{\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rd := rawPost(t, tr.srv.URL, tc.head, tc.body)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second))) // a hang fails, not blocks
			resp, err := http.ReadResponse(rd, nil)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(body))
			assert.Contains(t, string(body), "--body-read-timeout-secs 1")
			assert.True(t, resp.Close, "the answer says the connection closes")
			_, err = rd.ReadByte()
			assert.ErrorIs(t, err, io.EOF, "the router closed the connection")
		})
	}
	assert.Zero(t, w.callCount())
}

// A batch over --max-batch-size is a 400 naming the flag; no worker sees it.
func TestBatchOverLimitRefused(t *testing.T) {
	t.Parallel()
	w := newWorker(t, jsonReply(`{"text":"ok"}`))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.MaxBatchSize = 3
	tr := startRouter(t, cfg)
	status, _, body := tr.post(t, "/generate", `{"text":["a","b","c","d"]}`, nil)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "--max-batch-size 3")
	status, _, body = tr.post(t, "/v1/completions", `{"prompt":[[1],[2],[3],[4]]}`, nil)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "prompt is a batch of more than 3")
	assert.Zero(t, w.callCount())
	status, _, body = tr.post(t, "/generate", `{"text":["a","b","c"]}`, nil)
	assert.Equal(t, http.StatusOK, status, body)
}

// Bodies in flight share --body-memory-budget: with one request holding most of it, another
// body is answered 503 with Retry-After (announced or chunked), a body larger than the whole
// budget 413; once the first is over, the budget is whole again.
func TestBodiesShareMemoryBudget(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{})
	w := newWorker(t, arrivedThen(arrived, after(release, jsonReply(`{"text":"ok"}`))))
	cfg := DefaultConfig()
	cfg.WorkerURLs = []string{w.URL()}
	cfg.BodyMemoryBudget = 100 << 10
	tr := startRouter(t, cfg)
	body := func(n int) string { return `{"text":"` + strings.Repeat("a", n-11) + `"}` }

	first := make(chan int)
	go func() {
		status, _, _ := tr.post(t, "/generate", body(60<<10), nil)
		first <- status
	}()
	<-arrived
	assert.Equal(t, int64(60<<10), tr.s.budget.used.Load())

	status, hdr, msg := tr.post(t, "/generate", body(50<<10), nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, msg)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, msg, "--body-memory-budget")

	// Chunked: the first 32 KiB block fits, the next does not.
	req, err := http.NewRequest(http.MethodPost, tr.srv.URL+"/generate", io.MultiReader(strings.NewReader(body(200<<10))))
	require.NoError(t, err)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err == nil { // the router may close while the client still writes: then the error is the answer
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	}

	status, _, msg = tr.post(t, "/generate", body(101<<10), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, msg)

	close(release)
	assert.Equal(t, http.StatusOK, <-first)
	// Every body gives its bytes back when its handler returns (just after its answer).
	waitFor(t, func() bool { return tr.s.budget.used.Load() == 0 })
	status, _, _ = tr.post(t, "/generate", body(90<<10), nil)
	assert.Equal(t, http.StatusOK, status)
	// The announced body counted; the chunked one too unless the client saw the close first.
	assert.GreaterOrEqual(t, promtest.ToFloat64(tr.s.metrics.Errors.WithLabelValues("over_budget")), 1.0)
}

// A decode reply the router must hold whole (non-streaming, PD) that goes over the budget is
// answered 503 with Retry-After and not retried; no breaker counts it.
func TestHeldReplyOverBudgetNotRetried(t *testing.T) {
	t.Parallel()
	big := `{"text":"` + strings.Repeat("x", 300<<10) + `","meta_info":{}}`
	pw := newWorker(t, jsonReply(`{"text":"","meta_info":{}}`))
	dw := newWorker(t, jsonReply(big))
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.BodyMemoryBudget = 200 << 10
	tr := startRouter(t, cfg)
	status, hdr, msg := tr.post(t, "/generate", `{"text":"hi"}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, msg)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, msg, "memory budget")
	assert.Equal(t, 1, dw.callCount(), "not retried")
	tr.requireLoadsZero(t)
	waitFor(t, func() bool { return tr.s.budget.used.Load() == 0 })
	// Small replies still pass: the failure opened no breaker and left no bytes charged.
	dw.handle = jsonReply(`{"text":"ok","meta_info":{}}`)
	status, _, msg = tr.post(t, "/generate", `{"text":"hi"}`, nil)
	assert.Equal(t, http.StatusOK, status, msg)
}

// A prefill answer counts against the budget only when the router keeps it, to merge its
// logprobs: one it reads through and drops holds nothing, whatever its size. Kept and over
// the budget, it is answered 503 with Retry-After, as a held decode reply is. (Decode answers
// once prefill's worker has written its answer, which it can only when the router has read
// most of it: more than the budget, beyond what the sockets buffer.)
func TestPrefillAnswerChargedOnlyWhenKept(t *testing.T) {
	t.Parallel()
	big := `{"meta_info":{"input_token_logprobs":[[-1,1]]},"text":"` + strings.Repeat("x", 16<<20) + `"}`
	written := make(chan struct{})
	var once sync.Once
	pw := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		jsonReply(big)(w, r, c)
		once.Do(func() { close(written) })
	})
	dw := newWorker(t, after(written, jsonReply(`{"text":"ok","meta_info":{"input_token_logprobs":[[-3,3]]}}`)))
	cfg := pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil)
	cfg.BodyMemoryBudget = 200 << 10
	tr := startRouter(t, cfg)
	status, _, msg := tr.post(t, "/generate", `{"text":"hi"}`, nil)
	assert.Equal(t, http.StatusOK, status, msg)
	status, hdr, msg := tr.post(t, "/generate", `{"text":"hi","return_logprob":true}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, msg)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Contains(t, msg, "memory budget")
	tr.requireLoadsZero(t)
	waitFor(t, func() bool { return tr.s.budget.used.Load() == 0 })
}

func TestBudgetReserveRelease(t *testing.T) {
	t.Parallel()
	b := newBudget(1000)
	var wg sync.WaitGroup
	var got atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if b.reserve(300) {
					got.Add(1)
					b.release(300)
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, b.used.Load())
	assert.Positive(t, got.Load())
	require.True(t, b.reserve(1000))
	assert.False(t, b.reserve(1), "full")
	var nilBudget *budget
	assert.True(t, nilBudget.reserve(1<<40), "a nil budget admits everything")
}

func TestCgroupMemoryLimit(t *testing.T) {
	t.Parallel()
	write := func(files map[string]string) string {
		dir := t.TempDir()
		for name, v := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644))
		}
		return dir
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2 limit", map[string]string{"memory.max": "4294967296\n"}, 4 << 30, true},
		{"v2 none", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "1073741824\n"}, 1 << 30, true},
		{"v1 none", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"no cgroup", map[string]string{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cgroupMemoryLimit(write(tc.files))
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// fakeListener hands out what accepts sends: a connection or an error.
type fakeListener struct {
	accepts chan any
}

func (l *fakeListener) Accept() (net.Conn, error) {
	v, ok := <-l.accepts
	if !ok {
		return nil, net.ErrClosed
	}
	if err, isErr := v.(error); isErr {
		return nil, err
	}
	return v.(net.Conn), nil
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// closeConn records its Close.
type closeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeConn) Close() error { c.closed.Store(true); return nil }

func newCapListener(maxConns int, fl *fakeListener, sleeps *[]time.Duration) (*capListener, *limitsMetrics) {
	m := newLimitsMetrics(prometheus.NewRegistry(), newBudget(1))
	return &capListener{Listener: fl, max: int64(maxConns), open: &m.open, rejected: m.rejected, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		sleep: func(d time.Duration) { *sleeps = append(*sleeps, d) }}, m
}

// Over the cap a connection is closed as it is accepted; closing one under the cap makes room.
func TestCapListenerClosesOverCap(t *testing.T) {
	t.Parallel()
	fl := &fakeListener{accepts: make(chan any, 8)}
	var sleeps []time.Duration
	l, m := newCapListener(2, fl, &sleeps)
	conns := make([]*closeConn, 5)
	for i := range conns {
		conns[i] = &closeConn{}
	}
	fl.accepts <- conns[0]
	fl.accepts <- conns[1]
	a, err := l.Accept()
	require.NoError(t, err)
	_, err = l.Accept()
	require.NoError(t, err)
	assert.Equal(t, int64(2), m.open.Load())
	done := make(chan net.Conn)
	go func() { c, _ := l.Accept(); done <- c }()
	fl.accepts <- conns[2] // over the cap: closed on accept
	fl.accepts <- conns[3]
	waitFor(t, func() bool { return promtest.ToFloat64(m.rejected) == 2 })
	assert.True(t, conns[2].closed.Load())
	assert.True(t, conns[3].closed.Load())
	require.NoError(t, a.Close())
	require.NoError(t, a.Close()) // twice: counted once
	assert.Equal(t, int64(1), m.open.Load())
	fl.accepts <- conns[4] // room again
	got := <-done
	require.NotNil(t, got)
	assert.Same(t, conns[4], got.(*countedConn).Conn)
	assert.False(t, conns[4].closed.Load())
	assert.Equal(t, int64(2), m.open.Load())
	assert.Empty(t, sleeps)
}

// Out of descriptors, the accept loop backs off, doubling, instead of spinning; other errors end
// it.
func TestCapListenerBacksOffOnEMFILE(t *testing.T) {
	t.Parallel()
	fl := &fakeListener{accepts: make(chan any, 8)}
	var sleeps []time.Duration
	l, _ := newCapListener(0, fl, &sleeps)
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	for range 3 {
		fl.accepts <- emfile
	}
	fl.accepts <- &closeConn{}
	_, err := l.Accept()
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}, sleeps)
	fl.accepts <- &net.OpError{Op: "accept", Err: syscall.EINVAL}
	_, err = l.Accept()
	assert.ErrorIs(t, err, syscall.EINVAL)
}

// A body given as pieces (a PD leg, wire.Pieces) reaches the worker as their concatenation,
// with its Content-Length, through both transports — h1 for http:// (copied behind the head
// when small, written with one writev when large) and net/http for https:// — and the pieces
// are left as they were, so a retry can send them again.
func TestLegClientSendsPieces(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Got-Length", strconv.FormatInt(r.ContentLength, 10))
		w.Header().Set("X-Got-Type", r.Header.Get("Content-Type"))
		_, _ = w.Write(b)
	})
	plain, tlsSrv, c := plainAndTLSLegs(t, h)

	big := strings.Repeat("x", 200<<10)
	for _, tc := range []struct {
		name   string
		pieces [][]byte
	}{
		{"small", [][]byte{[]byte(`{"text":`), []byte(`"hi"`), []byte(`}`)}},
		{"large", [][]byte{[]byte(`{"text":"`), []byte(big), []byte(`","rid":"r"`), []byte(big), []byte(`"}`)}},
		{"empty", [][]byte{}},
	} {
		want := string(bytes.Join(tc.pieces, nil))
		keep := make([][]byte, len(tc.pieces))
		copy(keep, tc.pieces)
		for _, worker := range []string{plain.URL, tlsSrv.URL} {
			for range 2 { // twice: the pieces are not consumed
				resp, ue := send(context.Background(), c, &upstreamRequest{method: http.MethodPost, worker: worker, path: "/generate", pieces: tc.pieces, role: "prefill"}, nil)
				require.Nil(t, ue, "%s %s", tc.name, worker)
				assert.Equal(t, strconv.Itoa(len(want)), resp.Header.Get("X-Got-Length"), "%s %s", tc.name, worker)
				assert.Equal(t, "application/json", resp.Header.Get("X-Got-Type"), "%s %s", tc.name, worker)
				assert.Equal(t, want, testutil.ReadAll(t, resp), "%s %s", tc.name, worker)
			}
		}
		assert.Equal(t, keep, tc.pieces, "%s: pieces unchanged", tc.name)
	}
}

// A large PD body reaches both legs as the rewrite of the original, the prompt whole, though
// no leg copies it (they are pieces of the body the router read).
func TestPDLargeBodyLegsWhole(t *testing.T) {
	t.Parallel()
	prefilled := make(chan struct{}, 1) // the prefill leg may end after the router answered
	pw := newWorker(t, func(w http.ResponseWriter, r *http.Request, c call) {
		jsonReply(`{"text":"","meta_info":{}}`)(w, r, c)
		prefilled <- struct{}{}
	})
	dw := newWorker(t, jsonReply(`{"text":"ok","meta_info":{}}`))
	tr := startRouter(t, pdConfig([]*testWorker{pw}, []*testWorker{dw}, nil))
	prompt := strings.Repeat("lorem ipsum ", 100<<10)
	body := `{"text": "` + prompt + `", "sampling_params": {"max_new_tokens": 4}, "x_extra": [1, 2]}`
	status, _, out := tr.post(t, "/generate", body, nil)
	require.Equal(t, http.StatusOK, status, out)
	select {
	case <-prefilled:
	case <-time.After(30 * time.Second):
		t.Fatal("the prefill leg never arrived")
	}
	for _, w := range []*testWorker{pw, dw} {
		calls := w.callsTo("/generate")
		require.Len(t, calls, 1)
		c := calls[0]
		assert.Equal(t, prompt, c.body["text"])
		assert.Equal(t, map[string]any{"max_new_tokens": float64(4)}, c.body["sampling_params"])
		assert.Equal(t, []any{float64(1), float64(2)}, c.body["x_extra"])
		assert.NotEmpty(t, c.body["rid"])
		assert.NotEmpty(t, c.body["bootstrap_room"])
		assert.True(t, bytes.HasPrefix(c.raw, []byte(`{"text":"lorem`)), "members re-joined without white space, as before")
	}
	assert.Equal(t, pw.callsTo("/generate")[0].body["bootstrap_room"], dw.callsTo("/generate")[0].body["bootstrap_room"])
}

// oddReader yields data in reads of varying sizes.
type oddReader struct {
	data []byte
	k    int
}

func (r *oddReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	r.k++
	n := min(len(p), len(r.data), 1+(r.k*7919)%(300<<10))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// A chunked body is read whole however its reads fall, through the heap block and the mapped
// ones, and charged at least its size; refused when its next block does not fit the budget
// (503) or when the budget could never hold it (413), its blocks given back either way.
func TestReadChunked(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 32 << 10, 32<<10 + 1, 3<<20 + 17, 13 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*31 + i>>11)
		}
		b := newBudget(1 << 30)
		ch := &charge{b: b}
		got, err := readChunked(&oddReader{data: data}, ch, b.limit)
		require.NoError(t, err, "size %d", size)
		assert.True(t, bytes.Equal(data, got), "size %d: the body read whole", size)
		assert.GreaterOrEqual(t, ch.n, int64(size), "size %d: charged at least its size", size)
		ch.release()
		assert.Zero(t, b.used.Load())
	}

	b := newBudget(8 << 20)
	other := &charge{b: b}
	require.True(t, other.add(6<<20)) // another body holds most of it
	ch := &charge{b: b}
	_, err := readChunked(&oddReader{data: make([]byte, 4<<20)}, ch, b.limit)
	assert.ErrorIs(t, err, errOverBudget)
	ch.release()
	other.release()
	_, err = readChunked(&oddReader{data: make([]byte, 12<<20)}, ch, b.limit)
	assert.ErrorIs(t, err, errBodyOverBudget)
	ch.release()
	assert.Zero(t, b.used.Load())
}

// gcMinHeapPercent raises GOGC only as far as the floor needs, from whichever of the runtime's
// two bounds (the goal proper, the heap minimum) reaches it first, and never below Go's default.
func TestGCMinHeapPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name              string
		floor, live, scan uint64
		want              int
	}{
		{"before any collection: the heap minimum reaches it", 32 * mib, 0, 0, 800},
		{"a proxy's few live MiB: the heap minimum reaches it first", 32 * mib, 2 * mib, 0, 800},
		{"more live: the goal proper reaches it first", 32 * mib, 10 * mib, 0, 220},
		{"stacks and globals count in the goal", 32 * mib, 10 * mib, 6 * mib, 138},
		{"half the floor live: Go's default reaches it", 32 * mib, 16 * mib, 0, 100},
		{"more than the floor live: Go's default", 32 * mib, 600 * mib, 0, 100},
		{"a floor under Go's own minimum", 2 * mib, 0, 0, 100},
		{"an outsized floor stays within an int32", 1 << 62, 0, 0, 100 << 18},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := gcMinHeapPercent(c.floor, c.live, c.scan)
			assert.Equal(t, c.want, p)
			// The runtime's goal at p reaches the floor (bounded as gcMinHeapPercent bounds it).
			goal := max(c.live+(c.live+c.scan)*uint64(p)/100, goHeapMinimum*uint64(p)/100)
			assert.GreaterOrEqual(t, goal, min(c.floor, 1<<40))
		})
	}
}

// gcSetting reads one of the runtime's uint64 metrics.
func gcSetting(name string) int64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Serve keeps the collector's heap goal at --gc-min-heap while it serves, and puts the
// process's own GOGC percent back when it returns, with no tuning after; GOGC, when set, wins.
// (Not parallel: GOGC is the process's.)
func TestServeGCMinHeap(t *testing.T) {
	t.Cleanup(func() { debug.SetGCPercent(goDefaultGCPercent) })
	w := newWorker(t, jsonReply(genReply))
	cfg := regularConfig(w)
	cfg.GCMinHeap = 256 << 20      // well above what this test binary has live
	cfg.BodyMemoryBudget = 1 << 30 // the memory limit Serve sets (2 GiB + 64 MiB) is above it
	const goal, gogc = "/gc/heap/goal:bytes", "/gc/gogc:percent"

	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "100")
		base, stop, _ := serveOn(t, startServer(t, cfg))
		defer stop()
		resp, err := http.Get(base + "/liveness") // Serve has decided by now
		require.NoError(t, err)
		resp.Body.Close()
		// An earlier test's Server may still be stopping (its tuning ends when its Serve returns).
		testutil.Eventually(t, 10*time.Second, func() bool {
			runtime.GC()
			return gcSetting(gogc) == goDefaultGCPercent
		}, "Go's default pacing: GOGC set, --gc-min-heap left alone")
		assert.Less(t, gcSetting(goal), cfg.GCMinHeap)
	})
	t.Run("GOGC unset", func(t *testing.T) {
		const before = 150 // the process's own setting, which Serve puts back
		debug.SetGCPercent(before)
		base, stop, done := serveOn(t, startServer(t, cfg))
		testutil.Eventually(t, 10*time.Second, func() bool { return gcSetting(goal) >= cfg.GCMinHeap }, "the heap goal at the floor")
		assert.Greater(t, gcSetting(gogc), int64(goDefaultGCPercent))
		runtime.GC() // a collection, and the tuning after it, keep it there
		resp, err := http.Get(base + "/liveness")
		require.NoError(t, err)
		resp.Body.Close()
		assert.GreaterOrEqual(t, gcSetting(goal), cfg.GCMinHeap)
		for range 2 { // every collection tunes it again
			debug.SetGCPercent(goDefaultGCPercent)
			testutil.Eventually(t, 10*time.Second, func() bool {
				runtime.GC()
				return gcSetting(gogc) > goDefaultGCPercent
			}, "GOGC tuned again after a collection")
		}
		stop()
		require.NoError(t, <-done)
		assert.EqualValues(t, before, gcSetting(gogc), "GOGC put back when Serve returns")
		runtime.GC() // no tuning after it
		assert.EqualValues(t, before, gcSetting(gogc), "and no tuning after Serve returned")
		assert.Less(t, gcSetting(goal), cfg.GCMinHeap)
	})
}

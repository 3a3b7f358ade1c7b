package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/stretchr/testify/require"
)

// call is one request a test worker received.
type call struct {
	path   string
	header http.Header
	body   map[string]any
	raw    []byte
}

// testWorker is a recording SGLang stand-in: it answers /get_server_info with dpSize and every
// other route with handle.
type testWorker struct {
	t      *testing.T
	srv    *httptest.Server
	dpSize int
	mu     sync.Mutex
	calls  []call
	handle func(w http.ResponseWriter, r *http.Request, c call)
	// cancelled counts inference requests whose context ended before the handler returned.
	cancelled int
	// loads, when set, answers the router's engine load polls (GET /v1/loads and /metrics);
	// without it both answer 404, as a worker that reports no load. Polls are not recorded.
	loads func(w http.ResponseWriter, r *http.Request)
}

func newWorker(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, c call)) *testWorker {
	t.Helper()
	tw := &testWorker{t: t, dpSize: 1, handle: handle}
	tw.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c := call{path: r.URL.Path, header: r.Header.Clone(), raw: raw}
		if len(raw) > 0 {
			_ = json.Unmarshal(raw, &c.body)
		}
		switch r.URL.Path {
		case "/get_server_info":
			_ = json.NewEncoder(w).Encode(map[string]any{"dp_size": tw.dpSize, "model_path": "m"})
			return
		case "/health", "/health_generate":
			return
		case "/v1/loads", "/metrics":
			tw.mu.Lock()
			loads := tw.loads
			tw.mu.Unlock()
			if loads == nil {
				http.NotFound(w, r)
				return
			}
			loads(w, r)
			return
		}
		tw.mu.Lock()
		tw.calls = append(tw.calls, c)
		tw.mu.Unlock()
		tw.handle(w, r, c)
		if r.Context().Err() != nil {
			tw.mu.Lock()
			tw.cancelled++
			tw.mu.Unlock()
		}
	}))
	t.Cleanup(tw.srv.Close)
	return tw
}

func (tw *testWorker) URL() string { return tw.srv.URL }

// setLoads makes the worker answer the router's load polls with serve.
func (tw *testWorker) setLoads(serve func(w http.ResponseWriter, r *http.Request)) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.loads = serve
}

// callsTo returns the recorded calls to path.
func (tw *testWorker) callsTo(path string) []call {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	var out []call
	for _, c := range tw.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// callCount returns how many inference calls (any path) the worker has recorded.
func (tw *testWorker) callCount() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return len(tw.calls)
}

func (tw *testWorker) cancelledCount() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.cancelled
}

// jsonReply answers a fixed JSON body.
func jsonReply(body string) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, _ *http.Request, _ call) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
}

// statusReply answers status with a message.
func statusReply(status int, msg string) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, _ *http.Request, _ call) { http.Error(w, msg, status) }
}

// hangReply blocks until the request is cancelled (or release is closed).
func hangReply(release <-chan struct{}) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, r *http.Request, _ call) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

// sseReply streams events (each already "data: …"), flushing each, optionally waiting on gate
// before the i-th event.
func sseReply(events []string, gate map[int]<-chan struct{}) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, r *http.Request, _ call) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i, ev := range events {
			if g, ok := gate[i]; ok {
				select {
				case <-g:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	}
}

// testRouter is a server under test plus its HTTP front.
type testRouter struct {
	s      *Server
	srv    *httptest.Server
	dlog   *syncBuffer
	cancel context.CancelFunc
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startRouter(t *testing.T, cfg Config) *testRouter {
	t.Helper()
	return startRouterLogging(t, cfg, nil)
}

// startRouterLogging is startRouter with the server's log going to logger.
func startRouterLogging(t *testing.T, cfg Config, logger *slog.Logger) *testRouter {
	t.Helper()
	require.NoError(t, cfg.Validate())
	dlog := &syncBuffer{}
	cfg.Seed = new(int64(42))
	s, err := New(Options{Config: cfg, DecisionLog: dlog, Logger: logger})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	srv := httptest.NewServer(s.Handler())
	tr := &testRouter{s: s, srv: srv, dlog: dlog, cancel: cancel}
	t.Cleanup(func() {
		srv.Close()
		cancel()
		s.Wait()
	})
	return tr
}

func pdConfig(prefill, decode []*testWorker, port *int) Config {
	cfg := DefaultConfig()
	cfg.PDDisaggregation = true
	for _, p := range prefill {
		cfg.Prefill = append(cfg.Prefill, router.PrefillWorker{URL: p.URL(), BootstrapPort: port})
	}
	for _, d := range decode {
		cfg.Decode = append(cfg.Decode, d.URL())
	}
	return cfg
}

// post sends a JSON body to the router and returns status, headers and body.
func (tr *testRouter) post(t *testing.T, path, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tr.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(out)
}

// requireLoadsZero polls /get_loads until every load is zero (legs finish asynchronously).
func (tr *testRouter) requireLoadsZero(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(tr.srv.URL + "/get_loads")
		require.NoError(t, err)
		var got struct {
			Workers []loadEntry `json:"workers"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		resp.Body.Close()
		busy := 0
		for _, w := range got.Workers {
			busy += int(w.Load)
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loads did not return to zero: %+v", got.Workers)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// arrivedThen returns a handler that signals on entry (first call closes arrived) and then
// runs next: the scenario "the other leg is already waiting" without races.
func arrivedThen(arrived chan struct{}, next func(http.ResponseWriter, *http.Request, call)) func(http.ResponseWriter, *http.Request, call) {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, c call) {
		once.Do(func() { close(arrived) })
		next(w, r, c)
	}
}

// after returns a handler that waits for ch (or the request's end) and then runs next.
func after(ch <-chan struct{}, next func(http.ResponseWriter, *http.Request, call)) func(http.ResponseWriter, *http.Request, call) {
	return func(w http.ResponseWriter, r *http.Request, c call) {
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		next(w, r, c)
	}
}

package fakeworker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/router/tokenize"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// idleTimeout closes idle keep-alive connections like SGLang's uvicorn (timeout_keep_alive 5 s),
// so clients meet the same connection recycling as with a real worker.
const idleTimeout = 5 * time.Second

// shutdownGrace bounds how long a stopping worker waits for handlers to write their last bytes.
const shutdownGrace = 3 * time.Second

// Worker is one running fake SGLang worker: an HTTP server on its port, a bootstrap server on
// its bootstrap port (prefill mode) and the engine loop goroutine. Its methods are safe for
// concurrent use. It stops when the context given to Start is cancelled or when an injected
// crash kills it; Wait then returns.
type Worker struct {
	cfg     Config
	log     *slog.Logger
	loop    *loop
	slow    float64 // the slow factor now (Failures.SlowFactor, SetSlowFactor); owned by the engine loop
	metrics *metrics
	started time.Time
	kv      *kvPublisher        // nil without --kv-events-config
	kvCfg   KVEventsConfig      // parsed --kv-events-config
	tok     *tokenize.Tokenizer // nil: the approximate workloads tokenizer

	ln, bln   net.Listener
	srv, bsrv *http.Server
	client    *http.Client // decode: registrations at prefill bootstrap servers

	requests atomic.Int64  // inference requests received (for --crash-after)
	nextRoom atomic.Uint64 // regular mode: internal room ids
	ridSeq   atomic.Uint64 // generated request ids

	rngMu sync.Mutex // protects rng
	rng   *rand.Rand // failure-injection draws

	ridMu sync.Mutex        // protects rids
	rids  map[string]uint64 // live rid → room, for /abort_request

	bufs sync.Pool // *[]byte response buffers

	cancel    context.CancelFunc
	stopping  chan struct{} // closed when the worker starts stopping
	crashOnce sync.Once
	crashErr  error
	bg        sync.WaitGroup // registrations and other helper goroutines
	done      chan struct{}  // closed when everything has stopped
}

// Start validates cfg, binds the worker's ports (so URL and BootstrapPort are known when it
// returns) and serves until ctx is cancelled. Errors name the flag or the address at fault.
func Start(ctx context.Context, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok, err := loadTokenizer(cfg.TokenizerPath, cfg.ChatTemplate)
	if err != nil {
		return nil, err
	}
	var kvCfg KVEventsConfig
	if cfg.KVEventsConfig != "" {
		kvCfg, _ = ParseKVEventsConfig(cfg.KVEventsConfig) // checked by Validate
	}
	ec := cfg.engineConfig()
	var kv *kvPublisher
	if kvCfg.enabled() {
		// The engine calls the hook only from the loop, which starts after kv is set.
		ec.KVEvents = func(at time.Time, rank int, evs []engine.KVEvent) { kv.hook(at, rank, evs) }
	}
	srv, err := engine.New(ec)
	if err != nil {
		return nil, fmt.Errorf("fakeworker: %w", err)
	}
	if kvCfg.enabled() {
		if kv, err = startKVPublisher(kvCfg, cfg.KVEventsShape, srv.Config().DPSize, srv.Config().PageSize, cfg.Host, log); err != nil {
			return nil, err
		}
	}
	w := &Worker{
		cfg:      cfg,
		log:      log,
		kv:       kv,
		kvCfg:    kvCfg,
		tok:      tok,
		loop:     newLoop(srv),
		slow:     cfg.Failures.SlowFactor,
		started:  time.Now(),
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		rids:     make(map[string]uint64),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	w.metrics = newMetrics(w)
	w.ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		w.closeKV()
		return nil, fmt.Errorf("fakeworker: --port %d: %w", cfg.Port, err)
	}
	if cfg.TLS != nil {
		w.ln = tls.NewListener(w.ln, cfg.TLS)
	}
	if cfg.Mode == engine.RolePrefill {
		w.bln, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.BootstrapPort)))
		if err != nil {
			w.ln.Close()
			w.closeKV()
			return nil, fmt.Errorf("fakeworker: --bootstrap-port %d: %w", cfg.BootstrapPort, err)
		}
	}
	if cfg.Mode == engine.RoleDecode {
		w.client = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		}}
	}

	ctx, w.cancel = context.WithCancel(ctx)
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); w.loop.run(loopCtx) }()

	w.srv = &http.Server{Handler: w.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	serveDone := make(chan struct{}, 2)
	go func() { w.serve(w.srv, w.ln); serveDone <- struct{}{} }()
	if w.bln != nil {
		w.bsrv = &http.Server{Handler: w.bootstrapRoutes(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		go func() { w.serve(w.bsrv, w.bln); serveDone <- struct{}{} }()
	} else {
		serveDone <- struct{}{}
	}

	go func() {
		<-ctx.Done()
		close(w.stopping)
		stopLoop() // every waiting room fails, so handlers finish promptly
		<-loopDone
		w.closeKV()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		for _, s := range []*http.Server{w.srv, w.bsrv} {
			if s != nil {
				if err := s.Shutdown(sctx); err != nil {
					s.Close()
				}
			}
		}
		<-serveDone
		<-serveDone
		w.bg.Wait()
		if w.client != nil {
			w.client.CloseIdleConnections()
		}
		close(w.done)
	}()
	log.Info("fakeworker started", "mode", ModeName(cfg.Mode), "url", w.URL(), "bootstrap_port", w.BootstrapPort(),
		"dp_size", cfg.DPSize, "profile", cfg.Profile.Name)
	return w, nil
}

// closeKV stops the KV-event publisher, if any.
func (w *Worker) closeKV() {
	if w.kv != nil {
		w.kv.close()
	}
}

func (w *Worker) serve(s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		w.log.Error("fakeworker: serve", "addr", ln.Addr().String(), "err", err)
	}
}

// URL returns the worker's base URL, e.g. "http://127.0.0.1:30001" (https:// with Config.TLS).
func (w *Worker) URL() string {
	if w.cfg.TLS != nil {
		return "https://" + w.ln.Addr().String()
	}
	return "http://" + w.ln.Addr().String()
}

// BootstrapPort returns the port of the prefill bootstrap server, or 0 in other modes.
func (w *Worker) BootstrapPort() int {
	if w.bln == nil {
		return 0
	}
	return w.bln.Addr().(*net.TCPAddr).Port
}

// Mode returns the worker's mode.
func (w *Worker) Mode() engine.Role { return w.cfg.Mode }

// Config returns the worker's configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Stop begins stopping the worker (as cancelling Start's context does); Wait waits for it.
// Only tests call it (the fakeworker command cancels the context instead).
func (w *Worker) Stop() { w.cancel() }

// Wait blocks until the worker has stopped and returns the injected crash, if it crashed.
func (w *Worker) Wait() error {
	<-w.done
	return w.crashErr
}

// crash kills the worker the way a process death would: the engine loses every room and all
// connections drop at once.
func (w *Worker) crash(why string) {
	w.crashOnce.Do(func() {
		w.crashErr = fmt.Errorf("fakeworker: %s worker %s crashed: %s", ModeName(w.cfg.Mode), w.URL(), why)
		w.log.Warn("fakeworker crashed", "url", w.URL(), "why", why)
		w.loop.do(context.Background(), func(l *loop, now time.Time) { l.srv.Kill(now) })
		w.srv.Close()
		if w.bsrv != nil {
			w.bsrv.Close()
		}
		w.cancel()
	})
}

// draw reports whether a failure of probability rate strikes this request.
func (w *Worker) draw(rate float64) bool {
	if rate <= 0 {
		return false
	}
	w.rngMu.Lock()
	x := w.rng.Float64()
	w.rngMu.Unlock()
	return x < rate
}

func (w *Worker) getBuf() *[]byte {
	if b, ok := w.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (w *Worker) putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 {
		*b = (*b)[:0]
		w.bufs.Put(b)
	}
}

func (w *Worker) track(rid string, room uint64) {
	w.ridMu.Lock()
	w.rids[rid] = room
	w.ridMu.Unlock()
}

func (w *Worker) untrack(rid string, room uint64) {
	w.ridMu.Lock()
	if r, ok := w.rids[rid]; ok && r == room {
		delete(w.rids, rid)
	}
	w.ridMu.Unlock()
}

// writeError answers with an OpenAI-style JSON error.
func writeError(rw http.ResponseWriter, status int, message string) {
	typ := "server_error"
	if status < 500 {
		typ = wire.TypeInvalidRequest
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	rw.Write(wire.ErrorBody(status, typ, message))
}

func writeJSON(rw http.ResponseWriter, status int, body []byte) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	rw.Write(body)
}

// readBody reads a request body of at most limit bytes.
func readBody(rw http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(rw, r.Body, limit))
}

package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Options configure a [Server].
type Options struct {
	// Config is the validated configuration (SPEC §2): the routing settings and the server's.
	// Its Seed seeds the router's policies and the rid/room generator (router.NewRand,
	// wire.NewRand), so a run with --seed takes the same decisions as `router sim --seed`;
	// nil draws a random seed ([Server.Seed] tells which).
	Config Config
	// LocalIP suffixes generated rids (SPEC §1.4); "" means 127.0.0.1.
	LocalIP string
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Registry receives the Prometheus metrics; nil creates a private registry.
	Registry *prometheus.Registry
	// DecisionLog, if set, receives one JSON line per routing decision (SPEC §2).
	DecisionLog io.Writer
	// AccessLog, if set, receives one line per HTTP request.
	AccessLog io.Writer
	// FlushEachEvent flushes relayed streams after every SSE event instead of when the
	// upstream has nothing more buffered: more CPU for no latency gain (SPEC §1.4). It exists
	// to measure that (BenchmarkProxy, serve's hidden --flush-each-event).
	FlushEachEvent bool
	// LatencyModels are the engine models of predicted_latency, by role (regular, prefill,
	// decode), for the roles whose policy it is (cmd/router builds them from
	// --latency-profile): a role routed by it without one is an error.
	LatencyModels map[router.Role]router.LatencyModel
}

// Server is the live router: an http.Handler driving the router core with the wall clock.
// Create it with [New], register the configured workers with [Server.Start], serve
// [Server.Handler] and [Server.MetricsHandler] ([Server.Serve] and [Server.ServeMetrics] do it
// on listeners, with TLS and a graceful drain). Safe for concurrent use.
type Server struct {
	cfg       Config
	seed      int64 // cfg.Seed, or the random seed drawn for nil
	r         *router.Router
	ids       *wire.IDGen // rids and rooms sent to workers (seeded: parity with sim)
	reqIDs    *wire.IDGen // client-visible ids that are not sent to workers
	style     wire.FieldStyle
	ridKeys   []string      // cfg.RequestIDHeaders in canonical form (Config.requestIDKeys)
	keyHdrs   []string      // cfg.RoutingKeyHeaders, then routingKeyHeader, in canonical form; nil when no policy routes by key
	clients   [3]*legClient // per role: regular, prefill, decode
	admin     *http.Client  // probes, aborts, flush, proxied GETs
	adm       *admission
	metrics   *Metrics
	reg       *prometheus.Registry
	log       *slog.Logger
	probe     *serverInfoProbe // dp_size under --dp-aware
	hc        *healthChecker
	access    io.Writer
	flushEach bool // Options.FlushEachEvent

	servingTLS *tls.Config // Serve's HTTPS settings (--tls-cert-path); nil: plain HTTP

	dmu  sync.Mutex // protects dlog, dseq, dbuf
	dlog io.Writer
	dseq uint64
	dbuf []byte
	amu  sync.Mutex // protects access writes
	bg   sync.WaitGroup

	kv    *kvRouting  // cache_aware on the workers' KV events; nil when off
	loads *loadPoller // the workers' engine loads; nil when off (--load-poll-interval-ms 0)

	tr *tracing // --enable-trace (tracing.go); nil when off

	latency bool // a role is routed by predicted_latency: SLO headers are read (latency.go)

	bootHosts sync.Map // prefill URL → wire.BootstrapHost of it (a URL parse per PD request otherwise)

	budget   *budget        // --body-memory-budget: bodies in flight across requests
	limits   *limitsMetrics // open connections, rejections, budget gauges
	maxConns int            // --max-connections after the open-file limit; ≤ 0: no cap

	logMu          sync.Mutex           // protects lastAttemptLog
	lastAttemptLog map[string]time.Time // per worker: the last failed attempt logged at WARN
}

// New builds a server for opts.Config (which must pass Validate). It registers no workers:
// call Start.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.seed()
	r, err := router.New(cfg.Config, router.ClockFunc(time.Now), router.NewRand(seed))
	if err != nil {
		return nil, err
	}
	style, err := wire.ParseFieldStyle(cfg.DPRankFields)
	if err != nil {
		return nil, fmt.Errorf("router: --dp-rank-fields: %w", err)
	}
	host := opts.LocalIP
	if host == "" {
		host = "127.0.0.1"
	}
	reg := opts.Registry
	if reg == nil {
		r := prometheus.NewRegistry()
		// go_* and process_* beside pdrouter_*, as a Prometheus operator expects.
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	idle := time.Duration(cfg.UpstreamIdleTimeoutMs) * time.Millisecond
	s := &Server{
		cfg:       cfg,
		seed:      seed,
		r:         r,
		ids:       wire.NewIDGen(wire.NewRand(seed), host),
		reqIDs:    wire.NewIDGen(rand.New(rand.NewPCG(uint64(seed), 0x7265716964)), host),
		style:     style,
		ridKeys:   cfg.requestIDKeys(),
		admin:     &http.Client{Transport: newTransport(idle), Timeout: 30 * time.Second},
		adm:       newAdmission(cfg.Admission(), time.Duration(cfg.QueueTimeoutSecs)*time.Second, reg),
		metrics:   newMetrics(reg, r),
		reg:       reg,
		log:       newRedactLogger(logger), // no URL credentials in any log line
		dlog:      opts.DecisionLog,
		access:    opts.AccessLog,
		flushEach: opts.FlushEachEvent,

		lastAttemptLog: map[string]time.Time{},
	}
	s.initLimits()
	if s.tr, err = newTracing(cfg, s.log); err != nil {
		return nil, err
	}
	if s.kv, err = newKVRouting(s); err != nil {
		return nil, err
	}
	if err := s.initLatency(opts.LatencyModels, reg); err != nil {
		return nil, err
	}
	r.OnWorkerEvent(s.workerEvent)
	// https:// workers: the client's TLS settings.
	tc, err := workerTLS(cfg.ClientCertPath, cfg.ClientKeyPath, cfg.CACertPaths)
	if err != nil {
		return nil, err
	}
	for i := range s.clients {
		s.clients[i] = newLegClient(idle, tc)
	}
	if every := time.Duration(cfg.LoadPollIntervalMs) * time.Millisecond; every > 0 && cfg.LoadReportMaxAgeMs > 0 {
		// A poll may take as long as its report stays fresh: one slower than that is useless.
		s.loads = &loadPoller{Router: s.r, Client: newLegClient(idle, tc), Interval: every, Timeout: max(every, cfg.LoadReportMaxAge()),
			DPAware: cfg.DPAware, Log: s.log, Metrics: s.metrics, Now: time.Now}
		if cfg.APIKey != "" {
			s.loads.Header = http.Header{"Authorization": {"Bearer " + cfg.APIKey}}
		}
	}
	if cfg.TLSCertPath != "" {
		if s.servingTLS, err = ServingTLS(cfg.TLSCertPath, cfg.TLSKeyPath); err != nil {
			return nil, err
		}
	}
	s.probe = &serverInfoProbe{
		Client:   &http.Client{Transport: newTransport(idle), Timeout: 10 * time.Second},
		APIKey:   cfg.APIKey,
		Timeout:  time.Duration(cfg.WorkerStartupTimeoutSecs) * time.Second,
		Interval: time.Duration(cfg.WorkerStartupCheckInterval) * time.Second,
	}
	h := cfg.Health()
	s.hc = &healthChecker{Router: s.r, Client: s.admin, Endpoint: h.Endpoint, Timeout: h.Timeout, Interval: h.Interval,
		APIKey: cfg.APIKey, Now: time.Now}

	if tc != nil {
		s.admin.Transport.(*http.Transport).TLSClientConfig = tc
		s.probe.Client.Transport.(*http.Transport).TLSClientConfig = tc
	}
	if cfg.UsesRoutingKeys() {
		s.keyHdrs = canonicalKeys(append(slices.Clip(cfg.RoutingKeyHeaders), routingKeyHeader))
	}
	return s, nil
}

// Seed returns the seed in use: Config.Seed, or the one drawn at random when it was nil.
func (s *Server) Seed() int64 { return s.seed }

// Router returns the routing core the server drives. Only tests call it: cmd/router's and
// kube's, which read or seed the routing state of a server they started.
func (s *Server) Router() *router.Router { return s.r }

// Start registers the configured workers (probing dp_size under --dp-aware, retrying while
// they start) and runs the health checks and the router's Tick until ctx is done. It returns
// once every configured worker is registered, or the first registration error.
func (s *Server) Start(ctx context.Context) error {
	if s.kv != nil {
		s.kv.start(ctx)
	}
	type spec struct {
		url  string
		role router.Role
		port *int
	}
	var specs []spec
	for _, u := range s.cfg.WorkerURLs {
		specs = append(specs, spec{u, router.Regular, nil})
	}
	for _, p := range s.cfg.Prefill {
		specs = append(specs, spec{p.URL, router.Prefill, p.BootstrapPort})
	}
	for _, u := range s.cfg.Decode {
		specs = append(specs, spec{u, router.Decode, nil})
	}
	// Probe concurrently, register in the given order (target order is registration order).
	sizes := make([]int, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sizes[i], errs[i] = s.dpSize(ctx, sp.url, sp.role)
		}()
	}
	wg.Wait()
	for i, sp := range specs {
		if errs[i] != nil {
			return redactErr(errs[i], sp.url)
		}
		// Starting until its first health probe passes (right below, then every second).
		if err := s.r.AddWorker(router.WorkerSpec{URL: sp.url, Role: sp.role, BootstrapPort: sp.port, DPSize: sizes[i], Starting: true, Source: "config"}); err != nil {
			return err
		}
	}
	if len(specs) > 0 {
		for url, err := range s.hc.checkStarting(ctx) {
			s.log.Warn("worker did not pass its first health probe: no traffic until it does (probed every second)",
				"url", router.RedactURL(url), "cause", err.Error())
		}
	}
	switch {
	case s.cfg.ServiceDiscovery:
	case s.cfg.PDDisaggregation && (len(s.cfg.Prefill) == 0 || len(s.cfg.Decode) == 0):
		s.log.Warn("PD mode without prefill or decode workers: /readiness answers 503 until both are added through /workers")
	case !s.cfg.PDDisaggregation && len(s.cfg.WorkerURLs) == 0:
		s.log.Warn("no workers: every request is answered 503 until some are added (--worker-urls, POST /workers, or --service-discovery)")
	}
	if s.loads != nil {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.loads.Run(ctx) }()
	}
	s.bg.Add(2)
	go func() { defer s.bg.Done(); s.hc.Run(ctx) }()
	go func() {
		defer s.bg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.r.Tick(now)
			}
		}
	}()
	return nil
}

// attemptFailed logs a failed attempt at WARN, at most once per worker per
// attemptLogInterval (the others are counted in pdrouter_errors_total).
func (s *Server) attemptFailed(id string, attempt int, ue *upstreamError) {
	s.metrics.WorkerErrors.WithLabelValues(router.RedactURL(ue.Worker), ue.Role, errorKind(ue)).Inc()
	now := time.Now()
	s.logMu.Lock()
	last, seen := s.lastAttemptLog[ue.Worker]
	ok := !seen || now.Sub(last) >= attemptLogInterval
	if ok {
		s.lastAttemptLog[ue.Worker] = now
	}
	s.logMu.Unlock()
	if ok {
		s.log.Warn("attempt failed", "worker", router.RedactURL(ue.Worker), "role", ue.Role, "id", id, "attempt", attempt, "cause", ue.Error())
	} else {
		s.log.Debug("attempt failed", "worker", router.RedactURL(ue.Worker), "role", ue.Role, "id", id, "attempt", attempt, "cause", ue.Error())
	}
}

// attemptLogInterval rate-limits the WARN of failed attempts per worker.
const attemptLogInterval = 5 * time.Second

// Wait blocks until background work (health checks, ticks, best-effort aborts) has stopped,
// then closes idle upstream connections and, under --enable-trace, exports the spans still
// batched (within traceFlushTimeout); call it after cancelling Start's context.
func (s *Server) Wait() {
	s.bg.Wait()
	if s.tr != nil {
		s.tr.shutdown(s.log)
	}
	for _, c := range s.clients {
		c.CloseIdleConnections()
	}
	if c, ok := s.loads.client().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	s.admin.CloseIdleConnections()
}

// logDecision writes one decision-log line for d, line's request fields (id, rid, room,
// route) filled in by the caller (nothing without a decision log).
func (s *Server) logDecision(line wire.DecisionLine, d *router.Decision) {
	if s.dlog == nil {
		return
	}
	line.Reason, line.MatchRate = string(d.Reason), d.MatchRate
	if p, ok := d.Prediction(); ok {
		d.SetLogID(line.ID)
		f := predictedFigures(p)
		line.Predicted = &f
	}
	for _, leg := range []struct {
		role router.Role
		dst  **wire.DecisionTarget
	}{{router.Regular, &line.Regular}, {router.Prefill, &line.Prefill}, {router.Decode, &line.Decode}} {
		if l, ok := d.Leg(leg.role); ok {
			*leg.dst = &wire.DecisionTarget{Worker: router.RedactURL(l.Target.URL()), Index: l.WorkerIndex, Rank: l.Target.RankPtr(),
				Signal: string(l.Signal), LoadAgeMs: float64(l.LoadAge.Microseconds()) / 1000, Tier: l.Tier()}
		}
	}
	s.writeDecision(&line)
}

// writeDecision numbers line and writes it to the decision log.
func (s *Server) writeDecision(line *wire.DecisionLine) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	s.dseq++
	line.Seq = s.dseq
	s.dbuf = wire.AppendDecisionLine(s.dbuf[:0], line)
	if _, err := s.dlog.Write(s.dbuf); err != nil {
		s.log.Error("decision log write failed", "err", err)
	}
}

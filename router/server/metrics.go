package server

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
)

// durationBuckets spans 1 ms … 240 s like sgl-router's duration histograms.
var durationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 240}

// tokenBuckets span 1 ms … 2.5 s for the gaps between tokens (ITL, TPOT): a decode step takes
// 5-100 ms, a stall behind a long prefill batch seconds.
var tokenBuckets = []float64{.001, .0025, .005, .0075, .01, .015, .02, .03, .04, .05, .075, .1, .15, .2, .3, .5, 1, 2.5}

// ratioBuckets cover [0,1] in tenths.
var ratioBuckets = []float64{0, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1}

// Metrics are the router's Prometheus metrics (SPEC §2), prefixed pdrouter_ and in base units.
// Gauges that mirror router state (loads, health, breakers, trees) are read from the router
// at scrape time, so they can never drift from it. Safe for concurrent use.
type Metrics struct {
	Requests          *prometheus.CounterVec   // requests_total{route,code}
	RequestDuration   *prometheus.HistogramVec // request_duration_seconds{route}
	TTFT              *prometheus.HistogramVec // ttft_seconds{route}: first SSE event with text
	Retries           *prometheus.CounterVec   // retries_total{route}
	StreamErrors      *prometheus.CounterVec   // stream_errors_total{route,code}
	RetriesOverBudget *prometheus.CounterVec   // retries_over_budget_total{route}
	Errors            *prometheus.CounterVec   // errors_total{kind}
	PolicyDecisions   *prometheus.CounterVec   // policy_decisions_total{policy,role,reason}
	PrefillFailures   prometheus.Counter       // pd_prefill_failures_total
	DecodeFailures    prometheus.Counter       // pd_decode_failures_total
	PrefixMatchRatio  prometheus.Histogram     // prefix_match_ratio: the router's predicted match rate
	WorkerCachedRatio prometheus.Histogram     // worker_cached_token_ratio: cached_tokens/prompt_tokens reported
	DiscoveryEvents   *prometheus.CounterVec   // discovery_events_total{role,event}: Kubernetes pods added, removed, skipped
	WorkerErrors      *prometheus.CounterVec   // worker_errors_total{worker,role,kind}: failed attempts per worker
	LoadSource        *prometheus.GaugeVec     // worker_load_source{worker,source}: 1 for where each worker's engine load comes from
	LoadReports       *prometheus.CounterVec   // load_reports_total{result}: engine load polls, ok or failed
	Shed              *prometheus.CounterVec   // requests_shed_total{role}: 503s because every worker of a role was overloaded
	// The router's own measure of the token stream of every streamed response, by the role of
	// the worker that streamed it (regular, or decode in PD mode): every token passes through it.
	RoleTTFT *prometheus.HistogramVec // stream_ttft_seconds{role}: request arrival to the first event with text
	ITL      *prometheus.HistogramVec // inter_token_latency_seconds{role}: between consecutive events with text
	TPOT     *prometheus.HistogramVec // tpot_seconds{role}: per request, (last − first text event) / (events − 1)

	sgl *incumbentMetrics // sgl-router's names, beside ours

	policy     [3]string // policy name per router.Role, fixed when the router is built
	predicting bool      // the first leg's policy (prefill, or regular) is cache_aware
	state      *stateCollector

	// The children of the hot path's vectors, each looked up once (WithLabelValues hashes its
	// labels and takes a lock on every call; strconv.Itoa of a status code allocates).
	routes    seriesCache[string, *routeSeries]
	ttft      seriesCache[string, prometheus.Observer]   // by route, made at the first stream's text
	retries   seriesCache[string, [2]prometheus.Counter] // by route: ours, sgl-router's
	responses seriesCache[response, *responseSeries]
	decisions [3]seriesCache[router.Reason, prometheus.Counter] // by role, then reason
	roles     [3]seriesCache[struct{}, *roleSeries]             // one entry per role, made on first use
}

// routeSeries are the children observeRequest adds to for one inference route.
type routeSeries struct {
	duration, sglDuration, pdDuration prometheus.Observer // pdDuration and pdRequests: PD mode only
	pdRequests                        prometheus.Counter
	generate                          bool // sgl_router_generate_duration_seconds too
}

// response is the label set of requests_total.
type response struct {
	route     string
	code      int // the status sent
	streamErr int // the status of the error event a 200 stream ended with; 0: none
}

// responseSeries are the children countResponse adds to.
type responseSeries struct {
	requests, sglRequests, sglErrors prometheus.Counter // sglErrors nil unless an error
	streamErrors                     prometheus.Counter // nil unless the stream ended in an error
}

// roleSeries are the token-stream children of one worker role.
type roleSeries struct{ ttft, itl, tpot prometheus.Observer }

// maxCachedSeries bounds each seriesCache; past it, lookups go to the vector every time.
// The hot path's label sets are a few dozen.
const maxCachedSeries = 1024

// seriesCache maps label values to a vector's child, read without a lock: a copy-on-write map,
// copied on the rare insertion. The zero value is ready to use.
type seriesCache[K comparable, V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]V]
}

// get returns k's child, made by mk the first time.
func (c *seriesCache[K, V]) get(k K, mk func(K) V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if v, ok := old[k]; ok {
		return v
	}
	v := mk(k)
	if len(old) >= maxCachedSeries {
		return v
	}
	m := make(map[K]V, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[k] = v
	c.m.Store(&m)
	return v
}

// route returns route's children.
func (m *Metrics) route(route string) *routeSeries {
	return m.routes.get(route, func(route string) *routeSeries {
		rs := &routeSeries{
			duration:    m.RequestDuration.WithLabelValues(route),
			sglDuration: m.sgl.duration.WithLabelValues(route),
			generate:    route == "/generate",
		}
		if m.sgl.pd {
			rs.pdDuration = m.sgl.pdDuration.WithLabelValues(route)
			rs.pdRequests = m.sgl.pdRequests.WithLabelValues(route)
		}
		return rs
	})
}

// routeTTFT returns ttft_seconds{route}.
func (m *Metrics) routeTTFT(route string) prometheus.Observer {
	return m.ttft.get(route, func(route string) prometheus.Observer { return m.TTFT.WithLabelValues(route) })
}

// role returns the token-stream children of role.
func (m *Metrics) role(role router.Role) *roleSeries {
	return m.roles[role].get(struct{}{}, func(struct{}) *roleSeries {
		r := role.String()
		return &roleSeries{ttft: m.RoleTTFT.WithLabelValues(r), itl: m.ITL.WithLabelValues(r), tpot: m.TPOT.WithLabelValues(r)}
	})
}

// newMetrics registers the metrics on reg, reading state gauges from r at scrape time.
func newMetrics(reg prometheus.Registerer, r *router.Router) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_requests_total", Help: "Requests answered, by route and HTTP status code."},
			[]string{"route", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdrouter_request_duration_seconds", Help: "Time from request arrival to the end of the response, stream included.",
			Buckets: durationBuckets}, []string{"route"}),
		TTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdrouter_ttft_seconds", Help: "Router-observed time to the first SSE event carrying text.",
			Buckets: durationBuckets}, []string{"route"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_retries_total", Help: "Retried attempts, by route."}, []string{"route"}),
		StreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_stream_errors_total", Help: "Streams sent with status 200 that ended in an error event (cut, or the worker's error), by route and the event's status; requests_total counts them under 200, as the client saw them."}, []string{"route", "code"}),
		RetriesOverBudget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_retries_over_budget_total", Help: "Failed attempts not retried only because the retry budget was full (--retry-budget-percent, --retry-min-concurrency), by route."}, []string{"route"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_errors_total", Help: "Errors by kind (bad_request, no_workers, upstream_status, upstream_transport, timeout, client_disconnect, …)."},
			[]string{"kind"}),
		PolicyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_policy_decisions_total", Help: "Routing decisions by policy, role and reason (cache_hit, cache_miss, imbalance, …)."},
			[]string{"policy", "role", "reason"}),
		PrefillFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_pd_prefill_failures_total", Help: "PD requests whose prefill leg failed."}),
		DecodeFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdrouter_pd_decode_failures_total", Help: "PD requests whose decode leg failed."}),
		PrefixMatchRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pdrouter_prefix_match_ratio", Help: "The router's predicted prefix match rate per routed request (cache_aware).",
			Buckets: ratioBuckets}),
		WorkerCachedRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pdrouter_worker_cached_token_ratio", Help: "cached_tokens/prompt_tokens as reported by the worker, beside the router's prediction.",
			Buckets: ratioBuckets}),
		DiscoveryEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_discovery_events_total", Help: "Service discovery: pods added as workers, removed, or skipped (not ready, bad annotation, failed dp_size read), by role."},
			[]string{"role", "event"}),
		WorkerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_worker_errors_total", Help: "Failed attempts by worker, role and kind (upstream_status, upstream_transport, timeout, …); retried or not."},
			[]string{"worker", "role", "kind"}),
		LoadSource: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pdrouter_worker_load_source", Help: "1 for where each worker's engine load comes from: v1_loads (GET /v1/loads), metrics (its sglang gauges) or none (the policies use in-flight counts)."},
			[]string{"worker", "source"}),
		LoadReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_load_reports_total", Help: "Engine load polls of the workers, by result (ok, failed)."},
			[]string{"result"}),
		Shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdrouter_requests_shed_total", Help: "Requests answered 503 with Retry-After because every available worker of the role was overloaded (--worker-overload-*)."},
			[]string{"role"}),
		RoleTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdrouter_stream_ttft_seconds", Help: "Router-measured time from a streamed request's arrival to its first event with text, by the role of the worker streaming it (regular, decode).",
			Buckets: durationBuckets}, []string{"role"}),
		ITL: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdrouter_inter_token_latency_seconds", Help: "Router-measured gap between consecutive stream events with text (one per token at SGLang's default --stream-interval 1), by worker role.",
			Buckets: tokenBuckets}, []string{"role"}),
		TPOT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdrouter_tpot_seconds", Help: "Router-measured time per output token of each streamed response: (last - first event with text) / (events with text - 1), by worker role.",
			Buckets: tokenBuckets}, []string{"role"}),
		sgl: newIncumbentMetrics(r.PD()),
	}
	// Every (role, event) series exists from the start, at 0, so dashboards and alerts see
	// the series before the first pod comes or goes.
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		for _, ev := range []string{"added", "removed", "skipped"} {
			m.DiscoveryEvents.WithLabelValues(role.String(), ev)
		}
	}
	first := router.Regular
	if r.PD() {
		first = router.Prefill
	}
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		if p := r.Policy(role); p != nil {
			m.policy[role] = p.Name()
		}
	}
	m.predicting = m.policy[first] == router.PolicyCacheAware
	m.state = &stateCollector{r: r, sgl: m.sgl}
	streaming := router.Regular
	if r.PD() {
		streaming = router.Decode
	}
	// The token-stream series of the streaming role exist from the start, for dashboards.
	m.RoleTTFT.WithLabelValues(streaming.String())
	m.ITL.WithLabelValues(streaming.String())
	m.TPOT.WithLabelValues(streaming.String())
	reg.MustRegister(m.Requests, m.RequestDuration, m.TTFT, m.Retries, m.RetriesOverBudget, m.StreamErrors, m.Errors, m.PolicyDecisions,
		m.PrefillFailures, m.DecodeFailures, m.PrefixMatchRatio, m.WorkerCachedRatio, m.DiscoveryEvents, m.WorkerErrors, m.state,
		m.LoadSource, m.LoadReports, m.Shed,
		m.RoleTTFT, m.ITL, m.TPOT)
	reg.MustRegister(m.sgl.collectors()...)
	return m
}

// stateCollector exports the router's current state at scrape time, from the lists every
// view reads (router.Workers, router.Targets: draining workers included).
type stateCollector struct {
	r   *router.Router
	sgl *incumbentMetrics
}

var (
	descTargetLoad = prometheus.NewDesc("pdrouter_target_load", "Requests routed to the target and not finished (the router's own count).",
		[]string{"target", "role"}, nil)
	descWorkerHealthy = prometheus.NewDesc("pdrouter_worker_healthy", "1 when the worker passes its health checks.",
		[]string{"worker", "role"}, nil)
	descCBState = prometheus.NewDesc("pdrouter_cb_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open.",
		[]string{"worker"}, nil)
	descWorkerState = prometheus.NewDesc("pdrouter_worker_state", "1 for each worker's state: starting, healthy, unhealthy, breaker_open, or draining (removed, requests still in flight).",
		[]string{"worker", "role", "state"}, nil)
	descTreeChars = prometheus.NewDesc("pdrouter_tree_chars", "Characters held by the cache-aware tree.", []string{"role"}, nil)
	descTreeNodes = prometheus.NewDesc("pdrouter_tree_nodes", "Nodes of the cache-aware tree.", []string{"role"}, nil)
	descTreeBytes = prometheus.NewDesc("pdrouter_tree_bytes", "Heap held by the cache-aware tree, estimated: its edges' bytes and 104 bytes per node.", []string{"role"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTargetLoad, descWorkerHealthy, descCBState, descWorkerState, descTreeChars, descTreeNodes, descTreeBytes} {
		ch <- d
	}
	c.sgl.describe(ch)
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.r.Targets() {
		ch <- prometheus.MustNewConstMetric(descTargetLoad, prometheus.GaugeValue, float64(t.Load), router.RedactURL(t.Name), t.Role.String())
	}
	for _, w := range c.r.Workers() {
		healthy := 0.0
		if w.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descWorkerHealthy, prometheus.GaugeValue, healthy, router.RedactURL(w.URL), w.Role.String())
		ch <- prometheus.MustNewConstMetric(descCBState, prometheus.GaugeValue, float64(w.Breaker), router.RedactURL(w.URL))
		ch <- prometheus.MustNewConstMetric(descWorkerState, prometheus.GaugeValue, 1, router.RedactURL(w.URL), w.Role.String(), string(w.State))
	}
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		if size, ok := c.r.TreeStats(role); ok {
			ch <- prometheus.MustNewConstMetric(descTreeChars, prometheus.GaugeValue, float64(size.Chars), role.String())
			ch <- prometheus.MustNewConstMetric(descTreeNodes, prometheus.GaugeValue, float64(size.Nodes), role.String())
			ch <- prometheus.MustNewConstMetric(descTreeBytes, prometheus.GaugeValue, float64(size.Bytes), role.String())
		}
	}
	c.sgl.collectState(c.r, ch)
}

// observeDecision counts one routing decision per leg and records the predicted match rate.
func (m *Metrics) observeDecision(d *router.Decision) {
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		if l, ok := d.Leg(role); ok {
			m.decisions[role].get(l.Reason, func(reason router.Reason) prometheus.Counter {
				return m.PolicyDecisions.WithLabelValues(m.policy[role], role.String(), string(reason))
			}).Inc()
		}
	}
	if m.predicting {
		m.PrefixMatchRatio.Observe(d.MatchRate)
	}
	m.sgl.observeDecision(d)
}

// observeRequest records an inference request's duration (requests_total counts every
// response, in the handler: countResponse).
func (m *Metrics) observeRequest(route string, _ int, seconds float64) {
	rs := m.route(route)
	rs.duration.Observe(seconds)
	rs.sglDuration.Observe(seconds)
	if rs.generate {
		m.sgl.generate.Observe(seconds)
	}
	if m.sgl.pd {
		rs.pdRequests.Inc()
		rs.pdDuration.Observe(seconds)
	}
}

// retried counts one retried attempt of route.
func (m *Metrics) retried(route string) {
	c := m.retries.get(route, func(route string) [2]prometheus.Counter {
		return [2]prometheus.Counter{m.Retries.WithLabelValues(route), m.sgl.retries.WithLabelValues(route)}
	})
	c[0].Inc()
	c[1].Inc()
}

// countResponse counts one response of any route — inference, admin, health, 401, 404, 405 —
// in requests_total{route,code}; route is the matched path ("other" for unknown ones, so a
// scanner cannot grow the label set).
// countResponse counts one answered request under the status sent (code) and, for a stream
// that ended in an error event, that event's status (streamErr): requests_total says what the
// client saw, stream_errors_total and sgl-router's error counter that it failed.
func (m *Metrics) countResponse(route string, code, streamErr int) {
	rs := m.responses.get(response{route, code, streamErr}, func(k response) *responseSeries {
		r := &responseSeries{
			requests:    m.Requests.WithLabelValues(k.route, strconv.Itoa(k.code)),
			sglRequests: m.sgl.requests.WithLabelValues(k.route),
		}
		switch {
		case k.code >= 400:
			r.sglErrors = m.sgl.errors.WithLabelValues(k.route, errorType(k.code))
		case k.streamErr != 0:
			r.sglErrors = m.sgl.errors.WithLabelValues(k.route, errorType(k.streamErr))
			r.streamErrors = m.StreamErrors.WithLabelValues(k.route, strconv.Itoa(k.streamErr))
		}
		return r
	})
	rs.requests.Inc()
	rs.sglRequests.Inc()
	if rs.sglErrors != nil {
		rs.sglErrors.Inc()
	}
	if rs.streamErrors != nil {
		rs.streamErrors.Inc()
	}
}

// loadSource moves worker url's load source series from prev to next ("" none).
func (m *Metrics) loadSource(url, prev, next string) {
	w := router.RedactURL(url)
	if prev != "" {
		m.LoadSource.DeleteLabelValues(w, prev)
	}
	if next != "" {
		m.LoadSource.WithLabelValues(w, next).Set(1)
	}
}

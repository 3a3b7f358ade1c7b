package server

import (
	"strconv"

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
	Errors            *prometheus.CounterVec   // errors_total{kind}
	PolicyDecisions   *prometheus.CounterVec   // policy_decisions_total{policy,role,reason}
	PrefillFailures   prometheus.Counter       // pd_prefill_failures_total
	DecodeFailures    prometheus.Counter       // pd_decode_failures_total
	PrefixMatchRatio  prometheus.Histogram     // prefix_match_ratio: the router's predicted match rate
	WorkerCachedRatio prometheus.Histogram     // worker_cached_token_ratio: cached_tokens/prompt_tokens reported
	DiscoveryEvents   *prometheus.CounterVec   // discovery_events_total{role,event}: Kubernetes pods added, removed, skipped
	WorkerErrors      *prometheus.CounterVec   // worker_errors_total{worker,role,kind}: failed attempts per worker
	// The router's own measure of the token stream of every streamed response, by the role of
	// the worker that streamed it (regular, or decode in PD mode): every token passes through it.
	RoleTTFT *prometheus.HistogramVec // stream_ttft_seconds{role}: request arrival to the first event with text
	ITL      *prometheus.HistogramVec // inter_token_latency_seconds{role}: between consecutive events with text
	TPOT     *prometheus.HistogramVec // tpot_seconds{role}: per request, (last − first text event) / (events − 1)

	sgl *incumbentMetrics // sgl-router's names, beside ours

	policy     [3]string // policy name per router.Role, fixed when the router is built
	predicting bool      // the first leg's policy (prefill, or regular) is cache_aware
	state      *stateCollector
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
	reg.MustRegister(m.Requests, m.RequestDuration, m.TTFT, m.Retries, m.Errors, m.PolicyDecisions,
		m.PrefillFailures, m.DecodeFailures, m.PrefixMatchRatio, m.WorkerCachedRatio, m.DiscoveryEvents, m.WorkerErrors, m.state,
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
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTargetLoad, descWorkerHealthy, descCBState, descWorkerState, descTreeChars, descTreeNodes} {
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
		if chars, nodes, ok := c.r.TreeStats(role); ok {
			ch <- prometheus.MustNewConstMetric(descTreeChars, prometheus.GaugeValue, float64(chars), role.String())
			ch <- prometheus.MustNewConstMetric(descTreeNodes, prometheus.GaugeValue, float64(nodes), role.String())
		}
	}
	c.sgl.collectState(c.r, ch)
}

// observeDecision counts one routing decision per leg and records the predicted match rate.
func (m *Metrics) observeDecision(d *router.Decision) {
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		if l, ok := d.Leg(role); ok {
			m.PolicyDecisions.WithLabelValues(m.policy[role], role.String(), string(l.Reason)).Inc()
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
	m.RequestDuration.WithLabelValues(route).Observe(seconds)
	m.sgl.duration.WithLabelValues(route).Observe(seconds)
	if route == "/generate" {
		m.sgl.generate.Observe(seconds)
	}
	if m.sgl.pd {
		m.sgl.pdRequests.WithLabelValues(route).Inc()
		m.sgl.pdDuration.WithLabelValues(route).Observe(seconds)
	}
}

// retried counts one retried attempt of route.
func (m *Metrics) retried(route string) {
	m.Retries.WithLabelValues(route).Inc()
	m.sgl.retries.WithLabelValues(route).Inc()
}

// countResponse counts one response of any route — inference, admin, health, 401, 404, 405 —
// in requests_total{route,code}; route is the matched path ("other" for unknown ones, so a
// scanner cannot grow the label set).
func (m *Metrics) countResponse(route string, code int) {
	m.Requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.sgl.requests.WithLabelValues(route).Inc()
	if code >= 400 {
		m.sgl.errors.WithLabelValues(route, errorType(code)).Inc()
	}
}

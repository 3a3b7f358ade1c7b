package server

import (
	"strconv"
	"sync"

	"github.com/pdrouter/pdrouter/router"
	"github.com/prometheus/client_golang/prometheus"
)

// incumbentMetrics are sgl-router's own metric names, exported beside pdrouter_* so that an
// operator's sgl-router alerts and dashboards keep working: the set sgl-router's metrics.rs
// registers (sgl-project/sglang sgl-router/src/metrics.rs, init_metrics and RouterMetrics)
// and the SGLang router docs list, with its label names. Only those pdrouter can fill with
// the same meaning are exported (no tokenizer, embeddings or discovery-batch series).
type incumbentMetrics struct {
	requests        *prometheus.CounterVec   // sgl_router_requests_total{route}
	duration        *prometheus.HistogramVec // sgl_router_request_duration_seconds{route}
	errors          *prometheus.CounterVec   // sgl_router_request_errors_total{route,error_type}
	retries         *prometheus.CounterVec   // sgl_router_retries_total{route}
	processed       *workerCounter           // sgl_router_processed_requests_total{worker}
	cacheHits       prometheus.Counter       // sgl_router_cache_hits_total
	cacheMisses     prometheus.Counter       // sgl_router_cache_misses_total
	generate        prometheus.Histogram     // sgl_router_generate_duration_seconds
	pdRequests      *prometheus.CounterVec   // sgl_router_pd_requests_total{route}
	pdDuration      *prometheus.HistogramVec // sgl_router_pd_request_duration_seconds{route}
	pdPrefillReqs   *workerCounter           // sgl_router_pd_prefill_requests_total{worker}
	pdDecodeReqs    *workerCounter           // sgl_router_pd_decode_requests_total{worker}
	pdPrefillErrors *workerCounter           // sgl_router_pd_prefill_errors_total{worker}
	pdDecodeErrors  *workerCounter           // sgl_router_pd_decode_errors_total{worker}
	pdStreamErrors  *workerCounter           // sgl_router_pd_stream_errors_total{worker}
	pd              bool
}

// incumbentBuckets are sgl-router's duration buckets (metrics.rs, start_prometheus).
var incumbentBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30, 45, 60, 90, 120, 180, 240}

func newIncumbentMetrics(pd bool) *incumbentMetrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help + " (sgl-router's name)"}, labels)
	}
	hv := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help + " (sgl-router's name)", Buckets: incumbentBuckets}, labels)
	}
	return &incumbentMetrics{
		requests:  cv("sgl_router_requests_total", "Requests by route.", "route"),
		duration:  hv("sgl_router_request_duration_seconds", "Request duration by route, stream included.", "route"),
		errors:    cv("sgl_router_request_errors_total", "Requests answered with an error, or whose stream ended in an error event, by route and error type.", "route", "error_type"),
		retries:   cv("sgl_router_retries_total", "Retried attempts by route.", "route"),
		processed: newWorkerCounter("sgl_router_processed_requests_total", "Requests routed to each worker (each leg of a PD request)."),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "sgl_router_cache_hits_total",
			Help: "cache_aware decisions that followed a prefix match (sgl-router's name)."}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "sgl_router_cache_misses_total",
			Help: "cache_aware decisions without a good prefix match (sgl-router's name)."}),
		generate: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sgl_router_generate_duration_seconds",
			Help: "/generate request duration (sgl-router's name).", Buckets: incumbentBuckets}),
		pdRequests:      cv("sgl_router_pd_requests_total", "PD requests by route.", "route"),
		pdDuration:      hv("sgl_router_pd_request_duration_seconds", "PD request duration by route.", "route"),
		pdPrefillReqs:   newWorkerCounter("sgl_router_pd_prefill_requests_total", "Prefill legs sent to each worker."),
		pdDecodeReqs:    newWorkerCounter("sgl_router_pd_decode_requests_total", "Decode legs sent to each worker."),
		pdPrefillErrors: newWorkerCounter("sgl_router_pd_prefill_errors_total", "Failed prefill legs per worker."),
		pdDecodeErrors:  newWorkerCounter("sgl_router_pd_decode_errors_total", "Failed decode legs per worker."),
		pdStreamErrors:  newWorkerCounter("sgl_router_pd_stream_errors_total", "Decode streams that broke or ended in an error event, per worker."),
		pd:              pd,
	}
}

func (m *incumbentMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.errors, m.retries, m.cacheHits, m.cacheMisses,
		m.generate, m.pdRequests, m.pdDuration}
}

// workerCounters are the per-worker counters, exported by the state collector for the
// workers still registered only: a gone worker's series go with it (discovery churn must not
// grow /metrics without bound), and come back from 0 if it is registered again.
func (m *incumbentMetrics) workerCounters() []*workerCounter {
	return []*workerCounter{m.processed, m.pdPrefillReqs, m.pdDecodeReqs, m.pdPrefillErrors, m.pdDecodeErrors, m.pdStreamErrors}
}

// workerCounter is a counter per worker URL (redacted), exported through collectIncumbentState.
type workerCounter struct {
	desc *prometheus.Desc
	mu   sync.Mutex // protects n
	n    map[string]float64
}

func newWorkerCounter(name, help string) *workerCounter {
	return &workerCounter{desc: prometheus.NewDesc(name, help+" (sgl-router's name)", []string{"worker"}, nil), n: map[string]float64{}}
}

// inc counts one for worker (a raw URL).
func (c *workerCounter) inc(worker string) {
	w := router.RedactURL(worker)
	c.mu.Lock()
	c.n[w]++
	c.mu.Unlock()
}

// collect sends the counters of the workers in live (redacted URLs) and forgets the others.
func (c *workerCounter) collect(live map[string]bool, ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w, v := range c.n {
		if !live[w] {
			delete(c.n, w)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, w)
	}
}

// errorType names an error status as sgl-router's error_type label does.
func errorType(code int) string {
	switch code {
	case 400:
		return "bad_request"
	case 401:
		return "unauthorized"
	case 404:
		return "not_found"
	case 408:
		return "queue_timeout"
	case 413:
		return "payload_too_large"
	case 429:
		return "queue_full"
	case 499:
		return "client_disconnect"
	case 502:
		return "upstream_error"
	case 503:
		return "no_workers"
	case 504:
		return "timeout"
	}
	return "status_" + strconv.Itoa(code)
}

// observeDecision counts the workers a decision sends legs to, and cache_aware's hits.
func (m *incumbentMetrics) observeDecision(d *router.Decision) {
	for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
		l, ok := d.Leg(role)
		if !ok {
			continue
		}
		w := l.Target.URL()
		m.processed.inc(w)
		switch role {
		case router.Prefill:
			m.pdPrefillReqs.inc(w)
		case router.Decode:
			m.pdDecodeReqs.inc(w)
		}
	}
	switch d.Reason {
	case router.ReasonCacheHit:
		m.cacheHits.Inc()
	case router.ReasonCacheMiss, router.ReasonImbalance:
		m.cacheMisses.Inc()
	}
}

// legFailed counts a failed PD leg against its worker.
func (m *incumbentMetrics) legFailed(ue *upstreamError) {
	switch ue.Role {
	case "prefill":
		m.pdPrefillErrors.inc(ue.Worker)
	case "decode":
		m.pdDecodeErrors.inc(ue.Worker)
	}
}

// stateDescs are sgl-router's gauges, read from the router at scrape time.
var (
	descSGLActiveWorkers = prometheus.NewDesc("sgl_router_active_workers", "Workers taking traffic (sgl-router's name).", nil, nil)
	descSGLWorkerHealth  = prometheus.NewDesc("sgl_router_worker_health", "1 when the worker passes its health checks (sgl-router's name).", []string{"worker"}, nil)
	descSGLWorkerLoad    = prometheus.NewDesc("sgl_router_worker_load", "Requests routed to the worker and not finished (sgl-router's name).", []string{"worker"}, nil)
	descSGLRunning       = prometheus.NewDesc("sgl_router_running_requests", "Requests routed to the worker and not finished (sgl-router's name).", []string{"worker"}, nil)
	descSGLCBState       = prometheus.NewDesc("sgl_router_cb_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open (sgl-router's name).", []string{"worker"}, nil)
	sglStateDescs        = []*prometheus.Desc{descSGLActiveWorkers, descSGLWorkerHealth, descSGLWorkerLoad, descSGLRunning, descSGLCBState}
)

// collectState exports sgl-router's gauges from the router's views, and its
// per-worker counters of the workers still registered.
func (m *incumbentMetrics) collectState(r *router.Router, ch chan<- prometheus.Metric) {
	active := 0
	live := map[string]bool{}
	defer func() {
		for _, c := range m.workerCounters() {
			c.collect(live, ch)
		}
	}()
	for _, w := range r.Workers() {
		u := router.RedactURL(w.URL)
		live[u] = true
		healthy := 0.0
		if w.Healthy {
			healthy = 1
		}
		if w.State == router.WorkerHealthy {
			active++
		}
		ch <- prometheus.MustNewConstMetric(descSGLWorkerHealth, prometheus.GaugeValue, healthy, u)
		ch <- prometheus.MustNewConstMetric(descSGLWorkerLoad, prometheus.GaugeValue, float64(w.Load), u)
		ch <- prometheus.MustNewConstMetric(descSGLRunning, prometheus.GaugeValue, float64(w.Load), u)
		ch <- prometheus.MustNewConstMetric(descSGLCBState, prometheus.GaugeValue, float64(w.Breaker), u)
	}
	ch <- prometheus.MustNewConstMetric(descSGLActiveWorkers, prometheus.GaugeValue, float64(active))
}

// describe sends the descriptions of the series collectState exports.
func (m *incumbentMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, d := range sglStateDescs {
		ch <- d
	}
	for _, c := range m.workerCounters() {
		ch <- c.desc
	}
}

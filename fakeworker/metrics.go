package fakeworker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are one worker's Prometheus metrics, on its own registry, under SGLang's names
// (sglang:*), with a model_name label like SGLang's and a dp_rank label on per-rank gauges.
type metrics struct {
	reg       *prometheus.Registry
	ttft      prometheus.Histogram
	tpot      prometheus.Histogram
	e2e       prometheus.Histogram
	requests  prometheus.Counter
	prompt    prometheus.Counter
	generated prometheus.Counter
	cached    prometheus.Counter
	injected  *prometheus.CounterVec
}

// latencyBuckets are SGLang's TTFT buckets (seconds), which also serve TPOT and E2E here.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 40, 60, 120, 300}

func newMetrics(w *Worker) *metrics {
	labels := prometheus.Labels{"model_name": w.cfg.ModelPath}
	m := &metrics{reg: prometheus.NewRegistry()}
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m.ttft = hist("sglang:time_to_first_token_seconds", "Time to first token of finished requests, seconds (prefill: until the KV transfer is done).")
	m.tpot = hist("sglang:time_per_output_token_seconds", "Time per output token after the first, seconds.")
	m.e2e = hist("sglang:e2e_request_latency_seconds", "End-to-end latency of finished requests, seconds.")
	m.requests = counter("sglang:num_requests_total", "Finished requests.")
	m.prompt = counter("sglang:prompt_tokens_total", "Prompt tokens of finished requests.")
	m.generated = counter("sglang:generation_tokens_total", "Output tokens of finished requests.")
	m.cached = counter("sglang:cached_tokens_total", "Prompt tokens served from the prefix cache (in PD: the prefill's hit).")
	m.injected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fakeworker_injected_failures_total", Help: "Failures injected by the failure flags, by kind.", ConstLabels: labels}, []string{"kind"})
	m.reg.MustRegister(m.ttft, m.tpot, m.e2e, m.requests, m.prompt, m.generated, m.cached, m.injected, &gauges{w: w})
	if kv := w.kv; kv != nil {
		m.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fakeworker_kv_event_batches_published_total",
				Help: "KV-event batches sent on the PUB sockets (all DP ranks).", ConstLabels: labels},
				func() float64 { return float64(kv.published.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fakeworker_kv_event_batches_dropped_total",
				Help: "KV-event batches dropped because a rank's queue held max_queue_size batches.", ConstLabels: labels},
				func() float64 { return float64(kv.dropped.Load()) }))
	}
	return m
}

// observe records one finished request: start is when it arrived, first when its first token
// (prefill: the transfer) was done, end when it finished.
func (m *metrics) observe(start, first, end time.Time, u usage, _ int) {
	m.requests.Inc()
	m.prompt.Add(float64(u.prompt))
	m.generated.Add(float64(u.completion))
	m.cached.Add(float64(u.cached))
	m.e2e.Observe(end.Sub(start).Seconds())
	if !first.IsZero() {
		m.ttft.Observe(max(first.Sub(start), 0).Seconds())
		if u.completion > 1 {
			m.tpot.Observe(end.Sub(first).Seconds() / float64(u.completion-1))
		}
	}
}

// gauges collects the per-rank engine gauges from one Loads snapshot per scrape.
type gauges struct {
	w *Worker

	mu       sync.Mutex // protects the previous scrape's generated tokens and time
	lastGen  float64
	lastTime time.Time
}

var (
	rankLabels      = []string{"model_name", "dp_rank"}
	descRunning     = prometheus.NewDesc("sglang:num_running_reqs", "Requests being prefilled or decoded.", rankLabels, nil)
	descQueued      = prometheus.NewDesc("sglang:num_queue_reqs", "Requests waiting (bootstrap, prealloc, transfer and waiting queues).", rankLabels, nil)
	descUsedTokens  = prometheus.NewDesc("sglang:num_used_tokens", "KV tokens in use.", rankLabels, nil)
	descTokenUsage  = prometheus.NewDesc("sglang:token_usage", "KV tokens in use / max_total_num_tokens.", rankLabels, nil)
	descCacheHit    = prometheus.NewDesc("sglang:cache_hit_rate", "Prefix cache hit rate as SGLang's scheduler logs it: per prefill batch cached / (cached + new) tokens, summed over the batches so far.", rankLabels, nil)
	descGenTput     = prometheus.NewDesc("sglang:gen_throughput", "Output tokens per second since the previous scrape (SGLang: the decode log's gen throughput).", []string{"model_name"}, nil)
	descCacheConfig = prometheus.NewDesc("sglang:cache_config_info", "KV cache configuration (value 1).", []string{"model_name", "page_size", "num_pages", "max_total_num_tokens"}, nil)
)

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{descRunning, descQueued, descUsedTokens, descTokenUsage, descCacheHit, descGenTput, descCacheConfig} {
		ch <- d
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	w := g.w
	model := w.cfg.ModelPath
	total, page := w.maxTotalTokens(), w.pageSize()
	ch <- prometheus.MustNewConstMetric(descCacheConfig, prometheus.GaugeValue, 1, model, strconv.Itoa(page), strconv.Itoa(total/page), strconv.Itoa(total))
	var m dto.Metric
	_ = w.metrics.generated.Write(&m)
	gen, now := m.GetCounter().GetValue(), time.Now()
	g.mu.Lock()
	tput := 0.0
	if dt := now.Sub(g.lastTime).Seconds(); !g.lastTime.IsZero() && dt > 0 {
		tput = (gen - g.lastGen) / dt
	}
	g.lastGen, g.lastTime = gen, now
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descGenTput, prometheus.GaugeValue, tput, model)
	for _, l := range w.loads(context.Background()) {
		rank := strconv.Itoa(l.Rank)
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(l.Running), model, rank)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(l.Queued), model, rank)
		ch <- prometheus.MustNewConstMetric(descUsedTokens, prometheus.GaugeValue, float64(l.KVTokens), model, rank)
		ch <- prometheus.MustNewConstMetric(descTokenUsage, prometheus.GaugeValue, l.TokenUsage, model, rank)
		ch <- prometheus.MustNewConstMetric(descCacheHit, prometheus.GaugeValue, l.SGLangCacheHitRate, model, rank)
	}
}

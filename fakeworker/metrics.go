package fakeworker

import (
	"context"
	"strconv"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one worker's Prometheus metrics, on its own registry, under SGLang's names
// (sglang:*), with a model_name label like SGLang's and SGLang's scheduler labels plus
// dp_rank on the per-rank gauges.
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
	m.reg.MustRegister(m.ttft, m.tpot, m.e2e, m.requests, m.prompt, m.generated, m.cached, m.injected, cacheConfig{w})
	if !w.cfg.NoLoadReports {
		m.reg.MustRegister(gauges{w})
	}
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

// cacheConfig collects sglang:cache_config_info, the KV cache's configuration.
type cacheConfig struct{ w *Worker }

var descCacheConfig = prometheus.NewDesc("sglang:cache_config_info", "KV cache configuration (value 1).", []string{"model_name", "page_size", "num_pages", "max_total_num_tokens"}, nil)

func (c cacheConfig) Describe(ch chan<- *prometheus.Desc) { ch <- descCacheConfig }

func (c cacheConfig) Collect(ch chan<- prometheus.Metric) {
	total, page := c.w.maxTotalTokens(), c.w.pageSize()
	ch <- prometheus.MustNewConstMetric(descCacheConfig, prometheus.GaugeValue, 1, c.w.cfg.ModelPath, strconv.Itoa(page), strconv.Itoa(total/page), strconv.Itoa(total))
}

// gauges collects the per-rank gauges SGLang's schedulers export (metrics/collector.py
// SchedulerMetricsCollector), from one engine Loads snapshot per scrape. Labels are
// SGLang's: model_name, engine_type, tp_rank, pp_rank and moe_ep_rank of the scheduler that
// reports for the rank, plus dp_rank (SGLang adds it only with DP > 1; here always).
// Unlike SGLang's, which refresh at its log points (every prefill batch, every 40 decode
// steps), the values are the engine's at the scrape.
type gauges struct{ w *Worker }

var rankLabels = []string{"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}

// rankGauges are the gauges and how each reads a rank's load.
var rankGauges = []struct {
	desc  *prometheus.Desc
	value func(l *engine.RankLoad) float64
}{
	{prometheus.NewDesc("sglang:num_running_reqs", "Requests in the running (decode) batch; 0 on a prefill server.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.RunningReqs) }},
	{prometheus.NewDesc("sglang:num_queue_reqs", "Requests in the waiting queue (not the PD bootstrap, prealloc, transfer or retracted queues).", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(waitingQueue(*l)) }},
	{prometheus.NewDesc("sglang:num_used_tokens", "KV tokens held by requests (the evictable prefix cache excluded).", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.UsedTokens) }},
	{prometheus.NewDesc("sglang:token_usage", "num_used_tokens / max_total_num_tokens.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return l.TokenUsage }},
	{prometheus.NewDesc("sglang:max_total_num_tokens", "KV cache capacity of the rank, tokens.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.MaxTotalTokens) }},
	{prometheus.NewDesc("sglang:gen_throughput", "Tokens decoded per second over the last second.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return l.GenThroughput }},
	{prometheus.NewDesc("sglang:cache_hit_rate", "Prefix cache hit rate as SGLang's scheduler logs it: per prefill batch cached / (cached + new) tokens, summed over the batches so far.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return l.SGLangCacheHitRate }},
	{prometheus.NewDesc("sglang:num_prefill_bootstrap_queue_reqs", "Requests in the prefill bootstrap queue.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.ByQueue[engine.QueueBootstrap]) }},
	{prometheus.NewDesc("sglang:num_prefill_inflight_queue_reqs", "Requests in the prefill inflight (KV transfer) queue.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.ByQueue[engine.QueueInflight]) }},
	{prometheus.NewDesc("sglang:num_decode_prealloc_queue_reqs", "Requests in the decode prealloc queue.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.ByQueue[engine.QueuePrealloc]) }},
	{prometheus.NewDesc("sglang:num_decode_transfer_queue_reqs", "Requests in the decode transfer queue.", rankLabels, nil),
		func(l *engine.RankLoad) float64 { return float64(l.ByQueue[engine.QueueTransfer]) }},
}

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, rg := range rankGauges {
		ch <- rg.desc
	}
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	w := g.w
	engineType := "unified"
	if w.cfg.Mode != engine.RoleUnified {
		engineType = w.cfg.Mode.String()
	}
	for _, l := range w.loads(context.Background()) {
		tp, ep := w.reportingRanks(l.Rank)
		labels := []string{w.cfg.ModelPath, engineType, strconv.Itoa(tp), "0", strconv.Itoa(ep), strconv.Itoa(l.Rank)}
		for _, rg := range rankGauges {
			ch <- prometheus.MustNewConstMetric(rg.desc, prometheus.GaugeValue, rg.value(&l), labels...)
		}
	}
}

// reportingRanks are the tp_rank and moe_ep_rank of the scheduler that reports DP rank dp:
// under DP attention the first GPU of the rank's attention group (tp_rank dp·TP/DP, its
// expert-parallel rank tp_rank·EP/TP); without it each DP replica's TP rank 0.
func (w *Worker) reportingRanks(dp int) (tp, ep int) {
	if !w.cfg.DPAttention {
		return 0, 0
	}
	tp = dp * max(w.cfg.TPSize/w.cfg.DPSize, 1)
	return tp, tp * w.cfg.EPSize / w.cfg.TPSize
}

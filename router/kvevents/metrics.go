package kvevents

import (
	"github.com/pdrouter/pdrouter/router/kvindex"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the subscriber's Prometheus series. Target labels are redacted (no URL
// credentials leave the router, SPEC §1.7).
type metrics struct {
	events       *prometheus.CounterVec // target, kind
	blocks       *prometheus.CounterVec // target, op
	batches      *prometheus.CounterVec // target
	gaps         *prometheus.CounterVec // target
	replays      *prometheus.CounterVec // target, result
	restarts     *prometheus.CounterVec // target
	decodeErrors *prometheus.CounterVec // target
	unknown      *prometheus.CounterVec // target
	reconnects   *prometheus.CounterVec // target
	hashChecks   *prometheus.CounterVec // target, result
	stale        prometheus.Gauge
	connected    prometheus.Gauge
	lag          prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns = "pdrouter_kv_events_"
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: ns + name, Help: help}, labels)
	}
	m := &metrics{
		events:       counter("events_total", "KV events applied to the index, by target and kind (stored, removed, cleared).", "target", "kind"),
		blocks:       counter("blocks_total", "KV blocks applied to the index, by target and op (stored, removed).", "target", "op"),
		batches:      counter("batches_total", "Event batches applied, by target (replayed ones included).", "target"),
		gaps:         counter("seq_gaps_total", "Sequence gaps seen, by target.", "target"),
		replays:      counter("replays_total", "Replay requests after a gap, by target and result (ok, failed).", "target", "result"),
		restarts:     counter("publisher_restarts_total", "Publisher restarts seen (sequence going backwards): the target's blocks were cleared.", "target"),
		decodeErrors: counter("decode_errors_total", "Messages that failed to decode, by target.", "target"),
		unknown:      counter("unknown_events_total", "Events of an unknown type, skipped, by target.", "target"),
		reconnects:   counter("reconnects_total", "Failed dials and lost subscriptions, by target.", "target"),
		hashChecks: counter("hash_checks_total", "Stored blocks whose hash the router recomputed from their token ids, by target and result (ok, mismatch): a mismatch means the router hashes differently from the worker, so precise routing misses.",
			"target", "result"),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "stale_targets",
			Help: "Targets whose index view is stale (no batch received yet, or a gap without replay): they match no blocks until rebuilt."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: ns + "connected_targets",
			Help: "Targets whose publisher is connected."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: ns + "lag_seconds",
			Help:    "Event lag: the router's clock when a batch is applied minus the batch's publisher timestamp.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.events, m.blocks, m.batches, m.gaps, m.replays, m.restarts,
			m.decodeErrors, m.unknown, m.reconnects, m.hashChecks, m.stale, m.connected, m.lag} {
			reg.MustRegister(c)
		}
	}
	return m
}

// init creates a new target's series at 0, so dashboards and alerts see them (a gap rate of
// 0, not no data) before the first event.
func (m *metrics) init(label string) {
	for _, kind := range []string{"stored", "removed", "cleared"} {
		m.events.WithLabelValues(label, kind)
	}
	for _, op := range []string{"stored", "removed"} {
		m.blocks.WithLabelValues(label, op)
	}
	for _, r := range []string{"ok", "failed"} {
		m.replays.WithLabelValues(label, r)
	}
	for _, r := range []string{"ok", "mismatch"} {
		m.hashChecks.WithLabelValues(label, r)
	}
	for _, v := range []*prometheus.CounterVec{m.batches, m.gaps, m.restarts, m.decodeErrors, m.unknown, m.reconnects} {
		v.WithLabelValues(label)
	}
}

// indexCollector exports each subscribed target's block count in the index at scrape time.
type indexCollector struct{ s *Subscriber }

var (
	descIndexBlocks = prometheus.NewDesc("pdrouter_kv_events_index_blocks",
		"KV blocks the index holds for the target now on its GPU (from its events).", []string{"target"}, nil)
	descIndexHostBlocks = prometheus.NewDesc("pdrouter_kv_events_index_host_blocks",
		"KV blocks the index holds for the target now in its host memory (HiCache's CPU_PINNED tier).", []string{"target"}, nil)
)

func (c indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descIndexBlocks
	ch <- descIndexHostBlocks
}

func (c indexCollector) Collect(ch chan<- prometheus.Metric) {
	ix, ok := c.s.ix.(interface {
		Stats(kvindex.TargetID) kvindex.Stats
	})
	if !ok {
		return
	}
	c.s.mu.Lock()
	type row struct {
		label string
		id    kvindex.TargetID
	}
	rows := make([]row, 0, len(c.s.subs))
	for _, st := range c.s.subs {
		rows = append(rows, row{st.label, st.id})
	}
	c.s.mu.Unlock()
	for _, r := range rows {
		st := ix.Stats(r.id)
		ch <- prometheus.MustNewConstMetric(descIndexBlocks, prometheus.GaugeValue, float64(st.Blocks), r.label)
		ch <- prometheus.MustNewConstMetric(descIndexHostBlocks, prometheus.GaugeValue, float64(st.HostBlocks), r.label)
	}
}

// forget drops a removed target's series.
func (m *metrics) forget(target string) {
	l := prometheus.Labels{"target": redact(target)}
	for _, v := range []*prometheus.CounterVec{m.events, m.blocks, m.batches, m.gaps, m.replays, m.restarts,
		m.decodeErrors, m.unknown, m.reconnects, m.hashChecks} {
		v.DeletePartialMatch(l)
	}
}

// redact hides the credentials of a worker URL or url@rank target name, as router.RedactURL
// does (this package may not import router).
func redact(u string) string {
	suffix := ""
	if i := strings.LastIndex(u, "@"); i >= 0 && i+1 < len(u) && strings.Trim(u[i+1:], "0123456789") == "" && strings.Contains(u[:i], "://") {
		u, suffix = u[:i], u[i:]
	}
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u + suffix
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	at := strings.LastIndex(host, "@")
	if at < 0 {
		return u + suffix
	}
	return scheme + "://***@" + rest[at+1:] + suffix
}

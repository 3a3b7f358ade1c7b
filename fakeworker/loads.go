package fakeworker

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// The engine's load reports over HTTP: SGLang's GET /v1/loads (python/sglang/srt/entrypoints/
// v1_loads.py, the snapshot of managers/load_snapshot.py built by the scheduler's load
// inquirer), from engine.Server.Loads, and the deprecated GET /get_load. The per-rank
// Prometheus gauges of /metrics are in metrics.go.

// serverVersion is the SGLang version the worker reports (/get_server_info, /v1/loads).
const serverVersion = "pdrouter-fakeworker"

// loadSections are /v1/loads' include values (SGLang's LoadSnapshot.VALID_SECTIONS), in the
// sorted order its 400 answer lists them.
var loadSections = []string{"all", "core", "disagg", "lora", "memory", "queues", "spec"}

// loadValue is one entry of a rank's report: a number (an int unless float), or a string,
// which the Prometheus format skips.
type loadValue struct {
	key   string
	num   float64
	float bool
	str   *string
}

func intValue(key string, n int) loadValue { return loadValue{key: key, num: float64(n)} }

// floatValue rounds v to places decimals, as SGLang's inquirer does before reporting.
func floatValue(key string, v float64, places int) loadValue {
	p := math.Pow10(places)
	return loadValue{key: key, num: math.Round(v*p) / p, float: true}
}

// loadSection is an optional block of a rank's report: its JSON key, the include value that
// selects it and the prefix its entries take in the Prometheus format.
type loadSection struct {
	key, include, prefix string
	values               []loadValue
}

// rankReport is one rank's /v1/loads entry, in SGLang's key order: the core values (dp_rank
// first), then the sections. SGLang's memory, speculative and lora sections are never
// present: the worker has no such numbers to give, and SGLang omits a section it cannot fill.
type rankReport struct {
	core     []loadValue
	sections []loadSection
}

func (w *Worker) rankReport(l engine.RankLoad) rankReport {
	utilization := 0.0 // SGLang's is stuck at 0 (no max_running_requests_under_SLO) …
	if w.cfg.Mode == engine.RolePrefill {
		utilization = -1 // … and -1 on a prefill server
	}
	mode := disaggregationMode(w.cfg.Mode)
	return rankReport{
		core: []loadValue{
			intValue("dp_rank", l.Rank),
			intValue("num_running_reqs", l.RunningReqs),
			intValue("num_waiting_reqs", l.WaitingReqs),
			intValue("num_waiting_uncached_tokens", l.WaitingUncachedTokens),
			intValue("num_used_tokens", l.UsedTokens),
			intValue("num_total_tokens", l.TotalTokens),
			intValue("max_total_num_tokens", l.MaxTotalTokens),
			intValue("max_running_requests", l.MaxRunningRequests),
			floatValue("token_usage", l.TokenUsage, 4),
			floatValue("gen_throughput", l.GenThroughput, 2),
			floatValue("cache_hit_rate", l.SGLangCacheHitRate, 4),
			floatValue("utilization", utilization, 4),
		},
		sections: []loadSection{
			{key: "disaggregation", include: "disagg", prefix: "disagg", values: []loadValue{
				{key: "mode", str: &mode},
				intValue("prefill_bootstrap_queue_reqs", l.ByQueue[engine.QueueBootstrap]),
				intValue("prefill_inflight_queue_reqs", l.ByQueue[engine.QueueInflight]),
				intValue("decode_prealloc_queue_reqs", l.ByQueue[engine.QueuePrealloc]),
				intValue("decode_transfer_queue_reqs", l.ByQueue[engine.QueueTransfer]),
				intValue("decode_retracted_queue_reqs", l.RetractedReqs),
				floatValue("kv_transfer_speed_gb_s", 0, 2),
				floatValue("kv_transfer_latency_ms", 0, 2),
			}},
			{key: "queues", include: "queues", prefix: "queues", values: []loadValue{
				intValue("waiting", waitingQueue(l)),
				intValue("grammar", 0),
				intValue("paused", 0),
				intValue("retracted", l.RetractedReqs),
			}},
		},
	}
}

// waitingQueue is the length of SGLang's waiting_queue: the engine's waiting requests without
// a decode server's retracted ones, which SGLang keeps in a queue of their own.
func waitingQueue(l engine.RankLoad) int { return l.ByQueue[engine.QueueWaiting] - l.RetractedReqs }

// includeSet is /v1/loads' include parameter: nil for every section (absent, empty or "all"
// among them), else the sections named. Names outside loadSections give a non-empty detail,
// the 400 body's text in SGLang's wording (capitalised and punctuated as SGLang writes it, so
// it is a response body, not a Go error).
func includeSet(q string) (set map[string]bool, detail string) {
	if q == "" {
		return nil, ""
	}
	set = map[string]bool{}
	var bad []string
	for _, s := range strings.Split(q, ",") {
		s = strings.TrimSpace(s)
		set[s] = true
		if !slices.Contains(loadSections, s) && !slices.Contains(bad, s) {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		quoted := make([]string, len(bad))
		for i, s := range bad {
			quoted[i] = pyRepr(s)
		}
		valid := make([]string, len(loadSections))
		for i, s := range loadSections {
			valid[i] = pyRepr(s)
		}
		return nil, fmt.Sprintf("Invalid include sections: {%s}. Valid options: [%s]", strings.Join(quoted, ", "), strings.Join(valid, ", "))
	}
	if set["all"] {
		return nil, ""
	}
	return set, ""
}

// pyRepr quotes s as Python's repr does (single quotes unless s holds one and no double).
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	if q == "'" {
		s = strings.ReplaceAll(s, "'", `\'`)
	}
	return q + s + q
}

// pyNumber formats v as Python's str does: ints bare, floats with a decimal point ("0.0",
// "1842.55"), exponent form below 1e-4 and from 1e16.
func pyNumber(v loadValue) string {
	if !v.float {
		return strconv.FormatInt(int64(v.num), 10)
	}
	a := math.Abs(v.num)
	switch {
	case a != 0 && (a < 1e-4 || a >= 1e16):
		return strconv.FormatFloat(v.num, 'e', -1, 64)
	case v.num == math.Trunc(v.num):
		return strconv.FormatFloat(v.num, 'f', 1, 64)
	}
	return strconv.FormatFloat(v.num, 'f', -1, 64)
}

// appendJSON appends r as a JSON object with the sections inc selects (nil: all).
func (r rankReport) appendJSON(b []byte, inc map[string]bool) []byte {
	b = appendValues(append(b, '{'), r.core)
	for _, s := range r.sections {
		if inc == nil || inc[s.include] {
			b = strconv.AppendQuote(append(b, ','), s.key)
			b = append(appendValues(append(b, ":{"...), s.values), '}')
		}
	}
	return append(b, '}')
}

func appendValues(b []byte, vs []loadValue) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(strconv.AppendQuote(b, v.key), ':')
		if v.str != nil {
			q, _ := json.Marshal(*v.str)
			b = append(b, q...)
		} else {
			b = append(b, pyNumber(v)...)
		}
	}
	return b
}

// prometheusLoads renders reports as SGLang's /v1/loads?format=prometheus: one gauge per value,
// sglang_<key> (sections: sglang_<prefix>_<key>), a dp_rank label, metrics in the order they
// first appear, strings skipped, no HELP lines.
func prometheusLoads(rs []rankReport, inc map[string]bool) []byte {
	type sample struct {
		rank int
		v    loadValue
	}
	var names []string
	samples := map[string][]sample{}
	add := func(name string, rank int, v loadValue) {
		if v.str != nil {
			return
		}
		if _, ok := samples[name]; !ok {
			names = append(names, name)
		}
		samples[name] = append(samples[name], sample{rank, v})
	}
	for _, r := range rs {
		rank := int(r.core[0].num)
		for _, v := range r.core[1:] {
			add("sglang_"+v.key, rank, v)
		}
		for _, s := range r.sections {
			if inc == nil || inc[s.include] {
				for _, v := range s.values {
					add("sglang_"+s.prefix+"_"+v.key, rank, v)
				}
			}
		}
	}
	var b []byte
	for _, name := range names {
		b = fmt.Appendf(b, "# TYPE %s gauge\n", name)
		for _, s := range samples[name] {
			b = fmt.Appendf(b, "%s{dp_rank=\"%d\"} %s\n", name, s.rank, pyNumber(s.v))
		}
	}
	if len(b) == 0 {
		b = []byte("\n") // SGLang joins no lines and adds a newline
	}
	return b
}

// pyISOTime formats t in UTC as Python's datetime.isoformat: microseconds unless zero, and
// the +00:00 offset.
func pyISOTime(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// numAccelerators is SGLang's GPUs per DP rank: the server's TP size, divided among the
// ranks under DP attention.
func (w *Worker) numAccelerators() int {
	if w.cfg.DPAttention {
		return max(w.cfg.TPSize/w.cfg.DPSize, 1)
	}
	return w.cfg.TPSize
}

// writeDetail answers as FastAPI does for an HTTPException or a validation error.
func writeDetail(rw http.ResponseWriter, status int, detail any) {
	body, _ := json.Marshal(map[string]any{"detail": detail})
	writeJSON(rw, status, body)
}

// serveV1Loads answers GET /v1/loads as SGLang does: every DP rank's load (dp_rank=N: that
// rank only, none when out of range; not an integer: 422), the core values plus the
// sections include selects (core, disagg, queues, all; memory, spec and lora are accepted
// but never present; an unknown name: 400), as JSON {"timestamp", "version", "accelerator",
// "num_accelerators", "loads"} or, with format=prometheus, as gauges.
func (w *Worker) serveV1Loads(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rank, filter := 0, false
	if s := q.Get("dp_rank"); s != "" {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			writeDetail(rw, http.StatusUnprocessableEntity, []any{map[string]any{"type": "int_parsing", "loc": []string{"query", "dp_rank"},
				"msg": "Input should be a valid integer, unable to parse string as an integer", "input": s}})
			return
		}
		rank, filter = n, true
	}
	inc, detail := includeSet(q.Get("include"))
	if detail != "" {
		writeDetail(rw, http.StatusBadRequest, detail)
		return
	}
	ls := w.loads(r.Context())
	if ls == nil {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: engine is not running")
		return
	}
	reports := make([]rankReport, 0, len(ls))
	for _, l := range ls {
		if !filter || l.Rank == rank {
			reports = append(reports, w.rankReport(l))
		}
	}
	if q.Get("format") == "prometheus" {
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		rw.WriteHeader(http.StatusOK)
		rw.Write(prometheusLoads(reports, inc))
		return
	}
	loads := make([]json.RawMessage, len(reports))
	for i, rep := range reports {
		loads[i] = rep.appendJSON(nil, inc)
	}
	var accelerator *string
	if w.cfg.GPU != "" {
		accelerator = &w.cfg.GPU
	}
	body, _ := json.Marshal(struct {
		Timestamp       string            `json:"timestamp"`
		Version         string            `json:"version"`
		Accelerator     *string           `json:"accelerator"`
		NumAccelerators int               `json:"num_accelerators"`
		Loads           []json.RawMessage `json:"loads"`
	}{pyISOTime(time.Now()), serverVersion, accelerator, w.numAccelerators(), loads})
	writeJSON(rw, http.StatusOK, body)
}

// loadEntry is one DP rank in /get_load, SGLang's deprecated load endpoint.
type loadEntry struct {
	DPRank         int `json:"dp_rank"`
	NumReqs        int `json:"num_reqs"`         // running + queued + inflight
	NumWaitingReqs int `json:"num_waiting_reqs"` // queued (bootstrap, prealloc, transfer and waiting)
	NumTokens      int `json:"num_tokens"`       // KV tokens held, the prefix cache included
}

func loadEntries(ls []engine.RankLoad) []loadEntry {
	out := make([]loadEntry, len(ls))
	for i, l := range ls {
		out[i] = loadEntry{DPRank: l.Rank, NumReqs: l.Running + l.WaitingReqs + l.Inflight, NumWaitingReqs: l.WaitingReqs, NumTokens: l.KVTokens}
	}
	return out
}

func (w *Worker) serveLoad(rw http.ResponseWriter, r *http.Request) {
	ls := w.loads(r.Context())
	if ls == nil {
		writeError(rw, http.StatusServiceUnavailable, "fakeworker: engine is not running")
		return
	}
	body, _ := json.Marshal(loadEntries(ls))
	writeJSON(rw, http.StatusOK, body)
}

package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// SchemaVersion is the value of results.json's "schema" field this package writes and reads.
const SchemaVersion = "pdrouter.results/v1"

// Tools that write results (Meta.Tool).
const (
	ToolBench = "bench"
	ToolSim   = "sim"
)

// Results is the content of results.json (SPEC §6). Field order is the JSON order.
type Results struct {
	// Schema is SchemaVersion; EncodeResults fills it in when empty.
	Schema string `json:"schema"`
	// Meta describes the run.
	Meta Meta `json:"meta"`
	// Levels in the order they ran.
	Levels []Level `json:"levels"`
}

// Meta describes the run. Cluster and Router are opaque plain JSON (reports does not import
// the packages that define them); nil serialises as null. They are kept compact: reading
// compacts them, so write-then-read returns the same bytes when the producer stored
// json.Marshal output.
type Meta struct {
	// Tool is ToolBench or ToolSim.
	Tool string `json:"tool"`
	// Version is the router binary's version string.
	Version string `json:"version"`
	// Seed is the --seed of the run.
	Seed int64 `json:"seed"`
	// Workload names the workload and its parameters.
	Workload Workload `json:"workload"`
	// Target is the bench's URL; nil for the simulator.
	Target *string `json:"target"`
	// Cluster is the simulated (or described) cluster as JSON; nil when unknown.
	Cluster json.RawMessage `json:"cluster"`
	// Router is the router configuration as JSON: the routing settings (router.Config) for the
	// simulator, every setting (/get_router_config, server.Config) for a bench of a router serve;
	// nil when unknown.
	Router json.RawMessage `json:"router"`
	// Started is when a bench run began, written as RFC 3339 in the value's own zone and
	// precision (time.Now().UTC().Truncate(time.Second) gives a tidy value that reads back
	// equal). Nil for the simulator, whose output has no wall-clock values; omitted from JSON
	// when nil.
	Started *time.Time `json:"started,omitempty"`
	// Label names the run (--label); empty when not given. Reports use it as the run's name.
	Label string `json:"label,omitempty"`
	// Command is the command line that produced the run (arguments after the binary's name).
	Command []string `json:"command,omitempty"`
	// ServerInfo is the bench target's /get_server_info answer (a JSON object) when it gave
	// one; nil otherwise and for the simulator.
	ServerInfo json.RawMessage `json:"server_info,omitempty"`
	// Replay is the bench's exact workload and load parameters (workloads.Replay as JSON),
	// which `router sim calibrate` replays; nil for the simulator and older runs.
	Replay json.RawMessage `json:"replay,omitempty"`
	// Workers are the deployment's workers as a bench found them (those a router serve's
	// /get_router_config lists, or the target itself when it is a worker), each with its own
	// /get_server_info answer: `router sim calibrate` takes their engine arguments as given.
	// Nil for the simulator and when none were found.
	Workers []WorkerInfo `json:"workers,omitempty"`
	// Warnings are what a bench could not record (a worker that did not answer); not failures.
	Warnings []string `json:"warnings,omitempty"`
}

// WorkerInfo is one worker of a benched deployment.
type WorkerInfo struct {
	// URL is the worker's URL with any credentials redacted.
	URL string `json:"url"`
	// Role is prefill, decode or regular.
	Role string `json:"role"`
	// ServerInfo is its /get_server_info answer (a JSON object); nil when it gave none.
	ServerInfo json.RawMessage `json:"server_info,omitempty"`
	// Error says why ServerInfo is missing.
	Error string `json:"error,omitempty"`
}

// Workload is the workload name plus its parameters, written as one flat JSON object
// {"name": …, param: value, …} with parameters in sorted key order. Params values are JSON
// (see NewWorkload); a parameter may not be called "name".
type Workload struct {
	// Name is the --workload name (multiturn, gsp, random, …).
	Name string
	// Params maps each parameter to its compact JSON value; nil when there are none.
	Params map[string]json.RawMessage
}

// NewWorkload builds a Workload from a name and a parameter struct or map, which must marshal
// to a JSON object (nil means no parameters).
func NewWorkload(name string, params any) (Workload, error) {
	w := Workload{Name: name}
	if params == nil {
		return w, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return w, fmt.Errorf("reports: workload %q params: %w", name, err)
	}
	if err := w.setParams(b); err != nil {
		return w, fmt.Errorf("reports: workload %q params: %w", name, err)
	}
	return w, nil
}

func (w *Workload) setParams(obj []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return fmt.Errorf("want a JSON object: %w", err)
	}
	if _, ok := m["name"]; ok {
		return errors.New(`a parameter may not be called "name"`)
	}
	for k, v := range m {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return fmt.Errorf("parameter %q: %w", k, err)
		}
		m[k] = buf.Bytes()
	}
	if len(m) == 0 {
		m = nil
	}
	w.Params = m
	return nil
}

// MarshalJSON writes {"name": …} followed by the parameters in sorted key order.
func (w Workload) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	name, _ := json.Marshal(w.Name)
	buf.WriteString(`{"name":`)
	buf.Write(name)
	keys := make([]string, 0, len(w.Params))
	for k := range w.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "name" {
			return nil, fmt.Errorf("reports: workload %q: a parameter may not be called \"name\"", w.Name)
		}
		v := w.Params[k]
		if !json.Valid(v) {
			return nil, fmt.Errorf("reports: workload %q parameter %q is not valid JSON", w.Name, k)
		}
		key, _ := json.Marshal(k)
		buf.WriteByte(',')
		buf.Write(key)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the flat object written by MarshalJSON; "name" must be a string.
func (w *Workload) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("reports: workload: %w", err)
	}
	raw, ok := m["name"]
	if !ok {
		return errors.New("reports: workload has no \"name\"")
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return fmt.Errorf("reports: workload name: %w", err)
	}
	delete(m, "name")
	obj, _ := json.Marshal(m)
	*w = Workload{Name: name}
	if err := w.setParams(obj); err != nil {
		return fmt.Errorf("reports: workload %q: %w", name, err)
	}
	return nil
}

// Level is the summary of one load level (SPEC §6). Field order is the JSON order; pointer
// fields serialise as null when nil.
type Level struct {
	// Label is c{N}, r{R}, burst or trace (see ConcurrencyLabel, RateLabel).
	Label string `json:"label"`
	// Concurrency is N of a closed-loop level; nil in open loop.
	Concurrency *int `json:"concurrency"`
	// Rate is the open-loop arrival rate in requests/s; nil in closed loop, burst and trace.
	Rate *float64 `json:"rate"`
	// Arrival is the open-loop arrival process (ArrivalPoisson, …); nil in closed loop.
	Arrival *string `json:"arrival"`
	// Requests counts every recorded request, errors included.
	Requests int `json:"requests"`
	// Errors counts the failed requests.
	Errors int `json:"errors"`
	// ErrorsByKind counts errors by ErrorKind; nil (written as {}) when there are none.
	ErrorsByKind map[string]int `json:"errors_by_kind"`
	// DurationS is the level's wall (or virtual) duration in seconds.
	DurationS float64 `json:"duration_s"`
	// TTFTMs, TPOTMs, ITLMs and E2EMs summarise the successful requests (ITL: all their gaps;
	// TPOT: those with ≥ 2 output tokens).
	TTFTMs Stats `json:"ttft_ms"`
	TPOTMs Stats `json:"tpot_ms"`
	ITLMs  Stats `json:"itl_ms"`
	E2EMs  Stats `json:"e2e_ms"`
	// QueueMs summarises client-side queueing in open loop; nil in closed loop.
	QueueMs *Stats `json:"queue_ms"`
	// Throughput of the successful requests over DurationS.
	Throughput Throughput `json:"throughput"`
	// CacheHitRate is Σcached/Σinput tokens over successful requests, in [0,1]; nil when the
	// target does not report cached tokens.
	CacheHitRate *float64 `json:"cache_hit_rate"`
	// SGLangCacheHitRate is the hit rate as SGLang's scheduler logs it, per prefill batch
	// #cached-token / (#cached-token + #new-token) summed over the level's batches, where a
	// continued chunk counts its earlier chunks as cached; nil when the engines' counters are
	// not known (bench runs against live servers).
	SGLangCacheHitRate *float64 `json:"sglang_cache_hit_rate,omitempty"`
	// Goodput is the share of requests (errors included, as misses) meeting every SLO, in
	// [0,1]; nil when no SLO was given.
	Goodput *float64 `json:"goodput"`
	// Sim holds simulator-only metrics; nil for the bench.
	Sim *SimStats `json:"sim"`
}

// Stats summarises a set of samples in ms. Percentiles follow numpy's default (see
// Percentile); an empty set gives all zeros.
type Stats struct {
	// Mean is the arithmetic mean (gonum stat.Mean; its summation order may differ from
	// numpy's pairwise sum in the last bits).
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Throughput is per second of the level's duration, counting successful requests only.
type Throughput struct {
	// ReqS is successful requests/s; InputTokS and OutputTokS are their prompt and
	// completion tokens/s.
	ReqS       float64 `json:"req_s"`
	InputTokS  float64 `json:"input_tok_s"`
	OutputTokS float64 `json:"output_tok_s"`
}

// SimStats are the simulator's extra metrics for a level; sim computes them.
type SimStats struct {
	// PredictedMatchRate is the router's predicted prefix match rate (from its approximate
	// tree), in [0,1], to read beside the engine's actual CacheHitRate.
	PredictedMatchRate float64 `json:"predicted_match_rate"`
	// LoadSpread is how unevenly requests spread over the targets; sim computes it and
	// documents its formula.
	LoadSpread float64 `json:"load_spread"`
	// QueueDelayMs summarises engine-side queueing (arrival at a server to scheduling).
	QueueDelayMs Stats `json:"queue_delay_ms"`
	// GPUCacheHitRate and HostCacheHitRate split the engines' prefix hits of the recorded
	// requests by tier, as shares of their prompt tokens: found in a GPU cache, or loaded back
	// from a host tier (HiCache, --hicache-ratio). Nil without a host tier.
	GPUCacheHitRate  *float64 `json:"gpu_cache_hit_rate,omitempty"`
	HostCacheHitRate *float64 `json:"host_cache_hit_rate,omitempty"`
}

// MarshalJSON writes an empty ErrorsByKind as {} rather than null.
func (l Level) MarshalJSON() ([]byte, error) {
	type plain Level // drops the method, keeps the field order and tags
	p := plain(l)
	if p.ErrorsByKind == nil {
		p.ErrorsByKind = map[string]int{}
	}
	return json.Marshal(p)
}

// Level returns the level labelled label, or nil.
func (r *Results) Level(label string) *Level {
	for i := range r.Levels {
		if r.Levels[i].Label == label {
			return &r.Levels[i]
		}
	}
	return nil
}

// Validate checks what SPEC §6 requires beyond JSON types: the schema version, the tool,
// Started only for the bench, unique well-formed labels consistent with concurrency, rate and
// arrival, counts that add up, and finite numbers (JSON has no NaN).
func (r *Results) Validate() error {
	if r.Schema != SchemaVersion {
		return fmt.Errorf("reports: results schema %q, want %q", r.Schema, SchemaVersion)
	}
	switch r.Meta.Tool {
	case ToolBench:
	case ToolSim:
		if r.Meta.Started != nil {
			return errors.New("reports: meta.started is set in sim results (sim output has no wall-clock values)")
		}
	default:
		return fmt.Errorf("reports: meta.tool %q, want %q or %q", r.Meta.Tool, ToolBench, ToolSim)
	}
	if r.Meta.Workload.Name == "" {
		return errors.New("reports: meta.workload.name is empty")
	}
	for name, raw := range map[string]json.RawMessage{"cluster": r.Meta.Cluster, "router": r.Meta.Router, "server_info": r.Meta.ServerInfo, "replay": r.Meta.Replay} {
		if raw == nil {
			continue
		}
		if !json.Valid(raw) {
			return fmt.Errorf("reports: meta.%s is not valid JSON", name)
		}
		if t := bytes.TrimSpace(raw); string(t) != "null" && t[0] != '{' {
			return fmt.Errorf("reports: meta.%s is not a JSON object", name)
		}
	}
	seen := make(map[string]bool, len(r.Levels))
	for i := range r.Levels {
		l := &r.Levels[i]
		if seen[l.Label] {
			return fmt.Errorf("reports: level %q appears twice", l.Label)
		}
		seen[l.Label] = true
		if err := l.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks one level (see Results.Validate).
func (l *Level) Validate() error {
	if err := checkShape(l.Label, l.Concurrency, l.Rate, l.Arrival); err != nil {
		return err
	}
	if l.Requests < 0 || l.Errors < 0 || l.Errors > l.Requests {
		return fmt.Errorf("reports: level %q: %d errors of %d requests", l.Label, l.Errors, l.Requests)
	}
	sum := 0
	for kind, n := range l.ErrorsByKind {
		if n <= 0 {
			return fmt.Errorf("reports: level %q: errors_by_kind[%q] = %d, want > 0", l.Label, kind, n)
		}
		sum += n
	}
	if sum != l.Errors {
		return fmt.Errorf("reports: level %q: errors_by_kind adds up to %d, errors is %d", l.Label, sum, l.Errors)
	}
	nums := map[string]float64{
		"duration_s": l.DurationS, "throughput.req_s": l.Throughput.ReqS,
		"throughput.input_tok_s": l.Throughput.InputTokS, "throughput.output_tok_s": l.Throughput.OutputTokS,
	}
	addStats := func(name string, s *Stats) {
		if s != nil {
			for k, v := range map[string]float64{"mean": s.Mean, "p50": s.P50, "p90": s.P90, "p95": s.P95, "p99": s.P99, "max": s.Max} {
				nums[name+"."+k] = v
			}
		}
	}
	addStats("ttft_ms", &l.TTFTMs)
	addStats("tpot_ms", &l.TPOTMs)
	addStats("itl_ms", &l.ITLMs)
	addStats("e2e_ms", &l.E2EMs)
	addStats("queue_ms", l.QueueMs)
	if l.CacheHitRate != nil {
		nums["cache_hit_rate"] = *l.CacheHitRate
	}
	if l.Goodput != nil {
		if *l.Goodput > 1 {
			return fmt.Errorf("reports: level %q: goodput %v is above 1", l.Label, *l.Goodput)
		}
		nums["goodput"] = *l.Goodput
	}
	if l.Sim != nil {
		nums["sim.predicted_match_rate"] = l.Sim.PredictedMatchRate
		nums["sim.load_spread"] = l.Sim.LoadSpread
		if l.Sim.GPUCacheHitRate != nil && l.Sim.HostCacheHitRate != nil {
			nums["sim.gpu_cache_hit_rate"], nums["sim.host_cache_hit_rate"] = *l.Sim.GPUCacheHitRate, *l.Sim.HostCacheHitRate
		}
		addStats("sim.queue_delay_ms", &l.Sim.QueueDelayMs)
	}
	// Report the first bad field in a fixed order so the message is deterministic.
	keys := make([]string, 0, len(nums))
	for k := range nums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v := nums[k]; !(v >= 0) || math.IsInf(v, 1) {
			return fmt.Errorf("reports: level %q: %s = %v, want a finite number ≥ 0", l.Label, k, v)
		}
	}
	return nil
}

// normalize gives decoded results their canonical in-memory form: compact raw JSON with null
// as nil, empty maps as nil.
func (r *Results) normalize() error {
	for _, raw := range []*json.RawMessage{&r.Meta.Cluster, &r.Meta.Router, &r.Meta.ServerInfo} {
		if *raw == nil {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, *raw); err != nil {
			return err
		}
		if buf.String() == "null" {
			*raw = nil
		} else {
			*raw = buf.Bytes()
		}
	}
	for i := range r.Levels {
		if len(r.Levels[i].ErrorsByKind) == 0 {
			r.Levels[i].ErrorsByKind = nil
		}
	}
	return nil
}

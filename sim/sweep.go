package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// Vary is one sweep dimension, `--vary KEY=v1,v2,...`: KEY is a router setting under its
// config-file name (cache_threshold, balance_abs_threshold, balance_rel_threshold, policy,
// prefill_policy, decode_policy, dp_aware, …; dashes are accepted for underscores) or a
// Cluster key (dp_size, tp_size, ep_size, enable_dp_attention or dp_attention, prefill,
// decode, regular, profile, model_path, gpu, link_gbps, net_latency, …) or an SGLang engine
// argument (chunked_prefill_size, max_running_requests, max_total_tokens, page_size,
// cuda_graph_max_bs, mem_fraction_static, schedule_conservativeness; prefixed prefill_ or
// decode_ for one pool) or a routing-layer key (Routing: kv_events — off/on, or approximate/
// precise —, kv_events_delay, kv_events_loss, router_replicas, replica_affinity,
// load_report_interval — or serve's load_poll_interval_ms in whole milliseconds —,
// load_report_delay). Values are JSON scalars (numbers, true/false) or bare strings; durations
// take Go syntax ("100us").
type Vary struct {
	Key    string
	Values []string
}

// ParseVary parses "KEY=v1,v2,...".
func ParseVary(s string) (Vary, error) {
	k, vs, ok := strings.Cut(s, "=")
	k = strings.ReplaceAll(strings.TrimSpace(k), "-", "_")
	if !ok || k == "" || strings.TrimSpace(vs) == "" {
		return Vary{}, fmt.Errorf("sim: --vary %q: want KEY=v1,v2,…", s)
	}
	v := Vary{Key: k}
	for _, x := range strings.Split(vs, ",") {
		v.Values = append(v.Values, strings.TrimSpace(x))
	}
	return v, nil
}

// Point is one configuration of a sweep and its outcome.
type Point struct {
	// Index is the point's position in the grid (the first Vary varies slowest).
	Index int
	// Values are the point's value of each Vary, in order.
	Values []string
	// Config is the run's configuration.
	Config Config
	// Result is the run's result (nil when Err is set).
	Result *Result
	Err    error
}

// Last returns the point's last level (the one ranking uses), or nil.
func (p *Point) Last() *reports.Level {
	if p.Result == nil || len(p.Result.Results.Levels) == 0 {
		return nil
	}
	return &p.Result.Results.Levels[len(p.Result.Results.Levels)-1]
}

// Label renders the point's settings as "k1=v1 k2=v2".
func (p *Point) Label(vars []Vary) string {
	parts := make([]string, len(vars))
	for i, v := range vars {
		parts[i] = v.Key + "=" + p.Values[i]
	}
	return strings.Join(parts, " ")
}

// Grid expands base over the cartesian product of vars, the first Vary varying slowest.
func Grid(base Config, vars []Vary) ([]Point, error) {
	pts := []Point{{Config: base}}
	for _, v := range vars {
		if len(v.Values) == 0 {
			return nil, fmt.Errorf("sim: --vary %s has no values", v.Key)
		}
		var next []Point
		for _, p := range pts {
			for _, val := range v.Values {
				c, err := apply(p.Config, v.Key, val)
				if err != nil {
					return nil, err
				}
				next = append(next, Point{Values: append(slices.Clip(p.Values), val), Config: c})
			}
		}
		pts = next
	}
	for i := range pts {
		pts[i].Index = i
	}
	return pts, nil
}

// BaseIndex returns the Index of the point of pts that is base itself — every varied key at
// base's own value — or -1 when pts do not hold it.
func BaseIndex(base Config, vars []Vary, pts []Point) int {
	for _, p := range pts {
		same := len(p.Values) == len(vars)
		for k := 0; same && k < len(vars); k++ {
			c, err := apply(base, vars[k].Key, p.Values[k])
			same = err == nil && sameSettings(c, base)
		}
		if same {
			return p.Index
		}
	}
	return -1
}

// sameSettings reports whether a and b simulate the same thing: their clusters compared with
// the defaults filled in (a grid point --prefill 2 is the default cluster's 2 prefill servers).
func sameSettings(a, b Config) bool {
	ca, cb := a.Cluster.WithDefaults(a.Router.PDDisaggregation), b.Cluster.WithDefaults(b.Router.PDDisaggregation)
	return reflect.DeepEqual(ca, cb) && reflect.DeepEqual(a.Router, b.Router) &&
		reflect.DeepEqual(a.Routing, b.Routing) && reflect.DeepEqual(a.Workload, b.Workload) && reflect.DeepEqual(a.Load, b.Load)
}

// keyAliases are other names of sweep keys: SGLang's flag names where the cluster key keeps
// an older one.
var keyAliases = map[string]string{"enable_dp_attention": "dp_attention"}

// serverArgKeys are the JSON keys of engine.ServerArgs (chunked_prefill_size, …).
var serverArgKeys = func() map[string]bool {
	b, _ := json.Marshal(engine.ServerArgs{ChunkedPrefillSize: 1, MaxRunningRequests: 1, MaxTotalTokens: 1, PageSize: 1,
		CUDAGraphMaxBS: 1, MemFractionStatic: 1, ScheduleConservativeness: 1, HiCacheRatio: 1, HiCacheBandwidth: 1,
		Spec: engine.Spec{Algorithm: "x", NumSteps: 1, EagleTopK: 1, DraftTokens: 1, AcceptLength: 1}})
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	keys := map[string]bool{}
	for k := range m {
		keys[k] = true
	}
	return keys
}()

// setServerArg sets the engine argument key (a ServerArgs key, optionally prefixed prefill_ or
// decode_ for that pool) in c; false when key is none.
func setServerArg(c *Cluster, key string, raw []byte) (bool, error) {
	dst, name := &c.Args, key
	for _, role := range []struct {
		prefix string
		args   **engine.ServerArgs
	}{{"prefill_", &c.PrefillArgs}, {"decode_", &c.DecodeArgs}} {
		if k, ok := strings.CutPrefix(key, role.prefix); ok && serverArgKeys[k] {
			if *role.args == nil {
				a := c.Args // the pool's arguments start from every server's
				*role.args = &a
			} else {
				a := **role.args // a copy: the base point's pointer is shared
				*role.args = &a
			}
			dst, name = *role.args, k
		}
	}
	if !serverArgKeys[name] {
		return false, nil
	}
	b, _ := json.Marshal(map[string]json.RawMessage{name: raw})
	a := *dst
	if err := json.Unmarshal(b, &a); err != nil {
		return true, err
	}
	*dst = a
	return true, nil
}

// apply sets key=val in a copy of c.
func apply(c Config, key, val string) (Config, error) {
	key = strings.ReplaceAll(key, "-", "_")
	if k, ok := keyAliases[key]; ok {
		key = k
	}
	raw := []byte(val)
	if !json.Valid(raw) {
		if d, err := time.ParseDuration(val); err == nil && strings.ContainsAny(val, "smhµun") {
			raw = []byte(fmt.Sprint(int64(d)))
		} else {
			raw, _ = json.Marshal(val)
		}
	}
	set := func(dst any) (bool, error) {
		b, err := json.Marshal(dst)
		if err != nil {
			return false, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return false, err
		}
		if _, ok := m[key]; !ok {
			return false, nil
		}
		m[key] = raw
		b, _ = json.Marshal(m)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(dst); err != nil {
			return true, fmt.Errorf("sim: --vary %s=%s: %w", key, val, err)
		}
		return true, nil
	}
	switch key {
	case "kv_events_delay", "load_report_delay": // a distribution's text ("exp:10ms") or a duration
		if d, err := ParseDelay(val); err == nil {
			if key == "kv_events_delay" {
				c.Routing.KVEventsDelay = d
			} else {
				c.Routing.LoadReportDelay = d
			}
			return c, nil
		}
	case "load_report_interval": // a bare number would be nanoseconds: ask for a unit
		d, err := time.ParseDuration(val)
		if val == "0" {
			d, err = 0, nil
		}
		if err != nil {
			return c, fmt.Errorf("sim: --vary %s=%s: want a duration such as 100ms (0: off)", key, val)
		}
		c.Routing.LoadReportInterval = d
		return c, nil
	case "load_poll_interval_ms": // serve's setting: whole milliseconds
		ms, err := strconv.Atoi(val)
		if err != nil || ms < 0 {
			return c, fmt.Errorf("sim: --vary %s=%s: want whole milliseconds ≥ 0", key, val)
		}
		c.Routing.LoadReportInterval = time.Duration(ms) * time.Millisecond
		return c, nil
	}
	rt := c.Routing
	if ok, err := set(&rt); ok || err != nil {
		c.Routing = rt
		return c, err
	}
	// The router's worker lists (prefill, decode, worker_urls) are the simulator's to fill:
	// those keys are the cluster's server counts.
	if key != "prefill" && key != "decode" && key != "worker_urls" {
		rc := c.Router
		rc.Prefill, rc.Decode, rc.WorkerURLs = nil, nil, nil
		if ok, err := set(&rc); ok || err != nil {
			c.Router = rc
			return c, err
		}
	}
	cl := c.Cluster
	if ok, err := set(&cl); ok || err != nil {
		c.Cluster = cl
		return c, err
	}
	if ok, err := setServerArg(&cl, key, raw); ok || err != nil {
		if err != nil {
			return c, fmt.Errorf("sim: --vary %s=%s: %w", key, val, err)
		}
		c.Cluster = cl
		return c, nil
	}
	return c, fmt.Errorf("sim: --vary %s: not a router setting, a cluster key or an engine argument", key)
}

// SweepShard runs the points of shard i of n (0 ≤ i < n) of the grid of base over vars — the
// points whose grid index is i mod n, so n machines sharing the work run every point once;
// shard 0 of 1 is the whole grid — parallel runs at once (≤ 0: one per core), each fully
// deterministic, and returns them in grid order. progress, when set, is called (from any
// goroutine, serialised) after each point with the point just finished. Decision logs and
// per-run progress are off in sweeps.
func SweepShard(base Config, vars []Vary, parallel, i, n int, progress func(done, total int, p *Point)) ([]Point, error) {
	base.DecisionLog, base.Progress = nil, nil
	all, err := Grid(base, vars)
	if err != nil {
		return nil, err
	}
	if n < 1 || i < 0 || i >= n {
		return nil, fmt.Errorf("sim: shard %d/%d: want 0 ≤ i < n", i, n)
	}
	var pts []Point
	for _, p := range all {
		if p.Index%n == i {
			pts = append(pts, p)
		}
	}
	RunPoints(pts, parallel, progress)
	return pts, nil
}

// RunPoints runs every point of pts (their Config), parallel at once (≤ 0: one per core), and
// stores each one's Result and Err in place; progress is as SweepShard's. SweepShard runs a
// grid's points so; `router sim plan` its candidate clusters.
func RunPoints(pts []Point, parallel int, progress func(done, total int, p *Point)) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex // serialises progress and done
	done := 0
	for range min(parallel, len(pts)) {
		wg.Go(func() {
			for i := range work {
				pts[i].Result, pts[i].Err = Run(pts[i].Config)
				mu.Lock()
				done++
				if progress != nil {
					progress(done, len(pts), &pts[i])
				}
				mu.Unlock()
			}
		})
	}
	for i := range pts {
		work <- i
	}
	close(work)
	wg.Wait()
}

// Sweep objectives (--objective).
const (
	ObjectiveP95TTFT    = "p95-ttft"
	ObjectiveP99TTFT    = "p99-ttft"
	ObjectiveGoodput    = "goodput"
	ObjectiveThroughput = "throughput"
)

// Objectives lists the objective names.
var Objectives = []string{ObjectiveP95TTFT, ObjectiveP99TTFT, ObjectiveGoodput, ObjectiveThroughput}

// Objective scores a point over all its levels by its worst level — the highest P95 or P99
// TTFT, the lowest goodput or throughput — so a setting ranks well only if it holds at every
// load of the sweep, not just the last. Goodput is requests/s meeting SLO (a level's goodput
// share times its requests/s); throughput is requests/s.
type Objective struct {
	Name string
	SLO  *reports.SLO
}

// ParseObjective checks name (empty: p95-ttft); goodput needs an SLO.
func ParseObjective(name string, slo *reports.SLO) (Objective, error) {
	if name == "" {
		name = ObjectiveP95TTFT
	}
	if !slices.Contains(Objectives, name) {
		return Objective{}, fmt.Errorf("sim: --objective %q is not one of %s", name, strings.Join(Objectives, ", "))
	}
	if name == ObjectiveGoodput && slo == nil {
		return Objective{}, fmt.Errorf("sim: --objective goodput needs --slo ttft=MS,tpot=MS (the requests that count)")
	}
	return Objective{Name: name, SLO: slo}, nil
}

// Label names the score column, e.g. "worst P95 TTFT ms".
func (o Objective) Label() string {
	switch o.Name {
	case ObjectiveP99TTFT:
		return "worst P99 TTFT ms"
	case ObjectiveGoodput:
		return "worst goodput req/s"
	case ObjectiveThroughput:
		return "worst req/s"
	}
	return "worst P95 TTFT ms"
}

// HigherIsBetter reports whether a higher score is better (goodput, throughput).
func (o Objective) HigherIsBetter() bool {
	return o.Name == ObjectiveGoodput || o.Name == ObjectiveThroughput
}

// Score is p's objective over its levels (false: no levels).
func (o Objective) Score(p *Point) (float64, bool) {
	if p.Result == nil || len(p.Result.Results.Levels) == 0 {
		return 0, false
	}
	var score float64
	for i, l := range p.Result.Results.Levels {
		var v float64
		switch o.Name {
		case ObjectiveP99TTFT:
			v = l.TTFTMs.P99
		case ObjectiveGoodput:
			if l.Goodput != nil {
				v = *l.Goodput * l.Throughput.ReqS
			}
		case ObjectiveThroughput:
			v = l.Throughput.ReqS
		default:
			v = l.TTFTMs.P95
		}
		if i == 0 || (o.HigherIsBetter() && v < score) || (!o.HigherIsBetter() && v > score) {
			score = v
		}
	}
	return score, true
}

// Ranked is a point in ranking order: its rank (equal scores share one), score, and whether
// it ties with another point.
type Ranked struct {
	Point
	Rank  int
	Score float64
	Tied  bool
}

// Failed reports whether any level of the point's run had errors.
func (r *Ranked) Failed() bool {
	for _, l := range r.Result.Results.Levels {
		if l.Errors > 0 {
			return true
		}
	}
	return false
}

// RankBy orders points best first by objective o: points without errors before the others,
// then by score; equal scores share a rank (1, 2, 2, 4) and are marked Tied, listed in grid
// order. With an SLO and a latency or throughput objective, points whose worst level misses
// it (P95 TTFT above slo.TTFTMs or P95 TPOT above slo.TPOTMs; zero fields are not
// constrained) are dropped. The input is not modified.
func RankBy(points []Point, o Objective) []Ranked {
	var out []Ranked
	for _, p := range points {
		score, ok := o.Score(&p)
		if !ok {
			continue
		}
		if slo := o.SLO; slo != nil && o.Name != ObjectiveGoodput && missesSLO(&p, slo) {
			continue
		}
		out = append(out, Ranked{Point: p, Score: score})
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		if ea, eb := a.Failed(), b.Failed(); ea != eb {
			if ea {
				return 1
			}
			return -1
		}
		if a.Score != b.Score {
			if (a.Score < b.Score) != o.HigherIsBetter() {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	for i := range out {
		out[i].Rank = i + 1
		if i > 0 && out[i].Score == out[i-1].Score && out[i].Failed() == out[i-1].Failed() {
			out[i].Rank = out[i-1].Rank
			out[i].Tied, out[i-1].Tied = true, true
		}
	}
	return out
}

func missesSLO(p *Point, slo *reports.SLO) bool {
	for _, l := range p.Result.Results.Levels {
		if slo.TTFTMs > 0 && l.TTFTMs.P95 > slo.TTFTMs || slo.TPOTMs > 0 && l.TPOTMs.P95 > slo.TPOTMs {
			return true
		}
	}
	return false
}

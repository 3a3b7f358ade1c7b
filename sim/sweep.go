package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/reports"
)

// Vary is one sweep dimension, `--vary KEY=v1,v2,...`: KEY is a router setting under its
// config-file name (cache_threshold, balance_abs_threshold, balance_rel_threshold, policy,
// prefill_policy, decode_policy, dp_aware, …; dashes are accepted for underscores) or a
// Cluster key (dp_size, dp_attention, prefill, decode, regular, profile, link_gbps,
// net_latency, …). Values are JSON scalars (numbers, true/false) or bare strings; durations
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
		return Vary{}, fmt.Errorf("sim: --vary %q: want KEY=v1,v2,...", s)
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

// apply sets key=val in a copy of c.
func apply(c Config, key, val string) (Config, error) {
	key = strings.ReplaceAll(key, "-", "_")
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
	rc := c.Router
	rc.Prefill, rc.Decode, rc.WorkerURLs = nil, nil, nil
	if ok, err := set(&rc); ok || err != nil {
		c.Router = rc
		return c, err
	}
	cl := c.Cluster
	if ok, err := set(&cl); ok || err != nil {
		c.Cluster = cl
		return c, err
	}
	return c, fmt.Errorf("sim: --vary %s: not a router setting or a cluster key", key)
}

// Sweep runs every point of the grid of base over vars, parallel runs at once (≤ 0: one per
// core), each fully deterministic, and returns the points in grid order. progress, when set,
// is called (from any goroutine, serialised) after each point. Decision logs and per-run
// progress are off in sweeps.
func Sweep(base Config, vars []Vary, parallel int, progress func(done, total int)) ([]Point, error) {
	base.DecisionLog, base.Progress = nil, nil
	pts, err := Grid(base, vars)
	if err != nil {
		return nil, err
	}
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
					progress(done, len(pts))
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
	return pts, nil
}

// Rank orders points best first: runs that completed without errors before the others, then
// by the last level's P95 TTFT, its P95 TPOT and the grid order. With an SLO, points whose last
// level misses it (P95 TTFT above slo.TTFTMs or P95 TPOT above slo.TPOTMs; zero fields are
// not constrained) are dropped. The input is not modified.
func Rank(points []Point, slo *reports.SLO) []Point {
	var out []Point
	for _, p := range points {
		l := p.Last()
		if l == nil {
			continue
		}
		if slo != nil && (slo.TTFTMs > 0 && l.TTFTMs.P95 > slo.TTFTMs || slo.TPOTMs > 0 && l.TPOTMs.P95 > slo.TPOTMs) {
			continue
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b Point) int {
		la, lb := a.Last(), b.Last()
		if ea, eb := la.Errors > 0, lb.Errors > 0; ea != eb {
			if ea {
				return 1
			}
			return -1
		}
		if la.TTFTMs.P95 != lb.TTFTMs.P95 {
			if la.TTFTMs.P95 < lb.TTFTMs.P95 {
				return -1
			}
			return 1
		}
		if la.TPOTMs.P95 != lb.TPOTMs.P95 {
			if la.TPOTMs.P95 < lb.TPOTMs.P95 {
				return -1
			}
			return 1
		}
		return a.Index - b.Index
	})
	return out
}

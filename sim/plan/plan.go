// Package plan searches for the cheapest SGLang PD deployment that meets a workload's
// service-level objectives: prefill and decode server counts, each role's parallelism (valid
// for the model and the node) and the router's settings. It bounds every candidate cluster
// analytically first (Bound), simulates the rest with the router core in the loop (sim.Run),
// ranks them by an objective and re-simulates the winner at other seeds. `router sim plan`
// is its command.
package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// SLO is the service-level objective a plan must meet at every load level: the Percentile
// (p50, p90, p95 or p99) of TTFT and of TPOT at most TTFTMs and TPOTMs (0: not constrained),
// and at least Goodput (a share in [0, 1]; 0: not constrained) of the requests meeting both.
type SLO struct {
	Percentile string
	TTFTMs     float64
	TPOTMs     float64
	Goodput    float64
}

// Percentiles are the percentiles an SLO may name (those results report).
var Percentiles = []string{"p50", "p90", "p95", "p99"}

// Validate names the first invalid field by its flag.
func (s SLO) Validate() error {
	switch {
	case !slices.Contains(Percentiles, s.Percentile):
		return fmt.Errorf("plan: --slo-percentile %q is not one of %s", s.Percentile, strings.Join(Percentiles, ", "))
	case s.TTFTMs < 0 || s.TPOTMs < 0:
		return fmt.Errorf("plan: --slo-ttft-ms %g and --slo-tpot-ms %g must be ≥ 0", s.TTFTMs, s.TPOTMs)
	case s.TTFTMs == 0 && s.TPOTMs == 0:
		return fmt.Errorf("plan: give --slo-ttft-ms or --slo-tpot-ms (or both): a plan needs an objective to meet")
	case s.Goodput < 0 || s.Goodput > 1:
		return fmt.Errorf("plan: --goodput-target %g must be in [0, 1]", s.Goodput)
	}
	return nil
}

func (s SLO) q() float64 {
	switch s.Percentile {
	case "p50":
		return 0.5
	case "p95":
		return 0.95
	case "p99":
		return 0.99
	}
	return 0.9
}

func (s SLO) pick(st reports.Stats) float64 {
	switch s.Percentile {
	case "p50":
		return st.P50
	case "p95":
		return st.P95
	case "p99":
		return st.P99
	}
	return st.P90
}

// Objectives rank the candidates that meet the SLO.
const (
	// ObjectiveMinGPUs: the fewest GPUs, then the most goodput per GPU.
	ObjectiveMinGPUs = "min-gpus"
	// ObjectiveGoodputPerGPU: the most goodput per GPU, then the fewest GPUs.
	ObjectiveGoodputPerGPU = "goodput-per-gpu"
)

// Objectives lists the objective names.
var Objectives = []string{ObjectiveMinGPUs, ObjectiveGoodputPerGPU}

// Spec is a plan's question.
type Spec struct {
	// Base is the simulation every candidate starts from: the workload and load, the router's
	// settings, and the cluster's model and GPU (ModelPath and GPU) or profile. Its counts and
	// parallelism are what the plan chooses.
	Base sim.Config
	// GPUs is the budget: no candidate takes more. GPUsPerNode bounds a server's GPUs (a server
	// stays on one node).
	GPUs, GPUsPerNode int
	SLO               SLO
	Objective         string
	// Router are router settings to try on the Top best clusters (sweep keys: policy,
	// cache_threshold, …); each of their grid points is a candidate of its own.
	Router []sim.Vary
	Top    int
	// TPSizes, when set, are the only --tp-size values a server may take (the plan still
	// drops those the model and node cannot run).
	TPSizes []int
	// Parallel simulations at once (≤ 0: one per core).
	Parallel int
	// VerifySeeds: the winner is re-simulated at this many other seeds (the base seed + 1, + 2,
	// …) and must meet the SLO at each; one that does not gives way to the next candidate.
	VerifySeeds int
	// Shard and Shards: run only the simulations of candidates whose index is Shard mod
	// Shards (Shards ≤ 1: all).
	Shard, Shards int
}

// Validate names the first invalid field by its flag.
func (s Spec) Validate() error {
	switch {
	case s.GPUs < 2:
		return fmt.Errorf("plan: --gpus %d must be ≥ 2 (a prefill and a decode server)", s.GPUs)
	case s.GPUsPerNode < 1:
		return fmt.Errorf("plan: --gpus-per-node %d must be ≥ 1", s.GPUsPerNode)
	case !slices.Contains(Objectives, s.Objective):
		return fmt.Errorf("plan: --objective %q is not one of %s", s.Objective, strings.Join(Objectives, ", "))
	case s.Top < 1:
		return fmt.Errorf("plan: --top %d must be ≥ 1", s.Top)
	case s.VerifySeeds < 0:
		return fmt.Errorf("plan: --verify-seeds %d must be ≥ 0", s.VerifySeeds)
	case !s.Base.Router.PDDisaggregation:
		return fmt.Errorf("plan: plans PD clusters (--pd-disaggregation)")
	}
	return s.SLO.Validate()
}

// Outcome is a simulated candidate's figures at its worst level.
type Outcome struct {
	Simulated bool
	TTFTMs    float64 // the SLO's percentile, highest of the levels
	TPOTMs    float64
	Share     float64 // goodput share (requests meeting TTFT and TPOT), lowest of the levels
	Goodput   float64 // requests/s meeting the SLO, lowest of the levels
	Errors    int
	Meets     bool
}

// GoodputPerGPU is the candidate's goodput per GPU.
func (c *Candidate) GoodputPerGPU() float64 { return c.Goodput / float64(c.GPUs()) }

// Headroom is how far under an objective v is, in percent of it (negative: over).
func Headroom(v, slo float64) float64 {
	if slo <= 0 {
		return math.Inf(1)
	}
	return 100 * (slo - v) / slo
}

// score fills c's Outcome from its result.
func (c *Candidate) score(slo SLO) {
	r := c.Point.Result
	c.Outcome = Outcome{}
	if c.Point.Err != nil || r == nil || len(r.Results.Levels) == 0 {
		return
	}
	c.Simulated = true
	c.Share, c.Goodput = math.Inf(1), math.Inf(1)
	for _, l := range r.Results.Levels {
		c.TTFTMs = max(c.TTFTMs, slo.pick(l.TTFTMs))
		c.TPOTMs = max(c.TPOTMs, slo.pick(l.TPOTMs))
		share := 0.0
		if l.Goodput != nil {
			share = *l.Goodput
		}
		c.Share = min(c.Share, share)
		c.Goodput = min(c.Goodput, share*l.Throughput.ReqS)
		c.Errors += l.Errors
	}
	c.Meets = meets(c.Outcome, slo)
}

func meets(o Outcome, slo SLO) bool {
	return o.Simulated && o.Errors == 0 && (slo.TTFTMs == 0 || o.TTFTMs <= slo.TTFTMs) &&
		(slo.TPOTMs == 0 || o.TPOTMs <= slo.TPOTMs) && o.Share >= slo.Goodput
}

// Plan is a search's outcome.
type Plan struct {
	Spec     Spec
	Workload Workload
	// Candidates are every candidate in enumeration order (Index), pruned ones included; the
	// router variants of the Top clusters follow the clusters.
	Candidates []*Candidate
	// Ranked are the simulated candidates, best first: those meeting the SLO by the
	// objective, then the others by how far they miss.
	Ranked []*Candidate
	// Winner is the best candidate that met the SLO at every verification seed (nil: none).
	Winner *Candidate
	// Verified are the winner's (and any candidate tried before it) runs at the other seeds.
	Verified []Verification
}

// Verification is one candidate re-simulated at another seed.
type Verification struct {
	Candidate *Candidate
	Seed      int64
	Outcome
}

// Enumerate lists spec's candidate clusters, fewest GPUs first (then the prefill shape, the
// decode shape, the prefill count), each with its Config, and bounds each one (Pruned).
func Enumerate(spec Spec, w Workload) ([]*Candidate, error) {
	cl := spec.Base.Cluster
	var opts []Server
	if cl.ModelPath != "" {
		m, err := cl.Model()
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		for _, o := range ServerOptions(m, spec.GPUsPerNode, spec.GPUs) {
			if len(spec.TPSizes) == 0 || slices.Contains(spec.TPSizes, o.TP) {
				opts = append(opts, o)
			}
		}
	} else {
		// A preset or profile file brings its own parallelism: the plan chooses counts.
		tp, dp, ep := cl.Sizes(engine.RoleUnified)
		opts = []Server{{TP: tp, DP: dp, EP: ep, DPAttention: cl.DPAttention && dp > 1}}
	}
	var out []*Candidate
	for _, p := range opts {
		for _, d := range opts {
			if p.DPAttention != d.DPAttention && p.DP > 1 && d.DP > 1 {
				continue // one --enable-dp-attention for the cluster
			}
			for np := 1; np*p.GPUs()+d.GPUs() <= spec.GPUs; np++ {
				for nd := 1; np*p.GPUs()+nd*d.GPUs() <= spec.GPUs; nd++ {
					out = append(out, &Candidate{Prefill: np, Decode: nd, P: p, D: d})
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *Candidate) int { return cmp.Compare(a.GPUs(), b.GPUs()) })
	for i, c := range out {
		c.Index = i
		pts, err := sim.Grid(spec.Base, c.clusterVars())
		if err != nil {
			return nil, err
		}
		c.Point = pts[0]
		c.Point.Index = i
		c.Pruned = Bound(c.Point.Config, w, spec.SLO)
	}
	return out, nil
}

// Progress is told of each finished simulation: done of total in its stage, and the
// candidate.
type Progress func(stage string, done, total int, c *Candidate)

// Prepare reads the workload, enumerates the candidates and bounds them: the plan before any
// simulation. Run (or Merge) simulates, Finish ranks and verifies.
func Prepare(spec Spec) (*Plan, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec.Base.DecisionLog, spec.Base.Progress = nil, nil
	spec.Base.SLO = &reports.SLO{TTFTMs: spec.SLO.TTFTMs, TPOTMs: spec.SLO.TPOTMs}
	w, err := Analyze(spec.Base.Workload, spec.Base.Load)
	if err != nil {
		return nil, err
	}
	cands, err := Enumerate(spec, w)
	if err != nil {
		return nil, err
	}
	return &Plan{Spec: spec, Workload: w, Candidates: cands}, nil
}

// Search is Prepare, Run and Finish: the whole plan on this machine.
func Search(spec Spec, progress Progress) (*Plan, error) {
	spec.Shard, spec.Shards = 0, 1
	p, err := Prepare(spec)
	if err != nil {
		return nil, err
	}
	p.Run(progress)
	return p, p.Finish(progress)
}

// Todo are the candidates the bounds leave, in enumeration order: those the first stage
// simulates (shard i of n runs those at positions i mod n).
func (p *Plan) Todo() []*Candidate {
	var out []*Candidate
	for _, c := range p.Candidates {
		if c.Pruned == "" && c.Router == nil {
			out = append(out, c)
		}
	}
	return out
}

// Run simulates the first stage: every candidate of Todo, or this shard's (Spec.Shard of
// Spec.Shards).
func (p *Plan) Run(progress Progress) {
	var run []*Candidate
	for k, c := range p.Todo() {
		if p.Spec.Shards <= 1 || k%p.Spec.Shards == p.Spec.Shard {
			run = append(run, c)
		}
	}
	p.simulate("clusters", run, progress)
}

// simulate runs cs in parallel and scores them.
func (p *Plan) simulate(stage string, cs []*Candidate, progress Progress) {
	pts := make([]sim.Point, len(cs))
	for i, c := range cs {
		pts[i] = c.Point
		pts[i].Index = i
	}
	sim.RunPoints(pts, p.Spec.Parallel, func(done, total int, pt *sim.Point) {
		c := cs[pt.Index]
		if pt.Result != nil {
			pt.Result.Records = nil // the levels hold every figure a plan reads; hundreds of runs' records would not fit
		}
		c.Point.Result, c.Point.Err = pt.Result, pt.Err
		c.score(p.Spec.SLO)
		if progress != nil {
			progress(stage, done, total, c)
		}
	})
}

// Finish runs the second stage — the Spec.Router grid on the Top clusters that meet the SLO
// — ranks every simulated candidate and verifies the winner at other seeds.
func (p *Plan) Finish(progress Progress) error {
	p.rank()
	if len(p.Spec.Router) > 0 {
		var variants []*Candidate
		n := 0
		for _, c := range p.Ranked {
			if !c.Meets || n >= p.Spec.Top {
				break
			}
			n++
			pts, err := sim.Grid(c.Point.Config, p.Spec.Router)
			if err != nil {
				return err
			}
			same := sim.BaseIndex(c.Point.Config, p.Spec.Router, pts) // the base settings: simulated already
			for _, pt := range pts {
				v := &Candidate{Index: len(p.Candidates), Prefill: c.Prefill, Decode: c.Decode, P: c.P, D: c.D, Router: pt.Values}
				v.Point = pt
				v.Point.Index = v.Index
				p.Candidates = append(p.Candidates, v)
				if pt.Index == same { // the cluster's own run, now named by its settings
					v.Point.Result = c.Point.Result
					v.score(p.Spec.SLO)
					c.superseded = true
					continue
				}
				variants = append(variants, v)
			}
		}
		p.simulate("router settings", variants, progress)
		p.rank()
	}
	return p.verify(progress)
}

// rank orders the simulated candidates (see Plan.Ranked).
func (p *Plan) rank() {
	p.Ranked = p.Ranked[:0]
	for _, c := range p.Candidates {
		if c.Simulated && !c.superseded {
			p.Ranked = append(p.Ranked, c)
		}
	}
	slo := p.Spec.SLO
	// miss is how far a candidate is from the SLO: its worst headroom, negated.
	miss := func(c *Candidate) float64 {
		m := 0.0
		if slo.TTFTMs > 0 {
			m = max(m, -Headroom(c.TTFTMs, slo.TTFTMs))
		}
		if slo.TPOTMs > 0 {
			m = max(m, -Headroom(c.TPOTMs, slo.TPOTMs))
		}
		return m + 100*max(slo.Goodput-c.Share, 0) + float64(c.Errors)
	}
	slices.SortStableFunc(p.Ranked, func(a, b *Candidate) int {
		if a.Meets != b.Meets {
			if a.Meets {
				return -1
			}
			return 1
		}
		if !a.Meets {
			return cmp.Or(cmp.Compare(miss(a), miss(b)), cmp.Compare(a.Index, b.Index))
		}
		gpus, good := cmp.Compare(a.GPUs(), b.GPUs()), cmp.Compare(b.GoodputPerGPU(), a.GoodputPerGPU())
		rest := cmp.Or(cmp.Compare(a.TTFTMs, b.TTFTMs), cmp.Compare(a.TPOTMs, b.TPOTMs), cmp.Compare(a.Index, b.Index))
		if p.Spec.Objective == ObjectiveGoodputPerGPU {
			return cmp.Or(good, gpus, rest)
		}
		return cmp.Or(gpus, good, rest)
	})
}

// maxVerifyTries bounds how many candidates verification tries before it gives up.
const maxVerifyTries = 5

// verify re-simulates the best candidates at Spec.VerifySeeds other seeds until one meets the
// SLO at every one: the Winner.
func (p *Plan) verify(progress Progress) error {
	p.Winner, p.Verified = nil, nil
	tries := 0
	var failed []*Candidate
	for _, c := range p.Ranked {
		if !c.Meets || tries >= maxVerifyTries {
			return nil
		}
		if slices.ContainsFunc(failed, func(f *Candidate) bool { return f.Shape() == c.Shape() && f.Outcome == c.Outcome }) {
			continue // router settings that made no difference on this cluster: the same runs again
		}
		tries++
		seed := int64(1)
		if s := p.Spec.Base.Router.Seed; s != nil {
			seed = *s
		}
		runs := make([]*Candidate, p.Spec.VerifySeeds)
		for k := range runs {
			s := seed + int64(k) + 1
			cfg := c.Point.Config
			cfg.Router.Seed = &s
			cfg.Workload.Seed = uint64(s)
			runs[k] = &Candidate{Index: c.Index, Prefill: c.Prefill, Decode: c.Decode, P: c.P, D: c.D, Router: c.Router,
				Point: sim.Point{Config: cfg}}
		}
		p.simulate("verify "+c.Shape(), runs, progress)
		ok := true
		for _, r := range runs {
			p.Verified = append(p.Verified, Verification{Candidate: c, Seed: *r.Point.Config.Router.Seed, Outcome: r.Outcome})
			ok = ok && r.Meets
		}
		if ok {
			p.Winner = c
			return nil
		}
		failed = append(failed, c)
	}
	return nil
}

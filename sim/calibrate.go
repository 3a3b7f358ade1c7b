package sim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
	"gonum.org/v1/gonum/optimize"
)

// Calibration fits an engine profile to measured runs (router bench against a real
// deployment): each run's workload is replayed at its levels in the simulator, and the
// profile's free coefficients move until the simulated TTFT, TPOT and ITL percentiles match
// the measured ones. The loop BLIS offers for vLLM (observe, calibrate, replay), for SGLang PD.

// CalibrationRun is one measured run: what to replay and what was measured.
type CalibrationRun struct {
	Name     string
	Workload workloads.Params
	Load     workloads.LoadParams
	Measured []reports.Level // by label, as the bench wrote them
	// Records are the run's requests (requests.jsonl). With them, TTFT is also compared for
	// the requests with short and with long uncached prompts apart: percentiles of a level
	// alone cannot tell a per-token prefill cost from a fixed one.
	Records []reports.Record
}

// Fit holds the free coefficients of a calibration: speed factors on the base profile's
// per-token and per-request terms, and the fixed costs in seconds. A factor above 1 means
// slower than the base.
type Fit struct {
	Prefill      float64 `json:"prefill"`       // × a1, a2 (and attention/FFN compute under DP attention)
	PrefillFixed float64 `json:"prefill_fixed"` // a0, seconds per prefill step
	Decode       float64 `json:"decode"`        // × the decode step's batch and context terms
	DecodeFixed  float64 `json:"decode_fixed"`  // b0, seconds per decode step
	PDOverhead   float64 `json:"pd_overhead"`   // seconds per PD request
	T0           float64 `json:"t0"`            // KV transfer setup, seconds per room
}

// BaseFit is the fit that leaves p unchanged.
func BaseFit(p engine.Profile) Fit {
	return Fit{Prefill: 1, PrefillFixed: p.A0, Decode: 1, DecodeFixed: p.B0, PDOverhead: p.PDOverhead, T0: p.T0}
}

// Apply returns p with the fit's coefficients.
func (f Fit) Apply(p engine.Profile) engine.Profile {
	p.A0, p.A1, p.A2 = f.PrefillFixed, p.A1*f.Prefill, p.A2*f.Prefill
	p.B0 = f.DecodeFixed
	for _, c := range []*float64{&p.B1, &p.B2, &p.M0, &p.M2, &p.C1, &p.C2, &p.ExpertM0} {
		*c *= f.Decode
	}
	if p.DPAttn != nil {
		d := *p.DPAttn
		d.AttnA1 *= f.Prefill
		d.FFNC1 *= f.Prefill // gathered-token compute: prefill's many tokens dominate it
		d.AttnM0 *= f.Decode
		d.AttnC1 *= f.Decode
		d.FFNM0 *= f.Decode
		d.ExpertM0 *= f.Decode
		p.DPAttn = &d
	}
	p.PDOverhead, p.T0 = f.PDOverhead, f.T0
	return p
}

// fitVector is the optimizer's view of a Fit: logarithms, so every coefficient stays positive
// and a step moves each by a ratio.
func (f Fit) vector() []float64 {
	v := []float64{f.Prefill, f.PrefillFixed, f.Decode, f.DecodeFixed, f.PDOverhead, f.T0}
	for i := range v {
		v[i] = math.Log(max(v[i], minFixed))
	}
	return v
}

// minFixed is the floor of a fitted fixed cost (10 µs): a log cannot reach zero.
const minFixed = 1e-5

func fitOf(x []float64) Fit {
	e := func(i int) float64 { return math.Exp(x[i]) }
	return Fit{Prefill: e(0), PrefillFixed: e(1), Decode: e(2), DecodeFixed: e(3), PDOverhead: e(4), T0: e(5)}
}

// CalibrateConfig describes a calibration.
type CalibrateConfig struct {
	Base    engine.Profile // the starting point; its non-free fields are kept
	Cluster Cluster        // the servers of the measured deployment (its profile names are replaced)
	Router  router.Config  // the routing settings the runs used
	Runs    []CalibrationRun
	// MaxEvals bounds the objective evaluations (each simulates every run); 0 → 400.
	MaxEvals int
	// Parallel bounds the runs simulated at once; 0 → GOMAXPROCS.
	Parallel int
	// Progress, when set, is called after each evaluation with its number, its loss and the
	// best loss so far (from one goroutine at a time).
	Progress func(eval int, loss, best float64)
}

// FitPoint is one compared figure of one level: measured, simulated with the base profile and
// with the fit, in ms.
type FitPoint struct {
	Run, Level, Metric     string
	Measured, Base, Fitted float64
}

// ErrPct returns (fitted − measured)/measured in percent, or of base with base set.
func (p FitPoint) ErrPct(base bool) float64 {
	v := p.Fitted
	if base {
		v = p.Base
	}
	return (v - p.Measured) / p.Measured * 100
}

// Calibration is the outcome: the fitted profile, its coefficients, the per-level comparison
// and the losses (mean squared log ratio over the compared figures, weighted).
type Calibration struct {
	Profile           engine.Profile
	Fit               Fit
	Points            []FitPoint
	BaseLoss, FitLoss float64
	Evaluations       int
	BaseRMSE, FitRMSE float64 // root of the losses, ≈ the typical relative error
}

// calibratedProfileName names the profile under fit inside the simulated cluster.
const calibratedProfileName = "calibrating"

// splitWeight is the loss weight of the short- and long-prompt TTFT medians of a level.
const splitWeight = 1

// figures are the compared percentiles with their weight in the loss: the medians carry the
// fit, the tail counts half (it is noisier in a few hundred requests).
var figures = []struct {
	name   string
	weight float64
	get    func(l reports.Level) float64
}{
	{"ttft_p50", 1, func(l reports.Level) float64 { return l.TTFTMs.P50 }},
	{"ttft_p95", 0.5, func(l reports.Level) float64 { return l.TTFTMs.P95 }},
	{"tpot_p50", 1, func(l reports.Level) float64 { return l.TPOTMs.P50 }},
	{"itl_p50", 0.5, func(l reports.Level) float64 { return l.ITLMs.P50 }},
}

// Predict simulates one run with profile p and returns its levels.
func Predict(cl Cluster, rc router.Config, p engine.Profile, w workloads.Params, l workloads.LoadParams) ([]reports.Level, error) {
	res, err := predict(cl, rc, p, w, l)
	if err != nil {
		return nil, err
	}
	return res.Results.Levels, nil
}

func predict(cl Cluster, rc router.Config, p engine.Profile, w workloads.Params, l workloads.LoadParams) (*Result, error) {
	cl.Profile, cl.PrefillProfile, cl.DecodeProfile = calibratedProfileName, "", ""
	cl.Profiles = map[string]engine.Profile{calibratedProfileName: p}
	seed := int64(w.Seed) // the run's conversations: the simulator seeds the workload from the router's seed
	rc.Seed = &seed
	return Run(Config{Cluster: cl, Router: rc, Workload: w, Load: l})
}

// promptSplit is a level's TTFT for the requests with short and with long uncached prompts
// (input − cached tokens below, or at and above, the measured median).
type promptSplit struct{ short, long float64 }

// splitTTFT returns each level's median TTFT of its short- and long-prompt requests, split at
// threshold[level], and the thresholds used. With threshold nil, each level is split at its
// own median (the measured side); otherwise levels without a threshold are left out (they
// were not measured with records, so there is nothing to compare them with).
func splitTTFT(recs []reports.Record, threshold map[string]int) (map[string]promptSplit, map[string]int) {
	type acc struct {
		news  []int
		ttfts []float64
	}
	by := map[string]*acc{}
	for _, r := range recs {
		if r.Error != nil || r.TTFTMs == nil {
			continue
		}
		a := by[r.Level]
		if a == nil {
			a = &acc{}
			by[r.Level] = a
		}
		a.news = append(a.news, r.InputTokens-r.CachedTokens)
		a.ttfts = append(a.ttfts, *r.TTFTMs)
	}
	own := threshold == nil
	if own {
		threshold = map[string]int{}
	}
	out := map[string]promptSplit{}
	for level, a := range by {
		th, ok := threshold[level]
		if !ok {
			if !own {
				continue
			}
			sorted := append([]int(nil), a.news...)
			slices.Sort(sorted)
			th = sorted[len(sorted)/2]
			threshold[level] = th
		}
		var short, long []float64
		for i, n := range a.news {
			if n < th {
				short = append(short, a.ttfts[i])
			} else {
				long = append(long, a.ttfts[i])
			}
		}
		var ps promptSplit
		if len(short) >= 8 && len(long) >= 8 {
			slices.Sort(short)
			slices.Sort(long)
			ps = promptSplit{reports.Percentile(short, 50), reports.Percentile(long, 50)}
		}
		out[level] = ps
	}
	return out, threshold
}

// observed is what the loss compares of one run, measured or simulated: its levels and each
// level's TTFT by uncached prompt length.
type observed struct {
	levels []reports.Level
	split  map[string]promptSplit
}

// missedLoss is what a figure measured but simulated as zero costs: the squared log ratio of
// a simulation e⁵ ≈ 150 times off.
const missedLoss = 25

// loss is the weighted mean squared log ratio of simulated to measured figures, over every
// measured level of every run (simulated[i] is measured[i]'s replay): the figures with their
// weights, and the short- and long-prompt TTFT medians with splitWeight. A figure measured as
// 0 is not compared; one simulated as 0 costs missedLoss. 0 when nothing is compared.
func loss(measured, simulated []observed) float64 {
	var sum, wsum float64
	add := func(weight, m, s float64) {
		if m <= 0 {
			return
		}
		wsum += weight
		if s <= 0 {
			sum += weight * missedLoss
			return
		}
		d := math.Log(s / m)
		sum += weight * d * d
	}
	for i, mr := range measured {
		sr := simulated[i]
		for _, m := range mr.levels {
			var s reports.Level // a level the simulation lost: every figure 0
			if j := slices.IndexFunc(sr.levels, func(l reports.Level) bool { return l.Label == m.Label }); j >= 0 {
				s = sr.levels[j]
			}
			for _, f := range figures {
				add(f.weight, f.get(m), f.get(s))
			}
			ms, ss := mr.split[m.Label], sr.split[m.Label]
			add(splitWeight, ms.short, ss.short)
			add(splitWeight, ms.long, ss.long)
		}
	}
	if wsum == 0 {
		return 0
	}
	return sum / wsum
}

// calibrator is one calibration: the measured runs and what the optimizer has seen so far.
// Its objective is called by gonum/optimize from gonum's goroutines.
type calibrator struct {
	cfg        CalibrateConfig
	par        int              // runs simulated at once
	measured   []observed       // by run
	thresholds []map[string]int // by run: each level's measured median uncached prompt, splitting TTFT
	mu         sync.Mutex       // protects evals, best, err
	evals      int              // objective evaluations so far
	best       float64          // the lowest loss so far
	err        error            // the last failed evaluation's error: it ends the calibration
}

// newCalibrator validates cfg, applies its defaults and takes the measured side of each run.
func newCalibrator(cfg CalibrateConfig) (*calibrator, error) {
	if len(cfg.Runs) == 0 {
		return nil, errors.New("sim: calibrate: no runs")
	}
	if cfg.Base.Constant {
		return nil, fmt.Errorf("sim: calibrate: base profile %s has constant timings: nothing to fit (start from a preset)", cfg.Base.Name)
	}
	if cfg.MaxEvals == 0 {
		cfg.MaxEvals = 400
	}
	c := &calibrator{cfg: cfg, par: cfg.Parallel}
	if c.par <= 0 {
		c.par = runtime.GOMAXPROCS(0)
	}
	for _, r := range cfg.Runs {
		split, th := splitTTFT(r.Records, nil)
		c.measured = append(c.measured, observed{levels: r.Measured, split: split})
		c.thresholds = append(c.thresholds, th)
	}
	return c, nil
}

// simulate replays every run under profile p, c.par at a time.
func (c *calibrator) simulate(p engine.Profile) ([]*Result, error) {
	runs := c.cfg.Runs
	out := make([]*Result, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, c.par)
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = predict(c.cfg.Cluster, c.cfg.Router, p, r.Workload, r.Load)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("sim: calibrate: replaying %s: %w", r.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// observe takes of each simulated run what loss compares, split at the measured thresholds.
func (c *calibrator) observe(sims []*Result) []observed {
	out := make([]observed, len(sims))
	for i, r := range sims {
		split, _ := splitTTFT(r.Records, c.thresholds[i])
		out[i] = observed{levels: r.Results.Levels, split: split}
	}
	return out
}

// loss is the loss of simulated runs against the measured ones.
func (c *calibrator) loss(sims []*Result) float64 { return loss(c.measured, c.observe(sims)) }

// objective is the optimizer's function: the loss of the fit at x (fitOf). A failed
// simulation ends the calibration with its error (+Inf here, c.err for Calibrate).
func (c *calibrator) objective(x []float64) float64 {
	sims, err := c.simulate(fitOf(x).Apply(c.cfg.Base))
	var l float64
	if err == nil {
		l = c.loss(sims)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evals++
	if err != nil {
		c.err = err
		return math.Inf(1)
	}
	c.best = min(c.best, l)
	if c.cfg.Progress != nil {
		c.cfg.Progress(c.evals, l, c.best)
	}
	return l
}

// Calibrate fits cfg.Base to cfg.Runs with Nelder–Mead (gonum/optimize), derivative-free as
// the simulator's output is piecewise constant in its coefficients.
func Calibrate(cfg CalibrateConfig) (*Calibration, error) {
	c, err := newCalibrator(cfg)
	if err != nil {
		return nil, err
	}
	base := c.cfg.Base
	baseRuns, err := c.simulate(base)
	if err != nil {
		return nil, err
	}
	baseLoss := c.loss(baseRuns)
	c.best = baseLoss

	settings := &optimize.Settings{FuncEvaluations: c.cfg.MaxEvals,
		Converger: &optimize.FunctionConverge{Absolute: 1e-5, Relative: 1e-4, Iterations: 40}}
	res, err := optimize.Minimize(optimize.Problem{Func: c.objective}, BaseFit(base).vector(), settings, &optimize.NelderMead{SimplexSize: 0.4})
	c.mu.Lock()
	evals, evalErr := c.evals, c.err
	c.mu.Unlock()
	if evalErr != nil {
		return nil, evalErr
	}
	if err != nil && res == nil {
		return nil, fmt.Errorf("sim: calibrate: %w", err)
	}
	fit := fitOf(res.X)
	if res.F > baseLoss { // never worse than where it started
		fit = BaseFit(base)
	}
	prof := fit.Apply(base)
	fitRuns, err := c.simulate(prof)
	if err != nil {
		return nil, err
	}
	out := &Calibration{Profile: prof, Fit: fit, BaseLoss: baseLoss, FitLoss: c.loss(fitRuns), Evaluations: evals}
	out.BaseRMSE, out.FitRMSE = math.Sqrt(out.BaseLoss), math.Sqrt(out.FitLoss)
	levels := func(rs []*Result) [][]reports.Level {
		out := make([][]reports.Level, len(rs))
		for i, r := range rs {
			out[i] = r.Results.Levels
		}
		return out
	}
	out.Points = comparePoints(cfg.Runs, levels(baseRuns), levels(fitRuns))
	return out, nil
}

// comparePoints lists every measured figure beside its base and fitted simulation.
func comparePoints(runs []CalibrationRun, base, fitted [][]reports.Level) []FitPoint {
	var out []FitPoint
	for i, r := range runs {
		find := func(levels []reports.Level, label string) (reports.Level, bool) {
			for _, l := range levels {
				if l.Label == label {
					return l, true
				}
			}
			return reports.Level{}, false
		}
		for _, m := range r.Measured {
			b, _ := find(base[i], m.Label)
			f, _ := find(fitted[i], m.Label)
			for _, fig := range figures {
				if mv := fig.get(m); mv > 0 {
					out = append(out, FitPoint{Run: r.Name, Level: m.Label, Metric: fig.name, Measured: mv, Base: fig.get(b), Fitted: fig.get(f)})
				}
			}
		}
	}
	return out
}

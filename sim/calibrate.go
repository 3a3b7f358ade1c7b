package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
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
//
// The factors are split the way the costs scale on a GPU, so that a deployment whose balance
// differs from the base's (attention-heavy, or bound by memory where the base is by compute)
// is expressible: prefill linear layers (A1) apart from prefill attention (A2), decode memory
// traffic (weights M0 and KV reads M2 together: one bandwidth) apart from decode compute (C1
// and C2 together: one FLOP rate). PrefillAttn and DecodeCompute at 0 mean "as Prefill" and
// "as Decode" (a uniform scale, the form older callers write).
type Fit struct {
	Prefill       float64 `json:"prefill"`           // × a1 (and attention projections/FFN compute under DP attention)
	PrefillAttn   float64 `json:"prefill_attention"` // × a2; 0: as Prefill
	PrefillFixed  float64 `json:"prefill_fixed"`     // a0, seconds per prefill step
	Decode        float64 `json:"decode"`            // × the decode step's memory terms: m0, m2, expert reads, b2
	DecodeCompute float64 `json:"decode_compute"`    // × the decode step's compute terms: c1, c2, b1; 0: as Decode
	DecodeFixed   float64 `json:"decode_fixed"`      // b0, seconds per decode step
	PDOverhead    float64 `json:"pd_overhead"`       // seconds per PD request
	// T0 is the KV transfer setup per room. It is not fitted: it adds to every transfer exactly
	// as PDOverhead does, so the two cannot be told apart; calibrate keeps the base's.
	T0 float64 `json:"t0"`
}

// BaseFit is the fit that leaves p unchanged.
func BaseFit(p engine.Profile) Fit {
	return Fit{Prefill: 1, PrefillAttn: 1, PrefillFixed: p.A0, Decode: 1, DecodeCompute: 1, DecodeFixed: p.B0, PDOverhead: p.PDOverhead, T0: p.T0}
}

// attn and compute are the factors with their "0: as the other" default.
func (f Fit) attn() float64 {
	if f.PrefillAttn == 0 {
		return f.Prefill
	}
	return f.PrefillAttn
}

func (f Fit) compute() float64 {
	if f.DecodeCompute == 0 {
		return f.Decode
	}
	return f.DecodeCompute
}

// Apply returns p with the fit's coefficients.
func (f Fit) Apply(p engine.Profile) engine.Profile {
	p.A0, p.A1, p.A2 = f.PrefillFixed, p.A1*f.Prefill, p.A2*f.attn()
	p.B0 = f.DecodeFixed
	for _, c := range []*float64{&p.B2, &p.M0, &p.M2, &p.ExpertM0} {
		*c *= f.Decode
	}
	for _, c := range []*float64{&p.B1, &p.C1, &p.C2} {
		*c *= f.compute()
	}
	if p.DPAttn != nil {
		d := *p.DPAttn
		d.AttnA1 *= f.Prefill
		d.FFNC1 *= f.Prefill // gathered-token compute: prefill's many tokens dominate it
		d.AttnM0 *= f.Decode
		d.FFNM0 *= f.Decode
		d.ExpertM0 *= f.Decode
		d.AttnC1 *= f.compute()
		p.DPAttn = &d
	}
	p.PDOverhead, p.T0 = f.PDOverhead, f.T0
	return p
}

// vector is the optimizer's view of a Fit: logarithms of the free coefficients, so every
// coefficient stays positive and a step moves each by a ratio, with attention and decode
// compute as ratios to linear and decode memory (ln attention/linear, ln compute/memory): a
// step in the linear or memory coordinate moves its partner along, keeping the base's
// balance, and the balance moves only when the runs show it (see PriorWeight). T0 is not free.
func (f Fit) vector() []float64 {
	v := []float64{f.Prefill, f.attn(), f.PrefillFixed, f.Decode, f.compute(), f.DecodeFixed, f.PDOverhead}
	for i := range v {
		v[i] = math.Log(max(v[i], minFixed))
	}
	v[1] -= v[0]
	v[4] -= v[3]
	return v
}

// minFixed is the floor of a fitted fixed cost (10 µs): a log cannot reach zero.
const minFixed = 1e-5

// maxLogFactor bounds every free coefficient to within e^±7 (≈ ×1100) of the base, so the
// search stays bounded: a simplex that wanders past it (a coefficient the runs cannot see)
// is clamped rather than simulating absurd profiles.
const maxLogFactor = 7

func fitOf(x []float64, t0 float64) Fit {
	e := func(i int) float64 { return math.Exp(x[i]) }
	return Fit{Prefill: e(0), PrefillAttn: math.Exp(x[0] + x[1]), PrefillFixed: e(2), Decode: e(3), DecodeCompute: math.Exp(x[3] + x[4]),
		DecodeFixed: e(5), PDOverhead: e(6), T0: t0}
}

// CalibrateConfig describes a calibration.
type CalibrateConfig struct {
	Base    engine.Profile // the starting point; its non-free fields are kept
	Cluster Cluster        // the servers of the measured deployment (its profile names are replaced)
	Router  router.Config  // the routing settings the runs used
	Runs    []CalibrationRun
	// Holdout are levels left out of the fit and predicted afterwards (their error is the
	// honest estimate of the fitted profile's error on a load it has not seen); nil: none.
	Holdout []LevelRef
	// MaxEvals bounds the objective evaluations (each simulates every run); 0 → 400.
	MaxEvals int
	// Parallel bounds the runs simulated at once; 0 → GOMAXPROCS.
	Parallel int
	// Progress, when set, is called after each evaluation with its number, its loss and the
	// best loss so far (from one goroutine at a time).
	Progress func(eval int, loss, best float64)
}

// LevelRef names one measured level: the index of its run in CalibrateConfig.Runs and its
// label (c8, r2.5, …).
type LevelRef struct {
	Run   int
	Label string
}

// FitPoint is one compared figure of one level: measured, simulated with the base profile and
// with the fit, in ms. HeldOut marks a level left out of the fit.
type FitPoint struct {
	Run, Level, Metric     string
	Measured, Base, Fitted float64
	HeldOut                bool
}

// ErrPct returns (fitted − measured)/measured in percent, or of base with base set.
func (p FitPoint) ErrPct(base bool) float64 {
	v := p.Fitted
	if base {
		v = p.Base
	}
	return (v - p.Measured) / p.Measured * 100
}

// LevelResidual is one level's root mean squared log error under the fitted profile (the
// loss's figures and weights on that level alone).
type LevelResidual struct {
	Run, Level string
	RMSE       float64
	HeldOut    bool
}

// Calibration is the outcome: the fitted profile, its coefficients, the per-level comparison
// and the losses (mean squared log ratio over the compared figures, weighted).
type Calibration struct {
	Profile           engine.Profile
	Fit               Fit
	Points            []FitPoint
	BaseLoss, FitLoss float64 // over the fitted levels
	Evaluations       int
	BaseRMSE, FitRMSE float64 // root of the losses, ≈ the typical relative error
	// HoldoutRMSE is the held-out levels' root mean squared log error (0 without holdout).
	HoldoutRMSE float64
	// Levels is every level's residual, fitted and held out, in run and level order.
	Levels []LevelResidual
	// Warnings say where the fit cannot be trusted (ResidualWarnThreshold, HoldoutWarnThreshold).
	Warnings []string
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

// Predict simulates one run with profile p and returns its levels. No command calls it:
// cmd/router's calibration test uses it to check that a calibrated profile predicts runs it
// was not fitted to (`router sim --profile-file` is the same run from the command line).
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
	measured   []observed       // by run: the fitted levels only
	held       []observed       // by run: the held-out levels only
	thresholds []map[string]int // by run: each level's measured median uncached prompt, splitting TTFT
	fitting    []int            // the runs with a fitted level (the others need no replay while fitting)
	x0         []float64        // the start of the search (the base), centre of its bounds
	mu         sync.Mutex       // protects evals, best, err
	evals      int              // objective evaluations so far
	best       float64          // the lowest loss so far
	err        error            // the last failed evaluation's error: it ends the calibration
}

// newCalibrator validates cfg, applies its defaults and takes the measured side of each run,
// the held-out levels apart.
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
	held := map[LevelRef]bool{}
	for _, h := range cfg.Holdout {
		if h.Run < 0 || h.Run >= len(cfg.Runs) || !slices.ContainsFunc(cfg.Runs[h.Run].Measured, func(l reports.Level) bool { return l.Label == h.Label }) {
			return nil, fmt.Errorf("sim: calibrate: held-out level %d/%s is not a measured level", h.Run, h.Label)
		}
		held[h] = true
	}
	for i, r := range cfg.Runs {
		split, th := splitTTFT(r.Records, nil)
		var fit, out observed
		fit.split, out.split = map[string]promptSplit{}, map[string]promptSplit{}
		for _, l := range r.Measured {
			o := &fit
			if held[LevelRef{i, l.Label}] {
				o = &out
			}
			o.levels = append(o.levels, l)
			if s, ok := split[l.Label]; ok {
				o.split[l.Label] = s
			}
		}
		c.measured = append(c.measured, fit)
		c.held = append(c.held, out)
		c.thresholds = append(c.thresholds, th)
		if len(fit.levels) > 0 {
			c.fitting = append(c.fitting, i)
		}
	}
	if len(c.fitting) == 0 {
		return nil, errors.New("sim: calibrate: every level is held out: nothing left to fit")
	}
	return c, nil
}

// simulate replays runs (indices into cfg.Runs; nil: every run) under profile p, c.par at a
// time; out[i] is nil for a run not replayed.
func (c *calibrator) simulate(p engine.Profile, which []int) ([]*Result, error) {
	runs := c.cfg.Runs
	if which == nil {
		which = make([]int, len(runs))
		for i := range which {
			which[i] = i
		}
	}
	out := make([]*Result, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, c.par)
	var wg sync.WaitGroup
	for _, i := range which {
		r := runs[i]
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
		if r == nil {
			continue
		}
		split, _ := splitTTFT(r.Records, c.thresholds[i])
		out[i] = observed{levels: r.Results.Levels, split: split}
	}
	return out
}

// loss is the loss of simulated runs against the fitted levels of the measured ones.
func (c *calibrator) loss(sims []*Result) float64 { return loss(c.measured, c.observe(sims)) }

// PriorWeight weighs the calibration's prior: that attention costs scale as the linear layers
// do, and decode compute as decode memory, relative to the base (the base's balance, a
// roofline of the same model). The penalty is PriorWeight·(ln attention/linear)² +
// PriorWeight·(ln compute/memory)², added to the loss. Levels whose prompts all have about the
// same length cannot tell a1 from a2 (nor a decode batch bound by memory, c from m): without
// it the split wanders along that flat valley and extrapolates to longer prompts by chance.
// It is small beside what a level that does see the difference costs (a 10 % miss on one
// figure is ~0.009/N of the loss), so the data move the factors apart when they show it.
var PriorWeight = 1e-4

// prior is the prior's penalty at fit vector x (fitOf's order).
func prior(x []float64) float64 {
	return PriorWeight * (x[1]*x[1] + x[4]*x[4])
}

// clamp keeps x within maxLogFactor of the start, coordinate by coordinate.
func (c *calibrator) clamp(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = min(max(v, c.x0[i]-maxLogFactor), c.x0[i]+maxLogFactor)
	}
	return y
}

// objective is the optimizer's function: the loss of the fit at x (fitOf). A failed
// simulation ends the calibration with its error (+Inf here, c.err for Calibrate).
func (c *calibrator) objective(x []float64) float64 {
	x = c.clamp(x)
	sims, err := c.simulate(fitOf(x, c.cfg.Base.T0).Apply(c.cfg.Base), c.fitting)
	var l float64
	if err == nil {
		l = c.loss(sims) + prior(x)
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

// Calibrate fits cfg.Base to the fitted levels of cfg.Runs with Nelder–Mead (gonum/optimize),
// derivative-free as the simulator's output is piecewise constant in its coefficients. The
// search is deterministic: it starts from the base with a fixed simplex, evaluates one point
// at a time, and every replay uses the run's own seed. The held-out levels are then predicted
// with the fit, and Warnings name the levels the fit misses.
func Calibrate(cfg CalibrateConfig) (*Calibration, error) {
	c, err := newCalibrator(cfg)
	if err != nil {
		return nil, err
	}
	base := c.cfg.Base
	baseRuns, err := c.simulate(base, nil)
	if err != nil {
		return nil, err
	}
	baseLoss := c.loss(baseRuns)
	c.best = baseLoss
	c.x0 = BaseFit(base).vector()

	// Nelder–Mead in rounds: the first from the base, each later one restarted from the best
	// point so far with a fresh, smaller simplex (a simplex collapsed along a flat valley stops
	// early; a restart resumes), until the budget is spent or a round gains nothing.
	x, best := slices.Clone(c.x0), math.Inf(1)
	size := 0.5
	for round := 0; ; round++ {
		c.mu.Lock()
		left := c.cfg.MaxEvals - c.evals
		c.mu.Unlock()
		if left < 2*len(x)+2 {
			break
		}
		budget := left
		if round == 0 {
			budget = left * 3 / 5
		}
		settings := &optimize.Settings{FuncEvaluations: budget,
			Converger: &optimize.FunctionConverge{Absolute: 1e-7, Relative: 1e-4, Iterations: 40}}
		res, err := optimize.Minimize(optimize.Problem{Func: c.objective}, slices.Clone(x), settings, &optimize.NelderMead{SimplexSize: size})
		c.mu.Lock()
		evalErr := c.err
		c.mu.Unlock()
		if evalErr != nil {
			return nil, evalErr
		}
		if err != nil && res == nil {
			return nil, fmt.Errorf("sim: calibrate: %w", err)
		}
		gained := best - res.F
		if res.F < best {
			x, best = c.clamp(res.X), res.F
		}
		if round > 0 && !(gained > 1e-4*best) {
			break
		}
		size = 0.2
	}
	c.mu.Lock()
	evals := c.evals
	c.mu.Unlock()
	fit := fitOf(x, base.T0)
	if best > baseLoss { // never worse than where it started
		fit = BaseFit(base)
	}
	prof := fit.Apply(base)
	fitRuns, err := c.simulate(prof, nil)
	if err != nil {
		return nil, err
	}
	out := &Calibration{Profile: prof, Fit: fit, BaseLoss: baseLoss, FitLoss: c.loss(fitRuns), Evaluations: evals}
	out.BaseRMSE, out.FitRMSE = math.Sqrt(out.BaseLoss), math.Sqrt(out.FitLoss)
	fitObs := c.observe(fitRuns)
	out.HoldoutRMSE = math.Sqrt(loss(c.held, fitObs))
	levels := func(rs []*Result) [][]reports.Level {
		out := make([][]reports.Level, len(rs))
		for i, r := range rs {
			out[i] = r.Results.Levels
		}
		return out
	}
	out.Points = comparePoints(cfg.Runs, levels(baseRuns), levels(fitRuns), cfg.Holdout)
	out.Levels = c.levelResiduals(fitObs)
	out.Warnings = residualWarnings(out)
	fr := fitRange(cfg, c.measured)
	fr.Residual = out.FitRMSE
	out.Profile.Fit = &fr
	return out, nil
}

// levelResiduals is each measured level's RMS log error against the simulated runs.
func (c *calibrator) levelResiduals(sims []observed) []LevelResidual {
	var out []LevelResidual
	for i, r := range c.cfg.Runs {
		for _, part := range []struct {
			o    observed
			held bool
		}{{c.measured[i], false}, {c.held[i], true}} {
			for _, l := range part.o.levels {
				one := observed{levels: []reports.Level{l}, split: map[string]promptSplit{l.Label: part.o.split[l.Label]}}
				out = append(out, LevelResidual{Run: r.Name, Level: l.Label, HeldOut: part.held,
					RMSE: math.Sqrt(loss([]observed{one}, []observed{sims[i]}))})
			}
		}
	}
	// Run order, then the run's level order, whether held out or not.
	order := func(r LevelResidual) (int, int) {
		for i, run := range c.cfg.Runs {
			if run.Name == r.Run {
				return i, slices.IndexFunc(run.Measured, func(l reports.Level) bool { return l.Label == r.Level })
			}
		}
		return 0, 0
	}
	slices.SortStableFunc(out, func(a, b LevelResidual) int {
		ar, al := order(a)
		br, bl := order(b)
		if ar != br {
			return ar - br
		}
		return al - bl
	})
	return out
}

// ResidualWarnThreshold is the fitted RMS log error above which calibrate warns that the
// model family does not express the deployment: 0.10, a typical figure 10 % off on the very
// levels it was fitted to (a fit inside the family lands within a few percent; the noise of a
// few hundred live requests is about that).
const ResidualWarnThreshold = 0.10

// HoldoutWarnThreshold is the held-out level's RMS log error above which calibrate warns that
// the fit does not predict loads it has not seen: 0.15, the tolerance the issue asks of a
// calibrated prediction.
const HoldoutWarnThreshold = 0.15

// residualWarnings names the levels the fit misses: when the fitted residual passes
// ResidualWarnThreshold, the fitted levels with the largest residual (those within 80 % of
// the worst); when a held-out level's passes HoldoutWarnThreshold, that level.
func residualWarnings(c *Calibration) []string {
	var out []string
	name := func(l LevelResidual) string { return l.Run + "/" + l.Level }
	if c.FitRMSE > ResidualWarnThreshold {
		worst := 0.0
		for _, l := range c.Levels {
			if !l.HeldOut {
				worst = max(worst, l.RMSE)
			}
		}
		var names []string
		for _, l := range c.Levels {
			if !l.HeldOut && l.RMSE >= 0.8*worst {
				names = append(names, fmt.Sprintf("%s (%.3f)", name(l), l.RMSE))
			}
		}
		out = append(out, fmt.Sprintf("the fit misses the levels it was fitted to (rms log error %.3f > %.2f); largest residual: %s. "+
			"The engine model's free factors cannot express this deployment: do not trust its predictions beyond these levels",
			c.FitRMSE, ResidualWarnThreshold, strings.Join(names, ", ")))
	}
	for _, l := range c.Levels {
		if !l.HeldOut || l.RMSE <= HoldoutWarnThreshold {
			continue
		}
		worst := ""
		var worstErr float64
		for _, p := range c.Points {
			if p.HeldOut && p.Run == l.Run && p.Level == l.Level && math.Abs(p.ErrPct(false)) > math.Abs(worstErr) {
				worst, worstErr = p.Metric, p.ErrPct(false)
			}
		}
		msg := fmt.Sprintf("held-out level %s is mispredicted (rms log error %.3f > %.2f", name(l), l.RMSE, HoldoutWarnThreshold)
		if worst != "" {
			msg += fmt.Sprintf("; %s %+.1f %%", worst, worstErr)
		}
		out = append(out, msg+"): the fit does not carry to a load it has not seen")
	}
	return out
}

// fitRange is the range the fitted levels cover: prompt lengths of their successful requests
// and the most requests in flight per decode-side DP rank (a level's mean in flight by Little's
// law, throughput × mean end-to-end latency, over the ranks that hold decode batches: decode
// servers in PD, regular servers otherwise).
func fitRange(cfg CalibrateConfig, measured []observed) engine.FitRange {
	fr := engine.FitRange{PromptTokensMin: math.MaxInt}
	fitted := map[LevelRef]bool{}
	for i, o := range measured {
		for _, l := range o.levels {
			fitted[LevelRef{i, l.Label}] = true
		}
	}
	for i, r := range cfg.Runs {
		for _, rec := range r.Records {
			if rec.Error == nil && rec.InputTokens > 0 && fitted[LevelRef{i, rec.Level}] {
				fr.PromptTokensMin = min(fr.PromptTokensMin, rec.InputTokens)
				fr.PromptTokensMax = max(fr.PromptTokensMax, rec.InputTokens)
			}
		}
	}
	if fr.PromptTokensMin == math.MaxInt {
		fr.PromptTokensMin = 0
	}
	ranks := cfg.Cluster.DecodeRanks(cfg.Router.PDDisaggregation)
	for _, o := range measured {
		for _, l := range o.levels {
			inFlight := l.Throughput.ReqS * l.E2EMs.Mean / 1000
			fr.BatchPerRankMax = max(fr.BatchPerRankMax, int(math.Ceil(inFlight/float64(ranks))))
		}
	}
	return fr
}

// DecodeRanks is the DP ranks holding decode batches: the decode servers' in PD, the regular
// servers' otherwise (at least 1 each), with each pool's own DP size.
func (c Cluster) DecodeRanks(pd bool) int {
	if pd {
		_, dp, _ := c.Sizes(engine.RoleDecode)
		return max(c.Decode, 1) * dp
	}
	_, dp, _ := c.Sizes(engine.RoleUnified)
	return max(c.Regular, 1) * dp
}

// ExtrapolationWarnings says when a prediction with p reaches outside the ranges p was fitted
// on (p.Fit, written by calibrate): prompts shorter or longer than the fitted ones, or more
// requests in flight per decode rank than any fitted level had. promptMin and promptMax are
// the prediction's prompt lengths in tokens, batchPerRankMax its most requests in flight per
// decode-side DP rank (≤ 0: not checked). Nil for a profile without a fitted range. A small
// margin (10 %) is allowed before warning: the fitted range is itself a sample.
func ExtrapolationWarnings(p engine.Profile, promptMin, promptMax, batchPerRankMax int) []string {
	f := p.Fit
	if f == nil {
		return nil
	}
	var out []string
	const margin = 1.1
	if f.PromptTokensMax > 0 && promptMax > 0 && float64(promptMax) > margin*float64(f.PromptTokensMax) {
		out = append(out, fmt.Sprintf("profile %s was fitted on prompts of %d–%d tokens; this run has prompts up to %d: an extrapolation",
			p.Name, f.PromptTokensMin, f.PromptTokensMax, promptMax))
	}
	if f.PromptTokensMin > 0 && promptMin > 0 && float64(promptMin)*margin < float64(f.PromptTokensMin) {
		out = append(out, fmt.Sprintf("profile %s was fitted on prompts of %d–%d tokens; this run has prompts from %d: an extrapolation",
			p.Name, f.PromptTokensMin, f.PromptTokensMax, promptMin))
	}
	if f.BatchPerRankMax > 0 && batchPerRankMax > 0 && float64(batchPerRankMax) > margin*float64(f.BatchPerRankMax) {
		out = append(out, fmt.Sprintf("profile %s was fitted with up to %d requests in flight per decode rank; this run reaches %d: an extrapolation",
			p.Name, f.BatchPerRankMax, batchPerRankMax))
	}
	if f.Residual > ResidualWarnThreshold {
		out = append(out, fmt.Sprintf("profile %s fitted its own levels only within %.0f %% (rms log error %.3f): its predictions are rough",
			p.Name, f.Residual*100, f.Residual))
	}
	return out
}

// comparePoints lists every measured figure beside its base and fitted simulation.
func comparePoints(runs []CalibrationRun, base, fitted [][]reports.Level, holdout []LevelRef) []FitPoint {
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
			held := slices.Contains(holdout, LevelRef{i, m.Label})
			for _, fig := range figures {
				if mv := fig.get(m); mv > 0 {
					out = append(out, FitPoint{Run: r.Name, Level: m.Label, Metric: fig.name, Measured: mv, Base: fig.get(b), Fitted: fig.get(f), HeldOut: held})
				}
			}
		}
	}
	return out
}

// CalibrationLevels lists every measured level of runs, in run and level order (the order
// --holdout N counts in, from 1).
func CalibrationLevels(runs []CalibrationRun) []LevelRef {
	var out []LevelRef
	for i, r := range runs {
		for _, l := range r.Measured {
			out = append(out, LevelRef{i, l.Label})
		}
	}
	return out
}

// HighestLoadLevel is the level with the most requests in flight on average (Little's law:
// measured throughput × mean end-to-end latency), which compares closed- and open-loop levels
// alike; ties go to the later level.
func HighestLoadLevel(runs []CalibrationRun) (LevelRef, bool) {
	var best LevelRef
	bestL, found := -1.0, false
	for i, r := range runs {
		for _, l := range r.Measured {
			if v := l.Throughput.ReqS * l.E2EMs.Mean; v >= bestL {
				best, bestL, found = LevelRef{i, l.Label}, v, true
			}
		}
	}
	return best, found
}

// ResolveHoldout reads a --holdout value against runs: "highest" (the default: the level with
// the most requests in flight, HighestLoadLevel), "none", a level's number N (from 1, in
// CalibrationLevels order), a level label (c8) when one run has it, or RUN/LABEL. With a
// single level in all, "highest" holds nothing out (there would be nothing left to fit).
func ResolveHoldout(runs []CalibrationRun, spec string) ([]LevelRef, error) {
	all := CalibrationLevels(runs)
	switch spec {
	case "none", "":
		return nil, nil
	case "highest":
		if len(all) < 2 {
			return nil, nil
		}
		l, _ := HighestLoadLevel(runs)
		return []LevelRef{l}, nil
	}
	if n, err := strconv.Atoi(spec); err == nil {
		if n < 1 || n > len(all) {
			return nil, fmt.Errorf("sim: calibrate: --holdout %d: the runs have levels 1 to %d", n, len(all))
		}
		return []LevelRef{all[n-1]}, nil
	}
	runName, label, qualified := strings.Cut(spec, "/")
	if !qualified {
		runName, label = "", spec
	}
	var match []LevelRef
	for _, l := range all {
		if l.Label == label && (!qualified || runs[l.Run].Name == runName) {
			match = append(match, l)
		}
	}
	switch {
	case len(match) == 0:
		return nil, fmt.Errorf("sim: calibrate: --holdout %q: no such level (want highest, none, a level number, a label or RUN/LABEL)", spec)
	case len(match) > 1:
		return nil, fmt.Errorf("sim: calibrate: --holdout %q: %d runs have that level; name one as RUN/LABEL", spec, len(match))
	}
	return match, nil
}

// ServerInfo is what calibrate reads of a worker's /get_server_info, as router bench records
// it: SGLang's engine arguments and parallelism, under SGLang's key names (server_args.py's
// ServerArgs fields, and the scheduler's max_total_num_tokens, which SGLang's
// http_server.py get_server_info merges in). A key the worker did not report stays 0 (nil).
type ServerInfo struct {
	URL  string // as recorded (credentials redacted)
	Role string // prefill, decode or regular: the router's name for it, else disaggregation_mode
	// Args are chunked_prefill_size, max_running_requests, max_total_num_tokens, page_size
	// and cuda_graph_max_bs.
	Args                   engine.ServerArgs
	TPSize, DPSize, EPSize int   // tp_size, dp_size, ep_size
	DPAttention            *bool // enable_dp_attention
}

// ParseServerInfo reads one /get_server_info object. Keys are read one by one and a missing,
// null or non-numeric one is left unset: workers differ in what they report (SGLang versions,
// fakeworker). A negative chunked_prefill_size (SGLang's "chunking disabled") is left unset.
func ParseServerInfo(raw json.RawMessage) (ServerInfo, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return ServerInfo{}, fmt.Errorf("sim: /get_server_info: %w", err)
	}
	num := func(k string) int {
		v, ok := m[k].(float64)
		if !ok || v <= 0 || v > math.MaxInt32 {
			return 0
		}
		return int(v)
	}
	var si ServerInfo
	si.Args = engine.ServerArgs{ChunkedPrefillSize: num("chunked_prefill_size"), MaxRunningRequests: num("max_running_requests"),
		MaxTotalTokens: num("max_total_num_tokens"), PageSize: num("page_size"), CUDAGraphMaxBS: num("cuda_graph_max_bs")}
	si.TPSize, si.DPSize, si.EPSize = num("tp_size"), num("dp_size"), num("ep_size")
	if b, ok := m["enable_dp_attention"].(bool); ok {
		si.DPAttention = &b
	}
	if mode, ok := m["disaggregation_mode"].(string); ok && (mode == "prefill" || mode == "decode") {
		si.Role = mode
	}
	return si, nil
}

// RecordedArgs merges the recorded servers of one role (prefill, decode or regular; a server
// with no role counts as regular) into one ServerArgs: each field as the servers report it.
// Servers that disagree on a field give the first one's value and a note naming the field.
func RecordedArgs(servers []ServerInfo, role string) (engine.ServerArgs, []string, bool) {
	var a engine.ServerArgs
	var notes []string
	found := false
	for _, s := range servers {
		r := s.Role
		if r == "" {
			r = "regular"
		}
		if r != role {
			continue
		}
		found = true
		for _, f := range []struct {
			name     string
			dst, src *int
		}{{"chunked_prefill_size", &a.ChunkedPrefillSize, &s.Args.ChunkedPrefillSize}, {"max_running_requests", &a.MaxRunningRequests, &s.Args.MaxRunningRequests},
			{"max_total_num_tokens", &a.MaxTotalTokens, &s.Args.MaxTotalTokens}, {"page_size", &a.PageSize, &s.Args.PageSize},
			{"cuda_graph_max_bs", &a.CUDAGraphMaxBS, &s.Args.CUDAGraphMaxBS}} {
			switch {
			case *f.src == 0:
			case *f.dst == 0:
				*f.dst = *f.src
			case *f.dst != *f.src:
				notes = append(notes, fmt.Sprintf("%s servers disagree on %s (%d, %d at %s): using %d", role, f.name, *f.dst, *f.src, s.URL, *f.dst))
			}
		}
	}
	return a, notes, found
}

// fill returns a with its unset fields taken from rec: what the user set explicitly wins.
func fill(a, rec engine.ServerArgs) engine.ServerArgs {
	for _, f := range []struct{ dst, src *int }{{&a.ChunkedPrefillSize, &rec.ChunkedPrefillSize}, {&a.MaxRunningRequests, &rec.MaxRunningRequests},
		{&a.MaxTotalTokens, &rec.MaxTotalTokens}, {&a.PageSize, &rec.PageSize}, {&a.CUDAGraphMaxBS, &rec.CUDAGraphMaxBS}} {
		if *f.dst == 0 {
			*f.dst = *f.src
		}
	}
	return a
}

// ApplyServerInfo puts the recorded servers' engine arguments into the cluster calibrate
// simulates (Args for regular servers, PrefillArgs and DecodeArgs in PD; fields already set
// there are kept) and the recorded KV capacity into the base profile (MaxTotalTokens: the
// decode servers' in PD, the regular ones' otherwise, else the prefill ones'), so that the
// fit moves speeds only and never absorbs a limit it could have read. It returns notes on
// what it took and on disagreements.
func ApplyServerInfo(cl Cluster, base engine.Profile, pd bool, servers []ServerInfo) (Cluster, engine.Profile, []string) {
	var notes []string
	describe := func(role string, a engine.ServerArgs) {
		var parts []string
		for _, f := range []struct {
			k string
			v int
		}{{"max_total_num_tokens", a.MaxTotalTokens}, {"chunked_prefill_size", a.ChunkedPrefillSize}, {"max_running_requests", a.MaxRunningRequests},
			{"page_size", a.PageSize}, {"cuda_graph_max_bs", a.CUDAGraphMaxBS}} {
			if f.v != 0 {
				parts = append(parts, fmt.Sprintf("%s %d", f.k, f.v))
			}
		}
		if len(parts) > 0 {
			notes = append(notes, fmt.Sprintf("%s servers, as recorded: %s", role, strings.Join(parts, ", ")))
		}
	}
	kv := 0
	take := func(role string) (engine.ServerArgs, bool) {
		a, n, ok := RecordedArgs(servers, role)
		notes = append(notes, n...)
		if ok {
			describe(role, a)
		}
		return a, ok
	}
	if pd {
		if a, ok := take("prefill"); ok {
			p := fill(cl.Args, a)
			if cl.PrefillArgs != nil {
				p = fill(*cl.PrefillArgs, a)
			}
			cl.PrefillArgs = &p
			kv = p.MaxTotalTokens
		}
		if a, ok := take("decode"); ok {
			d := fill(cl.Args, a)
			if cl.DecodeArgs != nil {
				d = fill(*cl.DecodeArgs, a)
			}
			cl.DecodeArgs = &d
			if d.MaxTotalTokens != 0 {
				kv = d.MaxTotalTokens
			}
		}
	} else if a, ok := take("regular"); ok {
		cl.Args = fill(cl.Args, a)
		kv = cl.Args.MaxTotalTokens
	}
	if kv > 0 {
		base.MaxTotalTokens = kv
	}
	return cl, base, notes
}

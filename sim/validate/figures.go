package validate

import (
	"math"
	"strings"

	"github.com/pdrouter/pdrouter/reports"
)

// Band returns the allowed relative error of a figure: pass when |sim ÷ published − 1| ≤ band.
//
// Issue 25 sets TTFT mean/median ±25 %, TPOT and ITL (mean/median) ±15 %, throughputs ±15 %.
// For figures it gives no band this package chooses: benchmark duration ±15 % (it is the
// number of requests over the request throughput), E2E mean/median ±25 % (TTFT plus the output
// tokens' TPOT: the looser of its parts), and P99s (TTFT, TPOT, ITL) ±50 % — a tail over a few
// hundred to a few thousand requests, one scheduling hiccup wide.
func Band(figure string) float64 {
	switch {
	case strings.HasSuffix(figure, "_p99"):
		return 0.50
	case strings.HasPrefix(figure, "ttft_ms_"), strings.HasPrefix(figure, "e2e_ms_"):
		return 0.25
	case strings.HasPrefix(figure, "tpot_ms_"), strings.HasPrefix(figure, "itl_ms_"):
		return 0.15
	}
	return 0.15 // throughputs (req/s, tok/s, per node, per GPU) and duration_s
}

// Result is one figure of one level: published, simulated, their ratio and whether it lies in
// its band. A figure the suite could not compute has Simulated and Ratio NaN, Pass false and
// Note saying why ("not expressible yet: unknown model …").
type Result struct {
	Set       string  `json:"set"`
	Level     string  `json:"level"`
	Figure    string  `json:"figure"`
	Published float64 `json:"published"`
	Simulated float64 `json:"simulated"`
	Ratio     float64 `json:"ratio"`
	Band      float64 `json:"band"`
	Pass      bool    `json:"pass"`
	Note      string  `json:"note,omitempty"`
	// Gap is why the model is known to miss this figure (the level's known_gaps), "" if not.
	Gap string `json:"gap,omitempty"`
	// Explained is why the figure may lie more than 2× off (the level's beyond_2x), "" if not.
	Explained string `json:"explained,omitempty"`
	// Model and GPU are the catalog names the set ran with ("" when not resolved); validated.json
	// matches them to the presets.
	Model string `json:"model,omitempty"`
	GPU   string `json:"gpu,omitempty"`
}

// Compare builds the result of one figure.
func Compare(set, level, figure string, published, simulated float64) Result {
	r := Result{Set: set, Level: level, Figure: figure, Published: published, Simulated: simulated, Band: Band(figure)}
	r.Ratio = math.NaN()
	if published != 0 {
		r.Ratio = simulated / published
	}
	r.Pass = InBand(r.Ratio, r.Band)
	return r
}

// InBand reports whether ratio lies within ±band of 1 (NaN never does).
func InBand(ratio, band float64) bool {
	return !math.IsNaN(ratio) && math.Abs(ratio-1) <= band+1e-12
}

// Failed returns the result of a figure that could not be computed.
func Failed(set, level, figure string, published float64, why string) Result {
	return Result{Set: set, Level: level, Figure: figure, Published: published, Simulated: math.NaN(),
		Ratio: math.NaN(), Band: Band(figure), Note: why}
}

// Scale turns whole-deployment figures into the published units: per-GPU and per-node figures
// divide by the GPUs or nodes they count.
type Scale struct {
	GPUs     int // GPUs of the measured pool (or deployment)
	Nodes    int // nodes of the measured pool
	AllNodes int // nodes of the whole deployment (…_per_node_all_nodes)
}

// LevelFigure computes figure from a sim level (results.json units). ok is false for a figure
// the level does not give.
func LevelFigure(lv reports.Level, figure string, sc Scale) (float64, bool) {
	stat := func(s reports.Stats, kind string) (float64, bool) {
		switch kind {
		case "mean":
			return s.Mean, true
		case "median":
			return s.P50, true
		case "p99":
			return s.P99, true
		}
		return 0, false
	}
	for _, m := range []struct {
		prefix string
		s      reports.Stats
	}{{"ttft_ms_", lv.TTFTMs}, {"tpot_ms_", lv.TPOTMs}, {"itl_ms_", lv.ITLMs}, {"e2e_ms_", lv.E2EMs}} {
		if kind, ok := strings.CutPrefix(figure, m.prefix); ok {
			return stat(m.s, kind)
		}
	}
	tp := lv.Throughput
	switch figure {
	case "duration_s":
		return lv.DurationS, true
	case "request_throughput_req_s":
		return tp.ReqS, true
	}
	return Throughput(figure, tp.InputTokS, tp.OutputTokS, sc)
}

// Throughput computes a token-throughput figure from the whole deployment's (or measured
// pool's) input and output tokens per second.
func Throughput(figure string, in, out float64, sc Scale) (float64, bool) {
	var v float64
	base, unit, _ := strings.Cut(figure, "_per_")
	switch base {
	case "input_tok_s":
		v = in
	case "output_tok_s":
		v = out
	case "total_tok_s":
		v = in + out
	default:
		return 0, false
	}
	div := 1
	switch unit {
	case "":
	case "gpu":
		div = sc.GPUs
	case "node":
		div = sc.Nodes
	case "node_all_nodes":
		div = sc.AllNodes
	default:
		return 0, false
	}
	if div <= 0 {
		return 0, false
	}
	return v / float64(div), true
}

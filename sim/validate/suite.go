package validate

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// SetReport is what running one set gave: its figures and the notes of the run (lenient
// parsing, inferred setup values, scaled-down runs).
type SetReport struct {
	Set     string
	Results []Result
	Notes   []string
}

// Run runs every set (in parallel on all cores, each run deterministic) and returns their
// reports in the order given.
func Run(sets []Set) []SetReport { return runAll(sets, nil) }

// Results flattens reports into their results.
func Results(reps []SetReport) []Result {
	var rs []Result
	for _, r := range reps {
		rs = append(rs, r.Results...)
	}
	return rs
}

// RunSet runs every level of one set.
func RunSet(s Set) SetReport { return RunSetWith(s, nil) }

// RunSetWith runs every level of one set with the GPU descriptions of gpus (by engine name)
// in place of the built-in ones (a fit's trial values).
func RunSetWith(s Set, gpus map[string]engine.GPU) SetReport { return runSet(s, gpus, nil) }

// runSet is RunSetWith with conv remembering the serving levels' conversations across runs
// (nil: generated for the run).
func runSet(s Set, gpus map[string]engine.GPU, conv *sim.Conversations) SetReport {
	rep := SetReport{Set: s.Name}
	notes := append([]string(nil), s.Parse...)
	fail := func(lv Level, why string) {
		for _, f := range lv.Figures {
			rep.Results = append(rep.Results, Failed(s.Name, levelLabel(lv), f.Name, f.Value, why))
		}
	}
	model, errM := resolveModel(s)
	gpu, errG := resolveGPU(s)
	if g, ok := gpus[gpu.Name]; ok && errG == nil {
		gpu = g
	}
	if errM != nil || errG != nil {
		var why []string
		for _, e := range []error{errM, errG} {
			if e != nil {
				why = append(why, e.Error())
			}
		}
		for _, lv := range s.Levels {
			fail(lv, notExpressible+strings.Join(why, ", "))
		}
		rep.Notes = notes
		return rep
	}
	for _, lv := range s.Levels {
		var lnotes []string
		card := levelCard(levelSetup(s, lv), lv, model, &lnotes)
		figs, err := runLevel(s, lv, card, gpu, conv, &lnotes)
		for _, n := range lnotes {
			notes = append(notes, levelLabel(lv)+": "+n)
		}
		if err != nil {
			fail(lv, notExpressible+err.Error())
			continue
		}
		for _, f := range lv.Figures {
			v, ok := figs[f.Name]
			if !ok {
				rep.Results = append(rep.Results, Failed(s.Name, levelLabel(lv), f.Name, f.Value, "figure not computed by the suite"))
				continue
			}
			r := Compare(s.Name, levelLabel(lv), f.Name, f.Value, v)
			r.Model, r.GPU, r.Gap, r.Explained = card.Name, gpu.Name, lv.KnownGaps[f.Name], lv.Beyond2x
			rep.Results = append(rep.Results, r)
		}
	}
	for _, lv := range s.Levels {
		byWhy := map[string][]string{}
		for _, f := range lv.Figures {
			if why := lv.KnownGaps[f.Name]; why != "" {
				byWhy[why] = append(byWhy[why], f.Name)
			}
		}
		for _, why := range slices.Sorted(maps.Keys(byWhy)) {
			notes = append(notes, fmt.Sprintf("%s: known gap (%s): %s", levelLabel(lv), strings.Join(byWhy[why], ", "), why))
		}
	}
	rep.Notes = dedupe(notes)
	return rep
}

// levelCard is the model card a level ran with: the set's, or its precision variant.
func levelCard(s Set, lv Level, model engine.ModelCard, notes *[]string) engine.ModelCard {
	prec := s.Precision
	if p, ok := lv.Load["precision"].(string); ok {
		prec = p
	}
	return applyPrecision(model, prec, notes)
}

// runLevel computes one level's figures with m, the level's model card (levelCard).
func runLevel(s Set, lv Level, m engine.ModelCard, gpu engine.GPU, conv *sim.Conversations, notes *[]string) (map[string]float64, error) {
	s = levelSetup(s, lv)
	if isServing(lv) {
		s.ServerArgs = pickVariant(s.ServerArgs, offline(lv)).(map[string]any)
	}
	phase, _ := lv.Load["phase"].(string)
	svs, err := serversFor(s, m, gpu, phase, notes)
	if err != nil {
		return nil, err
	}
	if isServing(lv) {
		return runServing(s, lv, svs, conv, notes)
	}
	allNodes := 0
	for _, sv := range svs {
		allNodes += sv.nodes
	}
	var sv server
	var rate float64
	var in, out float64
	switch phase {
	case "prefill":
		sv = svs[0]
		l, ok := firstNum(lv.Load["input_len"], s.Workload["input_len"])
		if !ok {
			return nil, fmt.Errorf("prefill phase without input_len")
		}
		rate, err = runPrefillPhase(sv, int(l), notes)
		in = rate * float64(sv.count)
	case "decode":
		sv = svs[len(svs)-1]
		dec, _ := s.Workload["decode"].(map[string]any)
		batch, _ := firstNum(lv.Load["batch_size_per_device"], lv.Load["decode_batch_size"],
			s.Workload["decode_batch_size"], dec["batch_size_per_device"])
		ctx, ok := firstNum(lv.Load["kv_cache_len"], dec["kv_cache_len"], lv.Load["input_len"], s.Workload["input_len"])
		if !ok {
			return nil, fmt.Errorf("decode phase without a context length")
		}
		rate, err = runDecodePhase(sv, int(batch), int(ctx), notes)
		out = rate * float64(sv.count)
	default:
		return nil, fmt.Errorf("phase %q is neither prefill nor decode", phase)
	}
	if err != nil {
		return nil, err
	}
	sc := Scale{GPUs: sv.gpus, Nodes: sv.nodes, AllNodes: allNodes}
	figs := map[string]float64{}
	for _, f := range lv.Figures {
		if v, ok := Throughput(f.Name, in, out, sc); ok {
			figs[f.Name] = v
		}
	}
	return figs, nil
}

// levelSetup returns the set as one level ran it: a level's gpus_per_instance (GB200 part II:
// prefill instances of 2 or 4 GPUs) sets the prefill pool's server size.
func levelSetup(s Set, lv Level) Set {
	if s.PD == nil {
		return s
	}
	if g, ok := Num(lv.Load["gpus_per_instance"]); ok && g >= 1 {
		pd := *s.PD
		n := int(g)
		pd.Prefill = Pool{Servers: 1, GPUs: n, TP: n, DP: n, EP: n, GPUsPerInstance: n}
		s.PD = &pd
	}
	return s
}

// offline reports whether a serving level sends every request at once (rate inf), what
// bench_serving READMEs call the offline benchmark.
func offline(lv Level) bool {
	r, ok := Num(lv.Load["request_rate"])
	return ok && math.IsInf(r, 1)
}

// pickVariant resolves server-argument strings that give an online and an offline value
// ("0.85 online (…); 0.88 offline (…)") to the one of the level's kind, in nested objects too.
func pickVariant(v any, offline bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = pickVariant(e, offline)
		}
		return out
	case string:
		want, other := "online", "offline"
		if offline {
			want, other = other, want
		}
		for _, seg := range strings.Split(x, ";") {
			if strings.Contains(seg, want) && !strings.Contains(strings.ReplaceAll(seg, want, ""), other) {
				return strings.TrimSpace(seg)
			}
		}
	}
	return v
}

func firstNum(vs ...any) (float64, bool) {
	for _, v := range vs {
		if f, ok := Num(v); ok && !math.IsInf(f, 0) {
			return f, true
		}
	}
	return 0, false
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Tally counts results.
type Tally struct {
	Sets, Figures, Pass, Outside, NotComputed int
	// Gaps counts figures outside their band that their level lists as known gaps; Closed
	// those inside it although listed (the entry is stale: they count as Outside too).
	Gaps, Closed int
	Worst        *Result // the computed figure farthest from its published value (by |ratio − 1| over band)
}

// Count tallies results.
func Count(rs []Result) Tally {
	var t Tally
	sets := map[string]bool{}
	for i, r := range rs {
		sets[r.Set] = true
		t.Figures++
		switch {
		case math.IsNaN(r.Ratio):
			t.NotComputed++
		case r.Pass && r.Gap != "":
			t.Closed++
			t.Outside++
		case r.Pass:
			t.Pass++
		case r.Gap != "":
			t.Gaps++
		default:
			t.Outside++
		}
		if !math.IsNaN(r.Ratio) && (t.Worst == nil || excess(r) > excess(*t.Worst)) {
			t.Worst = &rs[i]
		}
	}
	t.Sets = len(sets)
	return t
}

func excess(r Result) float64 { return math.Abs(r.Ratio-1) / r.Band }

// OK reports whether every figure was computed and lies within its band.
func (t Tally) OK() bool { return t.Outside == 0 && t.NotComputed == 0 }

// String is the one-line summary.
func (t Tally) String() string {
	s := fmt.Sprintf("%d figures of %d sets: %d within band, %d outside, %d not computed", t.Figures, t.Sets, t.Pass, t.Outside, t.NotComputed)
	if t.Gaps > 0 || t.Closed > 0 {
		s += fmt.Sprintf(", %d known gaps (outside their band, reasons in the notes)", t.Gaps)
	}
	if t.Closed > 0 {
		s += fmt.Sprintf(", %d known gaps now within band (remove their known_gaps entries)", t.Closed)
	}
	if w := t.Worst; w != nil {
		s += fmt.Sprintf("; farthest: %s %s %s %.2f× (band ±%.0f%%)", w.Set, w.Level, w.Figure, w.Ratio, 100*w.Band)
	}
	return s
}

// Summary is how well the suite validates one preset: the sets run with its model on its GPU
// and the worst figure among them.
type Summary struct {
	Sets        []string `json:"sets"`         // set names, sorted
	Figures     int      `json:"figures"`      // figures of those sets
	Outside     int      `json:"outside"`      // figures outside their band
	NotComputed int      `json:"not_computed"` // figures that could not be computed
	// WorstError is the largest |sim ÷ published − 1| among computed figures; WorstSet,
	// WorstFigure name it.
	WorstError  float64 `json:"worst_error"`
	WorstSet    string  `json:"worst_set"`
	WorstFigure string  `json:"worst_figure"`
}

// validatedJSON is, for each engine preset, the sets of the embedded suite that validate it
// (summarizeByPreset in presets_test.go), written by the test of docs/validation.md's table (go
// test ./sim/validate -run TestREADMETable -update) and checked current by it, so `router
// fakeworker profiles` can say which sets validate each preset without running them.
//
//go:embed validated.json
var validatedJSON []byte

// Validated returns, for each engine preset, the sets of the embedded suite that validate it,
// as last recorded (validated.json).
func Validated() (map[string]Summary, error) {
	var m map[string]Summary
	if err := json.Unmarshal(validatedJSON, &m); err != nil {
		return nil, fmt.Errorf("validate: validated.json: %w", err)
	}
	return m, nil
}

// FormatValidated renders, for each preset name, the sets that validate it and their worst
// error, or "unvalidated roofline", one line per preset.
func FormatValidated(names []string, byPreset map[string]Summary) string {
	var b strings.Builder
	for _, n := range names {
		s, ok := byPreset[n]
		switch {
		case !ok:
			fmt.Fprintf(&b, "%-34s unvalidated roofline\n", n)
		case s.Figures == s.NotComputed:
			fmt.Fprintf(&b, "%-34s %s: no figure computed\n", n, strings.Join(s.Sets, ", "))
		default:
			fmt.Fprintf(&b, "%-34s %s: worst error %.0f %% (%s %s), %d of %d figures outside their band\n", n, strings.Join(s.Sets, ", "),
				100*s.WorstError, s.WorstSet, s.WorstFigure, s.Outside, s.Figures)
		}
	}
	return b.String()
}

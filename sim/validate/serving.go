package validate

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// benchServingDefaultPrompts is bench_serving's --num-prompts default (sglang
// python/sglang/bench_serving.py argument parser).
const benchServingDefaultPrompts = 1000

// inferred holds setup values a set's source does not state and its figures imply, by set
// name; each says how it was inferred.
var inferred = map[string]struct {
	rangeRatio *float64
	numPrompts int
	why        string
}{
	// PR #4880 states neither --random-range-ratio nor --num-prompts (its comment of
	// 2025-04-09 gives only the model, TP 4, random_input_len 8192 and random_output_len 512,
	// re-read 2026-11-25). Its figures imply a range ratio near 0.6 over a long run: at the
	// 1 req/s Poisson rate a run of many requests outputs the mean output length per second,
	// and 407.59 tok/s ≈ 512·(1 + 0.6)/2 = 409.6 (bench_serving draws lengths uniform in
	// [L·ratio, L]); total/output 7,084.46/407.59 = 17.4 keeps the 8192:512 proportion (+2 %).
	// With the ratio left at bench_serving's default 0 the mean output would be 256 and 407.59
	// tok/s impossible at 1 req/s. num_prompts: bench_serving's default. (Read as range ratio 1
	// over 20 prompts until 2026-11-25: that reading put output and total tok/s at ×1.18 and
	// ×1.16 and P99 TTFT at ×0.44; this one puts every figure within its band.)
	"qwen25-7b-gptq-a10-pd-1p1d-pr4880": {rangeRatio: ptr(0.6), numPrompts: benchServingDefaultPrompts,
		why: "range ratio 0.6 inferred from the published output rate at 1 req/s, num_prompts bench_serving's default (neither stated)"},
}

func ptr[T any](v T) *T { return &v }

// isServing reports whether a level is a serving measurement (not phase-isolated).
func isServing(lv Level) bool {
	_, phase := lv.Load["phase"]
	return !phase
}

// levelLabel names a level in the table.
func levelLabel(lv Level) string {
	l := lv.Load
	var parts []string
	if ph, ok := l["phase"].(string); ok {
		parts = append(parts, ph)
		for _, k := range []struct{ key, short string }{{"input_len", "in"}, {"batch_size_per_device", "bs"},
			{"decode_batch_size", "bs"}, {"kv_cache_len", "kv"}, {"nodes", "nodes"}, {"gpus_per_instance", "gpus"}} {
			if f, ok := Num(l[k.key]); ok {
				parts = append(parts, k.short+strconv.FormatFloat(f, 'g', -1, 64))
			}
		}
		if p, ok := l["precision"].(string); ok {
			parts = append(parts, firstWord(p))
		}
		return strings.Join(parts, " ")
	}
	if f, ok := Num(l["request_rate"]); ok {
		if math.IsInf(f, 1) {
			parts = append(parts, "rate inf")
		} else {
			parts = append(parts, "rate "+strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	if f, ok := Num(l["concurrency"]); ok {
		parts = append(parts, "c"+strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f, ok := Num(l["num_prompts"]); ok {
		parts = append(parts, "n"+strconv.FormatFloat(f, 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

// server is one side of a deployment as the suite runs it.
type server struct {
	role  string // "" (unified), "prefill", "decode"
	count int    // servers of this role
	par   engine.Parallelism
	given engine.ServerArgs // as the set's command line gave them (server-wide)
	// reserved is the decode side's per-room KV reserve the set's environment sets
	// (SGLANG_HACK_PD_DECODE_NUM_RESERVED_DECODE_TOKENS or SGLANG_NUM_RESERVED_DECODE_TOKENS);
	// 0: the engine's default.
	reserved int
	args     engine.ServerArgs // per rank, as the server runs with them (engine.BuildServer)
	model    engine.ModelCard
	gpu      engine.GPU
	profile  engine.Profile
	gpus     int // GPUs of the role's pool (all its servers)
	nodes    int // nodes of the role's pool
}

// sglangSizes are SGLang's --tp-size, --dp-size, --ep-size of a server of par (without DP
// attention SGLang's tp_size counts one replica's GPUs; engine.SGLangParallelism inverts it).
func sglangSizes(par engine.Parallelism) (tp, dp, ep int) {
	par = par.WithDefaults()
	if par.DPAttention {
		return par.TP, par.DP, par.EP
	}
	return par.TP / par.DP, par.DP, par.EP
}

// serversFor is servers for a level that measures only the pool of role need (a phase-isolated
// level: "prefill" or "decode"; "" for all): the other pool keeps its size (GPUs, nodes) but
// gets no profile, so a pool the simulator cannot express does not hide the other's figure.
func serversFor(s Set, m engine.ModelCard, g engine.GPU, need string, notes *[]string) ([]server, error) {
	gpn := s.GPUsPerServer
	if gpn == 0 {
		gpn = 8
	}
	mk := func(role string, count, tp, dp, ep, gpus, nodes int) (server, error) {
		if tp == 0 {
			tp = max(gpus/max(count, 1), 1)
		}
		if dp == 0 {
			dp = 1
			if s.DPAttention {
				dp = tp
			}
		}
		if ep == 0 && s.DPAttention {
			ep = tp
		}
		raw := roleArgs(s, role)
		par := parallelism(tp, dp, ep, s.DPAttention, nvlinkDomain(g, gpn), raw)
		given := serverArgs(raw, notes)
		name := "validate-" + s.Name
		if role != "" {
			name += "-" + role
		}
		var prof engine.Profile
		var args engine.ServerArgs
		if need == "" || role == "" || role == need {
			var err error
			if prof, args, err = engine.BuildServer(name, m, g, par, given); err != nil {
				return server{}, err
			}
		}
		if gpus == 0 {
			gpus = count * par.TP
		}
		if nodes == 0 {
			nodes = max((gpus+gpn-1)/gpn, 1)
		}
		return server{role: role, count: count, par: par, given: given, args: args, reserved: reservedDecodeTokens(raw, notes),
			model: m, gpu: g, profile: prof, gpus: gpus, nodes: nodes}, nil
	}
	if s.PD == nil {
		sv, err := mk("", 1, s.TP, s.DP, s.EP, 0, 0)
		return []server{sv}, err
	}
	var out []server
	for _, p := range []struct {
		role string
		pool Pool
	}{{"prefill", s.PD.Prefill}, {"decode", s.PD.Decode}} {
		count := max(p.pool.Servers, 1)
		tp := p.pool.TP
		if tp == 0 && p.pool.GPUsPerInstance > 0 {
			tp = p.pool.GPUsPerInstance
		}
		sv, err := mk(p.role, count, tp, p.pool.DP, p.pool.EP, p.pool.GPUs, p.pool.Nodes)
		if err != nil {
			return nil, fmt.Errorf("%s pool: %w", p.role, err)
		}
		out = append(out, sv)
	}
	return out, nil
}

// runServing runs one serving level through sim.Run and returns its figures.
func runServing(s Set, lv Level, svs []server, conv *sim.Conversations, notes *[]string) (map[string]float64, error) {
	w := workloads.DefaultParams()
	w.API, w.Seed = workloads.APIGenerate, 1 // bench_serving's sglang backend posts /generate
	inf := inferred[s.Name]
	if inf.why != "" {
		*notes = append(*notes, inf.why)
	}
	dataset := strings.ToLower(firstWord(str(s.Workload["dataset"])))
	switch dataset {
	case "sharegpt":
		w.Workload = workloads.WorkloadShareGPT
	case "random":
		w.Workload = workloads.WorkloadRandom
		in, ok1 := Num(s.Workload["input_len"])
		out, ok2 := Num(s.Workload["output_len"])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("random workload without input_len/output_len")
		}
		w.InputLen, w.OutputLen = int(in), int(out)
		// bench_serving's --random-range-ratio defaulted to 0 (lengths uniform in [1, L]) in
		// the versions of these sets; a set says otherwise in range_ratio.
		w.RangeRatio = 0
		if r, ok := Num(s.Workload["range_ratio"]); ok && r >= 0 && r <= 1 {
			w.RangeRatio = r
		} else if inf.rangeRatio != nil {
			w.RangeRatio = *inf.rangeRatio
		} else {
			*notes = append(*notes, "range ratio not stated: bench_serving's default 0")
		}
	default:
		return nil, fmt.Errorf("dataset %q has no workload here", str(s.Workload["dataset"]))
	}
	n := 0
	if f, ok := Num(lv.Load["num_prompts"]); ok {
		n = int(f)
	} else if f, ok := s.Workload["num_prompts"].(float64); ok {
		n = int(f)
	} else if inf.numPrompts > 0 {
		n = inf.numPrompts
	} else {
		n = benchServingDefaultPrompts
		*notes = append(*notes, fmt.Sprintf("num_prompts not stated: bench_serving's default %d", n))
	}
	w.NumPrompts = n
	if err := pinTokens(&w, lv, notes); err != nil {
		return nil, err
	}

	l := workloads.DefaultLoadParams()
	conc, hasConc := Num(lv.Load["concurrency"])
	if !hasConc {
		conc, hasConc = Num(s.Workload["max_concurrency"])
	}
	rate, hasRate := Num(lv.Load["request_rate"])
	if !hasRate {
		rate, hasRate = Num(s.Workload["request_rate"])
	}
	switch {
	case hasConc && (!hasRate || math.IsInf(rate, 1)):
		// bench_serving with --max-concurrency and rate inf keeps that many requests in
		// flight: a closed loop.
		l.Concurrency = []int{int(conc)}
	case hasRate:
		l.Rates = []float64{rate} // Poisson (bench_serving's default), +Inf = all at once
	default:
		l.Rates = []float64{math.Inf(1)}
	}

	// The cluster is what an operator would give `router sim`: the model and GPU with SGLang's
	// sizes and engine arguments (--model-path, --gpu, --tp-size, ...), so the suite checks
	// the path operators use.
	rc := router.DefaultConfig()
	rc.Policy = router.PolicyRoundRobin
	first := svs[0]
	cl := sim.Cluster{ModelPath: first.model.Name, GPU: first.gpu.Name, DPAttention: first.par.DPAttention,
		TwoBatchOverlap: first.par.TwoBatchOverlap, DeepEPMode: first.par.DeepEPMode}
	// disable_overlap_schedule: the set's SGLang ran without the overlap scheduler (the flag,
	// or a release before v0.4, which had none): sim's --disable-overlap-schedule, which
	// applies to every server of the cluster.
	for _, sv := range svs {
		if truthy(roleArgs(s, sv.role)["disable_overlap_schedule"]) {
			cl.DisableOverlap = true
		}
		if truthy(roleArgs(s, sv.role)["enable_mixed_chunk"]) { // --enable-mixed-chunk, likewise
			cl.MixedChunk = true
		}
	}
	if first.par.DPAttention != svs[len(svs)-1].par.DPAttention {
		return nil, fmt.Errorf("DP attention differs between the pools: sim sets --enable-dp-attention for every server")
	}
	if len(svs) == 1 {
		cl.Regular, cl.Args = 1, first.given
		cl.TPSize, cl.DPSize, cl.EPSize = sglangSizes(first.par)
	} else {
		pre, dec := svs[0], svs[1]
		rc.PDDisaggregation = true
		cl.Prefill, cl.Decode = pre.count, dec.count
		cl.PrefillTPSize, cl.PrefillDPSize, cl.PrefillEPSize = sglangSizes(pre.par)
		cl.DecodeTPSize, cl.DecodeDPSize, cl.DecodeEPSize = sglangSizes(dec.par)
		cl.PrefillGPU, cl.DecodeGPU = pre.gpu.Name, dec.gpu.Name
		cl.PrefillArgs, cl.DecodeArgs = ptr(pre.given), ptr(dec.given)
	}
	cl.GPUs = map[string]engine.GPU{} // the GPUs as resolved (RunSetWith's overrides)
	for _, sv := range svs {
		cl.GPUs[sv.gpu.Name] = sv.gpu
	}
	res, err := sim.Run(sim.Config{Cluster: cl, Router: rc, Workload: w, Load: l, Conversations: conv})
	if err != nil {
		return nil, err
	}
	rl := res.Results.Levels[0]
	if rl.Errors > 0 {
		*notes = append(*notes, fmt.Sprintf("%d of %d requests failed in the sim", rl.Errors, rl.Requests))
	}
	gpus, nodes, all := 0, 0, 0
	for _, sv := range svs {
		gpus += sv.gpus
		nodes += sv.nodes
	}
	all = nodes
	figs := map[string]float64{}
	for _, f := range lv.Figures {
		if v, ok := LevelFigure(rl, f.Name, Scale{GPUs: gpus, Nodes: nodes, AllNodes: all}); ok {
			figs[f.Name] = v
		}
	}
	return figs, nil
}

// pinTokens makes a workload's prompt and output lengths add up to the level's published
// totals when its load gives them: output_tokens, the output tokens its completed requests
// generated in all, and input_tokens, their prompt tokens ("Total input tokens" and "Total
// generated tokens" of a bench_serving block). A run without --ignore-eos stops a request at
// the model's end-of-sequence token, well before output_len (the dstack PD sets: ~620 of
// 2,048, ~62 of 128), and the simulator, which has no EOS, would otherwise generate
// output_len every time; a level of a few prompts (bench_serving's 10 at concurrency 1) draws
// lengths whose sum is its own, not the sim's draw of the same distribution (the
// sgl-cookbook's 10 random prompts of up to 8,000 tokens: 4,194 on average in theirs, 4,482
// in the sim's); and ShareGPT through another tokenizer, or a bench_serving without the
// 1,024-token prompt filter (sglang's since 2025), sends other lengths than the generated
// ShareGPT's (the cookbook's gpt-oss and Kimi-K2 sets: 297 prompt tokens on average, not 224).
// The level's own draw (workloads.RandomLengths or ShareGPTScaled, with the level's seed) is
// made to sum to the totals, to within rounding: a random workload's lengths stay uniform in
// [L·r, L] (bench_serving's --random-range-ratio r) with L chosen; a generated ShareGPT's are
// scaled (--sharegpt-prompt-scale, --sharegpt-output-scale).
func pinTokens(w *workloads.Params, lv Level, notes *[]string) error {
	in, pinIn := Num(lv.Load["input_tokens"])
	out, pinOut := Num(lv.Load["output_tokens"])
	if !pinIn && !pinOut {
		return nil
	}
	sharegpt := w.Workload == workloads.WorkloadShareGPT && w.DatasetPath == ""
	for _, t := range []struct {
		name  string
		total float64
		pin   bool
	}{{"input_tokens", in, pinIn}, {"output_tokens", out, pinOut}} {
		if t.pin && (w.Workload != workloads.WorkloadRandom && !sharegpt || t.total < float64(w.NumPrompts)) {
			return fmt.Errorf("load.%s %g: only for a random or generated sharegpt workload, at least one token per prompt (%d)", t.name, t.total, w.NumPrompts)
		}
	}
	p := workloads.DefaultLoadParams().LevelParams(*w, 0) // the level's seed, as sim.Run draws it
	lengths := workloads.RandomLengths
	if sharegpt {
		lengths = workloads.ShareGPTScaled
	}
	sums := func(p workloads.Params) (float64, float64) {
		var a, b float64
		for i := range p.NumPrompts {
			x, y := lengths(p, i)
			a, b = a+float64(x), b+float64(y)
		}
		return a, b
	}
	// The draw's sum grows about linearly with L or the scale (a fixed uniform variate scaled
	// to [L·r, L]; a fixed ShareGPT length times the scale): a few proportional steps, the
	// closest point kept.
	best, bestErr := p, math.Inf(1)
	for range 8 {
		a, b := sums(p)
		e := 0.0
		if pinIn {
			e += math.Abs(a/in - 1)
		}
		if pinOut {
			e += math.Abs(b/out - 1)
		}
		if e < bestErr {
			best, bestErr = p, e
		}
		if e < 1e-4 {
			break
		}
		switch {
		case sharegpt:
			if pinIn {
				p.ShareGPTPromptScale *= in / a
			}
			if pinOut {
				p.ShareGPTOutputScale *= out / b
			}
		default:
			if pinIn {
				p.InputLen = max(int(math.Round(float64(p.InputLen)*in/a)), 1)
			}
			if pinOut {
				p.OutputLen = max(int(math.Round(float64(p.OutputLen)*out/b)), 1)
			}
		}
	}
	w.InputLen, w.OutputLen = best.InputLen, best.OutputLen
	w.ShareGPTPromptScale, w.ShareGPTOutputScale = best.ShareGPTPromptScale, best.ShareGPTOutputScale
	n := float64(w.NumPrompts)
	if pinIn {
		*notes = append(*notes, fmt.Sprintf("%s: prompt lengths at the published mean %.0f tokens", levelLabel(lv), in/n))
	}
	if pinOut {
		*notes = append(*notes, fmt.Sprintf("%s: output lengths at the published mean %.0f tokens", levelLabel(lv), out/n))
	}
	return nil
}

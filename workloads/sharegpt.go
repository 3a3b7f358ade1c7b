package workloads

import (
	"math"
	"math/rand/v2"
	"strconv"
)

// The ShareGPT-like workload (--workload sharegpt) stands in for sglang bench_serving's default
// dataset without the dataset itself (nothing is downloaded): --num-prompts single-turn
// sessions whose prompt and output lengths follow what bench_serving sends from
// ShareGPT_V3_unfiltered_cleaned_split.json with a Llama-3 tokenizer.
//
// bench_serving (sglang python/sglang/bench_serving.py, sample_sharegpt_requests) takes the
// first two turns of each conversation, tokenizes them, uses the reply's length as the output
// length, and skips a pair whose prompt or reply is shorter than 4 tokens, whose prompt is longer
// than 1,024 tokens, or whose prompt + reply is longer than 2,048 tokens. Here each length pair
// is drawn from two independent log-normal distributions and redrawn until it passes the same
// filter, so the sample is the truncated distribution bench_serving's filter leaves.
//
// The log-normal locations are pinned to published totals (the widths are assumptions: ShareGPT
// lengths are heavy-tailed, a few times the median at the mean):
//   - mean prompt 224.0 tokens: sglang issue #2805 (2025-01-09, Llama-3.1-8B-Instruct,
//     bench_serving --dataset-name sharegpt): "Total input tokens: 369103" over "Successful
//     requests: 1648";
//   - mean output 194.35 tokens: sglang benchmark/benchmark_vllm_060/README.md, offline
//     Llama-3.1-8B-Instruct on 1×A100 over 5,000 ShareGPT prompts: 4,281.51 output tok/s at
//     22.03 req/s.
//
// With σ = 1.3 (prompt) and 1.0 (output) the locations below give those truncated means
// (TestShareGPTLengthsMatchPublishedMeans checks them on 20,000 draws).
const (
	shareGPTMeanPrompt = 224.0  // target mean prompt tokens (see above)
	shareGPTMeanOutput = 194.35 // target mean output tokens (see above)

	shareGPTPromptMu    = 5.0886
	shareGPTPromptSigma = 1.3
	shareGPTOutputMu    = 4.8145
	shareGPTOutputSigma = 1.0

	// bench_serving's filter (sample_sharegpt_requests).
	shareGPTMinLen       = 4
	shareGPTMaxPrompt    = 1024
	shareGPTMaxPromptOut = 2048
)

// ShareGPTLengths returns the prompt and output lengths of request i of a sharegpt workload
// seeded seed (deterministic).
func ShareGPTLengths(seed uint64, i int) (prompt, output int) {
	r := lengthRand(seed, uint64(i), 1<<33)
	return shareGPTDraw(r)
}

// shareGPTDraw draws one (prompt, output) pair that passes bench_serving's filter.
func shareGPTDraw(r *rand.Rand) (int, int) {
	for {
		in := int(math.Round(math.Exp(shareGPTPromptMu + shareGPTPromptSigma*r.NormFloat64())))
		out := int(math.Round(math.Exp(shareGPTOutputMu + shareGPTOutputSigma*r.NormFloat64())))
		if in < shareGPTMinLen || out < shareGPTMinLen || in > shareGPTMaxPrompt || in+out > shareGPTMaxPromptOut {
			continue
		}
		return in, out
	}
}

// ShareGPTScaled is ShareGPTLengths times p's --sharegpt-prompt-scale and
// --sharegpt-output-scale (rounded, at least 1): the lengths of request i of p's generated
// sharegpt workload.
func ShareGPTScaled(p Params, i int) (prompt, output int) {
	in, out := ShareGPTLengths(p.Seed, i)
	scale := func(n int, f float64) int { return max(int(math.Round(float64(n)*f)), 1) }
	return scale(in, p.ShareGPTPromptScale), scale(out, p.ShareGPTOutputScale)
}

// newShareGPT: --num-prompts single-turn sessions of generated text with ShareGPT-like prompt
// and output lengths (ShareGPTScaled); no system prompt, so no two prompts share a prefix.
func newShareGPT(p Params) Source {
	return &genSource{n: p.NumPrompts, make: func(i int) *Session {
		in, out := ShareGPTScaled(p, i)
		q := genText(p.Seed, domShareGPT, uint64(i), 0, in)
		return newSession("sharegpt-"+strconv.Itoa(i), p.form(), nil, 1, singleTurn(q, in, out))
	}}
}

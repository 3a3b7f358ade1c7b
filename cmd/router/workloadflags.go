package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/workloads"
)

// addWorkloadFlags registers the workload options (SPEC §7, plus the request form --api,
// --model, --seed) and the load options (SPEC §5) on fs, bound to p and l. p and l should hold
// workloads.DefaultParams() and workloads.DefaultLoadParams(): their values are the flags'
// defaults. `router sim` and `router bench` both call it, so the two commands take the same
// flags; call validateWorkloadFlags after parsing. --seed is skipped when fs already has it
// (`router sim` also registers the router's flags, whose Config has a seed): the caller then
// copies that seed into p.Seed.
func addWorkloadFlags(fs *pflag.FlagSet, p *workloads.Params, l *workloads.LoadParams) {
	// request form
	fs.StringVar(&p.Workload, "workload", p.Workload,
		"workload: "+strings.Join(workloads.Workloads, ", "))
	fs.Var((*apiValue)(&p.API), "api", "request form: chat (/v1/chat/completions), completions (/v1/completions) or generate (/generate)")
	fs.StringVar(&p.Model, "model", p.Model, `the "model" field of chat and completions requests (bench without --model: the first model the target's /v1/models lists)`)
	if fs.Lookup("seed") == nil {
		seedFlag(fs, cmdBench, &p.Seed)
	}
	fs.BoolVar(&p.IgnoreEOS, "ignore-eos", p.IgnoreEOS, "send ignore_eos so servers generate exactly the requested output tokens")

	// traces
	fs.StringVar(&p.TraceFile, "trace-file", p.TraceFile, "trace to replay: Mooncake JSONL (--workload mooncake) or Azure CSV (--workload azure)")
	fs.Float64Var(&p.TimeScale, "time-scale", p.TimeScale, "multiply trace timestamps by this factor (0.5 = replay twice as fast)")

	// datasets
	fs.StringVar(&p.DatasetPath, "dataset-path", p.DatasetPath, "prompts from a file, one single-turn request per record: --workload sharegpt reads ShareGPT JSON ([{\"conversations\": [{\"from\": \"human\", \"value\": PROMPT}, {\"from\": \"gpt\", \"value\": REPLY}]}, …]; the reply's length is the output length); --workload custom reads JSON Lines of {\"prompt\": PROMPT, \"output_len\": N} (N defaults to --output-len); either file may use either form")

	fs.Float64Var(&p.ShareGPTPromptScale, "sharegpt-prompt-scale", p.ShareGPTPromptScale, "sharegpt without --dataset-path: multiply each generated prompt length by this (the lengths follow bench_serving's ShareGPT sample with a Llama-3 tokenizer and its <= 1,024-token prompt filter; another tokenizer, or a bench_serving without that filter, sends other lengths)")
	fs.Float64Var(&p.ShareGPTOutputScale, "sharegpt-output-scale", p.ShareGPTOutputScale, "sharegpt without --dataset-path: multiply each generated output length by this")

	// multiturn
	fs.IntVar(&p.Conversations, "conversations", p.Conversations, "multiturn: number of conversations")
	fs.IntVar(&p.Turns, "turns", p.Turns, "multiturn: turns per conversation; each turn resends the whole history")
	fs.IntVar(&p.SystemPromptLen, "system-prompt-len", p.SystemPromptLen, "multiturn: system prompt length in tokens (0 = none)")
	fs.IntVar(&p.SharedSystemPrompts, "shared-system-prompts", p.SharedSystemPrompts, "multiturn: number of distinct system prompts; conversation i uses prompt i mod this")
	fs.IntVar(&p.QuestionLen, "question-len", p.QuestionLen, "multiturn: tokens of each new user question")
	fs.DurationVar(&p.ThinkTime, "think-time", p.ThinkTime, "multiturn: pause between a reply and the conversation's next turn (the client keeps its slot)")
	fs.IntVar(&p.OutputLen, "output-len", p.OutputLen, "multiturn, random: output tokens per request (max_tokens)")
	fs.Float64Var(&p.RangeRatio, "range-ratio", p.RangeRatio, "multiturn, random: lengths uniform in [max(1, L*ratio), L]; 1 = fixed (sglang's random uses 0)")

	// random
	fs.IntVar(&p.InputLen, "input-len", p.InputLen, "random: prompt tokens")
	fs.IntVar(&p.NumPrompts, "num-prompts", p.NumPrompts, "random, sharegpt, custom: number of requests (of a --dataset-path: at most)")

	// gsp
	fs.IntVar(&p.GSPNumGroups, "gsp-num-groups", p.GSPNumGroups, "gsp: number of groups, each with its own system prompt")
	fs.IntVar(&p.GSPPromptsPerGroup, "gsp-prompts-per-group", p.GSPPromptsPerGroup, "gsp: requests per group")
	fs.IntVar(&p.GSPSystemPromptLen, "gsp-system-prompt-len", p.GSPSystemPromptLen, "gsp: system prompt tokens")
	fs.IntVar(&p.GSPQuestionLen, "gsp-question-len", p.GSPQuestionLen, "gsp: question tokens")
	fs.IntVar(&p.GSPOutputLen, "gsp-output-len", p.GSPOutputLen, "gsp: output tokens per request")
	fs.BoolVar(&p.GSPOrdered, "gsp-ordered", p.GSPOrdered, "gsp: send group by group instead of shuffled")

	// long-system-prompt
	fs.IntVar(&p.LSPPrompts, "lsp-prompts", p.LSPPrompts, "long-system-prompt: number of requests")
	fs.IntVar(&p.LSPSystemPromptLen, "lsp-system-prompt-len", p.LSPSystemPromptLen, "long-system-prompt: tokens of the one shared system prompt")
	fs.IntVar(&p.LSPQuestionLen, "lsp-question-len", p.LSPQuestionLen, "long-system-prompt: question tokens")
	fs.IntVar(&p.LSPOutputLen, "lsp-output-len", p.LSPOutputLen, "long-system-prompt: output tokens per request")

	// cache-pressure
	fs.IntVar(&p.CPGroups, "cp-groups", p.CPGroups, "cache-pressure: groups, each with its own long prefix (many groups sharing long prefixes whose working set, groups × (prefix + prompts per group × question) tokens, is ~70 % of the KV of 8 servers of 320K tokens: llm-d's precise prefix-cache benchmark's shape)")
	fs.IntVar(&p.CPPromptsPerGroup, "cp-prompts-per-group", p.CPPromptsPerGroup, "cache-pressure: distinct questions per group; each request draws one of the groups' prompts at random, so prompts recur")
	fs.IntVar(&p.CPPrefixLen, "cp-prefix-len", p.CPPrefixLen, "cache-pressure: tokens of each group's shared prefix (a system message in chat)")
	fs.IntVar(&p.CPQuestionLen, "cp-question-len", p.CPQuestionLen, "cache-pressure: question tokens")
	fs.IntVar(&p.CPOutputLen, "cp-output-len", p.CPOutputLen, "cache-pressure: output tokens per request")
	fs.IntVar(&p.CPRequests, "cp-requests", p.CPRequests, "cache-pressure: number of requests")

	// hotspot
	fs.IntVar(&p.HSRequests, "hs-requests", p.HSRequests, "hotspot: number of requests, in periods of --hs-gap cold requests then a burst of --hs-burst requests of one hot group (at --rate R a burst puts R req/s on one prefix: cache_aware without load signals piles it onto the worker that caches it)")
	fs.IntVar(&p.HSHotGroups, "hs-hot-groups", p.HSHotGroups, "hotspot: hot prefix groups; each burst draws one")
	fs.IntVar(&p.HSPrefixLen, "hs-prefix-len", p.HSPrefixLen, "hotspot: tokens of each hot group's shared system prompt")
	fs.IntVar(&p.HSQuestionLen, "hs-question-len", p.HSQuestionLen, "hotspot: tokens of a hot request's own question (uncached)")
	fs.IntVar(&p.HSColdLen, "hs-cold-len", p.HSColdLen, "hotspot: tokens of a cold request's prompt (shares no prefix)")
	fs.IntVar(&p.HSOutputLen, "hs-output-len", p.HSOutputLen, "hotspot: output tokens per request")
	fs.IntVar(&p.HSBurst, "hs-burst", p.HSBurst, "hotspot: requests per burst of one hot group")
	fs.IntVar(&p.HSGap, "hs-gap", p.HSGap, "hotspot: cold requests before each burst (0: bursts only)")

	// load
	fs.IntSliceVar(&l.Concurrency, "concurrency", l.Concurrency, "closed-loop levels: comma-separated client counts, e.g. 1,2,4,8 (with neither --concurrency nor --rate: 1 client; traces replay their timestamps)")
	fs.Var((*rateList)(&l.Rates), "rate", "open-loop levels: comma-separated requests/s, or inf (every request at t=0)")
	fs.StringVar(&l.Arrival, "arrival", l.Arrival, "open-loop arrival process: poisson, constant, gamma, or trace (the trace's own timestamps)")
	fs.Float64Var(&l.Burstiness, "burstiness", l.Burstiness, "gamma arrivals: shape; 1 = Poisson, <1 burstier, >1 more regular (mean rate unchanged)")
	fs.IntVar(&l.Requests, "requests", l.Requests, "recorded requests per level (0 = until the workload ends)")
	fs.DurationVar(&l.Duration, "duration", l.Duration, "bound on each level's duration (0 = none)")
	fs.IntVar(&l.Warmup, "warmup", l.Warmup, "unrecorded warm-up requests before each level")
	fs.BoolVar(&l.FlushCache, "flush-cache", l.FlushCache, "flush router and worker caches between levels")
	fs.BoolVar(&l.SameConversations, "same-conversations", l.SameConversations, "replay the same conversations at every level (default: each level draws its own, so caches hold nothing of earlier levels' prompts)")
}

// validateWorkloadFlags checks both structs; errors name the flag at fault.
func validateWorkloadFlags(p workloads.Params, l workloads.LoadParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return l.Validate(p.IsTrace())
}

// apiValue binds --api, rejecting unknown forms while parsing.
type apiValue workloads.API

func (a *apiValue) String() string { return string(*a) }
func (a *apiValue) Type() string   { return "chat|completions|generate" }
func (a *apiValue) Set(s string) error {
	api, err := workloads.ParseAPI(s)
	if err != nil {
		return fmt.Errorf("not one of chat, completions, generate")
	}
	*a = apiValue(api)
	return nil
}

// rateList binds --rate: comma-separated rates in requests/s, "inf" for a burst. Repeating the
// flag appends.
type rateList []float64

func (r *rateList) String() string {
	if len(*r) == 0 {
		return ""
	}
	parts := make([]string, len(*r))
	for i, v := range *r {
		parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (r *rateList) Type() string { return "R|inf,..." }

func (r *rateList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if strings.EqualFold(part, "inf") {
			*r = append(*r, math.Inf(1))
			continue
		}
		v, err := strconv.ParseFloat(part, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%q is not a positive rate or inf", part)
		}
		*r = append(*r, v)
	}
	return nil
}

// printLevelWarnings writes reports.LevelWarnings of every level of res on w (stderr), and a
// warning for each level that recorded fewer requests than --requests asked for although no
// --duration cut it: the workload ran out of requests.
func printLevelWarnings(w io.Writer, res *reports.Results, p workloads.Params, l workloads.LoadParams) {
	for i := range res.Levels {
		lv := &res.Levels[i]
		for _, msg := range reports.LevelWarnings(lv, p.ConversationCount()) {
			fmt.Fprintln(w, "warning: "+msg)
		}
		if l.Requests > 0 && l.Duration == 0 && lv.Requests < l.Requests {
			fmt.Fprintf(w, "warning: level %s: recorded %d requests of the --requests %d: the %s workload ran out (%s)\n",
				lv.Label, lv.Requests, l.Requests, p.Workload, moreRequestsHint(p))
		}
	}
}

// fitRequests grows a generated workload so that each level holds the --warmup + --requests
// requests asked for: more conversations (multiturn), groups (gsp) or prompts (random,
// sharegpt, long-system-prompt, cache-pressure, hotspot) of the same shape, drawn from the same seed (the first ones
// are the ones a smaller run sends). It returns a note for stderr saying what it drew, or ""
// when the workload already holds enough or cannot grow (traces and --dataset-path files hold
// what they hold; printLevelWarnings then says the level ran short).
func fitRequests(p *workloads.Params, l workloads.LoadParams) string {
	if l.Requests == 0 {
		return ""
	}
	need := l.Warmup + l.Requests
	held := p.ConversationCount()
	ceil := func(a, b int) int { return (a + b - 1) / b }
	switch p.Workload {
	case workloads.WorkloadMultiTurn:
		if p.Conversations*p.Turns >= need {
			return ""
		}
		p.Conversations = ceil(need, p.Turns)
		return fmt.Sprintf("--requests %d (+ --warmup %d): the multiturn workload holds %d conversations × %d turns; drawing %d conversations",
			l.Requests, l.Warmup, held, p.Turns, p.Conversations)
	case workloads.WorkloadGSP:
		if held >= need {
			return ""
		}
		p.GSPNumGroups = ceil(need, p.GSPPromptsPerGroup)
		return fmt.Sprintf("--requests %d (+ --warmup %d): the gsp workload holds %d requests; drawing %d groups of %d",
			l.Requests, l.Warmup, held, p.GSPNumGroups, p.GSPPromptsPerGroup)
	case workloads.WorkloadLongSystemPrompt:
		return growRequests(&p.LSPPrompts, held, need, l, "long-system-prompt requests instead of")
	case workloads.WorkloadCachePressure:
		return growRequests(&p.CPRequests, held, need, l, "cache-pressure requests instead of --cp-requests")
	case workloads.WorkloadHotspot:
		return growRequests(&p.HSRequests, held, need, l, "hotspot requests instead of --hs-requests")
	case workloads.WorkloadRandom, workloads.WorkloadShareGPT:
		if held >= need || p.DatasetPath != "" {
			return ""
		}
		p.NumPrompts = need
		return fmt.Sprintf("--requests %d (+ --warmup %d): drawing %d %s prompts instead of --num-prompts %d",
			l.Requests, l.Warmup, need, p.Workload, held)
	}
	return ""
}

// growRequests sets *n, the request count of a workload of independent requests that holds
// held, to need when it holds fewer, and says so ("drawing need WHAT held").
func growRequests(n *int, held, need int, l workloads.LoadParams, what string) string {
	if held >= need {
		return ""
	}
	*n = need
	return fmt.Sprintf("--requests %d (+ --warmup %d): drawing %d %s %d", l.Requests, l.Warmup, need, what, held)
}

// moreRequestsHint names the flags that give a workload more requests.
func moreRequestsHint(p workloads.Params) string {
	switch p.Workload {
	case workloads.WorkloadMultiTurn:
		return fmt.Sprintf("%d conversations × %d turns; raise --conversations or --turns", p.Conversations, p.Turns)
	case workloads.WorkloadGSP:
		return "raise --gsp-num-groups or --gsp-prompts-per-group"
	case workloads.WorkloadLongSystemPrompt:
		return "raise --lsp-prompts"
	case workloads.WorkloadRandom, workloads.WorkloadShareGPT, workloads.WorkloadCustom:
		if p.DatasetPath != "" {
			return "--dataset-path holds what it holds; raise --num-prompts up to its size"
		}
		return "raise --num-prompts"
	case workloads.WorkloadCachePressure:
		return "raise --cp-requests"
	case workloads.WorkloadHotspot:
		return "raise --hs-requests"
	}
	return "a trace holds what it holds"
}

package workloads

import (
	"fmt"
	"time"
)

// Workload names accepted by --workload.
const (
	WorkloadMultiTurn        = "multiturn"
	WorkloadGSP              = "gsp"
	WorkloadLongSystemPrompt = "long-system-prompt"
	WorkloadRandom           = "random"
	WorkloadMooncake         = "mooncake"
	WorkloadAzure            = "azure"
	WorkloadShareGPT         = "sharegpt"       // ShareGPT-like lengths (sharegpt.go), --num-prompts requests
	WorkloadCachePressure    = "cache-pressure" // groups sharing long prefixes under KV pressure (pressure.go)
	WorkloadHotspot          = "hotspot"        // bursts of a few hot prefixes over a cold background (hotspot.go)
)

// Workloads lists every workload name, generators first.
var Workloads = []string{WorkloadMultiTurn, WorkloadGSP, WorkloadLongSystemPrompt, WorkloadRandom,
	WorkloadShareGPT, WorkloadCachePressure, WorkloadHotspot, WorkloadMooncake, WorkloadAzure, WorkloadCustom}

// Params are the workload options of SPEC §7 (and the request form of §4/§5): everything a
// Source needs. Lengths are content tokens of the shared tokenizer. Build with DefaultParams and
// check with Validate; the zero value is not valid.
type Params struct {
	Workload  string  // --workload: one of Workloads; default "multiturn"
	API       API     // --api: request form; default chat
	Model     string  // --model: the "model" field of chat/completions bodies; default "default"
	Seed      uint64  // --seed: all generated text and lengths derive from it; default 1
	IgnoreEOS bool    // --ignore-eos: ask the server to honour the output length exactly; default true
	TraceFile string  // --trace-file: JSONL (mooncake) or CSV (azure) path; required for those
	TimeScale float64 // --time-scale: trace timestamps are multiplied by it; default 1
	// DatasetPath (--dataset-path) is a file of prompts (DatasetSchema): ShareGPT conversations
	// for sharegpt (instead of generated text), your own prompts for custom (required there).
	DatasetPath string

	// multiturn
	Conversations       int           // --conversations: number of conversations; default 64
	Turns               int           // --turns: turns per conversation; default 4
	SystemPromptLen     int           // --system-prompt-len: system prompt tokens (0: none); default 1024
	SharedSystemPrompts int           // --shared-system-prompts: distinct system prompts, conversation i uses i mod G; default 8
	QuestionLen         int           // --question-len: tokens of each user question; default 128
	ThinkTime           time.Duration // --think-time: pause between a reply and the next turn; default 0

	// multiturn and random
	OutputLen  int     // --output-len: reply tokens per request (max_tokens); default 256
	RangeRatio float64 // --range-ratio: lengths uniform in [max(1, L·r), L]; default 1 (fixed; sglang's random uses 0)

	// random (and sharegpt: NumPrompts)
	InputLen   int // --input-len: prompt tokens; default 1024
	NumPrompts int // --num-prompts: number of requests; default 1000

	// sharegpt (generated, without --dataset-path): each drawn length times these; default 1
	// (--sharegpt-prompt-scale, --sharegpt-output-scale)
	ShareGPTPromptScale, ShareGPTOutputScale float64

	// gsp (sglang generated-shared-prefix)
	GSPNumGroups       int  // --gsp-num-groups: default 64
	GSPPromptsPerGroup int  // --gsp-prompts-per-group: default 16
	GSPSystemPromptLen int  // --gsp-system-prompt-len: default 2048
	GSPQuestionLen     int  // --gsp-question-len: default 128
	GSPOutputLen       int  // --gsp-output-len: default 256
	GSPOrdered         bool // --gsp-ordered: group by group instead of shuffled; default false

	// long-system-prompt
	LSPPrompts         int // --lsp-prompts: number of requests; default 1024
	LSPSystemPromptLen int // --lsp-system-prompt-len: the one shared system prompt; default 16384
	LSPQuestionLen     int // --lsp-question-len: default 32
	LSPOutputLen       int // --lsp-output-len: default 128

	// cache-pressure (pressure.go)
	CPGroups          int // --cp-groups: groups, each with its own prefix; default 150
	CPPromptsPerGroup int // --cp-prompts-per-group: distinct questions per group; default 5
	CPPrefixLen       int // --cp-prefix-len: the group's shared prefix; default 6000
	CPQuestionLen     int // --cp-question-len: default 1200
	CPOutputLen       int // --cp-output-len: default 1000
	CPRequests        int // --cp-requests: requests drawn from the groups' prompts; default 3000

	// hotspot (hotspot.go)
	HSRequests    int // --hs-requests: number of requests; default 4000
	HSHotGroups   int // --hs-hot-groups: hot prefix groups; default 3
	HSPrefixLen   int // --hs-prefix-len: each hot group's shared system prompt; default 4096
	HSQuestionLen int // --hs-question-len: a hot request's own question; default 512
	HSColdLen     int // --hs-cold-len: a cold request's prompt (no shared prefix); default 1024
	HSOutputLen   int // --hs-output-len: output tokens of every request; default 128
	HSBurst       int // --hs-burst: requests of one hot group per burst; default 200
	HSGap         int // --hs-gap: cold requests before each burst (0: hot only); default 200
}

// DefaultParams returns the documented defaults (multiturn over chat, seed 1).
func DefaultParams() Params {
	return Params{
		Workload: WorkloadMultiTurn, API: APIChat, Model: "default", Seed: 1, IgnoreEOS: true,
		TimeScale:     1,
		Conversations: 64, Turns: 4, SystemPromptLen: 1024, SharedSystemPrompts: 8, QuestionLen: 128,
		OutputLen: 256, RangeRatio: 1,
		InputLen: 1024, NumPrompts: 1000, ShareGPTPromptScale: 1, ShareGPTOutputScale: 1,
		GSPNumGroups: 64, GSPPromptsPerGroup: 16, GSPSystemPromptLen: 2048, GSPQuestionLen: 128,
		GSPOutputLen: 256,
		LSPPrompts:   1024, LSPSystemPromptLen: 16384, LSPQuestionLen: 32, LSPOutputLen: 128,
		CPGroups: DefaultCPGroups, CPPromptsPerGroup: DefaultCPPromptsPerGroup, CPPrefixLen: DefaultCPPrefixLen,
		CPQuestionLen: DefaultCPQuestionLen, CPOutputLen: DefaultCPOutputLen, CPRequests: DefaultCPRequests,
		HSRequests: DefaultHSRequests, HSHotGroups: DefaultHSHotGroups, HSPrefixLen: DefaultHSPrefixLen,
		HSQuestionLen: DefaultHSQuestionLen, HSColdLen: DefaultHSColdLen, HSOutputLen: DefaultHSOutputLen,
		HSBurst: DefaultHSBurst, HSGap: DefaultHSGap,
	}
}

// IsTrace reports whether the workload reads a trace file (mooncake, azure).
func (p Params) IsTrace() bool { return p.Workload == WorkloadMooncake || p.Workload == WorkloadAzure }

// atLeast returns an error naming flag when v < lo.
func atLeast(flag string, v, lo int) error {
	if v < lo {
		return fmt.Errorf("workloads: --%s %d must be ≥ %d", flag, v, lo)
	}
	return nil
}

// Validate returns the first invalid option, naming its flag, or nil. Options of workloads other
// than the selected one are checked too, so a bad value never hides behind the workload choice.
func (p Params) Validate() error {
	known := false
	for _, w := range Workloads {
		known = known || p.Workload == w
	}
	if !known {
		return fmt.Errorf("workloads: --workload %q is not one of %v", p.Workload, Workloads)
	}
	if _, err := ParseAPI(string(p.API)); err != nil {
		return err
	}
	if p.IsTrace() && p.TraceFile == "" {
		return fmt.Errorf("workloads: --trace-file is required by --workload %s", p.Workload)
	}
	if p.Workload == WorkloadCustom && p.DatasetPath == "" {
		return fmt.Errorf("workloads: --workload custom needs --dataset-path")
	}
	if p.DatasetPath != "" && p.Workload != WorkloadShareGPT && p.Workload != WorkloadCustom {
		return fmt.Errorf("workloads: --dataset-path is read by --workload sharegpt or custom, not %s", p.Workload)
	}
	if !(p.TimeScale > 0) {
		return fmt.Errorf("workloads: --time-scale %g must be > 0", p.TimeScale)
	}
	if !(p.ShareGPTPromptScale > 0) || !(p.ShareGPTOutputScale > 0) {
		return fmt.Errorf("workloads: --sharegpt-prompt-scale %g and --sharegpt-output-scale %g must be > 0", p.ShareGPTPromptScale, p.ShareGPTOutputScale)
	}
	if !(p.RangeRatio >= 0 && p.RangeRatio <= 1) {
		return fmt.Errorf("workloads: --range-ratio %g is outside [0,1]", p.RangeRatio)
	}
	if p.ThinkTime < 0 {
		return fmt.Errorf("workloads: --think-time %v must be ≥ 0", p.ThinkTime)
	}
	for _, c := range []struct {
		flag   string
		v, min int
	}{
		{"conversations", p.Conversations, 1}, {"turns", p.Turns, 1},
		{"system-prompt-len", p.SystemPromptLen, 0}, {"shared-system-prompts", p.SharedSystemPrompts, 1},
		{"question-len", p.QuestionLen, 1}, {"output-len", p.OutputLen, 1},
		{"input-len", p.InputLen, 1}, {"num-prompts", p.NumPrompts, 1},
		{"gsp-num-groups", p.GSPNumGroups, 1}, {"gsp-prompts-per-group", p.GSPPromptsPerGroup, 1},
		{"gsp-system-prompt-len", p.GSPSystemPromptLen, 1}, {"gsp-question-len", p.GSPQuestionLen, 1},
		{"gsp-output-len", p.GSPOutputLen, 1},
		{"lsp-prompts", p.LSPPrompts, 1}, {"lsp-system-prompt-len", p.LSPSystemPromptLen, 1},
		{"lsp-question-len", p.LSPQuestionLen, 1}, {"lsp-output-len", p.LSPOutputLen, 1},
		{"cp-groups", p.CPGroups, 1}, {"cp-prompts-per-group", p.CPPromptsPerGroup, 1},
		{"cp-prefix-len", p.CPPrefixLen, 1}, {"cp-question-len", p.CPQuestionLen, 1},
		{"cp-output-len", p.CPOutputLen, 1}, {"cp-requests", p.CPRequests, 1},
		{"hs-requests", p.HSRequests, 1}, {"hs-hot-groups", p.HSHotGroups, 1}, {"hs-prefix-len", p.HSPrefixLen, 1},
		{"hs-question-len", p.HSQuestionLen, 1}, {"hs-cold-len", p.HSColdLen, 1}, {"hs-output-len", p.HSOutputLen, 1},
		{"hs-burst", p.HSBurst, 1}, {"hs-gap", p.HSGap, 0},
	} {
		if err := atLeast(c.flag, c.v, c.min); err != nil {
			return err
		}
	}
	return nil
}

// form returns the per-request fields.
func (p Params) form() requestForm {
	return requestForm{api: p.API, model: p.Model, ignoreEOS: p.IgnoreEOS}
}

// ConversationCount is how many conversations the workload holds (0 for traces, whose length
// is the file's): a closed-loop level of more clients than that cannot keep them all busy.
func (p Params) ConversationCount() int {
	switch p.Workload {
	case WorkloadMultiTurn:
		return p.Conversations
	case WorkloadGSP:
		return p.GSPNumGroups * p.GSPPromptsPerGroup
	case WorkloadLongSystemPrompt:
		return p.LSPPrompts
	case WorkloadRandom, WorkloadShareGPT, WorkloadCustom:
		return p.NumPrompts
	case WorkloadCachePressure:
		return p.CPRequests
	case WorkloadHotspot:
		return p.HSRequests
	}
	return 0
}

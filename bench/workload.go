package bench

import (
	"github.com/pdrouter/pdrouter/workloads"
)

// workloadParams returns the parameters of p's workload that shape its requests, keyed by
// their flag names in snake case, for results.json's meta.workload.
func workloadParams(p workloads.Params) map[string]any {
	m := map[string]any{"api": string(p.API), "model": p.Model, "ignore_eos": p.IgnoreEOS}
	switch p.Workload {
	case workloads.WorkloadMultiTurn:
		m["conversations"], m["turns"] = p.Conversations, p.Turns
		m["system_prompt_len"], m["shared_system_prompts"] = p.SystemPromptLen, p.SharedSystemPrompts
		m["question_len"], m["output_len"], m["range_ratio"] = p.QuestionLen, p.OutputLen, p.RangeRatio
		m["think_time"] = p.ThinkTime.String()
	case workloads.WorkloadGSP:
		m["gsp_num_groups"], m["gsp_prompts_per_group"] = p.GSPNumGroups, p.GSPPromptsPerGroup
		m["gsp_system_prompt_len"], m["gsp_question_len"] = p.GSPSystemPromptLen, p.GSPQuestionLen
		m["gsp_output_len"], m["gsp_ordered"] = p.GSPOutputLen, p.GSPOrdered
	case workloads.WorkloadLongSystemPrompt:
		m["lsp_prompts"], m["lsp_system_prompt_len"] = p.LSPPrompts, p.LSPSystemPromptLen
		m["lsp_question_len"], m["lsp_output_len"] = p.LSPQuestionLen, p.LSPOutputLen
	case workloads.WorkloadRandom:
		m["num_prompts"], m["input_len"], m["output_len"], m["range_ratio"] = p.NumPrompts, p.InputLen, p.OutputLen, p.RangeRatio
	case workloads.WorkloadMooncake, workloads.WorkloadAzure:
		m["trace_file"], m["time_scale"] = p.TraceFile, p.TimeScale
	}
	return m
}

// expectedRequests returns how many requests p's workload holds, or 0 when unknown (traces).
func expectedRequests(p workloads.Params) int {
	switch p.Workload {
	case workloads.WorkloadMultiTurn:
		return p.Conversations * p.Turns
	case workloads.WorkloadGSP:
		return p.GSPNumGroups * p.GSPPromptsPerGroup
	case workloads.WorkloadLongSystemPrompt:
		return p.LSPPrompts
	case workloads.WorkloadRandom:
		return p.NumPrompts
	}
	return 0
}

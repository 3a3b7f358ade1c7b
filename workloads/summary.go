package workloads

// Summary returns the parameters of p's workload that shape its requests, keyed by their flag
// names in snake case: what results.json records as meta.workload, the same for bench and sim
// so their runs compare. The seed is not included (results.json has it as meta.seed).
func (p Params) Summary() map[string]any {
	m := map[string]any{"api": string(p.API), "model": p.Model, "ignore_eos": p.IgnoreEOS}
	switch p.Workload {
	case WorkloadMultiTurn:
		m["conversations"], m["turns"] = p.Conversations, p.Turns
		m["system_prompt_len"], m["shared_system_prompts"] = p.SystemPromptLen, p.SharedSystemPrompts
		m["question_len"], m["output_len"], m["range_ratio"] = p.QuestionLen, p.OutputLen, p.RangeRatio
		m["think_time"] = p.ThinkTime.String()
	case WorkloadGSP:
		m["gsp_num_groups"], m["gsp_prompts_per_group"] = p.GSPNumGroups, p.GSPPromptsPerGroup
		m["gsp_system_prompt_len"], m["gsp_question_len"] = p.GSPSystemPromptLen, p.GSPQuestionLen
		m["gsp_output_len"], m["gsp_ordered"] = p.GSPOutputLen, p.GSPOrdered
	case WorkloadLongSystemPrompt:
		m["lsp_prompts"], m["lsp_system_prompt_len"] = p.LSPPrompts, p.LSPSystemPromptLen
		m["lsp_question_len"], m["lsp_output_len"] = p.LSPQuestionLen, p.LSPOutputLen
	case WorkloadRandom:
		m["num_prompts"], m["input_len"], m["output_len"], m["range_ratio"] = p.NumPrompts, p.InputLen, p.OutputLen, p.RangeRatio
	case WorkloadShareGPT, WorkloadCustom:
		m["num_prompts"] = p.NumPrompts
		if p.DatasetPath != "" {
			m["dataset_path"], m["output_len"] = p.DatasetPath, p.OutputLen
		} else if p.Workload == WorkloadShareGPT && (p.ShareGPTPromptScale != 1 || p.ShareGPTOutputScale != 1) {
			m["sharegpt_prompt_scale"], m["sharegpt_output_scale"] = p.ShareGPTPromptScale, p.ShareGPTOutputScale
		}
	case WorkloadCachePressure:
		m["cp_groups"], m["cp_prompts_per_group"] = p.CPGroups, p.CPPromptsPerGroup
		m["cp_prefix_len"], m["cp_question_len"] = p.CPPrefixLen, p.CPQuestionLen
		m["cp_output_len"], m["cp_requests"] = p.CPOutputLen, p.CPRequests
	case WorkloadHotspot:
		m["hs_requests"], m["hs_hot_groups"], m["hs_prefix_len"] = p.HSRequests, p.HSHotGroups, p.HSPrefixLen
		m["hs_question_len"], m["hs_cold_len"], m["hs_output_len"] = p.HSQuestionLen, p.HSColdLen, p.HSOutputLen
		m["hs_burst"], m["hs_gap"] = p.HSBurst, p.HSGap
	case WorkloadMooncake, WorkloadAzure:
		m["trace_file"], m["time_scale"] = p.TraceFile, p.TimeScale
	}
	return m
}

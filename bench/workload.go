package bench

import (
	"github.com/pdrouter/pdrouter/workloads"
)

// expectedRequests returns how many requests p's workload holds, or 0 when unknown (traces).
func expectedRequests(p workloads.Params) int {
	switch p.Workload {
	case workloads.WorkloadMultiTurn:
		return p.Conversations * p.Turns
	case workloads.WorkloadGSP:
		return p.GSPNumGroups * p.GSPPromptsPerGroup
	case workloads.WorkloadLongSystemPrompt:
		return p.LSPPrompts
	case workloads.WorkloadRandom, workloads.WorkloadShareGPT, workloads.WorkloadCustom:
		return p.NumPrompts
	}
	return 0
}

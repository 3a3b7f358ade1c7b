package workloads

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSummaryNamesTheWorkloadsParameters(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	s := p.Summary()
	assert.Equal(t, p.Conversations, s["conversations"])
	assert.Equal(t, string(p.API), s["api"])
	assert.NotContains(t, s, "gsp_num_groups", "only the chosen workload's parameters")
	assert.NotContains(t, s, "seed", "the seed is meta.seed")
	p.Workload = WorkloadGSP
	assert.Equal(t, p.GSPNumGroups, p.Summary()["gsp_num_groups"])
}

package workloads

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCachePressureGroupsSharePrefixesAndPromptsRecur(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.Workload, p.API = WorkloadCachePressure, APIChat
	p.CPGroups, p.CPPromptsPerGroup, p.CPPrefixLen, p.CPQuestionLen, p.CPOutputLen, p.CPRequests = 3, 2, 200, 40, 7, 60
	assert.Equal(t, 3*(200+2*40), p.CacheWorkingSet())
	sessions := collect(t, p)
	require.Len(t, sessions, 60)
	byPrompt := map[string]int{}
	prefix := map[string][]uint32{} // group → the prompt ids its first request opened with
	for i, s := range sessions {
		require.Len(t, s, 1)
		turn := s[0]
		assert.Equal(t, 7, turn.MaxTokens)
		parts := strings.Split(turn.Session, "-") // cp-G-J-I
		require.Len(t, parts, 4, turn.Session)
		assert.Equal(t, strconv.Itoa(i), parts[3], "sessions in request order")
		ids, err := PromptIDs(turn.API, turn.Body)
		require.NoError(t, err)
		assert.Greater(t, len(ids), 240, "prefix + question + the chat template")
		byPrompt[string(turn.Body)]++
		g := parts[1]
		if first, ok := prefix[g]; ok {
			n := 0
			for n < len(ids) && n < len(first) && ids[n] == first[n] {
				n++
			}
			assert.GreaterOrEqual(t, n, 200, "a group's prompts share its prefix")
		} else {
			prefix[g] = ids
		}
	}
	assert.Len(t, prefix, 3, "every group drawn")
	assert.Len(t, byPrompt, 6, "60 draws of 6 prompts: each recurs")
	for g1, a := range prefix {
		for g2, b := range prefix {
			if g1 < g2 {
				assert.NotEqual(t, a[10:60], b[10:60], "groups %s and %s share no prefix text", g1, g2)
			}
		}
	}
	again := collect(t, p)
	for i := range sessions {
		assert.Equal(t, sessions[i][0].Body, again[i][0].Body, "same seed, same requests")
	}
}

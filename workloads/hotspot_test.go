package workloads

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hotspotParams is a small hot-spot workload: periods of 3 cold requests and a burst of 5.
func hotspotParams(api API) Params {
	p := DefaultParams()
	p.Workload, p.API, p.Seed = WorkloadHotspot, api, 7
	p.HSRequests, p.HSHotGroups, p.HSPrefixLen, p.HSQuestionLen, p.HSColdLen, p.HSOutputLen, p.HSBurst, p.HSGap = 80, 3, 200, 30, 60, 9, 5, 3
	return p
}

func TestHotspotBurstsOfHotGroupsOverColdBackground(t *testing.T) {
	t.Parallel()
	p := hotspotParams(APICompletions)
	sessions := collect(t, p)
	require.Len(t, sessions, 80)
	prefix := map[int][]uint32{} // hot group → its first request's prompt ids
	var cold [][]uint32
	groups := map[int]bool{}
	for i, s := range sessions {
		require.Len(t, s, 1)
		turn := s[0]
		assert.Equal(t, 9, turn.MaxTokens)
		ids, err := PromptIDs(turn.API, turn.Body)
		require.NoError(t, err)
		g := p.HotspotGroup(i)
		if i%8 < 3 {
			require.Equal(t, -1, g, "request %d: the period's first 3 are cold", i)
			assert.Equal(t, "hotspot-cold-"+strconv.Itoa(i), turn.Session)
			assert.Equal(t, 60, turn.InputTokens, "a cold prompt of --hs-cold-len tokens")
			cold = append(cold, ids)
			continue
		}
		require.GreaterOrEqual(t, g, 0, "request %d: the rest of the period is a burst", i)
		assert.Equal(t, p.HotspotGroup(i-i%8+3), g, "request %d: one group per burst", i)
		assert.Equal(t, "hotspot-hot"+strconv.Itoa(g)+"-"+strconv.Itoa(i), turn.Session)
		assert.Equal(t, 200+1+30, turn.InputTokens, "the group's prefix, \\n, the question")
		groups[g] = true
		if first, ok := prefix[g]; ok {
			n := commonPrefix(first, ids)
			assert.GreaterOrEqual(t, n, 201, "a group's requests share its prefix")
			assert.Less(t, n, 231, "and nothing else")
		} else {
			prefix[g] = ids
		}
	}
	assert.Len(t, groups, 3, "10 bursts draw every group")
	for g1, a := range prefix {
		for g2, b := range prefix {
			if g1 < g2 {
				assert.LessOrEqual(t, commonPrefix(a, b), 1, "groups %d and %d share no prefix", g1, g2)
			}
		}
		for _, c := range cold {
			assert.LessOrEqual(t, commonPrefix(a, c), 1, "cold prompts share no hot prefix")
		}
	}
}

func TestHotspotDeterministicAndSeeded(t *testing.T) {
	t.Parallel()
	p := hotspotParams(APIChat)
	a, b := collect(t, p), collect(t, p)
	require.Equal(t, a, b, "same seed, same requests")
	order := func(p Params) string {
		var s []string
		for i := range p.HSRequests {
			s = append(s, strconv.Itoa(p.HotspotGroup(i)))
		}
		return strings.Join(s, ",")
	}
	q := p
	q.Seed++
	assert.NotEqual(t, order(p), order(q), "another seed draws other groups for the bursts")
	q = p
	q.HSGap = 0
	for i := range 20 {
		assert.GreaterOrEqual(t, q.HotspotGroup(i), 0, "--hs-gap 0: bursts only")
	}
}

func TestHotspotParamsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag string
		set  func(p *Params)
	}{
		{"--hs-requests", func(p *Params) { p.HSRequests = 0 }},
		{"--hs-hot-groups", func(p *Params) { p.HSHotGroups = 0 }},
		{"--hs-prefix-len", func(p *Params) { p.HSPrefixLen = 0 }},
		{"--hs-burst", func(p *Params) { p.HSBurst = 0 }},
		{"--hs-gap", func(p *Params) { p.HSGap = -1 }},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			p := hotspotParams(APIChat)
			tc.set(&p)
			err := p.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.flag)
		})
	}
	p := hotspotParams(APIChat)
	assert.Equal(t, 80, p.ConversationCount())
	assert.Equal(t, 5, p.Summary()["hs_burst"])
}

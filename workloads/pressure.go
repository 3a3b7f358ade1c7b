package workloads

import (
	"math/rand/v2"
	"strconv"
)

// The cache-pressure workload: many groups whose prompts share a long prefix, more distinct
// prompt tokens than one server's KV cache holds, so that where a request lands decides
// whether its prefix is still cached. It has the shape of llm-d's precise prefix-cache
// benchmark (150 groups, a 6,000-token prefix per group, 1,200-token questions): its working
// set — every group's prefix and questions, CacheWorkingSet tokens — is 70 % of the KV
// capacity of 8 servers of 320K tokens each (1.8M of 2.56M), so only a routing that keeps each
// group on few servers keeps it cached.
//
// Defaults of its flags (DefaultParams).
const (
	DefaultCPGroups          = 150
	DefaultCPPromptsPerGroup = 5
	DefaultCPPrefixLen       = 6000
	DefaultCPQuestionLen     = 1200
	DefaultCPOutputLen       = 1000
	DefaultCPRequests        = 3000
)

// CacheWorkingSet returns the distinct prompt tokens of the cache-pressure workload p (tests
// of the simulator size a KV capacity from it, as an operator would size one against it):
// groups × (prefix + prompts per group × question), without the chat template's few tokens
// per message.
func (p Params) CacheWorkingSet() int {
	return p.CPGroups * (p.CPPrefixLen + p.CPPromptsPerGroup*p.CPQuestionLen)
}

// newCachePressure: --cp-requests single-turn requests, each one of the --cp-groups ×
// --cp-prompts-per-group distinct prompts drawn uniformly at random (seeded, with
// replacement, so prompts recur as a benchmark's sampled dataset makes them): its group's
// prefix (--cp-prefix-len tokens, a system message in chat) and its own question
// (--cp-question-len), asking --cp-output-len tokens. Request i's draw depends on (seed, i)
// alone.
func newCachePressure(p Params) Source {
	cache := &sharedCache{}
	return &genSource{n: p.CPRequests, make: func(i int) *Session {
		r := rand.New(rand.NewPCG(p.Seed, mix(domCPPick, uint64(i))))
		k := r.IntN(p.CPGroups * p.CPPromptsPerGroup)
		g, j := k/p.CPPromptsPerGroup, k%p.CPPromptsPerGroup
		sys := cache.get(uint64(g), func() *shared {
			return systemPiece(p, domCPPrefix, uint64(g), p.CPPrefixLen)
		})
		q := genText(p.Seed, domCPQuestion, uint64(g), uint64(j), p.CPQuestionLen)
		id := "cp-" + strconv.Itoa(g) + "-" + strconv.Itoa(j) + "-" + strconv.Itoa(i)
		return newSession(id, p.form(), sys, 1, singleTurn(q, p.CPQuestionLen, p.CPOutputLen))
	}}
}

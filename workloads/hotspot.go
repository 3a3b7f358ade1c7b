package workloads

import (
	"math/rand/v2"
	"strconv"
)

// The hot-spot workload: a few hot prefix groups over a cold background, the hot traffic in
// bursts — the shape behind the "death spiral" reported of cache-aware routers (issue 39):
// every request of a hot prefix goes to the worker that caches it until that worker queues for
// seconds while the others idle. The requests come in periods of --hs-gap cold requests
// followed by a burst of --hs-burst requests of one hot group (drawn per burst, seeded), so at
// an open-loop --rate R a burst puts R requests/s on one prefix for hs-burst/R seconds, and
// the cold stretch between bursts lasts hs-gap/R seconds (add --arrival gamma --burstiness
// below 1 for bursts of the total rate too).
//
//   - A hot request is its group's system prompt (--hs-prefix-len tokens, shared by every
//     request of the group: a cache hit wherever the group ran before) and its own question
//     (--hs-question-len tokens, uncached everywhere).
//   - A cold request is a prompt of its own (--hs-cold-len tokens, no shared prefix).
//   - Every request asks --hs-output-len tokens.
//
// Defaults of its flags (DefaultParams): 3 groups × 4,096-token prefixes as the issue's
// example, 512-token questions and 1,024-token cold prompts (a hot request's prefill on the
// worker that caches its prefix costs half a cold one's), 128-token replies, bursts of 200
// requests after 200 cold ones (half the requests hot).
const (
	DefaultHSRequests    = 4000
	DefaultHSHotGroups   = 3
	DefaultHSPrefixLen   = 4096
	DefaultHSQuestionLen = 512
	DefaultHSColdLen     = 1024
	DefaultHSOutputLen   = 128
	DefaultHSBurst       = 200
	DefaultHSGap         = 200
)

// HotspotGroup returns the hot group of request i of the hot-spot workload p (0-based), or -1
// for a cold request: request i belongs to period i/(gap+burst); its first --hs-gap requests
// are cold and the rest the burst of the period's group, drawn from (seed, period) alone.
func (p Params) HotspotGroup(i int) int {
	period := p.HSGap + p.HSBurst
	if i%period < p.HSGap {
		return -1
	}
	r := rand.New(rand.NewPCG(p.Seed, mix(domHSPick, uint64(i/period))))
	return r.IntN(p.HSHotGroups)
}

// newHotspot: --hs-requests single-turn requests in periods of --hs-gap cold requests and a
// burst of --hs-burst requests of one of --hs-hot-groups hot groups (HotspotGroup).
func newHotspot(p Params) Source {
	cache := &sharedCache{}
	return &genSource{n: p.HSRequests, make: func(i int) *Session {
		idx := strconv.Itoa(i)
		g := p.HotspotGroup(i)
		if g < 0 {
			q := genText(p.Seed, domHSCold, uint64(i), 0, p.HSColdLen)
			return newSession("hotspot-cold-"+idx, p.form(), nil, 1, singleTurn(q, p.HSColdLen, p.HSOutputLen))
		}
		sys := cache.get(uint64(g), func() *shared { return systemPiece(p, domHSPrefix, uint64(g), p.HSPrefixLen) })
		q := genText(p.Seed, domHSQuestion, uint64(i), 0, p.HSQuestionLen)
		return newSession("hotspot-hot"+strconv.Itoa(g)+"-"+idx, p.form(), sys, 1,
			singleTurn(q, p.HSQuestionLen, p.HSOutputLen))
	}}
}

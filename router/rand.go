package router

import "math/rand/v2"

// NewRand returns the router's random source for seed: the one source that serve and sim
// both build from --seed, so the random policies draw the same numbers in both.
func NewRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x726f75746572)) // "router"
}

package main

import (
	"fmt"
	"strings"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// latencyModels builds predicted_latency's engine models for serve from --latency-profile,
// --latency-prefill-profile and --latency-decode-profile: each a preset or a profile file,
// resolved as `router sim --profile` resolves the simulated servers' (sim.Cluster.Server), at
// the engine's defaults and the simulator's default KV link. nil when no role is routed by
// predicted_latency or no profile is given (server.New then names the missing flag).
func latencyModels(cfg server.Config) (map[router.Role]router.LatencyModel, error) {
	pd := cfg.PDDisaggregation
	roles := map[router.Role]engine.Role{router.Regular: engine.RoleUnified}
	if pd {
		roles = map[router.Role]engine.Role{router.Prefill: engine.RolePrefill, router.Decode: engine.RoleDecode}
	}
	uses := false
	for role := range roles {
		uses = uses || cfg.PolicyFor(role) == router.PolicyPredictedLatency
	}
	if !uses || cfg.LatencyProfile == "" && (cfg.LatencyPrefillProfile == "" || cfg.LatencyDecodeProfile == "" || !pd) {
		return nil, nil
	}
	cl := sim.Cluster{Profile: cfg.LatencyProfile, PrefillProfile: cfg.LatencyPrefillProfile, DecodeProfile: cfg.LatencyDecodeProfile}
	if cl.Profile == "" {
		cl.Profile = cl.PrefillProfile
	}
	if err := loadClusterProfiles(&cl); err != nil {
		return nil, fmt.Errorf("--latency-profile: %w", err)
	}
	cl = cl.WithDefaults(pd)
	out := map[router.Role]router.LatencyModel{}
	for role, er := range roles {
		p, args, err := cl.Server(er)
		if err != nil { // sim names its own flag: say ours
			return nil, fmt.Errorf("--latency-profile: %s", strings.TrimPrefix(err.Error(), "sim: --profile: "))
		}
		m, err := engine.NewCostModel(args.Apply(engine.Config{Role: er, Profile: p, LinkBandwidth: cl.LinkGbps * 1e9 / 8}))
		if err != nil {
			return nil, fmt.Errorf("--latency-profile %s: %w", p.Name, err)
		}
		out[role] = m
	}
	return out, nil
}

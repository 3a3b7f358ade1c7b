package demo

import (
	"fmt"
	"time"

	"github.com/pdrouter/pdrouter/fakeworker"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server"
	"github.com/pdrouter/pdrouter/sim"
	"github.com/pdrouter/pdrouter/workloads"
)

// Defaults of the demo scenario (DefaultScenario).
const (
	// DefaultProfile is the engine preset of every worker.
	DefaultProfile = "llama3-8b-h100"
	// DefaultSpeedup divides every model duration. The preset at this speed keeps live TTFT
	// at 20 ms or more, so the router's and the HTTP stack's own sub-millisecond costs stay
	// small beside what is being predicted.
	DefaultSpeedup = 1.0
	// DefaultNetLatency is the one-way latency of a simulated network hop. It stands for a
	// loopback HTTP hop of the live system including the receiver's handling (the router
	// parses the body and derives the routing text; a fakeworker renders and tokenizes the
	// prompt; each engine loop wakes up): at 250 µs the simulated and live TTFT of the demo
	// agree within a few tenths of a millisecond at concurrency 1 (at sim's default 100 µs
	// the live TTFT is 1.0 ms longer, over 5 simulated hops).
	DefaultNetLatency = 250 * time.Microsecond
	// DefaultSeed seeds the router, the rid/room source and the workload.
	DefaultSeed = 1
)

// DefaultConcurrency is the closed-loop levels of the demo.
var DefaultConcurrency = []int{1, 4, 16}

// Scenario is one demo run: the cluster, the router settings, the workload and the load. The
// live run and the simulation are both built from it, so they differ only in what runs them.
type Scenario struct {
	Prefill, Decode int     // workers per role
	DPSize          int     // DP ranks per worker
	DPAttention     bool    // DP-attention lockstep
	Profile         string  // engine preset (engine.PresetNames), "instant" or "constant"
	Speedup         float64 // every model duration is divided by it (> 0)
	// NetLatency is the simulated one-way latency of each network hop (sim.Cluster.NetLatency;
	// negative: none). It has no live counterpart: it stands for loopback HTTP.
	NetLatency time.Duration
	// Policy is the routing policy of both roles.
	Policy string
	// LoadReports is how often the live router reads the workers' engine loads
	// (--load-poll-interval-ms); 0 turns engine load reports off, so the policies compare
	// in-flight counts alone. Exact decision parity holds only then: when a report is taken
	// relative to a request is the driver's own timing.
	LoadReports time.Duration
	// Seed seeds the router's policies and the rid/room source in both runs (--seed), and the
	// workload (Workload.Seed is overwritten with it).
	Seed int64
	// Workload and Load are the bench's (and the simulator's) workload and load options.
	Workload workloads.Params
	Load     workloads.LoadParams
}

// DefaultScenario returns the demo: 2 prefill + 2 decode workers with DP 4 and DP-attention,
// DefaultProfile at DefaultSpeedup, cache_aware and --dp-aware routing, and the multiturn
// workload (48 conversations of 3 turns, 1,024-token system prompts shared by groups of 8,
// questions of 256-512 and replies of 16-32 tokens) at concurrency 1, 4 and 16, each level
// starting with cold caches (--flush-cache) and 16 unrecorded warm-up requests, then 128
// recorded ones: the whole workload. The live part takes about 35 s.
//
// Two choices keep the comparison about the steady state. Lengths vary (--range-ratio 0.5)
// so that the clients drift out of phase, as live clients do; with equal lengths the
// simulated clients stay in perfect lockstep for the whole level and always share prefill
// steps. And the warm-up absorbs each level's first wave: the simulator sends every client's
// first request at the same virtual instant, so all of them share one DP-attention prefill
// step, while live clients start some 50 µs apart and all but the first wait a whole step.
//
// Under DP-attention lockstep TTFT is a staircase (a request waits whole prefill and decode
// steps), so a percentile that falls on the edge of a step jumps by a step when a few requests
// more or fewer wait. These lengths put the P50s mid-step: over workload seeds 1-6 the
// simulated P50 at concurrency 4 and 16 moves by 1 % at most (with 16-token replies it moves by
// 18 %, and live runs flip between the two steps).
func DefaultScenario() Scenario {
	p := workloads.DefaultParams()
	p.Conversations, p.Turns, p.QuestionLen, p.OutputLen, p.RangeRatio = 48, 3, 512, 32, 0.5
	l := workloads.DefaultLoadParams()
	l.Concurrency = append([]int(nil), DefaultConcurrency...)
	l.Requests, l.Warmup, l.FlushCache = 128, 16, true
	return Scenario{
		Prefill: 2, Decode: 2, DPSize: 4, DPAttention: true,
		Profile: DefaultProfile, Speedup: DefaultSpeedup, NetLatency: DefaultNetLatency,
		Policy: "cache_aware", Seed: DefaultSeed, Workload: p, Load: l, LoadReports: 100 * time.Millisecond,
	}
}

// Validate reports the first invalid field, naming the flag at fault.
func (sc Scenario) Validate() error {
	switch {
	case sc.Prefill < 1 || sc.Decode < 1:
		return fmt.Errorf("demo: --prefill %d and --decode %d must be ≥ 1", sc.Prefill, sc.Decode)
	case sc.DPSize < 1:
		return fmt.Errorf("demo: --dp-size %d must be ≥ 1", sc.DPSize)
	case !(sc.Speedup > 0):
		return fmt.Errorf("demo: --speedup %g must be > 0", sc.Speedup)
	}
	if _, err := fakeworker.ResolveProfile(sc.Profile, 0, 0); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	w := sc.workload()
	if err := w.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := sc.Load.Validate(w.IsTrace()); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	rc := sc.RouterConfig(nil)
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return sim.Config{Cluster: sc.SimCluster()}.Cluster.Validate(true)
}

// workload returns the workload parameters with the scenario's seed.
func (sc Scenario) workload() workloads.Params {
	w := sc.Workload
	w.Seed = uint64(sc.Seed)
	return w
}

// WorkerConfig returns the template of every live worker (fakeworker.ClusterConfig.Worker).
func (sc Scenario) WorkerConfig() (fakeworker.Config, error) {
	prof, err := fakeworker.ResolveProfile(sc.Profile, 0, 0)
	if err != nil {
		return fakeworker.Config{}, fmt.Errorf("demo: %w", err)
	}
	return fakeworker.Config{Host: "127.0.0.1", DPSize: sc.DPSize, DPAttention: sc.DPAttention,
		Profile: prof, Speedup: sc.Speedup, Seed: uint64(sc.Seed)}, nil
}

// ServeConfig returns the settings of the live router (what `router serve` would run with
// the cluster's ServeArgs, --policy and --seed) for the given workers: [Scenario.RouterConfig]
// and a listener on 127.0.0.1.
func (sc Scenario) ServeConfig(cl *fakeworker.Cluster) server.Config {
	c := server.DefaultConfig()
	c.Config = sc.RouterConfig(cl)
	c.Host, c.Port = "127.0.0.1", 0
	c.LoadPollIntervalMs = int(sc.LoadReports / time.Millisecond)
	return c
}

// RouterConfig returns the routing settings of the live router for the given workers; nil
// cluster gives the simulator's settings, whose workers the simulator adds itself.
func (sc Scenario) RouterConfig(cl *fakeworker.Cluster) router.Config {
	rc := router.DefaultConfig()
	rc.PDDisaggregation = true
	rc.DPAware = sc.DPSize > 1
	rc.Policy = sc.Policy
	seed := sc.Seed
	rc.Seed = &seed
	if cl != nil {
		for _, w := range cl.Workers() {
			switch fakeworker.ModeName(w.Mode()) {
			case "prefill":
				port := w.BootstrapPort()
				rc.Prefill = append(rc.Prefill, router.PrefillWorker{URL: w.URL(), BootstrapPort: &port})
			case "decode":
				rc.Decode = append(rc.Decode, w.URL())
			}
		}
	}
	return rc
}

// SimCluster returns the simulated cluster matching the live one.
func (sc Scenario) SimCluster() sim.Cluster {
	return sim.Cluster{Prefill: sc.Prefill, Decode: sc.Decode, DPSize: sc.DPSize, DPAttention: sc.DPAttention,
		Profile: sc.Profile, NetLatency: sc.NetLatency, Speedup: sc.Speedup}
}

// SimConfig returns the simulation of the scenario.
func (sc Scenario) SimConfig(version string) sim.Config {
	cfg := sim.Config{Cluster: sc.SimCluster(), Router: sc.RouterConfig(nil), Workload: sc.workload(),
		Load: sc.Load, Version: version, KeepITL: true}
	if sc.LoadReports > 0 { // the live router's polls, modelled
		cfg.Routing.LoadReportInterval = sc.LoadReports
		cfg.Routing.LoadReportDelay = sim.Delay{Fixed: sim.DefaultLoadReportDelay}
	}
	return cfg
}

package workloads

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Arrival process names accepted by --arrival.
const (
	ArrivalPoisson  = "poisson"
	ArrivalConstant = "constant"
	ArrivalGamma    = "gamma"
	ArrivalTrace    = "trace" // the trace's own timestamps (mooncake, azure)
	ArrivalBurst    = "burst" // every arrival at t=0: what --rate inf selects
)

// LoadParams are the load options of SPEC §5, shared by `router bench` and `router sim`. Build
// with DefaultLoadParams and check with Validate.
type LoadParams struct {
	Concurrency []int         // --concurrency: closed-loop levels, N clients each; default none
	Rates       []float64     // --rate: open-loop levels in requests/s; +Inf = burst; default none
	Arrival     string        // --arrival: poisson (default), constant, gamma, or trace
	Burstiness  float64       // --burstiness: gamma shape (1 = Poisson); default 1
	Requests    int           // --requests: recorded requests per level; 0 = until the workload ends
	Duration    time.Duration // --duration: bound on each level; 0 = none
	Warmup      int           // --warmup: unrecorded requests before each level; default 0
	FlushCache  bool          // --flush-cache: flush router and worker caches between levels
	// SameConversations replays the same conversations at every level (--same-conversations);
	// by default level k draws its own (LevelParams), so a later level measures fresh traffic
	// rather than prompts an earlier level left in the caches.
	SameConversations bool
}

// LevelSeed is the workload seed of level k of a run seeded seed: seed itself for the first
// level, a seed derived from (seed, k) for the others, so every level draws conversations of
// its own (distinct prompts, the same shapes and lengths distribution).
func LevelSeed(seed uint64, k int) uint64 {
	if k == 0 {
		return seed
	}
	return mix(seed, domLevel, uint64(k))
}

// LevelParams returns the workload parameters of level k: p with LevelSeed(p.Seed, k), or p
// itself with SameConversations.
func (l LoadParams) LevelParams(p Params, k int) Params {
	if !l.SameConversations {
		p.Seed = LevelSeed(p.Seed, k)
	}
	return p
}

// DefaultLoadParams returns the defaults: no levels given (see Levels), Poisson arrivals,
// burstiness 1, no request or duration bound, no warmup.
func DefaultLoadParams() LoadParams {
	return LoadParams{Arrival: ArrivalPoisson, Burstiness: 1}
}

// Validate returns the first invalid option, naming its flag, or nil. isTrace says whether the
// workload is a trace (--arrival trace needs one).
func (l LoadParams) Validate(isTrace bool) error {
	for _, c := range l.Concurrency {
		if c < 1 {
			return fmt.Errorf("workloads: --concurrency %d must be ≥ 1", c)
		}
	}
	for _, r := range l.Rates {
		if !(r > 0) {
			return fmt.Errorf("workloads: --rate %g must be > 0 (or inf)", r)
		}
	}
	switch l.Arrival {
	case ArrivalPoisson, ArrivalConstant, ArrivalGamma:
	case ArrivalTrace:
		if !isTrace {
			return fmt.Errorf("workloads: --arrival trace needs a trace workload (mooncake, azure)")
		}
		if len(l.Rates) > 0 {
			return fmt.Errorf("workloads: --arrival trace replays timestamps and takes no --rate")
		}
	default:
		return fmt.Errorf("workloads: --arrival %q is not one of poisson, constant, gamma, trace", l.Arrival)
	}
	if !(l.Burstiness > 0) || math.IsInf(l.Burstiness, 0) {
		return fmt.Errorf("workloads: --burstiness %g must be > 0", l.Burstiness)
	}
	if err := atLeast("requests", l.Requests, 0); err != nil {
		return err
	}
	if err := atLeast("warmup", l.Warmup, 0); err != nil {
		return err
	}
	if l.Duration < 0 {
		return fmt.Errorf("workloads: --duration %v must be ≥ 0", l.Duration)
	}
	return nil
}

// Level is one load level of a run: closed loop (Concurrency > 0) or open loop (an arrival
// process). Label is the results label of SPEC §6: c{N}, r{R}, burst or trace.
type Level struct {
	Label       string
	Concurrency int     // > 0: closed loop with this many clients
	Rate        float64 // open loop: requests/s; +Inf for burst; 0 for closed loop and trace
	Arrival     string  // open loop: poisson, constant, gamma, burst or trace; "" for closed loop
}

// Levels returns the levels in order: every --concurrency level, then every --rate level.
// With neither given, a trace workload replays its timestamps (one "trace" level) and any other
// workload runs closed loop with one client; --arrival trace gives one "trace" level (after
// any concurrency levels).
func (l LoadParams) Levels(isTrace bool) []Level {
	var out []Level
	for _, c := range l.Concurrency {
		out = append(out, Level{Label: "c" + strconv.Itoa(c), Concurrency: c})
	}
	if l.Arrival == ArrivalTrace {
		return append(out, Level{Label: "trace", Arrival: ArrivalTrace})
	}
	for _, r := range l.Rates {
		if math.IsInf(r, 1) {
			out = append(out, Level{Label: "burst", Rate: r, Arrival: ArrivalBurst})
			continue
		}
		out = append(out, Level{Label: "r" + strconv.FormatFloat(r, 'g', -1, 64), Rate: r, Arrival: l.Arrival})
	}
	if len(out) == 0 {
		if isTrace {
			return []Level{{Label: "trace", Arrival: ArrivalTrace}}
		}
		return []Level{{Label: "c1", Concurrency: 1}}
	}
	return out
}

// Arrivals returns the open-loop arrival process of the level (nil for closed loop and trace
// levels: use OpenTraceArrivals or the sessions' own Arrival for those). limit > 0 caps the
// number of arrivals; seed keys the random processes (use a distinct seed per level for
// independent levels).
func (lv Level) Arrivals(l LoadParams, seed uint64, limit int) Arrivals {
	switch lv.Arrival {
	case ArrivalBurst:
		return Burst{Limit: limit}
	case ArrivalConstant:
		return Constant{Rate: lv.Rate, Limit: limit}
	case ArrivalPoisson:
		return NewPoisson(lv.Rate, seed, limit)
	case ArrivalGamma:
		return NewGamma(lv.Rate, l.Burstiness, seed, limit)
	}
	return nil
}

// errNotTrace names a workload that has no trace file.
func errNotTrace(w string) error {
	return fmt.Errorf("workloads: --workload %s has no trace timestamps", w)
}

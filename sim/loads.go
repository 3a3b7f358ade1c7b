package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
)

// Engine load reports (Routing.LoadReportInterval > 0), as serve's load poller reads them
// (router/server/loads.go). Every interval each router replica polls every live server: the
// poll samples the server's ranks (engine.Server.Loads) at that instant and its answer reaches
// the replica after the replica's own draw of Routing.LoadReportDelay, through the event
// queue; the replica then calls Router.ReportLoad with the sample's time, as serve stamps a
// report with its poll's start. Like serve:
//   - a DP-aware router gets each rank's report on its url@rank target, any other router the
//     ranks' sum (router.EngineLoad.Add) on the worker's url;
//   - at most one poll of a worker is in flight per replica: a tick that finds the previous
//     poll unanswered (a delay above the interval) skips the worker, and its report ages;
//   - a killed server answers no poll: its last report ages out
//     (--load-report-max-age-ms) and the policies fall back to in-flight counts.
// Each replica's ticker starts at its own offset in [0, interval), drawn from its seed, so
// replicas do not poll in lockstep. Not modelled: SGLang's older Prometheus gauges (which lack
// num_waiting_uncached_tokens), failed or garbage answers, and the poll's own cost.

// loadFeed is the simulator's side of the load reports: what each replica's polls are and
// which are in flight.
type loadFeed struct {
	every int64    // the poll interval, ns
	delay Delay    // from a poll's start to its report reaching the replica
	names []string // by server index: the router target its summed report goes to (not DP-aware)
	// ranked says, by server index, whether its ranks report to url@rank targets (DP-aware).
	ranked []bool
	rngs   []*rand.Rand // by replica: its ticker's offset and its delay draws
	polls  []loadPoll   // by replica·len(servers) + server
	stats  LoadStats
}

// loadPoll is one replica's poll of one server: the sample, while its answer is on its way.
type loadPoll struct {
	busy  bool
	at    int64               // when the sample was taken
	loads []router.EngineLoad // one per rank (DP-aware), or the ranks' sum
}

// LoadStats count the engine load reports of a run (Routing.LoadReportInterval > 0), summed
// over the replicas.
type LoadStats struct {
	Reports uint64 // polls answered: one report per server (per rank when DP-aware) each
	// Skipped counts the polls not sent because the replica's previous poll of the server was
	// still unanswered (a --load-report-delay above --load-report-interval), as serve skips.
	Skipped uint64
}

// loadSeedDomain separates the replicas' load-report draws from their other streams.
const loadSeedDomain = 0x6c6f616473 // "loads"

// newLoadFeed returns the feed of a run with load reports (startLoadPolls schedules the
// replicas' first polls); nil when they are off (no interval, or reports never used: --load-report-max-age-ms 0,
// on which serve does not poll either).
func (x *sim) newLoadFeed(seed int64) *loadFeed {
	r := x.cfg.Routing
	if r.LoadReportInterval <= 0 || x.cfg.Router.LoadReportMaxAgeMs <= 0 {
		return nil
	}
	f := &loadFeed{every: int64(r.LoadReportInterval), delay: r.LoadReportDelay,
		names: make([]string, len(x.servers)), ranked: make([]bool, len(x.servers)),
		polls: make([]loadPoll, len(x.reps)*len(x.servers))}
	for _, t := range x.reps[0].rt.Targets() {
		if t.Rank >= 0 {
			f.ranked[x.byURL[t.URL].idx] = true
		}
	}
	for i, sv := range x.servers {
		f.names[i] = sv.url
	}
	for i := range x.reps {
		f.rngs = append(f.rngs, rand.New(rand.NewPCG(uint64(seed), uint64(i)^loadSeedDomain)))
	}
	return f
}

// startLoadPolls schedules every replica's first poll, at its own offset in [0, interval).
func (x *sim) startLoadPolls() {
	if f := x.loads; f != nil {
		for i, rng := range f.rngs {
			x.push(rng.Int64N(f.every), event{kind: evLoadPoll, srv: int32(i)})
		}
	}
}

// pollLoads is replica rep's ticker: it samples every live server whose previous poll was
// answered, schedules each answer after a draw of the delay, and the next tick.
func (x *sim) pollLoads(rep int) {
	f := x.loads
	now := x.clock.now
	rng := f.rngs[rep]
	for i, sv := range x.servers {
		p := &f.polls[rep*len(x.servers)+i]
		if sv.killed {
			continue
		}
		if p.busy {
			f.stats.Skipped++
			continue
		}
		p.busy, p.at = true, now
		p.loads = sample(p.loads[:0], sv.eng.Loads(x.t()), f.ranked[i])
		x.push(now+f.delay.draw(rng), event{kind: evLoadReport, srv: int32(rep*len(x.servers) + i)})
	}
	x.push(now+f.every, event{kind: evLoadPoll, srv: int32(rep)})
}

// deliverLoads is the answer of the poll in slot reaching its replica: ReportLoad per rank
// (DP-aware) or the sum, stamped with the poll's time, as serve's report does.
func (x *sim) deliverLoads(slot int) {
	f := x.loads
	p := &f.polls[slot]
	p.busy = false
	rep, i := slot/len(x.servers), slot%len(x.servers)
	rt, at := x.reps[rep].rt, Epoch.Add(time.Duration(p.at))
	f.stats.Reports++
	if !f.ranked[i] {
		if err := rt.ReportLoad(f.names[i], p.loads[0], at); err != nil {
			x.err = err
		}
		return
	}
	for rank, l := range p.loads {
		if err := rt.ReportLoad(router.TargetName(f.names[i], rank), l, at); err != nil {
			x.err = err
		}
	}
}

// sample appends a server's report to dst: each rank's load, or their sum when !ranked.
func sample(dst []router.EngineLoad, ranks []engine.RankLoad, ranked bool) []router.EngineLoad {
	for i := range ranks {
		l := engineLoad(&ranks[i])
		switch {
		case ranked || i == 0:
			dst = append(dst, l)
		default:
			dst[0] = dst[0].Add(l)
		}
	}
	return dst
}

// engineLoad is what serve reads of a rank from a fakeworker's GET /v1/loads: the engine's
// numbers, token_usage rounded to 4 decimals and gen_throughput to 2 as SGLang's inquirer
// (and so fakeworker) reports them.
func engineLoad(l *engine.RankLoad) router.EngineLoad {
	return router.EngineLoad{RunningReqs: l.RunningReqs, WaitingReqs: l.WaitingReqs,
		WaitingUncachedTokens: l.WaitingUncachedTokens, UsedTokens: l.UsedTokens, MaxTotalTokens: l.MaxTotalTokens,
		TokenUsage: math.Round(l.TokenUsage*1e4) / 1e4, GenThroughput: math.Round(l.GenThroughput*100) / 100,
		MaxRunningRequests: l.MaxRunningRequests}
}

package sim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// Epoch is virtual time zero: every simulated run starts at this instant, so the router's
// clock readings, and therefore its decisions, never depend on when the run happens.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// vclock is the router's clock: the simulator's virtual now.
type vclock struct{ now int64 }

// Now implements router.Clock.
func (c *vclock) Now() time.Time { return Epoch.Add(time.Duration(c.now)) }

// epochUnix is Epoch in Unix nanoseconds.
var epochUnix = Epoch.UnixNano()

// ns converts an engine time into virtual nanoseconds (UnixNano is cheaper than Sub, which
// guards against monotonic readings and overflow that engine times never have).
func ns(t time.Time) int64 { return t.UnixNano() - epochUnix }

// ms converts virtual nanoseconds into milliseconds.
func ms(d int64) float64 { return float64(d) / 1e6 }

// server is one simulated SGLang server.
type server struct {
	eng    *engine.Server
	url    string
	role   router.Role
	prof   engine.Profile
	cfg    engine.Config // with defaults
	waking bool          // an evWake is scheduled at wakeAt
	wakeAt int64
	killed bool
	idx    int32 // position in sim.servers
}

// Result is what a run produced.
type Result struct {
	// Results is results.json: one level per load level, tool "sim", no wall-clock values.
	Results *reports.Results
	// Records are requests.jsonl, every recorded request of every level in completion order.
	Records []reports.Record
	// Stats describe the run itself.
	Stats Stats
}

// Stats describe a run: its size, and the conservation checks at its end.
type Stats struct {
	Events   uint64        // events popped from the heap
	Requests int           // requests completed or failed (warm-up included)
	Attempts int           // Route calls that picked targets (retries included)
	Virtual  time.Duration // virtual time at the end of the run
	// Targets is the router's view of every target at the end: every Load must be zero.
	Targets []router.TargetInfo
	// LiveRooms counts requests still live in any engine at the end: must be zero.
	LiveRooms int
	// KV counts the KV-event traffic (Routing.KVEvents on).
	KV KVStats
	// Loads counts the engine load reports (Routing.LoadReportInterval > 0).
	Loads LoadStats
	// Shed counts the requests shed because every available target of a role was over its
	// --worker-overload-* bound (router.OverloadError; warm-up included): each ends as an
	// http_503 error, not retried, as serve answers 503 and the bench's client does not retry.
	// ShedRetryAfter sums the Retry-After serve's answers would carry (whole seconds, ≥ 1).
	Shed           int
	ShedRetryAfter time.Duration
	// BreakerOpens counts, by worker URL, how often a router's circuit breaker opened on the
	// worker (summed over the router replicas; warm-up included). Nil when none did.
	BreakerOpens map[string]int
	// TreeTrims counts the times a router tree went over its bound (Config.TreeChars or
	// max_tree_total_chars) and was trimmed, summed over the replicas and roles: while it is
	// zero the trees held every routed text, as serve's would. A tree no pick consults any more
	// is dropped (a role whose every KV-event view is established on a loss-free feed:
	// sim/kvevents.go) and counts only the trims before.
	TreeTrims int
	// RetriesOverBudget counts the failed attempts not retried only because the router's retry
	// budget was full (--retry-budget-percent, --retry-min-concurrency; warm-up included).
	RetriesOverBudget int
	// Tenants are what each tenant's recorded requests saw in each level (--tenant-mix, or
	// admission limits), in order of first appearance; nil when the run has neither.
	Tenants []*TenantStats
}

// sim is one run. Everything runs on the caller's goroutine.
type sim struct {
	cfg Config
	cl  Cluster
	pd  bool
	lat int64 // one-way network latency, ns
	// lastSend and lastArrival are the send instant and arrival of the latest request sent,
	// so same-instant sends keep their order (arriveAt).
	lastSend, lastArrival int64
	clock                 vclock
	q                     queue      // the event queue, by (time, push order)
	reps                  []*replica // the router replicas (Routing.Replicas)
	nextRep               int        // round-robin affinity: the next request's replica
	kv                    *kvFeed    // nil without KV events
	tn                    *tenancy   // tenants, priorities and each replica's admission
	loads                 *loadFeed  // nil without engine load reports
	ids                   *wire.IDGen
	servers               []*server
	byURL                 map[string]*server  // lookups only
	rooms                 map[uint64]*attempt // live attempts by room; lookups only
	slot                  map[string]int      // target name → slot within its role; lookups only
	nslots                [3]int
	urls                  [3][]*string // by role and slot: the target's worker URL, shared by the records
	outs                  []engine.Output
	logBuf                []byte
	logSeq                uint64
	room                  uint64 // regular mode: next room id

	levels   []workloads.Level
	li       int
	lv       *level
	res      []reports.Level
	records  []reports.Record
	finished bool
	err      error
	stats    Stats
}

// Run simulates cfg to completion and returns its results. It is deterministic: the same
// Config gives the same Result, byte for byte once encoded. Run is safe to call from several
// goroutines at once on distinct Configs (Sweep does).
func Run(cfg Config) (*Result, error) {
	x, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	if err := x.run(); err != nil {
		return nil, err
	}
	return x.result()
}

func newSim(cfg Config) (*sim, error) {
	seed := int64(cfg.Workload.Seed)
	if cfg.Router.Seed != nil {
		seed = *cfg.Router.Seed
	}
	cfg.Workload.Seed = uint64(seed)
	rc := cfg.Router.RoutingOnly()
	rc.Seed = &seed
	cfg.Router = rc
	pd := rc.PDDisaggregation
	if err := cfg.Cluster.Validate(pd); err != nil {
		return nil, err
	}
	if err := cfg.Workload.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Load.Validate(cfg.Workload.IsTrace()); err != nil {
		return nil, err
	}
	cl := cfg.Cluster.WithDefaults(pd)
	x := &sim{cfg: cfg, cl: cl, pd: pd, byURL: map[string]*server{}, rooms: map[uint64]*attempt{},
		slot: map[string]int{}, levels: cfg.Load.Levels(cfg.Workload.IsTrace())}
	if cl.NetLatency > 0 {
		x.lat = int64(cl.NetLatency)
	}
	if err := cfg.Routing.Validate(); err != nil {
		return nil, err
	}
	trc := rc // the routers' settings: rc with the trees bounded by TreeChars
	if tc := cmp.Or(cfg.TreeChars, DefaultTreeChars); tc > 0 && tc < trc.MaxTreeTotalChars {
		trc.MaxTreeTotalChars = tc
	}
	for i := range cfg.Routing.replicas() {
		// Replica 0 draws from the run's seed, so one replica is exactly the simulator without
		// replicas; the others from seeds of their own.
		rs := seed + int64(i)*replicaSeedStride
		rt, err := router.New(trc, &x.clock, router.NewRand(rs))
		if err != nil {
			return nil, err
		}
		rt.OnWorkerEvent(x.countBreakerOpens)
		// A routing text is a view of its conversation's text, which only grows by appending
		// (workloads.Session.ForSimulator) and lives while the conversation does.
		rt.RetainRoutedTexts()
		if cfg.DecisionLog != nil {
			rt.OnObserved(x.logObserved)
		}
		x.reps = append(x.reps, &replica{rt: rt, rng: rand.New(rand.NewPCG(uint64(seed), uint64(i)^kvSeedDomain))})
	}
	tn, err := newTenancy(cfg, len(x.reps))
	if err != nil {
		return nil, err
	}
	x.tn = tn
	rt := x.reps[0].rt
	kvRoles := x.kvRoles(cfg)
	if len(kvRoles) > 0 {
		x.kv = newKVFeed(x.reps)
	}
	x.ids = wire.NewIDGen(wire.NewRand(seed), "sim")

	x.cl.Resolved = map[string]ResolvedServer{}
	for _, g := range cl.roles(pd) {
		role := router.Regular
		switch g.role {
		case engine.RolePrefill:
			role = router.Prefill
		case engine.RoleDecode:
			role = router.Decode
		}
		prof, args, err := cl.server(g.role, g.profile)
		if err != nil {
			return nil, err
		}
		tp, dp, ep := cl.Sizes(g.role)
		par := cl.parallelism(g.role)
		for i := range g.n {
			ec := engine.Config{Role: g.role, DPSize: dp, Profile: prof, DPAttention: cl.DPAttention,
				LinkBandwidth: cl.LinkGbps * 1e9 / 8, Speedup: cl.Speedup,
				SchedulePolicy: cl.SchedulePolicy, DisableOverlap: cl.DisableOverlap, MixedChunk: cl.MixedChunk,
				DecodeRadixCache: cl.DecodeRadixCache && g.role == engine.RoleDecode}
			var sv *server
			if x.kv != nil && slices.Contains(kvRoles, role) {
				ec.KVEvents = func(at time.Time, rank int, evs []engine.KVEvent) { x.publish(sv, at, rank, evs) }
			}
			eng, err := engine.New(args.Apply(ec))
			if err != nil {
				return nil, fmt.Errorf("sim: %s server %d: %w", role, i, err)
			}
			sv = &server{eng: eng, url: WorkerURL(role, i), role: role, prof: prof, cfg: eng.Config(), idx: int32(len(x.servers))}
			if i == 0 && rc.PolicyFor(role) == router.PolicyPredictedLatency {
				if err := x.useLatencyModel(role, sv.cfg); err != nil {
					return nil, err
				}
			}
			for _, rep := range x.reps {
				if err := rep.rt.AddWorker(router.WorkerSpec{URL: sv.url, Role: role, DPSize: dp}); err != nil {
					return nil, err
				}
			}
			x.servers = append(x.servers, sv)
			x.byURL[sv.url] = sv
			if i == 0 {
				x.cl.Resolved[role.String()] = resolved(prof, tp, dp, ep, par.DPAttention, args, sv.cfg)
			}
		}
	}
	for _, t := range rt.Targets() {
		x.slot[t.Name] = x.nslots[t.Role]
		x.nslots[t.Role]++
		x.urls[t.Role] = append(x.urls[t.Role], &t.URL)
	}
	if x.kv != nil {
		if err := x.setupKV(kvRoles); err != nil {
			return nil, err
		}
	}
	x.loads = x.newLoadFeed(seed)
	if err := x.checkDirect(); err != nil {
		return nil, err
	}
	for _, k := range cfg.Kills {
		if _, ok := x.byURL[k.Worker]; !ok {
			return nil, fmt.Errorf("sim: --kill %s: no simulated worker %q (names look like %s)", k, k.Worker, x.servers[0].url)
		}
	}
	return x, nil
}

// resolved describes a pool's servers for results.json: the profile, SGLang's sizes, and the
// engine arguments each rank runs with (the engine's configuration after its defaults).
func resolved(p engine.Profile, tp, dp, ep int, dpa bool, args engine.ServerArgs, c engine.Config) ResolvedServer {
	return ResolvedServer{Profile: p.Name, TPSize: tp, DPSize: dp, EPSize: ep, DPAttention: dpa,
		Args: engine.ServerArgs{ChunkedPrefillSize: c.ChunkedPrefillSize, MaxRunningRequests: c.MaxRunningRequests,
			MaxTotalTokens: c.MaxTotalTokens, PageSize: c.PageSize, CUDAGraphMaxBS: c.CUDAGraphMaxBS,
			MemFractionStatic: args.MemFractionStatic, ScheduleConservativeness: cmp.Or(c.ScheduleConservativeness, 1), Spec: c.Spec}}
}

// countBreakerOpens is every router's worker-event listener: it counts breakers opening.
func (x *sim) countBreakerOpens(ev router.WorkerEvent) {
	if ev.To != router.WorkerBreakerOpen {
		return
	}
	if x.stats.BreakerOpens == nil {
		x.stats.BreakerOpens = map[string]int{}
	}
	x.stats.BreakerOpens[ev.URL]++
}

// push schedules e at virtual time at.
func (x *sim) push(at int64, e event) { x.q.Push(at, e) }

// pushHop schedules e a network hop after at (at + the one-way latency): usually no earlier
// than the last hop scheduled, so these events skip the heap (queue).
func (x *sim) pushHop(at int64, e event) { x.q.pushHop(at+x.lat, e) }

// now is the virtual time as an engine time.
func (x *sim) t() time.Time { return Epoch.Add(time.Duration(x.clock.now)) }

// touch schedules a wake-up of sv at its next engine event if that is earlier than the one
// already scheduled. Call it after every call into sv's engine.
func (x *sim) touch(sv *server) {
	t, ok := sv.eng.NextEvent()
	if !ok {
		return
	}
	at := max(ns(t), x.clock.now)
	if sv.waking && sv.wakeAt <= at {
		return
	}
	sv.waking, sv.wakeAt = true, at
	x.push(at, event{kind: evWake, srv: sv.idx})
}

func (x *sim) run() error {
	defer func() {
		if x.lv != nil {
			_ = x.lv.pf.close() // a run stopped by an error leaves its level open
		}
	}()
	for _, k := range x.cfg.Kills {
		x.push(int64(k.At), event{kind: evKill, srv: x.byURL[k.Worker].idx})
		if k.Back > 0 {
			x.push(int64(k.Back), event{kind: evRestart, srv: x.byURL[k.Worker].idx})
		}
	}
	for i, d := range x.cfg.Direct {
		x.push(int64(d.At), event{kind: evDirect, srv: int32(i)})
	}
	if len(x.cfg.Kills) > 0 {
		x.push(x.probeInterval(), event{kind: evProbe})
	}
	x.push(int64(time.Second), event{kind: evTick})
	x.startLoadPolls()
	x.startLevel()
	for !x.finished && x.err == nil && x.q.Len() > 0 {
		e := x.q.Pop()
		x.clock.now = e.At
		x.stats.Events++
		x.dispatch(&e.V)
	}
	if x.err != nil {
		return x.err
	}
	if !x.finished {
		return errors.New("sim: event queue ran dry before the workload ended (a request was lost)")
	}
	// Drain what the engines still have to say (aborted rooms' failures, late prefill
	// completions): nothing of it reaches a request any more.
	for _, sv := range x.servers {
		for {
			t, ok := sv.eng.NextEvent()
			if !ok {
				break
			}
			x.clock.now = max(x.clock.now, ns(t))
			x.outs = sv.eng.AppendAdvance(x.outs[:0], t)
			for i := range x.outs {
				x.output(sv, &x.outs[i])
			}
		}
		x.stats.LiveRooms += sv.eng.Live()
	}
	x.stats.Virtual = time.Duration(x.clock.now)
	for _, rep := range x.reps {
		x.stats.Targets = append(x.stats.Targets, rep.rt.Targets()...)
		for _, role := range []router.Role{router.Regular, router.Prefill, router.Decode} {
			if size, ok := rep.rt.TreeStats(role); ok {
				x.stats.TreeTrims += size.Trims
			}
		}
	}
	if x.kv != nil {
		x.kv.count(&x.stats.KV, x.reps)
	}
	if x.loads != nil {
		x.stats.Loads = x.loads.stats
	}
	return x.err
}

func (x *sim) probeInterval() int64 {
	return int64(x.cfg.Router.Health().Interval)
}

func (x *sim) dispatch(ev *event) {
	switch ev.kind {
	case evWake:
		sv := x.servers[ev.srv]
		if !sv.waking || sv.wakeAt != x.clock.now {
			return // superseded by an earlier wake-up
		}
		sv.waking = false
		x.outs = sv.eng.AppendAdvance(x.outs[:0], x.t())
		for i := range x.outs {
			x.output(sv, &x.outs[i])
		}
		x.touch(sv)
	case evSend:
		x.send(ev.conv())
	case evArrive:
		r := ev.req()
		r.rep = x.pickReplica(r.turn.Session)
		r.retrier = x.reps[r.rep].rt.NewRetrier()
		x.admit(r)
	case evQueueTimeout:
		x.queueTimeout(ev.req())
	case evRetry:
		x.route(ev.req())
	case evSubmit:
		x.submit(ev.att())
	case evHandshake:
		if a := ev.att(); !a.over && !a.preEnded {
			a.pre.eng.HandshakeCached(x.t(), a.room, a.decCached)
			x.touch(a.pre)
		}
	case evKVArrived:
		if a := ev.att(); !a.over && !a.decEnded {
			a.dec.eng.KVArrived(x.t(), a.room, a.preCached)
			x.touch(a.dec)
		}
	case evLegEnd:
		x.legEnd(ev)
	case evClientEnd:
		x.clientEnd(ev.req())
	case evArrival:
		x.arrival()
	case evTick:
		for _, rep := range x.reps {
			rep.rt.Tick(x.t())
		}
		x.push(x.clock.now+int64(time.Second), event{kind: evTick})
	case evProbe:
		for _, rep := range x.reps {
			for _, sv := range x.servers {
				var probeErr error
				if sv.killed {
					probeErr = errSimKilled
				}
				if _, err := rep.rt.ObserveHealth(sv.url, probeErr, x.t()); err != nil {
					x.err = err
				}
			}
		}
		x.push(x.clock.now+x.probeInterval(), event{kind: evProbe})
	case evKill:
		sv := x.servers[ev.srv]
		sv.eng.Kill(x.t())
		sv.killed = true
		x.touch(sv)
	case evRestart: // back in rotation once the health probes pass, as serve's
		sv := x.servers[ev.srv]
		sv.eng.Restart(x.t())
		sv.killed = false
		x.touch(sv)
	case evKVBatch:
		x.deliverKV(ev.kv(), int(ev.srv))
	case evLoadPoll:
		x.pollLoads(int(ev.srv))
	case evLoadReport:
		x.deliverLoads(int(ev.srv))
	case evDirect:
		x.submitDirect(int(ev.srv))
	}
}

func (x *sim) result() (*Result, error) {
	w, err := reports.NewWorkload(x.cfg.Workload.Workload, x.cfg.Workload.Summary())
	if err != nil {
		return nil, err
	}
	clusterJSON, err := json.Marshal(x.cl)
	if err != nil {
		return nil, fmt.Errorf("sim: cluster: %w", err)
	}
	routerJSON, err := x.routerMeta()
	if err != nil {
		return nil, fmt.Errorf("sim: router config: %w", err)
	}
	res := &reports.Results{
		Schema: reports.SchemaVersion,
		Meta: reports.Meta{Tool: reports.ToolSim, Version: x.cfg.Version, Seed: *x.cfg.Router.Seed,
			Workload: w, Cluster: clusterJSON, Router: routerJSON},
		Levels: x.res,
	}
	if res.Levels == nil {
		res.Levels = []reports.Level{}
	}
	if err := res.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &Result{Results: res, Records: x.records, Stats: x.stats}, nil
}

// errSimKilled is a killed server's health probe failure.
var errSimKilled = errors.New("GET /health: connection refused (the server was killed)")

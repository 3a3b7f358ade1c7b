package sim

import (
	"errors"
	"hash/fnv"
	"math"
	"time"
	"unsafe"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// request is one client request: a turn of a conversation, through all its attempts.
type request struct {
	conv     *conv
	turn     workloads.Turn
	route    wire.Route
	id       string   // session/turn, e.g. "multiturn-3/1"
	recorded bool     // not a warm-up request
	sendAt   int64    // client send time
	replyIDs []uint32 // regular mode: the reply's token ids (the server caches them)
	retrier  *router.Retrier
	rep      int            // the router replica handling it (all its attempts)
	rreq     router.Request // the routing view, reused by retries (Avoid grows)
	att      *attempt       // current (last) attempt
	attempts int

	firstTok, lastTok int64   // client-observed token times; firstTok < 0: none yet
	itl               []int64 // ns between client-observed tokens (recorded requests)
	usage             engine.Usage
	errMsg            *string

	tenant  string         // --tenant-mix's pick; "" without one
	ticket  *router.Ticket // its admission ticket; nil when refused or nothing admits
	refused string         // the admission's reason when it refused the request
}

// attempt is one Route of a request and the engine legs it started.
type attempt struct {
	req              *request
	d                *router.Decision
	room             uint64
	rid              string
	pre, dec, reg    *server
	preRank, decRank int // engine ranks: the target's DP rank, or -1 (the server picks)
	submitAt         int64
	engFirst         int64  // engine time of the first token (prefill's in PD)
	preCached        int    // prefill's cached tokens, carried to decode with the KV
	decCached        int    // decode radix cache: prompt tokens the decode side holds, told to prefill
	preEnded         bool   // the prefill leg's engine room ended (done, failed or aborted)
	decEnded         bool   // the decode (or regular) leg's engine room ended
	started          bool   // a decode token reached the router
	startedAt        int64  // when it did (router time)
	over             bool   // the router is done with this attempt
	preWhy, decWhy   string // the engine's reason for a failed leg
	// pd decides, as in serve, who a PD leg's failure charges, whether it cancels the other
	// leg, and how the attempt fails (router.PDAttempt).
	pd router.PDAttempt
}

// ended reports whether role's engine leg ended.
func (a *attempt) ended(role router.Role) bool {
	if role == router.Prefill {
		return a.preEnded
	}
	return a.decEnded
}

func (a *attempt) server(role router.Role) *server {
	switch role {
	case router.Prefill:
		return a.pre
	case router.Decode:
		return a.dec
	}
	return a.reg
}

// send is the client sending conversation c's pending turn.
func (x *sim) send(c *conv) {
	lv := x.lv
	if !x.canIssue() {
		x.endConv(c)
		return
	}
	sc := c.sc
	r := &request{conv: c, turn: sc.turn, route: sc.route, replyIDs: sc.reply, id: sc.id,
		recorded: lv.issued >= x.cfg.Load.Warmup, sendAt: x.clock.now, firstTok: -1}
	if r.recorded && !lv.recording {
		lv.recording, lv.recBegin = true, x.clock.now
		lv.batchHit0, lv.batchNew0 = x.batchCounters()
		lv.prompt0, lv.cached0, lv.host0, _ = x.tierCounters()
	}
	lv.issued++
	x.push(x.arriveAt(sc.jitter), event{kind: evArrive, p: unsafe.Pointer(r)})
}

// arriveAt is when a request sent now with jitter reaches the router. Requests sent at one
// instant (an open loop at --rate inf, clients released by one decode step) keep their send
// order: each arrives after the one sent before it at that instant, so the jitter spreads
// them but never reorders them (--gsp-ordered sends group by group and must arrive so).
func (x *sim) arriveAt(jitter int64) int64 {
	at := x.clock.now + x.lat + jitter
	if x.clock.now == x.lastSend && at <= x.lastArrival {
		at = x.lastArrival + 1
	}
	x.lastSend, x.lastArrival = x.clock.now, at
	return at
}

// maxArrivalJitter bounds arrivalJitter.
const maxArrivalJitter = 50 * time.Microsecond

// arrivalJitter is a small deterministic offset of a request's arrival at the router, in
// [0, maxArrivalJitter). Live, clients whose replies ended on the same decode step send
// their next turns tens of microseconds apart, so the second waits for the prefill step the
// first started; without it they would arrive at the same virtual instant and share one step,
// and the simulated TTFT tail would be too short.
func arrivalJitter(id string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return int64(h.Sum64() % uint64(maxArrivalJitter))
}

// route is the router handling one attempt of r, as serve does: Route (policies draw from
// the router's source), then rid and room from the wire source, then both legs sent.
func (x *sim) route(r *request) {
	if r.rreq.Text == "" {
		r.rreq.Text, r.rreq.Model, r.rreq.TextRunes = r.turn.RouteText, r.turn.Model, r.turn.RouteRunes
		r.rreq.RoutingKey = r.turn.Session // consistent_hashing keys a conversation, as a client sending X-SMG-Routing-Key
		if x.kv != nil {
			// Serve's precise mode gives the router the prompt ids the worker will see (input_ids,
			// or its tokenizer and chat template): the very ids the engine caches.
			r.rreq.Tokens = r.turn.PromptIDs
		}
	}
	d, err := x.reps[r.rep].rt.Route(&r.rreq)
	if err != nil {
		var nt *router.NoTargetError
		var ov *router.OverloadError
		switch {
		case errors.As(err, &ov):
			x.shed(r, ov)
		case errors.As(err, &nt):
			r.errMsg = reports.FormatError(reports.HTTPErrorKind(503), err.Error())
			x.pushHop(x.clock.now, event{kind: evClientEnd, p: unsafe.Pointer(r)})
		default:
			x.err = err
		}
		return
	}
	x.stats.Attempts++
	r.attempts++
	a := &attempt{req: r, d: d, preRank: -1, decRank: -1}
	r.att = a
	if x.pd {
		a.pre, a.dec = x.byURL[d.Prefill.URL()], x.byURL[d.Decode.URL()]
		if rk, ok := d.Prefill.Rank(); ok {
			a.preRank = rk
		}
		if rk, ok := d.Decode.Rank(); ok {
			a.decRank = rk
		}
		// The workloads send single requests without a rid: serve then draws the rid and the
		// room from the wire source in this order (wire.Body.PD), and so does the simulator.
		a.rid = x.ids.RID(r.route)
		a.room = x.ids.Room()
		if x.rooms[a.room] != nil { // a 63-bit collision: astronomically unlikely
			a.room ^= 1 << 62
		}
	} else {
		a.reg = x.byURL[d.Regular.URL()]
		if rk, ok := d.Regular.Rank(); ok {
			a.decRank = rk
		}
		x.room++
		a.room = x.room
	}
	x.rooms[a.room] = a
	if w := x.cfg.DecisionLog; w != nil {
		x.logDecision(r, a)
		if _, err := w.Write(x.logBuf); err != nil {
			x.err = err
		}
	}
	x.pushHop(x.clock.now, event{kind: evSubmit, p: unsafe.Pointer(a)})
}

// shed is the router shedding r because every available target of a role is overloaded, as
// serve's shed does (router/server/inference.go): 503 with Retry-After at once, whatever
// attempt this was, never queued and not retried by the client (the bench's does not retry
// either), with a decision-log line of reason "overloaded".
func (x *sim) shed(r *request, ov *router.OverloadError) {
	x.stats.Shed++
	x.stats.ShedRetryAfter += time.Duration(max(1, math.Ceil(ov.RetryAfter.Seconds()))) * time.Second
	if w := x.cfg.DecisionLog; w != nil {
		x.logSeq++
		line := wire.DecisionLine{Seq: x.logSeq, ID: r.id, Route: r.turn.Path, Reason: reasonOverloaded}
		x.logBuf = wire.AppendDecisionLine(x.logBuf[:0], &line)
		if _, err := w.Write(x.logBuf); err != nil {
			x.err = err
		}
	}
	r.errMsg = reports.FormatError(reports.HTTPErrorKind(503), ov.Error())
	x.pushHop(x.clock.now, event{kind: evClientEnd, p: unsafe.Pointer(r)})
}

// reasonOverloaded is the decision-log reason of a shed request: serve's (router/server/
// inference.go shed).
const reasonOverloaded = "overloaded"

func (x *sim) logDecision(r *request, a *attempt) {
	x.logSeq++
	line := wire.DecisionLine{Seq: x.logSeq, ID: r.id, RID: a.rid, Route: r.turn.Path,
		Reason: string(a.d.Reason), MatchRate: a.d.MatchRate}
	if x.pd {
		line.Room = a.room
	}
	var ts [3]wire.DecisionTarget
	set := func(role router.Role) *wire.DecisionTarget {
		leg, ok := a.d.Leg(role)
		if !ok {
			return nil
		}
		ts[role] = wire.DecisionTarget{Worker: leg.Target.URL(), Index: leg.WorkerIndex, Rank: leg.Target.RankPtr(),
			Signal: string(leg.Signal), LoadAgeMs: float64(leg.LoadAge.Microseconds()) / 1000, Tier: leg.Tier()}
		return &ts[role]
	}
	line.Prefill, line.Decode, line.Regular = set(router.Prefill), set(router.Decode), set(router.Regular)
	if p, ok := a.d.Prediction(); ok {
		f := wire.Figures(p.TTFT, p.TPOT, p.CorrectionTTFT, p.CorrectionTPOT)
		line.Predicted = &f
		a.d.SetLogID(r.id)
	}
	x.logBuf = wire.AppendDecisionLine(x.logBuf[:0], &line)
}

// submit is an attempt reaching its worker(s).
func (x *sim) submit(a *attempt) {
	if a.over {
		return
	}
	r := a.req
	a.submitAt = x.clock.now
	now := x.t()
	req := engine.Req{Room: a.room, Prompt: r.turn.PromptIDs, MaxNew: r.turn.MaxTokens, Gaps: x.gapSink(r)}
	if x.pd {
		req.Rank = a.preRank
		a.pre.eng.Submit(now, req)
		req.Rank = a.decRank
		a.dec.eng.Submit(now, req)
		x.touch(a.pre)
		x.touch(a.dec)
		return
	}
	req.Rank = a.decRank
	req.Output = r.replyIDs
	a.reg.eng.Submit(now, req)
	x.touch(a.reg)
}

// output handles one engine output of sv.
func (x *sim) output(sv *server, o *engine.Output) {
	a := x.rooms[o.Room]
	if a == nil {
		return // an aborted or finished attempt
	}
	at := ns(o.At)
	switch sv.role {
	case router.Prefill:
		if a.preEnded {
			return
		}
		switch o.Kind {
		case engine.KindTransferDone:
			a.preEnded = true
			a.engFirst = ns(o.FirstToken)
			a.preCached = o.CachedTokens
			if !a.decEnded {
				// The KV "transfer done" signal crosses the network like the live bootstrap
				// transport's (ARCHITECTURE §4): one hop.
				x.pushHop(at, event{kind: evKVArrived, p: unsafe.Pointer(a)})
			}
			x.pushHop(at, event{kind: evLegEnd, ok: true, role: uint8(router.Prefill), p: unsafe.Pointer(a)})
		case engine.KindFailed:
			a.preEnded, a.preWhy = true, o.Reason
			x.pushHop(at, event{kind: evLegEnd, role: uint8(router.Prefill), p: unsafe.Pointer(a)})
		}
	default: // decode or regular
		if a.decEnded {
			return
		}
		switch o.Kind {
		case engine.KindPreallocated:
			a.decCached = o.CachedTokens
			x.pushHop(at, event{kind: evHandshake, p: unsafe.Pointer(a)})
		case engine.KindToken:
			if !x.pd && o.Index == 0 {
				a.engFirst = at
			}
			x.token(a, at)
		case engine.KindFinished:
			a.decEnded = true
			a.req.usage = o.Usage
			x.pushHop(at, event{kind: evLegEnd, ok: true, role: uint8(sv.role), p: unsafe.Pointer(a)})
		case engine.KindFailed:
			a.decEnded, a.decWhy = true, o.Reason
			x.pushHop(at, event{kind: evLegEnd, role: uint8(sv.role), p: unsafe.Pointer(a)})
		}
	}
}

// discardGaps is the gap sink of warm-up requests.
type discardGaps struct{}

func (discardGaps) AddN(int64, int64) {}

// gapSink is where the engine counts r's inter-token gaps, or nil for a KindToken output per
// token. A level keeps only the distribution of its successful requests' gaps, so without
// per-request ITL lists (KeepITL) the engine counts them straight into the level's ITL. Only
// with --kill is that not exact (a stream cut by a killed server would count its gaps), so
// then every token is reported and a request's gaps join the level's when it succeeds. (A
// room the engine fails after streaming for want of a whole rank's KV counts its gaps.)
func (x *sim) gapSink(r *request) engine.GapSink {
	if x.perToken() {
		return nil
	}
	if !r.recorded {
		return discardGaps{}
	}
	return &x.lv.itl
}

// perToken reports whether the engines report every token (see gapSink).
func (x *sim) perToken() bool { return x.cfg.KeepITL || len(x.cfg.Kills) > 0 }

// token records a streamed token produced at engine time at: the router relays it, the
// client sees it 2×latency later.
func (x *sim) token(a *attempt, at int64) {
	r := a.req
	if !a.started {
		a.started, a.startedAt = true, at+x.lat
	}
	ct := at + 2*x.lat
	if r.firstTok < 0 {
		r.firstTok = ct
		a.d.ObserveFirstToken(Epoch.Add(time.Duration(at + x.lat))) // the router relays it then
		if r.recorded && r.itl == nil && x.perToken() {
			r.itl = make([]int64, 0, max(r.turn.MaxTokens-1, 0))
		}
	} else if r.recorded {
		r.itl = append(r.itl, ct-r.lastTok)
	}
	r.lastTok = ct
}

// legEnd is the router seeing a leg finish, at the moment serve would call Decision.Done.
func (x *sim) legEnd(ev *event) {
	a := ev.att()
	role := router.Role(ev.role)
	if x.pd {
		x.syncDecode(a)
	}
	if ev.ok {
		if x.pd {
			a.pd.Answered(role)
		}
		a.d.Done(role, router.Success)
		if role == router.Prefill || a.over {
			return
		}
		a.over = true
		delete(x.rooms, a.room)
		x.pushHop(x.clock.now, event{kind: evClientEnd, p: unsafe.Pointer(a.req)})
		return
	}
	// As the worker answers: a dead server sends nothing (a transport error); a live one
	// answers 500 with the engine's reason, as fakeworker does. router.PDAttempt,
	// router.LegOutcome and router.Retryable decide, as in serve.
	why := a.decWhy
	if role == router.Prefill {
		why = a.preWhy
	}
	outcome := router.Attempt{Status: 500, Body: []byte(why)}
	if a.server(role).eng.Dead() {
		outcome = router.Attempt{Transport: true}
	}
	x.legFailed(a, role, outcome, why)
}

// legFailed is the router seeing role's leg of a fail as outcome says (why: the worker's
// reason, for the client's error).
func (x *sim) legFailed(a *attempt, role router.Role, outcome router.Attempt, why string) {
	fail := pdFailure{Failed: role, Blamed: role, Attempt: outcome}
	switch {
	case !x.pd || role == router.Decode && a.pd.Committed():
		// A regular leg, or a decode stream cut after its head went out (serve's relay
		// judges that one: the leg's own outcome).
		a.d.Done(role, router.LegOutcome(outcome))
	default:
		cancelPeer := a.pd.Failed(role, outcome)
		a.d.Done(role, a.pd.Outcome(role))
		if !cancelPeer { // the attempt goes on (its head went out), or failed already
			return
		}
		other := router.Decode
		if role == router.Decode {
			other = router.Prefill
		}
		if !a.ended(other) { // serve cancels the paired leg
			if other == router.Prefill {
				a.preEnded = true
			} else {
				a.decEnded = true
			}
			sv := a.server(other)
			sv.eng.Abort(x.t(), a.room, role.String()+" leg failed")
			x.touch(sv)
		}
		a.d.Done(other, a.pd.Outcome(other))
		f, _ := a.pd.Failure()
		fail = pdFailure(f)
	}
	if a.over {
		return
	}
	a.over = true
	delete(x.rooms, a.room)
	r := a.req
	// As serve: the retry avoids the worker at fault, if another is available.
	blamed := a.server(fail.Blamed)
	r.rreq.Avoid = append(r.rreq.Avoid, blamed.url)
	fail.Attempt.Started = a.started && a.startedAt <= x.clock.now
	wait, retry := r.retrier.Next(fail.Attempt)
	if retry {
		x.push(x.clock.now+int64(wait), event{kind: evRetry, p: unsafe.Pointer(r)})
		return
	}
	if r.retrier.OverBudget() {
		x.stats.RetriesOverBudget++
	}
	msg := fail.Failed.String() + " " + a.server(fail.Failed).url + ": " + why
	switch {
	case fail.Blamed == router.Prefill && fail.Failed == router.Decode:
		msg = "prefill " + blamed.url + ": never delivered the KV: " + msg
	case fail.Blamed == router.Decode && fail.Failed == router.Prefill:
		msg = "decode " + blamed.url + ": never completed the bootstrap with its prefill: " + msg
	}
	// The status serve answers: the worker's own, or 502 for a transport error and for a
	// failure charged to the peer that caused it.
	status := 502
	if fail.Blamed == fail.Failed && !fail.Attempt.Transport {
		status = fail.Attempt.Status
	}
	if fail.Attempt.Started {
		r.errMsg = reports.FormatError(reports.ErrKindStreamCut, msg)
	} else {
		r.errMsg = reports.FormatError(reports.HTTPErrorKind(status), msg)
	}
	x.pushHop(x.clock.now, event{kind: evClientEnd, p: unsafe.Pointer(r)})
}

// pdFailure is how an attempt failed: router.PDFailureReport, which a regular attempt's
// failure fills in too (Failed and Blamed its own leg).
type pdFailure router.PDFailureReport

// syncDecode tells a's PD state that decode's first token has reached the router, once it has
// by now (the token was relayed at startedAt): its head is committed there, as serve commits
// it at the first event.
func (x *sim) syncDecode(a *attempt) {
	if a.started && a.startedAt <= x.clock.now && !a.pd.Committed() {
		a.pd.Answered(router.Decode)
		a.pd.Commit()
	}
}

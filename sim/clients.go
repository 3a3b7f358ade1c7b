package sim

import (
	"math"
	"time"
	"unsafe"

	"github.com/pdrouter/pdrouter/reports"
	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/sim/engine"
	"github.com/pdrouter/pdrouter/workloads"
)

// conv is a conversation in progress. In closed loop it is one of the N clients, which takes
// the next conversation when its own ends; in open loop it is one arrival's conversation.
type conv struct {
	sc     *script
	client bool
}

// level is one load level in progress.
type level struct {
	info      workloads.Level
	pf        *prefetcher
	begin     int64 // virtual start of the level
	budget    int   // requests to issue (warm-up included); 0 = until the workload ends
	issued    int
	active    int  // conversations alive plus a pending arrival
	starting  bool // clients are being spawned: do not end the level yet
	exhausted bool // the source returned io.EOF
	recording bool
	recBegin  int64 // first recorded send
	recEnd    int64 // last recorded end
	// batchHit0 and batchNew0 are the engines' SGLang-style hit counters when recording began.
	batchHit0, batchNew0 int64
	// prompt0, cached0 and host0 are the engines' admitted prompt, cached and host-tier-loaded
	// tokens then (tierCounters).
	prompt0, cached0, host0 int64
	arr                     workloads.Arrivals
	nextArr                 int
	pending                 *script // trace: the conversation whose arrival is scheduled
	records                 []reports.Record
	itl                     reports.Counts // ITLs of the recorded successful requests

	// simulator metrics over the recorded requests
	predicted, predictedW float64 // Σ match rate × input tokens, Σ input tokens
	counts                [3][]int
	queue                 []float64
}

// canIssue reports whether the level may send another request at now.
func (lv *level) canIssue(now int64, d time.Duration) bool {
	return (lv.budget == 0 || lv.issued < lv.budget) && (d == 0 || now < lv.begin+int64(d))
}

func (x *sim) canIssue() bool { return x.lv.canIssue(x.clock.now, x.cfg.Load.Duration) && x.err == nil }

// startLevel starts level x.li at the current virtual time.
func (x *sim) startLevel() {
	info := x.levels[x.li]
	params := x.cfg.Load.LevelParams(x.cfg.Workload, x.li)
	var pf *prefetcher
	if x.cfg.Conversations != nil {
		var err error
		if pf, err = x.cfg.Conversations.prefetcher(params, !x.pd); err != nil {
			x.err = err
			return
		}
	} else {
		src, err := workloads.NewSource(params)
		if err != nil {
			x.err = err
			return
		}
		pf = startPrefetch(src, !x.pd)
	}
	lv := &level{info: info, pf: pf, begin: x.clock.now, starting: true}
	if x.cfg.Load.Requests > 0 {
		lv.budget = x.cfg.Load.Warmup + x.cfg.Load.Requests
	}
	for role := range lv.counts {
		lv.counts[role] = make([]int, x.nslots[role])
	}
	if n := x.levelRequests(); n > 0 {
		lv.records = make([]reports.Record, 0, n)
		lv.queue = make([]float64, 0, n)
	}
	x.lv = lv
	switch {
	case info.Concurrency > 0:
		for range info.Concurrency {
			c := &conv{client: true}
			lv.active++
			x.nextSession(c)
		}
	case info.Arrival == workloads.ArrivalTrace:
		x.scheduleTrace()
	default:
		lv.arr = info.Arrivals(x.cfg.Load, x.cfg.Workload.Seed+uint64(x.li), 0)
		x.scheduleArrival()
	}
	lv.starting = false
	if lv.active == 0 {
		x.endLevel()
	}
}

// levelRequests is how many requests a level of the multiturn workload sends when nothing cuts
// it short (its conversations × turns, or the --requests budget): the capacity of its records,
// which a run of a million requests would otherwise grow by copying, 150 MB at the last step.
// 0 when unknown.
func (x *sim) levelRequests() int {
	p := x.cfg.Workload
	if p.Workload != workloads.WorkloadMultiTurn || x.cfg.Load.Duration > 0 {
		return 0
	}
	n := p.Conversations * p.Turns
	if x.cfg.Load.Requests > 0 {
		n = min(n, x.cfg.Load.Warmup+x.cfg.Load.Requests)
	}
	return n
}

// nextSession gives conversation c a new conversation and sends its first turn now, or ends c.
func (x *sim) nextSession(c *conv) {
	sc, _ := x.takeSession()
	if sc == nil {
		x.endConv(c)
		return
	}
	x.begin(c, sc)
}

// takeSession returns the level's next conversation (and its trace arrival offset), or nil when
// the level may not start one.
func (x *sim) takeSession() (*script, int64) {
	lv := x.lv
	if lv.exhausted || !x.canIssue() {
		return nil, 0
	}
	sc, arr, err := lv.pf.next()
	if err != nil {
		x.err = err
		return nil, 0
	}
	if sc == nil {
		lv.exhausted = true
	}
	return sc, arr
}

// begin starts conversation sc on c: its first turn is sent now.
func (x *sim) begin(c *conv, sc *script) {
	c.sc = sc
	if !sc.has {
		x.endConv(c)
		return
	}
	x.push(x.clock.now, event{kind: evSend, p: unsafe.Pointer(c)})
}

// endConv retires c; the level ends with its last conversation.
func (x *sim) endConv(c *conv) {
	c.sc = nil
	x.lv.active--
	if x.lv.active == 0 && !x.lv.starting {
		x.endLevel()
	}
}

// scheduleArrival schedules the level's next open-loop arrival, if any.
func (x *sim) scheduleArrival() {
	lv := x.lv
	if lv.exhausted || !x.canIssue() {
		return
	}
	off, ok := lv.arr.At(lv.nextArr)
	if !ok {
		return
	}
	lv.active++
	x.push(max(lv.begin+int64(off), x.clock.now), event{kind: evArrival})
}

// scheduleTrace reads the next trace conversation and schedules it at its own timestamp.
func (x *sim) scheduleTrace() {
	lv := x.lv
	sc, arr := x.takeSession()
	if sc == nil {
		return
	}
	lv.pending = sc
	lv.active++
	x.push(max(lv.begin+arr, x.clock.now), event{kind: evArrival})
}

// arrival is an open-loop arrival: a new conversation starts.
func (x *sim) arrival() {
	lv := x.lv
	c := &conv{}
	if lv.info.Arrival == workloads.ArrivalTrace {
		sc := lv.pending
		lv.pending = nil
		x.begin(c, sc) // the pending arrival becomes the conversation
		x.scheduleTrace()
		return
	}
	lv.nextArr++
	sc, _ := x.takeSession()
	if sc == nil {
		x.endConv(c) // the pending arrival ends
		return
	}
	x.begin(c, sc)
	x.scheduleArrival()
}

// clientEnd is the client receiving the end of r's response (or its error).
func (x *sim) clientEnd(r *request) {
	x.stats.Requests++
	if r.retrier != nil { // routed: it leaves the router's retry budget
		r.retrier.Done()
	}
	if r.att != nil && r.errMsg == nil && r.firstTok >= 0 { // predicted_latency learns from what the router saw
		r.att.d.ObserveEnd(Epoch.Add(time.Duration(x.clock.now-x.lat)), r.usage.CompletionTokens) // the router relayed the end a hop ago
	}
	lv := x.lv
	if r.recorded {
		x.record(r)
	}
	x.release(r)
	if p := x.cfg.Progress; p != nil && x.stats.Requests%1024 == 0 {
		p(lv.info.Label, x.stats.Requests, time.Duration(x.clock.now))
	}
	c := r.conv
	if r.errMsg == nil {
		if c.sc.next() {
			x.push(x.clock.now+int64(c.sc.turn.ThinkTime), event{kind: evSend, p: unsafe.Pointer(c)})
			return
		}
	}
	if c.client {
		x.nextSession(c)
		return
	}
	x.endConv(c)
}

// record turns a finished request into its requests.jsonl record and the level's metrics.
func (x *sim) record(r *request) {
	lv := x.lv
	now := x.clock.now
	lv.recEnd = max(lv.recEnd, now)
	rec := reports.Record{Level: lv.info.Label, ID: r.id, StartMs: ms(r.sendAt - lv.recBegin),
		E2EMs: ms(now - r.sendAt), InputTokens: r.turn.InputTokens, Error: r.errMsg}
	if lv.info.Concurrency == 0 {
		rec.QueueMs = new(0.0) // the simulated client sends every request on time
	}
	if r.firstTok >= 0 {
		rec.TTFTMs = new(ms(r.firstTok - r.sendAt))
	}
	x.recordTenant(r, rec.TTFTMs)
	if a := r.att; a != nil {
		for _, role := range []router.Role{router.Prefill, router.Decode, router.Regular} {
			if leg, ok := a.d.Leg(role); ok {
				slot := x.slot[leg.Target.Name()]
				url := x.urls[role][slot] // one string per target: a million records share 32
				switch role {
				case router.Prefill:
					rec.Targets.Prefill = url
				case router.Decode:
					rec.Targets.Decode = url
				default:
					rec.Targets.Regular = url
				}
				lv.counts[role][slot]++
			}
		}
	}
	if r.errMsg == nil {
		rec.OutputTokens = r.usage.CompletionTokens
		rec.CachedTokens = r.usage.CachedTokens
		lv.itl.AddAll(r.itl)
		if x.cfg.KeepITL {
			rec.ITLMs = make([]float64, len(r.itl))
			for i, d := range r.itl {
				rec.ITLMs[i] = ms(d)
			}
		}
		r.itl = nil
		if rec.TTFTMs != nil {
			rec.TPOTMs = reports.TPOT(*rec.TTFTMs, rec.E2EMs, rec.OutputTokens)
		}
		a := r.att
		lv.predicted += a.d.MatchRate * float64(rec.InputTokens)
		lv.predictedW += float64(rec.InputTokens)
		sv := a.reg
		if x.pd {
			sv = a.pre
		}
		q := a.engFirst - a.submitAt - int64(idealPrefill(sv, rec.InputTokens, rec.CachedTokens))
		lv.queue = append(lv.queue, ms(max(q, 0)))
	}
	lv.records = append(lv.records, rec)
}

// idealPrefill is the time sv's profile needs to prefill the uncached part of a prompt alone on
// an idle rank (chunk by chunk), with its speedup: what is left of the time to the first token
// is queueing (SimStats.QueueDelayMs).
func idealPrefill(sv *server, input, cached int) time.Duration {
	p := sv.prof
	var d time.Duration
	if p.Constant {
		d = p.TTFT
	} else {
		done := cached
		for done < input {
			n := min(sv.cfg.ChunkedPrefillSize, input-done)
			d += p.PrefillTime(n, float64(n)*(float64(done)+float64(n)/2))
			done += n
		}
	}
	return time.Duration(float64(d) / sv.cfg.Speedup)
}

// endLevel summarises the level and starts the next one, or finishes the run.
func (x *sim) endLevel() {
	lv := x.lv
	if err := lv.pf.close(); err != nil && x.err == nil {
		x.err = err
	}
	info := x.levelInfo(lv.info)
	if lv.recording {
		info.Duration = time.Duration(lv.recEnd - lv.recBegin)
	}
	info.SLO = x.cfg.SLO
	info.Sim = x.simStats(lv)
	if prompt, cached, host, tiered := x.tierCounters(); lv.recording && tiered && prompt > lv.prompt0 {
		n := float64(prompt - lv.prompt0)
		gpu, hostRate := float64(cached-lv.cached0-(host-lv.host0))/n, float64(host-lv.host0)/n
		info.Sim.GPUCacheHitRate, info.Sim.HostCacheHitRate = &gpu, &hostRate
	}
	info.ITL = &lv.itl
	if hit, nw := x.batchCounters(); lv.recording && hit+nw > lv.batchHit0+lv.batchNew0 {
		rate := float64(hit-lv.batchHit0) / float64(hit+nw-lv.batchHit0-lv.batchNew0)
		info.SGLangCacheHitRate = &rate
	}
	l, err := reports.Aggregate(info, lv.records)
	if err != nil {
		x.err = err
		return
	}
	x.res = append(x.res, l)
	if x.records == nil {
		x.records = lv.records // not a copy: a million records are 150 MB
	} else {
		x.records = append(x.records, lv.records...)
	}
	lv.records = nil
	if p := x.cfg.Progress; p != nil {
		p(lv.info.Label, x.stats.Requests, time.Duration(x.clock.now))
	}
	x.li++
	if x.li == len(x.levels) {
		x.finished = true
		return
	}
	if x.cfg.Load.FlushCache {
		x.flush()
	}
	x.startLevel()
}

// batchCounters sums the engines' SGLang-style hit accounting (cached and new tokens of every
// prefill batch so far) over every server and rank.
func (x *sim) batchCounters() (hit, nw int64) {
	for _, sv := range x.servers {
		for _, l := range sv.eng.Loads(x.t()) {
			hit += l.BatchHitTokens
			nw += l.BatchNewTokens
		}
	}
	return hit, nw
}

// tierCounters sums the prefill and regular engines' admitted prompt tokens, those found cached, and those of them
// loaded back from a host tier (--hicache-ratio), and whether any has one.
func (x *sim) tierCounters() (prompt, cached, host int64, tiered bool) {
	for _, sv := range x.servers {
		if sv.cfg.Role == engine.RoleDecode { // its hits are the prefill side's, counted there
			continue
		}
		for _, l := range sv.eng.Loads(x.t()) {
			prompt += l.PromptTokens
			cached += l.CachedTokens
			host += l.HostCachedTokens
			tiered = tiered || l.HostCapacity > 0
		}
	}
	return prompt, cached, host, tiered
}

// flush resets the engines' prefix caches and the router's trees (--flush-cache), as serve's
// POST /flush_cache does.
func (x *sim) flush() {
	for _, sv := range x.servers {
		sv.eng.FlushCache()
	}
	for _, rep := range x.reps {
		rep.rt.ResetTrees()
	}
}

func (x *sim) levelInfo(l workloads.Level) reports.LevelInfo {
	switch {
	case l.Concurrency > 0:
		return reports.ClosedLoop(l.Concurrency)
	case l.Arrival == workloads.ArrivalTrace:
		return reports.Trace()
	case math.IsInf(l.Rate, 1):
		return reports.Burst()
	}
	return reports.OpenLoop(l.Rate, l.Arrival)
}

// simStats computes the simulator's extra metrics of a level:
//   - predicted_match_rate: the router's predicted prefix match rate of each successful
//     request (its final attempt's first leg), weighted by input tokens, to read beside the
//     engine's cache_hit_rate (Σ cached / Σ input tokens);
//   - load_spread: per role, the most requests routed to one target divided by the mean over
//     the role's targets (1 = perfectly even, N = everything on one of N targets); the largest
//     over the roles;
//   - queue_delay_ms: per successful request, the time from its arrival at the server that
//     computes the first token (prefill in PD) to that token, minus what the profile needs to
//     prefill its uncached tokens on an idle rank: waiting for KV preallocation, the
//     handshake, the batch queue and lockstep partners.
func (x *sim) simStats(lv *level) *reports.SimStats {
	st := &reports.SimStats{QueueDelayMs: reports.Summarize(lv.queue)}
	if lv.predictedW > 0 {
		st.PredictedMatchRate = lv.predicted / lv.predictedW
	}
	for _, counts := range lv.counts {
		total, most := 0, 0
		for _, n := range counts {
			total += n
			most = max(most, n)
		}
		if total > 0 {
			st.LoadSpread = max(st.LoadSpread, float64(most)*float64(len(counts))/float64(total))
		}
	}
	return st
}

package engine

import (
	"fmt"
	"time"
	"unsafe"
)

// The event loop: at each model instant, step ends (rank order), then timers (time, push order),
// then scheduling; plus the bookkeeping shared by every path that ends a request.

// next is the earliest internal event, stale timers dropped.
func (s *Server) next() (time.Time, bool) {
	var t time.Time
	ok := false
	take := func(u time.Time) {
		if !ok || u.Before(t) {
			t, ok = u, true
		}
	}
	if s.kick {
		take(s.kickAt)
	}
	for s.timers.Len() > 0 && !s.timerValid(&s.timers.Min().V) {
		s.timers.pop()
	}
	if s.timers.Len() > 0 {
		take(s.timers.Min().V.at)
	}
	if s.cfg.Role == RolePrefill {
		for _, rk := range s.ranks {
			if rk.link.armed {
				take(rk.link.at)
			}
		}
	}
	if s.cfg.DPAttention {
		if s.stepping {
			take(s.stepEnd)
		}
	} else {
		for _, rk := range s.ranks {
			if rk.stepKind != stepNone {
				take(rk.stepEnd)
			}
		}
	}
	return t, ok
}

// processAt handles every event due at t: step ends (rank order), timers (time, sequence), then
// scheduling on every rank.
func (s *Server) processAt(t time.Time) {
	if s.kick && !s.kickAt.After(t) {
		s.kick = false
	}
	if s.cfg.DPAttention {
		if s.stepping && s.stepEnd.Equal(t) {
			s.stepping = false
			for _, rk := range s.ranks {
				s.finishStep(rk, t)
			}
		}
	} else {
		for _, rk := range s.ranks {
			if rk.stepKind != stepNone && rk.stepEnd.Equal(t) {
				s.finishStep(rk, t)
			}
		}
	}
	if s.cfg.Role == RolePrefill {
		for _, rk := range s.ranks {
			if rk.link.armed && !rk.link.at.After(t) {
				s.linkFire(rk, t)
			}
		}
	}
	for s.timers.Len() > 0 && !s.timers.Min().V.at.After(t) {
		tm := s.timers.pop()
		if s.timerValid(&tm) {
			s.fire(tm, t)
		}
	}
	s.schedule(t)
	if s.cfg.KVEvents != nil {
		if s.cfg.Role == RolePrefill {
			s.publishKVPrefillPoll(t)
		} else if s.parallel {
			for _, rk := range s.ranks {
				s.publishKV(rk, t)
			}
		}
	}
	s.flushGaps()
}

func (s *Server) timerValid(tm *timer) bool {
	switch tm.kind {
	case tTimeout:
		q := tm.r.queue
		return !tm.r.done && (q == QueueBootstrap || q == QueueTransfer)
	case tTransfer, tStuck:
		return !tm.r.done && tm.r.queue == QueueInflight
	case tToken:
		return !tm.r.done && tm.r.queue == QueueRunning
	case tEarly:
		at, ok := s.early[tm.room]
		return ok && at.Equal(tm.at)
	case tArrive:
		return !tm.r.done && tm.r.arriving
	}
	return false
}

func (s *Server) fire(tm timer, t time.Time) {
	r := tm.r
	switch tm.kind {
	case tTimeout:
		// SGLang's own reasons (disaggregation/common/conn.py: the sender's bootstrap timeout,
		// the receiver's waiting timeout), the text the router's blame rule meets in production
		// (router.WaitedForPeer).
		state := "KVPoll.Bootstrapping" // no decode handshake
		if s.cfg.Role != RolePrefill {
			state = "KVPoll.WaitingForInput" // the KV from the prefill server did not arrive
		}
		s.fail(r, t, fmt.Sprintf("Request %d timed out after %.1fs in %s", r.room, s.cfg.BootstrapTimeout.Seconds(), state))
	case tStuck:
		s.fail(r, t, fmt.Sprintf("kv transfer did not complete within %s", s.cfg.BootstrapTimeout))
	case tTransfer:
		r.state = StateSuccess
		s.emit(Output{Kind: KindTransferDone, At: t, Room: r.room, Rank: r.rk.id, CachedTokens: r.cached, FirstToken: r.firstTok})
		r.generated = 1
		s.complete(r, t)
	case tToken:
		s.parallelToken(r, t)
	case tEarly:
		delete(s.early, tm.room)
	case tArrive:
		r.arriving = false
		if r.queue == QueueWaiting { // unified, or prefill after its Handshake
			s.enqueue(r, t)
		}
	}
}

// schedule runs every rank's scheduler at t: decode preallocation, then new steps on idle ranks
// (all ranks together under DP attention).
func (s *Server) schedule(t time.Time) {
	if s.dead {
		return
	}
	if s.cfg.Role == RoleDecode && !s.parallel {
		for _, rk := range s.ranks {
			s.preallocate(rk, t)
		}
	}
	if s.parallel {
		return
	}
	if s.cfg.Role == RoleDecode {
		// Forming a decode batch can free KV (a room with MaxNew 1 ends as it joins), so
		// preallocation gets a second chance.
		defer func() {
			for _, rk := range s.ranks {
				s.preallocate(rk, t)
			}
		}()
	}
	if s.cfg.DPAttention {
		if s.stepping {
			return
		}
		// Lockstep: the slowest rank gates the step. With a DP-attention split that is the
		// attention part only, and the FFN/MoE layers and collectives then run once on the
		// tokens gathered from every rank (Profile.DPAttn).
		var longest time.Duration
		any, prefill, tokens := false, false, 0
		for _, rk := range s.ranks {
			if d, ok := s.formStep(rk, t); ok {
				any = true
				longest = max(longest, d)
				tokens += rk.stepTokens
				prefill = prefill || rk.stepKind == stepPrefill
			}
		}
		for _, rk := range s.ranks {
			s.releaseStaged(rk, t, any)
		}
		if any {
			switch {
			case s.split() && prefill: // the gathered tokens include a prefill chunk
				longest += s.dur(s.cfg.Profile.SharedPrefillTime(tokens))
			case s.split():
				longest += s.dur(s.cfg.Profile.SharedTime(tokens))
			}
			s.stepping, s.stepEnd = true, t.Add(longest)
			for _, rk := range s.ranks {
				rk.stepEnd = s.stepEnd
			}
		}
		return
	}
	for _, rk := range s.ranks {
		if rk.stepKind == stepNone {
			d, ok := s.formStep(rk, t)
			if ok {
				rk.stepEnd = t.Add(d)
			}
			s.releaseStaged(rk, t, ok)
		}
	}
}

// enqueue puts a request that reached the scheduler into its rank's prefill queue. Under
// SGLang's overlap scheduler (scheduler.py event_loop_overlap) the next batch is formed from
// what the scheduler has received when the step in flight starts, while it runs; a request
// that arrives during a step therefore misses the batch that follows it and joins the one
// after. Here a batch is formed when the step before it ends, so a request that arrives while
// its rank steps waits in staged until that next batch is formed (releaseStaged); an idle rank takes
// it at once. Without the overlap scheduler (Config.DisableOverlap) the batch is formed after
// the step, from everything received by then.
func (s *Server) enqueue(r *request, t time.Time) {
	rk := r.rk
	busy := rk.stepKind != stepNone && t.Before(rk.stepEnd) // arriving as the step ends: in time for the batch formed then
	if s.cfg.DPAttention {
		busy = s.stepping && t.Before(s.stepEnd)
	}
	if busy && !s.cfg.DisableOverlap {
		rk.staged.push(r)
		return
	}
	rk.waiting.push(r)
	s.setKick(t)
}

// releaseStaged moves rk's staged requests into its prefill queue once a batch has been formed
// (formed) or none could be (the rank idles: the scheduler takes them at once).
func (s *Server) releaseStaged(rk *rank, t time.Time, formed bool) {
	if rk.staged.peek() == nil {
		return
	}
	for r := rk.staged.peek(); r != nil; r = rk.staged.peek() {
		rk.staged.pop()
		rk.waiting.push(r)
	}
	if !formed {
		s.setKick(t)
	}
}

// split reports whether steps divide into per-rank and shared parts (DP attention with a
// profile that says how: Profile.DPAttn).
func (s *Server) split() bool { return s.cfg.DPAttention && s.cfg.Profile.DPAttn != nil }

// formStep builds rank rk's next batch at t and returns its duration; false when idle.
// An idle rank's new-token ratio goes back to its initial value (scheduler.py: on idle,
// NewTokenRatioTracker.reset).
func (s *Server) formStep(rk *rank, t time.Time) (time.Duration, bool) {
	var d time.Duration
	var ok bool
	switch s.cfg.Role {
	case RolePrefill:
		d, ok = s.formPrefill(rk, t)
	case RoleDecode:
		d, ok = s.formDecode(rk, t)
	default:
		if d, ok = s.formPrefill(rk, t); !ok { // prefill-first
			d, ok = s.formDecode(rk, t)
		}
	}
	if !ok {
		rk.ratio = s.ratioInit
		s.publishKV(rk, t) // idle (scheduler.py on_idle)
	}
	return d, ok
}

func (s *Server) finishStep(rk *rank, t time.Time) {
	switch rk.stepKind {
	case stepPrefill:
		s.finishPrefillStep(rk, t)
	case stepDecode:
		s.finishDecodeStep(rk, t)
	}
	rk.stepKind = stepNone
}

// setQueue moves r to queue q, keeping the per-rank counters.
func (s *Server) setQueue(r *request, q Queue) {
	if r.queue == QueueInflight && q != QueueInflight {
		r.rk.polled = true // the prefill scheduler's inflight poll took it out
	}
	rk := r.rk
	if r.queue != 0 {
		rk.n[r.queue]--
		rk.queueTokens(r, -1)
	}
	r.queue = q
	if q != 0 {
		rk.n[q]++
		rk.queueTokens(r, 1)
	}
}

// queueTokens adds sign × r's prompt to the token sum of its queue, if that queue keeps one.
func (rk *rank) queueTokens(r *request, sign int) {
	switch r.queue {
	case QueueBootstrap:
		rk.bootTok += sign * len(r.prompt)
	case QueuePrealloc:
		rk.preTok += sign * len(r.prompt)
	}
}

// release frees r's KV and forgets it.
func (s *Server) release(r *request) {
	rk := r.rk
	if r.node != nil {
		rk.cache.unlockPath(r.node)
		r.node = nil
	}
	if r.dnode != nil {
		rk.dcache.unlockPath(r.dnode)
		r.dnode = nil
	}
	s.leaveRun(r)
	s.unretract(r)
	rk.private -= r.alloc
	r.alloc = 0
	s.setQueue(r, 0)
	r.done = true
	delete(s.rooms, r.room)
	r.prev.next, r.next.prev = r.next, r.prev
	r.prev, r.next = nil, nil
}

func (s *Server) fail(r *request, t time.Time, why string) {
	s.linkDrop(r.rk, r, t)
	r.state = StateFailed
	s.emit(Output{Kind: KindFailed, At: t, Room: r.room, Rank: r.rk.id, Reason: fmt.Sprintf("room %d: %s", r.room, why)})
	s.release(r)
}

func (s *Server) complete(r *request, t time.Time) {
	if r.insertPending { // done before the lag ended (a zero-time transfer): cache it now
		r.insertPending = false
		s.cachePrompt(r.rk, r)
	}
	s.emit(Output{Kind: KindFinished, At: t, Room: r.room, Rank: r.rk.id,
		Usage: Usage{PromptTokens: len(r.prompt), CompletionTokens: r.generated, CachedTokens: r.cached}})
	if s.cfg.Role == RoleUnified && len(r.output) > 0 && r.generated > 1 {
		s.cacheFinished(r)
	}
	if r.rk.dcache != nil && !s.parallel {
		s.cacheDecoded(r)
	}
	s.release(r)
}

// cacheDecoded inserts a finished room's prompt into the decode radix cache: the prompt's KV
// moves from the room's private share into the tree (SGLang decode_radix_cache caches the
// request on finish); what another room cached meanwhile is freed as a duplicate.
func (s *Server) cacheDecoded(r *request) {
	_, added := r.rk.dcache.insert(r.prompt)
	r.rk.private -= added
	r.alloc -= added
}

// cacheFinished inserts prompt + the outputs whose KV was computed (all but the last token) into
// the tree. The new tokens come out of r's private KV (its outputs and partial page), so KV in
// use does not grow; in the Constant profiles the cache is trimmed back to capacity instead.
func (s *Server) cacheFinished(r *request) {
	rk := r.rk
	n := min(r.generated-1, len(r.output))
	seq := make([]uint32, 0, len(r.prompt)+n)
	seq = append(append(seq, r.prompt...), r.output[:n]...)
	if s.parallel {
		rk.cache.insert(seq)
		if over := rk.cache.size - rk.capacity; over > 0 {
			rk.cache.evict(over)
		}
		return
	}
	_, added := rk.cache.insert(seq)
	rk.private -= added
	r.alloc -= added
}

func (s *Server) token(r *request, t time.Time) {
	switch {
	case r.gaps == nil:
		s.emit(Output{Kind: KindToken, At: t, Room: r.room, Rank: r.rk.id, Index: r.generated})
	case r.generated == 0:
		s.emit(Output{Kind: KindToken, At: t, Room: r.room, Rank: r.rk.id, Index: 0})
		r.lastTok = t.UnixNano()
	default:
		tn := t.UnixNano()
		g := tn - r.lastTok
		r.lastTok = tn
		if g != s.gapNS || !sameSink(&r.gaps, &s.gapSink) {
			s.flushGaps()
			s.gapSink, s.gapNS = r.gaps, g
		}
		s.gapN++
	}
	r.generated++
}

// sameSink reports whether a and b hold the same dynamic type and data word, which for the
// pointer sinks in use is a == b without the runtime call an interface comparison makes (0.4 s
// of a 1M-request run, once per token). Equal words imply a == b; a value sink boxed twice
// may compare unequal, which only ends a run of gaps early (flushGaps: the counts are the
// same).
func sameSink(a, b *GapSink) bool {
	return *(*[2]uintptr)(unsafe.Pointer(a)) == *(*[2]uintptr)(unsafe.Pointer(b))
}

// chunkToken is a further output token of the step that produced r's last one (speculative
// decoding accepts several): SGLang streams them in one chunk, so it adds no inter-token gap.
func (s *Server) chunkToken(r *request, t time.Time) {
	if r.gaps == nil {
		s.emit(Output{Kind: KindToken, At: t, Room: r.room, Rank: r.rk.id, Index: r.generated})
	}
	r.generated++
}

// flushGaps hands the current run of equal gaps to its sink. A decode step's continuing rooms
// share one gap (the step's length), so a step costs a sink call or two, not one per token.
func (s *Server) flushGaps() {
	if s.gapN > 0 {
		s.gapSink.AddN(s.gapNS, s.gapN)
		s.gapN = 0
	}
	s.gapSink = nil
}

package engine

import (
	"fmt"
	"math"
	"time"
)

// Server is one SGLang server (ARCHITECTURE §4): a role, DPSize ranks each with a radix KV cache
// and a scheduler, driven by explicit calls carrying the model time. A Server is not safe for
// concurrent use: one goroutine drives it at a time. Times passed to its methods must not
// decrease; an earlier time is treated as the latest time seen.
type Server struct {
	cfg      Config
	parallel bool // Constant profile: per-request timers, no batching
	ranks    []*rank
	rooms    map[uint64]*request // live requests; lookups only, never iterated
	live     request             // sentinel of the live list, in Submit order (Kill iterates it)
	timers   timerHeap
	pending  []Output // produced, not yet returned by Advance
	// gapSink, gapNS, gapN: the run of equal token gaps not yet handed to its sink (Req.Gaps).
	gapSink GapSink
	gapNS   int64
	gapN    int64
	early   map[uint64]time.Time
	// earlyCached is the decode-side hit of an early Handshake (HandshakeCached).
	earlyCached map[uint64]int
	last        time.Time // latest time seen
	kick        bool      // scheduling pending at kickAt
	kickAt      time.Time
	rr          int // unified round-robin cursor
	dead        bool
	neverKV     bool
	stepping    bool      // lockstep: a server-wide step is in progress
	stepEnd     time.Time // lockstep: its end

	ratioInit, ratioMin, ratioDecay float64 // new_token_ratio schedule (New)
}

// request is the server's record of a room. The fields every decode step reads of every
// running room (formDecode, finishDecodeStep) come first, in the struct's first two cache
// lines (its 256 bytes are a size class of their own, so those lines are aligned): at 100k
// requests the decode loop's time is mostly waiting on them.
type request struct {
	// What a decode step reads of each running request (finishDecodeStep, decodeTokens, token)
	// comes first: one cache line, which the step's first pass brings in.
	generated int     // output tokens produced
	maxNew    int     // output tokens to produce
	gaps      GapSink // Req.Gaps: tokens after the first are counted here, not emitted
	lastTok   int64   // gaps: when the last output token was produced, Unix ns
	rk        *rank
	done      bool
	state     State
	queue     Queue
	inRun     bool // in rk.running: its terms are in the rank's running sums (runRemain, runSeq)
	admitted  bool // the prefix hit has been measured
	earlyKV   bool // decode: KVArrived came while still in prealloc
	held      bool // lpm: deprioritized this step by in-batch prefix sharing (sorted last)
	arriving  bool // Profile.HostOverhead: not yet through the host path into the scheduler

	prompt    []uint32
	alloc     int // KV tokens held outside the tree (rank.private share)
	decodeHit int // decode radix cache: prompt tokens the decode side holds (prefill: told by Handshake)

	room       uint64
	output     []uint32 // optional reply ids, cached on finish (unified)
	prev, next *request // live list

	cached    int   // reported cached tokens (prefill/unified: own hit; decode: from KVArrived)
	node      *node // locked cache node (prefill, unified)
	target    int   // tokens to prefill: prompt (+ generated after a retraction)
	prefilled int   // tokens of target with KV (cached + computed)
	firstTok  time.Time

	dnode         *node   // decode radix cache: the locked node of that hit
	matched       int     // lpm: cached prefix measured when the queue was last ordered
	matchNode     *node   // lpm: the node of that match
	matchGen      uint64  // lpm: the cache's gen at that match (admit reuses it while unchanged)
	sent          int     // prefill: prompt tokens whose KV has been handed to the link
	xferLeft      float64 // prefill: bytes handed to the link and not yet sent
	loadBack      int32   // host-tier hit to load back in the prefill batch that starts it (hostcache.go)
	specCarry     uint8   // speculative decoding: the accepted tokens' running remainder in 1/256 (accepted)
	insertPending bool    // prefilled; its prompt becomes matchable after the next batch is formed
	onLink        bool    // prefill: in rk.link.act
	retractedQ    bool    // decode: in rk.retracted (counted in rk.retractedNeed)
}

// New returns a server for cfg, or an error naming the invalid field.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Spec.On() {
		cfg.DisableOverlap = true // SGLang's speculative worker runs without the overlap scheduler
		cfg.MixedChunk = false    // and without mixed chunks (server_args.py, with a warning)
	}
	s := &Server{cfg: cfg, parallel: cfg.Profile.Constant, rooms: make(map[uint64]*request), early: make(map[uint64]time.Time),
		earlyCached: make(map[uint64]int), neverKV: cfg.NeverSignalKV}
	s.live.next, s.live.prev = &s.live, &s.live
	// new_token_ratio (scheduler.py Scheduler.__init__, NewTokenRatioTracker.from_server_args):
	// starts at min(0.7 × conservativeness, 1), decays linearly to 0.14 of that over 600
	// decode steps.
	s.ratioInit = min(InitNewTokenRatio*cfg.ScheduleConservativeness, 1)
	s.ratioMin = min(s.ratioInit*MinNewTokenRatioFactor, 1)
	s.ratioDecay = (s.ratioInit - s.ratioMin) / NewTokenRatioDecaySteps
	s.ranks = make([]*rank, cfg.DPSize)
	for i := range s.ranks {
		s.ranks[i] = &rank{id: i, capacity: cfg.MaxTotalTokens, ratio: s.ratioInit}
		if cfg.Role != RoleDecode {
			s.ranks[i].cache = newRadix(cfg.PageSize)
		} else if cfg.DecodeRadixCache {
			s.ranks[i].dcache = newRadix(cfg.PageSize)
		}
	}
	if cfg.HostCacheTokens > 0 {
		s.enableHostCache()
	}
	if cfg.KVEvents != nil {
		s.enableKVEvents()
	}
	return s, nil
}

// Config returns the server's configuration with defaults filled in (page size,
// max_total_num_tokens per rank and so on, for /get_server_info).
func (s *Server) Config() Config { return s.cfg }

// SetSpeedup changes Config.Speedup from now on: the steps that begin after it run at the new
// speed, a step under way ends when it was due, and KV transfers under way move at the new
// link rate from the next transfer event on (fakeworker's slow factor changed at runtime: a
// worker degrading behind a router's back). It fails unless speedup is finite and > 0.
func (s *Server) SetSpeedup(speedup float64) error {
	if !(speedup > 0) || math.IsInf(speedup, 0) {
		return fmt.Errorf("engine: speedup %g must be > 0", speedup)
	}
	s.cfg.Speedup = speedup
	return nil
}

// dur converts a model duration into server time (Speedup applied).
func (s *Server) dur(d time.Duration) time.Duration {
	if s.cfg.Speedup == 1 {
		return d
	}
	return time.Duration(float64(d) / s.cfg.Speedup)
}

func (s *Server) emit(o Output) { s.pending = append(s.pending, o) }

func (s *Server) setKick(t time.Time) {
	if !s.kick || t.Before(s.kickAt) {
		s.kick, s.kickAt = true, t
	}
}

// sync clamps now to the latest time seen and processes every event before it, so a call never
// changes the past. Events at exactly now wait for Advance, so calls made at one instant are
// scheduled together (two Handshakes at t can share a batch).
func (s *Server) sync(now time.Time) time.Time {
	if now.Before(s.last) {
		now = s.last
	}
	s.last = now
	for {
		t, ok := s.next()
		if !ok || !t.Before(now) {
			return now
		}
		s.processAt(t)
	}
}

// Submit hands the server a request at now. Outputs (including an immediate Failed for an
// invalid request, a dead server or a duplicate live room) come from the next Advance.
func (s *Server) Submit(now time.Time, req Req) {
	now = s.sync(now)
	fail := func(why string) {
		s.emit(Output{Kind: KindFailed, At: now, Room: req.Room, Rank: req.Rank, Reason: fmt.Sprintf("room %d: %s", req.Room, why)})
	}
	switch {
	case s.dead:
		fail("server is dead")
		return
	case len(req.Prompt) == 0:
		fail("empty prompt")
		return
	case req.Rank >= len(s.ranks):
		fail(fmt.Sprintf("dp rank %d out of range [0,%d)", req.Rank, len(s.ranks)))
		return
	case s.rooms[req.Room] != nil:
		fail("duplicate room: a request with this room is still live")
		return
	}
	rank := req.Rank
	if rank < 0 {
		if s.cfg.Role == RoleUnified {
			rank = s.rr
			s.rr = (s.rr + 1) % len(s.ranks)
		} else {
			rank = int(req.Room % uint64(len(s.ranks)))
		}
	}
	r := &request{room: req.Room, rk: s.ranks[rank], prompt: req.Prompt, output: req.Output, maxNew: max(req.MaxNew, 1), target: len(req.Prompt), gaps: req.Gaps}
	s.rooms[r.room] = r
	r.prev, r.next = s.live.prev, &s.live
	s.live.prev.next = r
	s.live.prev = r
	// Host overhead (tokenizer_manager.py → scheduler.py over ZMQ, HTTP): on unified and
	// prefill servers a request reaches the scheduler's waiting queue only HostOverhead after
	// Submit (a prefill room still needs its Handshake too). Constant profiles skip it.
	if h := s.cfg.Profile.HostOverhead; h > 0 && !s.parallel && s.cfg.Role != RoleDecode {
		r.arriving = true
		s.timers.push(timer{at: now.Add(s.dur(seconds(h))), kind: tArrive, r: r})
	}
	switch s.cfg.Role {
	case RoleUnified:
		r.state = StateWaitingForInput
		if s.parallel {
			s.startParallel(r, now)
			s.publishKV(r.rk, now)
			return
		}
		s.setQueue(r, QueueWaiting)
		if !r.arriving {
			s.enqueue(r, now)
		}
	case RolePrefill:
		if _, ok := s.early[r.room]; ok {
			delete(s.early, r.room)
			r.decodeHit = min(s.earlyCached[r.room], len(r.prompt))
			delete(s.earlyCached, r.room)
			s.handshake(r, now)
			if s.parallel {
				s.publishKV(r.rk, now)
			}
			return
		}
		r.state = StateBootstrapping
		s.setQueue(r, QueueBootstrap)
		s.armTimeout(r, now)
	case RoleDecode:
		// No deadline while the room waits for its KV slots: SGLang's decode starts its
		// waiting timeout only once it has preallocated and sent the indices (preallocated).
		r.state = StateBootstrapping
		if s.parallel {
			s.preallocated(r, now)
			return
		}
		s.setQueue(r, QueuePrealloc)
		r.rk.prealloc.push(r)
	}
	s.setKick(now)
}

func (s *Server) armTimeout(r *request, now time.Time) {
	if s.cfg.BootstrapTimeout > 0 {
		s.timers.pushDeadline(timer{at: now.Add(s.cfg.BootstrapTimeout), kind: tTimeout, r: r})
	}
}

// Handshake tells a prefill server that the decode side registered room and preallocated its KV;
// only then may the room be prefilled. A Handshake before the room's Submit is remembered (for
// BootstrapTimeout). Ignored on other roles, for unknown rooms past that and when dead. The
// drivers call HandshakeCached; Handshake is the protocol step the package doc is written in.
func (s *Server) Handshake(now time.Time, room uint64) { s.HandshakeCached(now, room, 0) }

// HandshakeCached is Handshake from a decode server that already holds the first decodeCached
// prompt tokens of room (its radix cache, Preallocated.CachedTokens): only the rest of the KV
// is transferred.
func (s *Server) HandshakeCached(now time.Time, room uint64, decodeCached int) {
	now = s.sync(now)
	if s.dead || s.cfg.Role != RolePrefill {
		return
	}
	r := s.rooms[room]
	if r == nil {
		s.earlyCached[room] = decodeCached
		s.early[room] = now.Add(s.cfg.BootstrapTimeout)
		if s.cfg.BootstrapTimeout > 0 {
			s.timers.pushDeadline(timer{at: now.Add(s.cfg.BootstrapTimeout), kind: tEarly, room: room})
		}
		return
	}
	if r.queue == QueueBootstrap {
		r.decodeHit = min(decodeCached, len(r.prompt))
		s.handshake(r, now)
		if s.parallel {
			s.publishKV(r.rk, now)
		}
	}
}

func (s *Server) handshake(r *request, now time.Time) {
	r.state = StateWaitingForInput
	if s.parallel {
		s.admitParallel(r)
		r.firstTok = now.Add(s.dur(s.cfg.Profile.TTFT))
		s.startTransfer(r, now, r.firstTok)
		return
	}
	s.setQueue(r, QueueWaiting)
	if !r.arriving { // else the tArrive timer queues it
		s.enqueue(r, now)
	}
}

// KVArrived tells a decode server that room's KV and first token landed; cachedTokens is the
// prefill server's prefix hit, reported in the room's Usage. A KVArrived while the room still
// waits for its preallocation is applied right after it. Ignored on other roles, for unknown
// rooms and when dead.
func (s *Server) KVArrived(now time.Time, room uint64, cachedTokens int) {
	now = s.sync(now)
	if s.dead || s.cfg.Role != RoleDecode {
		return
	}
	r := s.rooms[room]
	if r == nil {
		return
	}
	switch r.queue {
	case QueuePrealloc:
		r.earlyKV, r.cached = true, cachedTokens
	case QueueTransfer:
		r.cached = cachedTokens
		s.kvArrived(r, now)
	}
}

func (s *Server) kvArrived(r *request, now time.Time) {
	r.state = StateSuccess
	r.admitted = true
	r.rk.promptTokens += int64(len(r.prompt))
	r.rk.cachedTokens += int64(r.cached)
	if s.parallel {
		s.setQueue(r, QueueRunning)
		s.parallelToken(r, now)
		return
	}
	s.setQueue(r, QueueWaiting)
	r.rk.waiting.push(r)
	s.setKick(now)
}

// Abort ends room at now with a Failed output whose reason includes why, freeing its KV.
// Unknown rooms are ignored (a pending early Handshake for room is dropped).
func (s *Server) Abort(now time.Time, room uint64, why string) {
	now = s.sync(now)
	delete(s.early, room)
	if r := s.rooms[room]; r != nil {
		s.fail(r, now, "aborted: "+why)
		s.setKick(now)
	}
}

// Kill simulates the server dying at now: every live room fails, caches and queues are lost, and
// later Submits fail until Restart.
func (s *Server) Kill(now time.Time) {
	now = s.sync(now)
	for r := s.live.next; r != &s.live; {
		nx := r.next
		s.fail(r, now, "server killed")
		r = nx
	}
	for _, rk := range s.ranks {
		*rk = rank{id: rk.id, capacity: rk.capacity, cache: rk.cache, dcache: rk.dcache, ratio: s.ratioInit}
		if t := rk.tree(); t != nil && t.log != nil {
			t.log.drop() // unpublished events die with the process; the restarted one starts with a clear
		}
		if rk.cache != nil {
			rk.cache.reset()
		}
		if rk.dcache != nil {
			rk.dcache.reset()
		}
	}
	s.timers.Clear()
	clear(s.early)
	s.stepping, s.kick, s.dead = false, false, true
}

// Dead reports whether the server was killed and not restarted.
func (s *Server) Dead() bool { return s.dead }

// Restart brings a killed server back at now, as a restarted SGLang process: empty caches and
// queues (Kill emptied them), accepting requests again.
func (s *Server) Restart(now time.Time) {
	s.sync(now)
	s.dead = false
}

// FlushCache empties every rank's prefix cache, as SGLang's /flush_cache, and reports whether it
// did: like SGLang it refuses while any request is live. With KVEvents, each rank publishes
// its AllBlocksCleared at once, stamped with the latest time seen (the server is idle, and
// SGLang's idle loop publishes right after the flush).
func (s *Server) FlushCache() bool {
	if s.live.next != &s.live {
		return false
	}
	for _, rk := range s.ranks {
		if rk.cache != nil {
			rk.cache.reset()
		}
		if rk.dcache != nil {
			rk.dcache.reset()
		}
		s.publishKV(rk, s.last)
	}
	return true
}

// Live returns the number of live (not yet finished or failed) rooms.
func (s *Server) Live() int { return len(s.rooms) }

// Loads returns a snapshot of every rank, in rank order, as of the latest call: it processes
// nothing, so a driver wanting the state at now calls it after Advance(now). now (clamped to
// the latest time seen, so a zero now means that) only ends RankLoad.GenThroughput's window. Its cost is linear in the
// waiting queues' lengths, like one batch formation.
func (s *Server) Loads(now time.Time) []RankLoad {
	if now.Before(s.last) {
		now = s.last
	}
	out := make([]RankLoad, len(s.ranks))
	for i, rk := range s.ranks {
		held := rk.private
		used := rk.private
		if t := rk.tree(); t != nil {
			held += t.size
			used += t.size - t.evictable
		}
		waiting := rk.n[QueueBootstrap] + rk.n[QueuePrealloc] + rk.n[QueueTransfer] + rk.n[QueueWaiting]
		uncached, pending := s.pendingPrefill(rk)
		l := RankLoad{Rank: i, Running: rk.n[QueueRunning], Queued: waiting, Inflight: rk.n[QueueInflight],
			KVTokens: held, KVCapacity: rk.capacity, TokenUsage: float64(used) / float64(rk.capacity),
			Retractions: rk.retractions, RecomputedTokens: rk.recomputed,
			RunningReqs: rk.nRun, WaitingReqs: waiting, WaitingUncachedTokens: uncached, UsedTokens: used,
			TotalTokens: used + pending, MaxTotalTokens: rk.capacity, MaxRunningRequests: s.cfg.MaxRunningRequests,
			GenThroughput: rk.gen.rate(now), ByQueue: rk.n, RetractedReqs: rk.nRetracted}
		if s.parallel {
			l.RunningReqs = rk.n[QueueRunning]
		}
		if rk.promptTokens > 0 {
			l.CacheHitRate = float64(rk.cachedTokens) / float64(rk.promptTokens)
		}
		l.PromptTokens, l.CachedTokens = rk.promptTokens, rk.cachedTokens
		if h := rk.host(); h != nil {
			l.HostCachedTokens, l.HostTokens, l.HostCapacity = rk.hostHit, h.tree.size, h.capacity
		}
		l.BatchHitTokens, l.BatchNewTokens = rk.batchHit, rk.batchNew
		if n := rk.batchHit + rk.batchNew; n > 0 {
			l.SGLangCacheHitRate = float64(rk.batchHit) / float64(n)
		}
		out[i] = l
	}
	return out
}

// pendingPrefill returns rk's RankLoad.WaitingUncachedTokens, and the tokens of its requests
// whose KV is not allocated yet (TotalTokens − UsedTokens).
func (s *Server) pendingPrefill(rk *rank) (uncached, pending int) {
	if s.cfg.Role == RoleDecode {
		pending = rk.preTok
		for _, r := range rk.retracted.items[rk.retracted.head:] {
			if !r.done && r.retractedQ {
				pending += len(r.prompt) + r.generated
			}
		}
		return 0, pending
	}
	for _, q := range []*fifo{&rk.waiting, &rk.staged} { // staged: held for a batch by the overlap scheduler, queued all the same
		for _, r := range q.items[q.head:] {
			if !r.done && r.queue == QueueWaiting {
				uncached += max(r.target-r.matched, 0)
				pending += r.target
			}
		}
	}
	uncached += rk.bootTok
	pending += rk.bootTok
	if c := rk.chunked; c != nil && !c.done {
		left := c.target - c.prefilled
		if rk.stepKind == stepPrefill { // the chunk in flight counts as done, as in SGLang's prefix_indices
			for _, ch := range rk.batch {
				if ch.r == c {
					left -= ch.n
				}
			}
		}
		uncached += max(left, 0)
	}
	return uncached, pending
}

// NextEvent returns the model time of the next thing the server will do on its own (a step
// ending, a transfer finishing, a timeout, or outputs already waiting), and false when it has
// nothing scheduled. The driver calls Advance at that time (or earlier on a new call).
func (s *Server) NextEvent() (time.Time, bool) {
	if len(s.pending) > 0 {
		return s.last, true
	}
	return s.next()
}

// Advance processes everything due up to now and returns the outputs produced since the last
// Advance, in the order they happened. The slice is newly allocated; see AppendAdvance to reuse
// one (the drivers do; Advance is the protocol step the package doc is written in).
func (s *Server) Advance(now time.Time) []Output {
	return s.AppendAdvance(nil, now)
}

// AppendAdvance is Advance appending to dst, for drivers that reuse a buffer.
func (s *Server) AppendAdvance(dst []Output, now time.Time) []Output {
	now = s.sync(now)
	// Outputs go straight into dst: what earlier calls produced first, then this Advance's.
	dst = append(dst, s.pending...)
	clear(s.pending)
	spare := s.pending[:0]
	s.pending = dst
	for {
		t, ok := s.next()
		if !ok || t.After(now) {
			break
		}
		s.processAt(t)
	}
	dst = s.pending
	s.pending = spare
	return dst
}

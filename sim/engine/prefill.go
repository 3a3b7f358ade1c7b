package engine

import (
	"fmt"
	"slices"
	"time"
)

// formPrefill builds a chunked-prefill batch on rk at t (prefill and unified roles), as SGLang's
// scheduler does (python/sglang/srt/managers/scheduler.py get_new_batch_prefill with
// schedule_policy.py's SchedulePolicy and PrefillAdder):
//
//   - the request whose prefill was chunked continues first (scheduler.py: chunked_req is added
//     before the waiting queue);
//   - the waiting queue is ordered by the schedule policy (orderWaiting): lpm puts the longest
//     cached prefix first and sorts last the requests that share an uncached prefix with one
//     picked before them; fcfs keeps arrival order;
//   - requests are admitted in that order while the step's token budget (ChunkedPrefillSize)
//     lasts and PrefillAdder's memory rule admits them (admit: uncached tokens plus clipped max
//     new below rem_total_tokens, which charges the running batch ratio × its remaining
//     outputs); the last one admitted may be chunked. A request that does not fit holds the
//     queue (no skipping ahead), as PrefillAdder stops at the first request it cannot add, and
//     (unified) admission is not tried again until the running batch shrinks (batch_is_full).
//
// With the overlap scheduler (the default), the prompts of the batch that just ended become
// matchable only now, after this batch was formed (flushInserts).
func (s *Server) formPrefill(rk *rank, t time.Time) (time.Duration, bool) {
	d, ok := s.formPrefillBatch(rk, t)
	if ok {
		s.publishKV(rk, t) // get_new_batch_prefill → log_prefill_stats → _publish_kv_events
	}
	rk.flushInserts(s)
	return d, ok
}

func (s *Server) formPrefillBatch(rk *rank, t time.Time) (time.Duration, bool) {
	rk.batch = rk.batch[:0]
	budget := s.cfg.ChunkedPrefillSize
	unified := s.cfg.Role == RoleUnified
	mixing := false
	if unified && s.cfg.MixedChunk {
		n, _ := s.liveRunning(rk)
		mixing = n > 0
	}
	if mixing {
		budget -= len(rk.running) // rem_chunk_tokens: one token of each running request
		if budget <= 0 {
			return 0, false // the running batch fills the chunk: a decode step instead
		}
	}
	// PrefillAdder's rem_total_tokens = free + evictable − offset, where the offset charges
	// each running request min(remaining max new, clip) × new_token_ratio and each request
	// admitted in this batch its clipped max new (its extend tokens are already reserved
	// here, so free has dropped by them). A prefill server's running batch is empty.
	offset := rk.ratio * float64(rk.runRemain)
	chunked := rk.chunked != nil
	if c := rk.chunked; c != nil {
		if c.done {
			rk.chunked = nil
		} else {
			n := min(c.target-c.prefilled, budget)
			rk.batch = append(rk.batch, chunk{c, n})
			budget -= n
			if c.prefilled+n < c.target {
				budget = 0
			} else {
				rk.chunked = nil
				offset += float64(s.clipNew(c)) // add_chunked_req: the last chunk charges its max new
			}
		}
	}
	if budget > 0 {
		s.orderWaiting(rk)
	}
	// batch_is_full (unified): after admission stopped for memory or count, SGLang does not
	// try again until the running batch shrinks, unless a chunked prefill continues
	// (scheduler.py get_new_batch_prefill).
	stop := unified && rk.full && !chunked
	for i := rk.waiting.head; budget > 0 && !stop && i < len(rk.waiting.items); {
		if unified && rk.n[QueueRunning] >= s.cfg.MaxRunningRequests {
			rk.full = true
			break
		}
		r := rk.waiting.items[i]
		if r.done {
			i++
			continue
		}
		ok := s.admit(rk, r, t, offset)
		if r.done { // failed: can never fit
			i++
			continue
		}
		if !ok { // NO_TOKEN: the queue waits (no skipping ahead)
			rk.full = unified
			break
		}
		i = rk.waiting.remove(i)
		s.setQueue(r, QueueRunning)
		n := min(r.target-r.prefilled, budget)
		rk.batch = append(rk.batch, chunk{r, n})
		budget -= n
		if r.prefilled+n < r.target {
			rk.chunked = r
			break
		}
		offset += float64(s.clipNew(r))
		// budget_state: no tokens left once rem_total_tokens or cur_rem_tokens is spent.
		if avail := rk.free() + rk.evictable(); avail <= 0 || float64(avail)-offset <= 0 {
			rk.full = unified
			break
		}
	}
	if len(rk.batch) == 0 {
		return 0, false
	}
	newTok, newCtx := 0, 0.0
	for _, c := range rk.batch {
		newTok += c.n
		newCtx += float64(c.n) * (float64(c.r.prefilled) + float64(c.n)/2)
		// SGLang logs a prefill batch's hit rate as #cached-token / (#cached-token +
		// #new-token), where a chunk's cached tokens are everything before it — the prefix
		// hit and, for a continued chunk, the earlier chunks (scheduler.py log_prefill_stats,
		// PrefillAdder.log_hit_tokens).
		rk.batchHit += int64(c.r.prefilled)
		rk.batchNew += int64(c.n)
	}
	rk.stepKind = stepPrefill
	if mixing {
		// Each running request adds one token attending its whole context.
		n, ctx := s.mixRunning(rk)
		newTok += n
		newCtx += float64(ctx)
	}
	rk.stepTokens = newTok
	var load time.Duration
	if rk.host() != nil {
		load = s.loadBackTime(rk)
	}
	if s.split() {
		return s.dur(load + s.cfg.Profile.AttnPrefillTime(newTok, newCtx)), true
	}
	return s.dur(load + s.cfg.Profile.PrefillTime(newTok, newCtx)), true
}

// liveRunning drops the ended requests from rk's running batch and returns how many are left
// and the KV tokens they lack for their next token (Σ max(kvNeed − alloc, 0)). The sum is
// taken in the same pass so that its loads (the request's second cache line: see request)
// overlap the filter's, where a pass of its own waited on them (1.6 s of a 1M-request run).
func (s *Server) liveRunning(rk *rank) (n, need int) {
	live := rk.running[:0]
	for _, r := range rk.running {
		if !r.done {
			live = append(live, r)
			need += max(s.kvNeed(r)-r.alloc, 0)
		}
	}
	clear(rk.running[len(live):])
	rk.running = live
	return len(live), need
}

// mixRunning reserves the KV of one more token for each running request of rk and makes them
// ride the prefill step being formed (rk.mixed); it returns their number and Σ context. When
// the pool cannot give them all a token the step goes unmixed (SGLang's PrefillAdder charged
// their remaining tokens before admitting the prompts, so it does not happen there).
func (s *Server) mixRunning(rk *rank) (n, ctx int) {
	need := 0
	for _, r := range rk.running {
		need += max(s.kvNeed(r)-r.alloc, 0)
	}
	if !rk.reserve(need) {
		return 0, 0
	}
	rk.mixed = rk.mixed[:0]
	for _, r := range rk.running {
		r.alloc += max(s.kvNeed(r)-r.alloc, 0)
		rk.mixed = append(rk.mixed, r)
		ctx += len(r.prompt) + r.generated
	}
	return len(rk.mixed), ctx
}

// orderWaiting orders rk's waiting queue by the schedule policy (schedule_policy.py
// SchedulePolicy.calc_priority). fcfs, and lpm with more than LPMQueueLimit waiting, keep
// arrival order and hold nothing back. lpm otherwise:
//
//   - each request's cached prefix is measured (_compute_prefix_matches);
//   - a request whose cached prefix is at most InBatchCheckThreshold tokens is compared with
//     the requests checked before it: if it shares at least InBatchDeprioritizeThreshold
//     leading tokens with one of them it is deprioritized, otherwise it joins them (in-batch
//     prefix caching: of several requests with the same uncached prefix, one computes it and
//     the others hit the cache later). Prompts whose KV is being computed (the chunked
//     request) or computed but not yet matchable (the overlap lag) count as picked before;
//   - the queue is sorted by cached prefix, longest first, deprioritized requests last
//     (_sort_by_longest_prefix; ties keep arrival order).
//
// Deprioritized requests are only sorted last, not held out: when the step's token budget
// and memory reach them they join the batch, as in SGLang.
func (s *Server) orderWaiting(rk *rank) {
	q := &rk.waiting
	live := q.items[q.head:q.head]
	for _, r := range q.items[q.head:] {
		if !r.done {
			live = append(live, r)
		}
	}
	clear(q.items[q.head+len(live):])
	q.items = q.items[:q.head+len(live)]
	for _, r := range live {
		r.held = false
	}
	if s.cfg.SchedulePolicy != PolicyLPM || len(live) > LPMQueueLimit || rk.cache == nil {
		return
	}
	picked := rk.inBatch[:0]
	seed := func(r *request) {
		if r != nil && !r.done && len(r.prompt) > InBatchDeprioritizeThreshold {
			picked = append(picked, r.prompt[:InBatchDeprioritizeThreshold])
		}
	}
	seed(rk.chunked)
	for _, r := range rk.pendingInsert {
		seed(r)
	}
	for _, r := range live {
		r.matched, r.matchNode = rk.cache.match(r.prompt[:len(r.prompt)-1])
		r.matchGen = rk.cache.gen
		if r.matched > InBatchCheckThreshold || len(r.prompt) <= InBatchDeprioritizeThreshold {
			continue
		}
		head := r.prompt[:InBatchDeprioritizeThreshold]
		if slices.ContainsFunc(picked, func(p []uint32) bool { return slices.Equal(p, head) }) {
			r.held = true
			continue
		}
		picked = append(picked, head)
	}
	rk.inBatch = picked[:0]
	slices.SortStableFunc(live, func(a, b *request) int {
		switch {
		case a.held != b.held:
			if a.held {
				return 1
			}
			return -1
		case a.held:
			return 0
		}
		return b.matched - a.matched
	})
}

// admit measures r's prefix hit (first admission only is reported), locks the hit and reserves
// KV for the rest. It returns false if the request does not fit now: as PrefillAdder.add_one_req,
// its uncached tokens plus its clipped max new must be below rem_total_tokens (free + evictable
// − offset, the hit locked first), and the uncached tokens must be reservable. A request that
// can never fit is failed. A retracted request (target beyond the prompt) matches its whole
// prompt and counts what it computes again in rank.recomputed.
func (s *Server) admit(rk *rank, r *request, t time.Time, offset float64) bool {
	// SGLang matches at most len-1 tokens of what it prefills: the last one is computed to
	// get the logits. The match orderWaiting made is reused while the tree has not changed
	// shape since.
	hit, nd := r.matched, r.matchNode
	if r.matchNode == nil || r.matchGen != rk.cache.gen || r.target != len(r.prompt) {
		key := r.prompt[:len(r.prompt)-1]
		if r.target > len(r.prompt) {
			key = r.prompt
		}
		hit, nd = rk.cache.match(key)
	}
	r.matchNode = nil
	loaded := 0 // the host tier's hit beyond the GPU's, loaded back rather than computed
	if h := rk.host(); h != nil && r.target == len(r.prompt) {
		loaded = h.hit(r.prompt[:len(r.prompt)-1], hit)
	}
	need := r.target - hit
	if need > rk.capacity {
		s.fail(r, t, fmt.Sprintf("needs %d KV tokens, more than the rank's capacity of %d", need, rk.capacity))
		return false
	}
	if total := need + s.clipNew(r); total >= rk.capacity { // SGLang would leave it waiting forever
		s.fail(r, t, fmt.Sprintf("needs %d KV tokens to prefill and %d to generate, %d in all: not below the rank's capacity of %d", need, s.clipNew(r), total, rk.capacity))
		return false
	}
	rk.cache.lockPath(nd)
	if float64(need+s.clipNew(r)) >= float64(rk.free()+rk.evictable())-offset || !rk.reserve(need) {
		rk.cache.unlockPath(nd)
		return false
	}
	r.node, r.alloc, r.prefilled, r.loadBack = nd, need, hit+loaded, int32(loaded)
	if r.target > len(r.prompt) {
		rk.recomputed += int64(need)
	}
	if !r.admitted {
		r.admitted, r.cached = true, hit+loaded
		rk.promptTokens += int64(len(r.prompt))
		rk.cachedTokens += int64(hit + loaded)
		rk.hostHit += int64(loaded)
	}
	return true
}

func (s *Server) finishPrefillStep(rk *rank, t time.Time) {
	if len(rk.mixed) > 0 { // the running requests that decoded inside this step
		decoded := 0
		for i, r := range rk.mixed {
			rk.mixed[i] = nil
			if !r.done {
				decoded += s.decodeTokens(rk, r, t)
			}
		}
		rk.mixed = rk.mixed[:0]
		rk.gen.add(t, decoded)
	}
	for i, c := range rk.batch {
		rk.batch[i] = chunk{}
		r := c.r
		if r.done {
			continue
		}
		r.prefilled += c.n
		if s.cfg.Role == RolePrefill {
			s.sendChunk(rk, r, t)
		}
		if r.prefilled < r.target {
			continue
		}
		if s.cfg.DisableOverlap {
			s.cachePrompt(rk, r)
		} else {
			r.insertPending = true
			rk.pendingInsert = append(rk.pendingInsert, r)
		}
		if s.cfg.Role == RolePrefill {
			r.firstTok = t
			s.lastChunkSent(rk, r, t)
			continue
		}
		r.state = StateSuccess
		s.token(r, t) // the first token, or after a retraction the next one
		if r.generated >= r.maxNew {
			s.complete(r, t)
			rk.full = false // the batch shrank (scheduler.py: last_batch filtered)
			continue
		}
		s.joinRun(rk, r)
	}
	rk.batch = rk.batch[:0]
}

// flushInserts makes the prompts of the last prefill batch matchable (the overlap lag ends);
// it reports whether there were any.
func (rk *rank) flushInserts(s *Server) bool {
	if len(rk.pendingInsert) == 0 {
		return false
	}
	for i, r := range rk.pendingInsert {
		if r.insertPending && !r.done {
			s.cachePrompt(rk, r)
		}
		r.insertPending = false
		rk.pendingInsert[i] = nil
	}
	rk.pendingInsert = rk.pendingInsert[:0]
	return true
}

// cachePrompt inserts r's computed prompt into the tree and moves r's lock there. The prompt's
// KV leaves r's private share (duplicates of what another request cached meanwhile are freed);
// a partial last page and any regenerated output tokens stay private.
func (s *Server) cachePrompt(rk *rank, r *request) {
	nd, _ := rk.cache.insertPrompt(r.prompt, r.node) // r.node: its locked hit, a prefix of the prompt
	rk.cache.lockPath(nd)
	rk.cache.unlockPath(r.node)
	r.node = nd
	keep := len(r.prompt)%s.cfg.PageSize + (r.target - len(r.prompt))
	rk.private -= r.alloc - keep
	r.alloc = keep
}

// startTransfer puts a prefilled room on the wire: TransferDone at done, unless the
// never-signal failure hook is on.
func (s *Server) startTransfer(r *request, now, done time.Time) {
	r.state = StateTransferring
	s.setQueue(r, QueueInflight)
	if s.neverKV {
		if s.cfg.BootstrapTimeout > 0 {
			s.timers.pushDeadline(timer{at: now.Add(s.cfg.BootstrapTimeout), kind: tStuck, r: r})
		}
		return
	}
	s.timers.push(timer{at: done, kind: tTransfer, r: r})
}

// KV transfer as SGLang's prefill server streams it (disaggregation/prefill.py
// SchedulerDisaggregationPrefillMixin.send_kv_chunk): the KV of every finished chunk is handed
// to the transfer engine as chunked prefill proceeds — from the first token the decode side
// lacks (its radix-cache hit), the prefill side's own cache hit included — and the last chunk
// completes the transfer. Each DP rank has one link of Config.LinkBandwidth shared by its
// transfers in progress (processor sharing: each of n active transfers moves at bandwidth/n),
// so earlier chunks travel while later ones compute, and concurrent transfers slow each other.
// A room's TransferDone comes T0 + PDOverhead after its last byte has left (and its last
// chunk was computed).

// link is one rank's KV link.
type link struct {
	act   []*request // transfers with bytes left, in the order they started
	last  time.Time  // progress of act is accounted up to here
	at    time.Time  // when the first of act drains
	armed bool       // at is valid
}

// linkRate is the link's bandwidth in bytes per second of server time.
func (s *Server) linkRate() float64 { return s.cfg.LinkBandwidth * s.cfg.Speedup }

// linkSync brings the active transfers' progress up to t.
func (s *Server) linkSync(rk *rank, t time.Time) {
	l := &rk.link
	if n := len(l.act); n > 0 && t.After(l.last) {
		moved := s.linkRate() * t.Sub(l.last).Seconds() / float64(n)
		for _, r := range l.act {
			r.xferLeft -= moved
		}
	}
	l.last = t
}

// linkArm computes when the first active transfer drains.
func (s *Server) linkArm(rk *rank) {
	l := &rk.link
	if len(l.act) == 0 {
		l.armed = false
		return
	}
	least := l.act[0].xferLeft
	for _, r := range l.act[1:] {
		least = min(least, r.xferLeft)
	}
	l.at, l.armed = l.last.Add(seconds(max(least, 0)*float64(len(l.act))/s.linkRate())), true
}

// sendChunk hands the KV r computed since its last send to the link.
func (s *Server) sendChunk(rk *rank, r *request, t time.Time) {
	from, upto := max(r.sent, r.decodeHit), min(r.prefilled, len(r.prompt))
	if upto <= from || s.neverKV {
		return
	}
	r.sent = upto
	bytes := float64(upto-from) * s.cfg.Profile.KVBytesPerToken
	if !(bytes > 0) {
		return
	}
	s.linkSync(rk, t)
	r.xferLeft += bytes
	if !r.onLink {
		r.onLink = true
		rk.link.act = append(rk.link.act, r)
	}
	s.linkArm(rk)
}

// lastChunkSent puts a prefilled room in the inflight queue; its TransferDone follows once
// its bytes have drained (at once if none are left), unless the never-signal hook is on.
func (s *Server) lastChunkSent(rk *rank, r *request, t time.Time) {
	r.state = StateTransferring
	s.setQueue(r, QueueInflight)
	if s.neverKV {
		s.linkDrop(rk, r, t)
		if s.cfg.BootstrapTimeout > 0 {
			s.timers.pushDeadline(timer{at: t.Add(s.cfg.BootstrapTimeout), kind: tStuck, r: r})
		}
		return
	}
	if !r.onLink {
		s.transferDrained(r, t)
	}
}

// transferDrained schedules TransferDone T0 + PDOverhead after r's last byte left at t.
func (s *Server) transferDrained(r *request, t time.Time) {
	s.timers.push(timer{at: t.Add(s.dur(seconds(s.cfg.Profile.T0 + s.cfg.Profile.PDOverhead))), kind: tTransfer, r: r})
}

// linkFire retires the transfers that drained by t.
func (s *Server) linkFire(rk *rank, t time.Time) {
	s.linkSync(rk, t)
	l := &rk.link
	n := float64(len(l.act))
	keep := l.act[:0]
	for _, r := range l.act {
		// Drained: less than a nanosecond of its share is left (the drain time was rounded).
		if r.xferLeft*n/s.linkRate() < 1e-9 {
			r.onLink, r.xferLeft = false, 0
			if r.queue == QueueInflight {
				s.transferDrained(r, t)
			}
			continue
		}
		keep = append(keep, r)
	}
	clear(l.act[len(keep):])
	l.act = keep
	s.linkArm(rk)
}

// linkDrop takes r off the link at t (it failed, or will never signal).
func (s *Server) linkDrop(rk *rank, r *request, t time.Time) {
	if !r.onLink {
		return
	}
	s.linkSync(rk, t)
	r.onLink, r.xferLeft = false, 0
	l := &rk.link
	if i := slices.Index(l.act, r); i >= 0 {
		l.act = slices.Delete(l.act, i, i+1)
	}
	s.linkArm(rk)
}

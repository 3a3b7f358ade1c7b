package engine

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// preallocate runs SGLang's decode-side admission (disaggregation/decode.py
// DecodePreallocQueue) on rk: first retracted rooms resume (resume_retracted_reqs), and while
// any is left no new room is preallocated; then prealloc-queue rooms are taken in FIFO order
// (pop_preallocated) while each fits in the allocatable tokens:
//
//	allocatable = free − max(ReservedDecodeTokens × (running + transfer + waiting rooms),
//	                         max over running of (prompt + min(max new, 4096)) − retractable)
//	              − Σ retracted rooms' (prompt + generated + ReservedDecodeTokens)
//
// where retractable is the running rooms' prompt + generated tokens (_allocatable_tokens). A
// room fits when max(prompt + ReservedDecodeTokens, prompt + max new − retractable) is within
// it; it then takes prompt + ReservedDecodeTokens of it, but only its prompt's KV is allocated
// (_pre_alloc): output tokens are allocated step by step, and retraction covers an overrun.
// When memory is short the queue waits — and so, because no Handshake reaches it, does the
// room on the prefill server (back-pressure). With the decode radix cache, evictable cache
// counts as free and a cached prompt prefix needs no KV of its own.
func (s *Server) preallocate(rk *rank, t time.Time) {
	reserved := s.cfg.ReservedDecodeTokens
	if rk.retracted.peek() != nil {
		alloc := s.allocatable(rk, false)
		for {
			r := rk.retracted.peek()
			if r == nil {
				break
			}
			need := len(r.prompt) - r.decodeHit + r.generated // its KV: all but the newest token's
			if required := min(need+reserved, rk.capacity); required > alloc || !rk.reserve(need-1) {
				return // retracted rooms still wait: no new room is preallocated
			}
			alloc -= need + reserved
			rk.retracted.pop()
			s.unretract(r)
			r.alloc = need - 1
			rk.waiting.push(r) // resumed: into the running batch at the next decode step
		}
	}
	if rk.prealloc.peek() == nil {
		return
	}
	retractable := int(rk.runSeq)
	alloc := s.allocatable(rk, true)
	for {
		r := rk.prealloc.peek()
		if r == nil {
			return
		}
		if need := len(r.prompt) + min(r.maxNew, reserved); need > rk.capacity {
			rk.prealloc.pop()
			s.fail(r, t, fmt.Sprintf("needs %d KV tokens, more than the rank's capacity of %d", need, rk.capacity))
			continue
		}
		// The decode radix cache (SGLang decode_radix_cache): a cached prompt prefix is shared,
		// locked for the room, and needs no KV of its own.
		hit, nd := 0, (*node)(nil)
		if rk.dcache != nil {
			hit, nd = rk.dcache.match(r.prompt[:len(r.prompt)-1])
			rk.dcache.lockPath(nd)
		}
		// SGLang would wait forever for a reserve beyond the whole pool: capped at capacity.
		required := min(len(r.prompt)-hit+reserved, rk.capacity)
		if max(required, len(r.prompt)-hit+r.maxNew-retractable) > alloc || !rk.reserve(len(r.prompt)-hit) {
			if rk.dcache != nil {
				rk.dcache.unlockPath(nd)
			}
			return
		}
		alloc -= required
		rk.prealloc.pop()
		r.alloc, r.decodeHit, r.dnode = len(r.prompt)-hit, hit, nd
		s.preallocated(r, t)
		if r.earlyKV {
			s.kvArrived(r, t)
		}
	}
}

// unretract takes r's terms out of the retracted-queue sums.
func (s *Server) unretract(r *request) {
	if !r.retractedQ {
		return
	}
	r.retractedQ = false
	r.rk.nRetracted--
	r.rk.retractedNeed -= int64(len(r.prompt) - r.decodeHit + r.generated + s.cfg.ReservedDecodeTokens)
}

// allocatable is DecodePreallocQueue._allocatable_tokens on rk (see preallocate); with
// admitting false, as resume_retracted_reqs calls it: no single-room term, retracted rooms
// not subtracted.
func (s *Server) allocatable(rk *rank, admitting bool) int {
	reserved := s.cfg.ReservedDecodeTokens
	rooms := rk.n[QueueRunning] + rk.n[QueueTransfer] + rk.n[QueueWaiting] - rk.nRetracted
	keep := reserved * rooms
	if admitting && len(rk.running) > 0 {
		keep = max(keep, rk.runMaxNeed()-int(rk.runSeq))
	}
	a := rk.free() + rk.evictable() - keep
	if admitting {
		a -= int(rk.retractedNeed)
	}
	return a
}

// runMaxNeed is the largest prompt + min(max new, clip) of the running batch (recomputed only
// after the rooms holding it left).
func (rk *rank) runMaxNeed() int {
	if rk.runMaxStale {
		rk.runMax, rk.runMaxN, rk.runMaxStale = 0, 0, false
		for _, r := range rk.running {
			if r.inRun {
				rk.noteRunMax(r)
			}
		}
	}
	return rk.runMax
}

func runNeed(r *request) int { return len(r.prompt) + min(r.maxNew, ClipMaxNewTokens) }

func (rk *rank) noteRunMax(r *request) {
	switch v := runNeed(r); {
	case v > rk.runMax:
		rk.runMax, rk.runMaxN = v, 1
	case v == rk.runMax:
		rk.runMaxN++
	}
}

func (s *Server) preallocated(r *request, t time.Time) {
	r.state = StateWaitingForInput
	s.setQueue(r, QueueTransfer)
	// The KV must now arrive within BootstrapTimeout, counted from here: SGLang's receiver
	// stamps init_time when the preallocated indices go to the prefill (disaggregation/
	// mooncake/conn.py, MooncakeKVReceiver.init, called from decode.py
	// DecodePreallocQueue.pop_preallocated) and its poll fails the room only after
	// SGLANG_DISAGGREGATION_WAITING_TIMEOUT from then (_check_waiting_timeout). A room still
	// queued for KV slots is the prefill's to time out ("… in KVPoll.Bootstrapping").
	s.armTimeout(r, t)
	s.emit(Output{Kind: KindPreallocated, At: t, Room: r.room, Rank: r.rk.id, CachedTokens: r.decodeHit})
}

// kvNeed is the KV r must hold privately for its next decode step, which writes the KV of the
// last token and reads prompt + generated tokens of context.
func (s *Server) kvNeed(r *request) int {
	n := len(r.prompt) + r.generated
	if s.cfg.Spec.On() { // the verify step writes the KV of every draft token, then frees the rejected
		n += s.cfg.Spec.DraftTokens - 1
	}
	if r.rk.cache != nil { // unified: the page-aligned prompt lives in the tree
		n -= len(r.prompt) - len(r.prompt)%s.cfg.PageSize
	}
	return n - r.decodeHit // decode radix cache: the hit lives in the tree
}

// clipNew is the output tokens admission charges r with: min(max new − generated,
// ClipMaxNewTokens) (schedule_policy.py PrefillAdder.add_one_req and
// _get_running_request_total_token_offset). A prefill server sets every request's max new
// tokens to 1 (disaggregation/prefill.py PrefillBootstrapQueue._process_req).
func (s *Server) clipNew(r *request) int {
	if s.cfg.Role == RolePrefill {
		return max(1-r.generated, 0)
	}
	return min(max(r.maxNew-r.generated, 0), ClipMaxNewTokens)
}

// joinRun appends r to the running batch, adding its terms to the rank's running sums.
func (s *Server) joinRun(rk *rank, r *request) {
	rk.running = append(rk.running, r)
	r.inRun = true
	rk.nRun++
	rk.runRemain += int64(s.clipNew(r))
	rk.runSeq += int64(len(r.prompt) + r.generated)
	if !rk.runMaxStale {
		rk.noteRunMax(r)
	}
}

// leaveRun takes r's terms out of the running sums (the caller drops it from rk.running).
func (s *Server) leaveRun(r *request) {
	if !r.inRun {
		return
	}
	r.inRun = false
	rk := r.rk
	rk.nRun--
	rk.runRemain -= int64(s.clipNew(r))
	rk.runSeq -= int64(len(r.prompt) + r.generated)
	if runNeed(r) == rk.runMax && !rk.runMaxStale {
		if rk.runMaxN--; rk.runMaxN == 0 {
			rk.runMaxStale = true
		}
	}
	rk.full = false // the running batch shrank: admission may retry (scheduler.py update_running_batch)
}

// formDecode builds a decode step on rk at t: (decode role) admit waiting rooms into the running
// batch up to MaxRunningRequests — a room's first token, produced by prefill, is emitted as it
// joins — then make sure every running request has KV for one more token, as SGLang's
// update_running_batch does (scheduler.py): when the pool (free plus evictable) cannot give the
// batch its next tokens (schedule_batch.py ScheduleBatch.check_decode_mem), requests are
// retracted in retract_decode's order — fewest output tokens first, then the longest prompt,
// later-admitted first among equals — until the rest fit (at least one is retracted, the last
// is never), and new_token_ratio jumps to (Σ generated + 20·n) / (Σ max new + 1) over the
// survivors, at most 1 (NewTokenRatioTracker.estimate_new_token_ratio_after_retract).
// Otherwise the ratio decays one step toward its floor (decay_step).
func (s *Server) formDecode(rk *rank, t time.Time) (time.Duration, bool) {
	_, need := s.liveRunning(rk)
	if s.cfg.Role == RoleDecode {
		for len(rk.running) < s.cfg.MaxRunningRequests {
			r := rk.waiting.peek()
			if r == nil {
				break
			}
			rk.waiting.pop()
			s.setQueue(r, QueueRunning)
			if r.generated == 0 {
				s.token(r, t)
				if r.generated >= r.maxNew {
					s.complete(r, t)
					continue
				}
			}
			s.joinRun(rk, r)
			need += max(s.kvNeed(r)-r.alloc, 0)
		}
	}
	if len(rk.running) == 0 {
		rk.full = false
		return 0, false
	}
	if need > 0 && rk.free()+rk.evictable() < need {
		s.retractFor(rk, need)
	} else {
		rk.ratio = max(rk.ratio-s.ratioDecay, s.ratioMin)
	}
	ctx := 0 // the batch's context, summed in the same pass (a failure empties the batch)
	for i := 0; i < len(rk.running); i++ {
		r := rk.running[i]
		if d := s.kvNeed(r) - r.alloc; d > 0 {
			if !rk.reserve(d) { // only the last request is left, and it does not fit
				s.fail(r, t, fmt.Sprintf("out of KV memory: %d tokens do not fit in the rank's capacity of %d", s.kvNeed(r), rk.capacity))
				rk.running = rk.running[:0]
				break
			}
			r.alloc += d
		}
		ctx += len(r.prompt) + r.generated
	}
	if len(rk.running) == 0 {
		return 0, false
	}
	rk.stepKind = stepDecode
	d, n := s.decodeStepTime(len(rk.running), ctx)
	rk.stepTokens = n
	return d, true
}

// retractFor retracts running requests of rk in SGLang's order (formDecode) until the others'
// next tokens, need in all, fit, and re-estimates the new-token ratio.
func (s *Server) retractFor(rk *rank, need int) {
	order := append(rk.order[:0], rk.running...)
	slices.SortStableFunc(order, func(a, b *request) int {
		if a.generated != b.generated {
			return b.generated - a.generated
		}
		return len(a.prompt) - len(b.prompt)
	})
	for first := true; len(order) > 1 && (first || rk.free()+rk.evictable() < need); first = false {
		r := order[len(order)-1]
		order[len(order)-1] = nil
		order = order[:len(order)-1]
		need -= max(s.kvNeed(r)-r.alloc, 0)
		s.retract(rk, r)
	}
	clear(order)
	rk.order = order[:0]
	live := rk.running[:0]
	gen, maxNew := 0, 0
	for _, r := range rk.running {
		if r.inRun {
			live = append(live, r)
			gen += r.generated
			maxNew += r.maxNew
		}
	}
	clear(rk.running[len(live):])
	rk.running = live
	rk.ratio = min(1, float64(gen+RetractDecodeSteps*len(live))/float64(maxNew+1))
}

// retract takes r out of the running batch and frees its KV (schedule_batch.py
// ScheduleBatch.release_req). Unified: it is appended to the waiting queue (scheduler.py
// _extend_requests_to_queue) and prefilled again — prompt and generated tokens, the prompt
// mostly from the cache — producing its next token as a prefill does. Decode: it waits in
// the retracted queue (DecodePreallocQueue.retracted_queue, FIFO) until its KV can be reserved
// again; SGLang offloads its KV to host memory and loads it back, which is not charged.
func (s *Server) retract(rk *rank, r *request) {
	rk.retractions++
	s.leaveRun(r)
	if r.node != nil {
		rk.cache.unlockPath(r.node)
		r.node = nil
	}
	rk.private -= r.alloc
	r.alloc = 0
	s.setQueue(r, QueueWaiting)
	if rk.cache == nil {
		rk.retracted.push(r)
		r.retractedQ = true
		rk.nRetracted++
		rk.retractedNeed += int64(len(r.prompt) - r.decodeHit + r.generated + s.cfg.ReservedDecodeTokens)
		return
	}
	r.target = len(r.prompt) + r.generated
	r.prefilled = 0
	rk.waiting.push(r)
}

func (s *Server) finishDecodeStep(rk *rank, t time.Time) {
	// Count the live requests first: loads independent of each other, which the CPU overlaps,
	// where the loop that produces the tokens waits on each request in turn (other ranks' steps
	// ran since this one was formed, so the requests have left the cache; reading r.done in
	// that loop was 1.8 s of a 1M-request run). r.done shares its cache line with what the
	// second loop reads (see request).
	live := 0
	for _, r := range rk.running {
		if !r.done {
			live++
		}
	}
	decoded := 0
	for _, r := range rk.running {
		if live == 0 {
			break // the rest are done
		}
		if !r.done {
			live--
			decoded += s.decodeTokens(rk, r, t)
		}
	}
	rk.gen.add(t, decoded)
	// process_batch_result_decode: log_decode_stats (which publishes) every decode_log_interval
	// decode batches.
	if rk.decodeSteps++; rk.decodeSteps%DecodeLogInterval == 0 {
		s.publishKV(rk, t)
	}
}

// decodeTokens gives running request r the output of a decode step ending at t — one token,
// or what speculation accepted — and completes it at its max new tokens; it returns the tokens
// produced. The running sums move with each token (min(remaining, clip) shrinks unless the
// remainder is above the clip).
func (s *Server) decodeTokens(rk *rank, r *request, t time.Time) int {
	n := 0
	for i := range s.accepted(r) {
		if r.generated >= r.maxNew {
			break
		}
		n++
		if r.maxNew-r.generated <= ClipMaxNewTokens {
			rk.runRemain--
		}
		rk.runSeq++
		if i == 0 {
			s.token(r, t)
		} else {
			s.chunkToken(r, t)
		}
	}
	if r.generated >= r.maxNew {
		s.complete(r, t)
	}
	return n
}

// accepted is the tokens r gains from this decode step: 1, or under speculative decoding
// Spec.AcceptLength on average, spread deterministically (a running remainder per request, so
// 2.5 gives 2, 3, 2, 3, …).
func (s *Server) accepted(r *request) int {
	if !s.cfg.Spec.On() {
		return 1
	}
	const unit = 256 // the remainder's resolution: rounding keeps the mean unbiased
	carry := float64(r.specCarry)/unit + s.cfg.Spec.AcceptLength
	k := int(carry)
	r.specCarry = uint8(min(math.Round((carry-float64(k))*unit), unit-1))
	return k
}

// PaddedBatch is the batch size a decode step of b requests runs at, and whether it replays a
// CUDA graph, on a server with --cuda-graph-max-bs maxBS. SGLang captures graphs for the batch
// sizes 1, 2, 4, 8, 12, 16…256 step 8, 272…496 step 16, 512… step 32, those ≤ maxBS
// (server_args.py ServerArgs._generate_cuda_graph_batch_sizes); a step replays the graph of
// the smallest captured size ≥ b, padding the batch with empty rows
// (model_executor/cuda_graph_runner.py CudaGraphRunner.can_run and replay_prepare). A batch
// larger than every captured size runs eagerly, unpadded: (b, false). maxBS ≤ 0: (b, false).
func PaddedBatch(b, maxBS int) (int, bool) {
	if maxBS <= 0 || b <= 0 {
		return b, false
	}
	var p int
	switch {
	case b <= 2:
		p = b
	case b <= 4:
		p = 4
	case b <= 8:
		p = 8
	case b <= 12:
		p = 12
	case b <= 256:
		p = (b + 7) / 8 * 8
	case b <= 496:
		p = 256 + (b-256+15)/16*16
	default:
		p = 512 + (b-512+31)/32*32
	}
	if p > maxBS {
		return b, false
	}
	return p, true
}

// NoOverlapHostPerRequest is the scheduler's CPU time per running request per decode step
// that the GPU waits for when the scheduler does not overlap it (Config.DisableOverlap: SGLang
// before v0.4, whose scheduler loop — managers/tp_worker.py forward_step and
// forward_decode_batch — built the next batch (prepare_for_decode) and processed every
// request's result (check_finished, handle_finished_requests building each streamed
// request's output) between GPU steps; later SGLang with --disable-overlap-schedule). With
// the overlap scheduler (scheduler.py event_loop_overlap, SGLang's default since v0.4) that
// work runs while the GPU computes the previous batch and is not charged. Fixed by the two
// offline levels of the v0.3.0 README (benchmark/benchmark_vllm_060), 5,000 ShareGPT
// requests at decode batches of ~1,000 (output tok/s, req/s): llama31-70b-h100-tp4-sharegpt-v030
// ran ×1.18–1.20 and llama31-8b-a100-sharegpt-v030 ×0.96–0.98 without it; 20 µs puts them at
// ×1.08–1.11 and ×0.89–0.91, their errors balanced (15 µs: ×1.10–1.13 and ×0.91–0.93; 25 µs:
// ×1.06–1.08 and ×0.87–0.89). It also lifts both sets' rate-8 medians, whose batches are in
// the tens (A100 ITL ×0.88 → ×0.92, 70B TPOT ×0.89 → ×0.93).
const NoOverlapHostPerRequest = 20e-6

// decodeStepTime is the duration of a decode step of batch requests over context tokens,
// with CUDA-graph padding or the eager overhead when Config.CUDAGraphMaxBS is set. Padding rows
// cost compute (and MoE expert reads) but read no KV, so the padded size replaces the batch
// and the context is unchanged. Without the overlap scheduler (Config.DisableOverlap) the
// step also waits for the scheduler's per-request CPU work (NoOverlapHostPerRequest × batch,
// unpadded). Under speculative decoding (Config.Spec) the target verifies the draft tokens of
// every request and the draft forwards are added (spec.go). It returns the tokens the step
// counts under DP attention (the padded batch, times the draft tokens).
func (s *Server) decodeStepTime(batch, context int) (time.Duration, int) {
	n, eager := batch, 0.0
	if s.cfg.CUDAGraphMaxBS > 0 {
		var graph bool
		if n, graph = PaddedBatch(batch, s.cfg.CUDAGraphMaxBS); !graph {
			eager = s.cfg.Profile.EagerOverhead
		}
	}
	var d time.Duration
	k := 1 // tokens per request the target computes: the draft tokens under speculation
	if s.cfg.Spec.On() {
		k = s.cfg.Spec.DraftTokens
	}
	if s.split() {
		d = s.cfg.Profile.attnVerifyTime(n, k, context)
	} else {
		d = s.cfg.Profile.verifyTime(n, k, context)
	}
	if s.cfg.Spec.On() {
		d += s.cfg.Profile.specDraftTime(s.cfg.Spec, n, context)
	}
	if eager > 0 {
		d += seconds(eager)
	}
	d = s.cfg.Profile.withHost(d, !s.cfg.DisableOverlap)
	if s.cfg.DisableOverlap {
		d += seconds(NoOverlapHostPerRequest * float64(batch))
	}
	return s.dur(d), n * k
}

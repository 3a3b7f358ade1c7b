package engine

import (
	"fmt"
	"time"
)

// preallocate reserves KV for prealloc-queue rooms in FIFO order (decode role): prompt plus
// min(MaxNew, ReservedDecodeTokens). When memory is short the queue waits — and so, because no
// Handshake reaches it, does the room on the prefill server (back-pressure).
func (s *Server) preallocate(rk *rank, t time.Time) {
	for {
		r := rk.prealloc.peek()
		if r == nil {
			return
		}
		need := len(r.prompt) + min(r.maxNew, s.cfg.ReservedDecodeTokens)
		if need > rk.capacity {
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
		if !rk.reserve(need - hit) {
			if rk.dcache != nil {
				rk.dcache.unlockPath(nd)
			}
			return
		}
		rk.prealloc.pop()
		r.alloc, r.decodeHit, r.dnode = need-hit, hit, nd
		s.preallocated(r, t)
		if r.earlyKV {
			s.kvArrived(r, t)
		}
	}
}

func (s *Server) preallocated(r *request, t time.Time) {
	r.state = StateWaitingForInput
	s.setQueue(r, QueueTransfer)
	s.emit(Output{Kind: KindPreallocated, At: t, Room: r.room, Rank: r.rk.id, CachedTokens: r.decodeHit})
}

// kvNeed is the KV r must hold privately for its next decode step, which writes the KV of the
// last token and reads prompt + generated tokens of context.
func (s *Server) kvNeed(r *request) int {
	n := len(r.prompt) + r.generated
	if r.rk.cache != nil { // unified: the page-aligned prompt lives in the tree
		n -= len(r.prompt) - len(r.prompt)%s.cfg.PageSize
	}
	return n - r.decodeHit // decode radix cache: the hit lives in the tree
}

// formDecode builds a decode step on rk at t: (decode role) admit waiting rooms into the running
// batch up to MaxRunningRequests — a room's first token, produced by prefill, is emitted as it
// joins — then make sure every running request has KV for one more token, retracting the most
// recently admitted requests when memory runs out.
func (s *Server) formDecode(rk *rank, t time.Time) (time.Duration, bool) {
	live := rk.running[:0]
	for _, r := range rk.running {
		if !r.done {
			live = append(live, r)
		}
	}
	clear(rk.running[len(live):])
	rk.running = live
	if s.cfg.Role == RoleDecode {
		// Retracted rooms first, while their KV can be had again; then rooms whose KV is already
		// reserved (never blocked behind a retracted one, which could wait forever otherwise).
		for len(rk.running) < s.cfg.MaxRunningRequests {
			r := rk.retracted.peek()
			if r == nil {
				break
			}
			need := len(r.prompt) - r.decodeHit + r.generated + min(r.maxNew-r.generated, s.cfg.ReservedDecodeTokens)
			if need > rk.capacity {
				rk.retracted.pop()
				s.fail(r, t, fmt.Sprintf("needs %d KV tokens, more than the rank's capacity of %d", need, rk.capacity))
				continue
			}
			if !rk.reserve(need) {
				break
			}
			r.alloc = need
			rk.retracted.pop()
			s.setQueue(r, QueueRunning)
			rk.running = append(rk.running, r)
		}
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
			rk.running = append(rk.running, r)
		}
	}
	for i := 0; i < len(rk.running); i++ {
		r := rk.running[i]
		need := s.kvNeed(r)
		for r.alloc < need {
			if rk.reserve(need - r.alloc) {
				r.alloc = need
				break
			}
			if len(rk.running) == 1 {
				s.fail(r, t, fmt.Sprintf("out of KV memory: %d tokens do not fit in the rank's capacity of %d", need, rk.capacity))
				rk.running = rk.running[:0]
				break
			}
			last := len(rk.running) - 1
			s.retract(rk, rk.running[last])
			rk.running[last] = nil
			rk.running = rk.running[:last]
			if last == i { // r itself was the most recent
				break
			}
		}
	}
	if len(rk.running) == 0 {
		return 0, false
	}
	ctx := 0
	for _, r := range rk.running {
		ctx += len(r.prompt) + r.generated
	}
	rk.stepKind = stepDecode
	rk.stepTokens = len(rk.running)
	if s.split() {
		return s.dur(s.cfg.Profile.AttnDecodeTime(len(rk.running), ctx)), true
	}
	return s.dur(s.cfg.Profile.DecodeTime(len(rk.running), ctx)), true
}

// retract takes r out of the running batch and frees its KV; it goes back to the head of the
// waiting queue. Decode: it resumes when its KV can be reserved again (SGLang offloads or
// recomputes it; neither is charged). Unified: its prompt and generated tokens are prefilled
// again (mostly cache hits).
func (s *Server) retract(rk *rank, r *request) {
	rk.retractions++
	if r.node != nil {
		rk.cache.unlockPath(r.node)
		r.node = nil
	}
	rk.private -= r.alloc
	r.alloc = 0
	s.setQueue(r, QueueWaiting)
	if rk.cache == nil {
		rk.retracted.pushFront(r)
		return
	}
	r.target = len(r.prompt) + r.generated
	r.prefilled = 0
	rk.waiting.pushFront(r)
}

func (s *Server) finishDecodeStep(rk *rank, t time.Time) {
	for _, r := range rk.running {
		if r.done {
			continue
		}
		s.token(r, t)
		if r.generated >= r.maxNew {
			s.complete(r, t)
		}
	}
}

package engine

import (
	"fmt"
	"time"
)

// formPrefill builds a chunked-prefill batch on rk at t (prefill and unified roles): the
// continuing chunked request first, then waiting requests in FIFO order while the token budget
// lasts and their uncached tokens fit in KV (evicting LRU cache leaves). The last request admitted
// may be chunked. A request that does not fit holds the queue (no skipping ahead), as SGLang's
// FCFS policy does.
func (s *Server) formPrefill(rk *rank, t time.Time) (time.Duration, bool) {
	rk.batch = rk.batch[:0]
	budget := s.cfg.ChunkedPrefillSize
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
			}
		}
	}
	for budget > 0 {
		if s.cfg.Role == RoleUnified && rk.n[QueueRunning] >= s.cfg.MaxRunningRequests {
			break
		}
		r := rk.waiting.peek()
		if r == nil {
			break
		}
		ok := s.admit(rk, r, t)
		if r.done { // failed: can never fit
			continue
		}
		if !ok {
			break
		}
		rk.waiting.pop()
		s.setQueue(r, QueueRunning)
		n := min(r.target-r.prefilled, budget)
		rk.batch = append(rk.batch, chunk{r, n})
		budget -= n
		if r.prefilled+n < r.target {
			rk.chunked = r
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
	}
	rk.stepKind = stepPrefill
	return s.dur(s.cfg.Profile.PrefillTime(newTok, newCtx)), true
}

// admit measures r's prefix hit (first admission only is reported), locks the hit and reserves
// KV for the rest. It returns false if the KV is not available now; a request that can never
// fit is failed.
func (s *Server) admit(rk *rank, r *request, t time.Time) bool {
	// SGLang matches at most len-1 tokens: the last one is computed to get the logits.
	hit, nd := rk.cache.match(r.prompt[:len(r.prompt)-1])
	need := r.target - hit
	if need > rk.capacity {
		s.fail(r, t, fmt.Sprintf("needs %d KV tokens, more than the rank's capacity of %d", need, rk.capacity))
		return false
	}
	rk.cache.lockPath(nd)
	if !rk.reserve(need) {
		rk.cache.unlockPath(nd)
		return false
	}
	r.node, r.alloc, r.prefilled = nd, need, hit
	if !r.admitted {
		r.admitted, r.cached = true, hit
		rk.promptTokens += int64(len(r.prompt))
		rk.cachedTokens += int64(hit)
	}
	return true
}

func (s *Server) finishPrefillStep(rk *rank, t time.Time) {
	for i, c := range rk.batch {
		rk.batch[i] = chunk{}
		r := c.r
		if r.done {
			continue
		}
		r.prefilled += c.n
		if r.prefilled < r.target {
			continue
		}
		s.cachePrompt(rk, r)
		if s.cfg.Role == RolePrefill {
			r.firstTok = t
			s.startTransfer(r, t, t.Add(s.dur(s.cfg.Profile.TransferTime(len(r.prompt), s.cfg.LinkBandwidth))))
			continue
		}
		r.state = StateSuccess
		if r.generated == 0 {
			s.token(r, t)
		}
		if r.generated >= r.maxNew {
			s.complete(r, t)
			continue
		}
		rk.running = append(rk.running, r)
	}
	rk.batch = rk.batch[:0]
}

// cachePrompt inserts r's computed prompt into the tree and moves r's lock there. The prompt's
// KV leaves r's private share (duplicates of what another request cached meanwhile are freed);
// a partial last page and any regenerated output tokens stay private.
func (s *Server) cachePrompt(rk *rank, r *request) {
	nd, _ := rk.cache.insert(r.prompt)
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
			s.timers.push(timer{at: now.Add(s.cfg.BootstrapTimeout), kind: tStuck, r: r})
		}
		return
	}
	s.timers.push(timer{at: done, kind: tTransfer, r: r})
}

package engine

import "time"

// The Constant (and instant) profiles model an infinitely parallel server: no batching, no
// queueing, no KV back-pressure. Each request runs on its own timers, so every request gets
// exactly the profile's TTFT and ITL however many run. The prefix cache is still consulted
// (match, then insert, then evict down to capacity) so cached_tokens stays meaningful.

// startParallel starts a unified request: first token TTFT after now.
func (s *Server) startParallel(r *request, now time.Time) {
	s.admitParallel(r)
	s.setQueue(r, QueueRunning)
	r.state = StateSuccess
	s.timers.push(timer{at: now.Add(s.dur(s.cfg.Profile.TTFT)), kind: tToken, r: r})
}

// admitParallel measures r's prefix hit and caches its prompt, nothing locked.
func (s *Server) admitParallel(r *request) {
	rk := r.rk
	hit, _ := rk.cache.match(r.prompt[:len(r.prompt)-1])
	loaded := 0 // a host-tier hit counts as cached; a constant profile takes no time to load it
	if h := rk.host(); h != nil {
		loaded = h.hit(r.prompt[:len(r.prompt)-1], hit)
	}
	rk.cache.insert(r.prompt)
	if over := rk.cache.size - rk.capacity; over > 0 {
		rk.cache.evict(over)
	}
	r.admitted, r.cached = true, hit+loaded
	rk.promptTokens += int64(len(r.prompt))
	rk.cachedTokens += int64(hit + loaded)
	rk.hostHit += int64(loaded)
}

// parallelToken emits r's next token at t and schedules the one after, or finishes r.
func (s *Server) parallelToken(r *request, t time.Time) {
	if r.generated > 0 { // the first token is prefill's
		r.rk.gen.add(t, 1)
	}
	s.token(r, t)
	if r.generated >= r.maxNew {
		s.complete(r, t)
		return
	}
	s.timers.push(timer{at: t.Add(s.dur(s.cfg.Profile.ITL)), kind: tToken, r: r})
}

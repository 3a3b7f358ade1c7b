package fakeworker

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/sim/engine"
)

// The engine loop: one goroutine per worker owns its engine.Server (which is not safe for
// concurrent use). Handlers send it commands (closures run on the loop goroutine) and wait on a
// sub, a per-room mailbox the loop fills from Advance outputs. The loop never blocks on a
// handler: a sub is a mutex-guarded state plus a one-slot notify channel, so events produced
// while a handler is busy writing coalesce into one wake-up.

// subState is what a waiting handler knows about its room.
type subState struct {
	tokens       int          // output tokens produced so far (KindToken outputs seen)
	prealloc     bool         // decode: KV reserved; the room may be registered at the prefill's bootstrap server
	decodeCached int          // decode: prompt tokens its radix cache already holds
	transferred  bool         // prefill: KV transfer done (TransferDone seen)
	cached       int          // prefill: cached tokens reported with TransferDone
	rank         int          // DP rank that served the room
	done         bool         // terminal: Finished or failed
	failed       string       // non-empty: the room failed for this reason
	status       int          // HTTP status to answer a failure with (500 unless set)
	usage        engine.Usage // Finished: token accounting
	firstToken   time.Time    // when the first token (or TransferDone) was seen by the loop
}

// sub is one waiter on a room. The loop writes, one handler reads.
type sub struct {
	notify chan struct{} // one slot: signalled after every change
	mu     sync.Mutex    // protects st
	st     subState
}

func newSub() *sub { return &sub{notify: make(chan struct{}, 1)} }

func (s *sub) snapshot() subState {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	return st
}

func (s *sub) update(f func(st *subState)) {
	s.mu.Lock()
	f(&s.st)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// deliver applies one engine output to the sub's state.
func (s *sub) deliver(o *engine.Output) {
	s.mu.Lock()
	st := &s.st
	st.rank = o.Rank
	switch o.Kind {
	case engine.KindPreallocated:
		st.prealloc, st.decodeCached = true, o.CachedTokens
	case engine.KindTransferDone:
		st.transferred, st.cached = true, o.CachedTokens
		st.firstToken = o.At
	case engine.KindToken:
		if st.tokens == 0 {
			st.firstToken = o.At
		}
		st.tokens = o.Index + 1
	case engine.KindFinished:
		st.done, st.usage = true, o.Usage
	case engine.KindFailed:
		if !st.done {
			st.done, st.failed, st.status = true, o.Reason, http.StatusInternalServerError
		}
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// fail ends the sub with reason and status unless it already ended.
func (s *sub) fail(status int, reason string) {
	s.update(func(st *subState) {
		if !st.done {
			st.done, st.failed, st.status = true, reason, status
		}
	})
}

// roomSubs are the waiters on one room: the inference leg and (prefill) the bootstrap
// registration of the decode side.
type roomSubs struct {
	leg    *sub
	waiter *sub
}

// loop drives one engine.Server in real time.
type loop struct {
	srv     *engine.Server
	cmds    chan func(l *loop, now time.Time)
	stopped chan struct{} // closed when the loop has exited
	subs    map[uint64]roomSubs
	outs    []engine.Output
}

func newLoop(srv *engine.Server) *loop {
	return &loop{srv: srv, cmds: make(chan func(*loop, time.Time), 1024), stopped: make(chan struct{}), subs: make(map[uint64]roomSubs)}
}

// do runs f on the loop goroutine (asynchronously) and reports whether the loop accepted it:
// false once the loop has stopped or ctx is done.
func (l *loop) do(ctx context.Context, f func(l *loop, now time.Time)) bool {
	select {
	case l.cmds <- f:
		return true
	case <-l.stopped:
		return false
	case <-ctx.Done():
		return false
	}
}

// query runs f on the loop goroutine and waits for it; false when the loop stopped or ctx ended.
func (l *loop) query(ctx context.Context, f func(l *loop, now time.Time)) bool {
	done := make(chan struct{})
	if !l.do(ctx, func(l *loop, now time.Time) { f(l, now); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-l.stopped:
		return false
	case <-ctx.Done():
		return false
	}
}

// run is the loop goroutine; it returns when ctx is done, after failing every waiter.
func (l *loop) run(ctx context.Context) {
	defer close(l.stopped)
	wake := newWaker()
	defer wake.Close()
	for {
		select {
		case <-ctx.Done():
			for room, rs := range l.subs {
				for _, s := range [...]*sub{rs.leg, rs.waiter} {
					if s != nil {
						s.fail(http.StatusServiceUnavailable, "fakeworker: worker stopped")
					}
				}
				delete(l.subs, room)
			}
			return
		case f := <-l.cmds:
			now := time.Now()
			f(l, now)
			// Take what else is queued at the same instant, so one Advance serves a burst.
		drain:
			for range 256 {
				select {
				case f := <-l.cmds:
					f(l, now)
				default:
					break drain
				}
			}
		case <-wake.C():
		}
		l.outs = l.srv.AppendAdvance(l.outs[:0], time.Now())
		l.dispatch(l.outs)
		if t, ok := l.srv.NextEvent(); ok {
			wake.Arm(time.Until(t))
		} else {
			wake.Disarm()
		}
	}
}

// dispatch hands outputs to the rooms' waiters; terminal outputs forget the room.
func (l *loop) dispatch(outs []engine.Output) {
	for i := range outs {
		o := &outs[i]
		rs, ok := l.subs[o.Room]
		if !ok {
			continue
		}
		if rs.leg != nil {
			rs.leg.deliver(o)
		}
		if rs.waiter != nil {
			rs.waiter.deliver(o)
		}
		if o.Kind == engine.KindFinished || o.Kind == engine.KindFailed {
			delete(l.subs, o.Room)
		}
	}
	clear(outs)
}

// submit registers s as the inference leg of req.Room and submits req; a room that already has
// a live leg on this worker fails s with 409 without touching the engine.
func (l *loop) submit(s *sub, req engine.Req, now time.Time) {
	rs := l.subs[req.Room]
	if rs.leg != nil {
		s.fail(http.StatusConflict, "fakeworker: bootstrap room is already live on this worker")
		return
	}
	rs.leg = s
	l.subs[req.Room] = rs
	l.srv.Submit(now, req)
}

// watch registers s as the bootstrap waiter of room and sends the engine its Handshake.
func (l *loop) watch(s *sub, room uint64, decodeCached int, now time.Time) {
	rs := l.subs[room]
	if rs.waiter != nil {
		s.fail(http.StatusConflict, "fakeworker: bootstrap room is already registered")
		return
	}
	rs.waiter = s
	l.subs[room] = rs
	l.srv.HandshakeCached(now, room, decodeCached)
}

// unwatch drops the bootstrap waiter s of room; when the room has not completed its transfer,
// the decode side is gone (it gave up, or died), so the room is aborted too, with the reason
// SGLang's Mooncake sender gives when its decode's session is gone (mooncake/conn.py).
func (l *loop) unwatch(s *sub, room uint64, decode string, now time.Time) {
	rs, ok := l.subs[room]
	if !ok || rs.waiter != s {
		return
	}
	st := s.snapshot()
	rs.waiter = nil
	if rs.leg == nil {
		delete(l.subs, room)
	} else {
		l.subs[room] = rs
	}
	if !st.transferred && !st.done {
		l.srv.Abort(now, room, "Decode instance could be dead, remote mooncake session "+decode+" is not alive")
	}
}

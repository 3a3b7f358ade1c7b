package sim

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// script is a conversation: every turn of it, built ahead on the prefetcher's goroutine
// (workloads Session.ForSimulator: token ids and routing text appended piece by piece, no
// bodies). A simulated server always generates exactly max_tokens tokens and its reply text is
// workloads.ReplyText, so each reply, and with it the next turn, is known before the turn is
// sent; a failed turn ends its conversation and the turns built after it are dropped.
type script struct {
	turns  []plannedTurn
	k      int            // the pending turn's index
	turn   workloads.Turn // the pending turn, when has
	has    bool
	route  wire.Route
	id     string   // the pending turn's request id, "session/turn"
	jitter int64    // arrivalJitter(id)
	reply  []uint32 // regular mode: the pending turn's reply ids (the server caches them)
}

// plannedTurn is one turn of a script.
type plannedTurn struct {
	turn   workloads.Turn
	route  wire.Route
	id     string
	jitter int64    // arrivalJitter(id), hashed here on the prefetcher's goroutine, not on the loop's
	reply  []uint32 // regular mode only
}

// newScript builds every turn of s and makes the first one pending.
func newScript(s *workloads.Session, regular bool) (*script, error) {
	s.ForSimulator()
	sc := &script{turns: make([]plannedTurn, 0, s.Turns())}
	var reply []byte // the reply to the previous turn; the buffers are reused for every turn
	var replyIDs []uint32
	for {
		t, ok := s.NextReply(reply, replyIDs)
		if !ok {
			break
		}
		route, ok := wire.RouteFromPath(t.Path)
		if !ok {
			return nil, errors.New("sim: workload turn has no inference path")
		}
		p := plannedTurn{turn: t, route: route, id: t.Session + "/" + strconv.Itoa(t.Index)}
		p.jitter = arrivalJitter(p.id)
		// The reply makes the next turn's prompt and, in regular mode, is what the server
		// caches; a PD conversation's last reply is neither (generating replies was 9 % of a
		// whole-suite validate --fit's CPU, mostly last turns of single-turn workloads).
		if regular || t.Index+1 < s.Turns() {
			if regular { // the engine keeps the reply's ids (Req.Output): a slice of its own
				replyIDs = nil
			}
			reply, replyIDs = workloads.AppendReply(reply[:0], replyIDs[:0], t.PromptIDs, t.MaxTokens)
		}
		if regular {
			p.reply = replyIDs
		}
		sc.turns = append(sc.turns, p)
	}
	sc.set(0)
	return sc, nil
}

// set makes turn k pending (none past the last).
func (sc *script) set(k int) {
	sc.k = k
	sc.has = k < len(sc.turns)
	if !sc.has {
		sc.turn, sc.reply, sc.turns = workloads.Turn{}, nil, nil
		return
	}
	p := &sc.turns[k]
	sc.turn, sc.route, sc.id, sc.jitter, sc.reply = p.turn, p.route, p.id, p.jitter, p.reply
	*p = plannedTurn{} // the script no longer holds what the request now does
}

// next makes the turn after the pending one pending; false when it was the last.
func (sc *script) next() bool {
	if !sc.has {
		return false
	}
	sc.set(sc.k + 1)
	return sc.has
}

// prefetcher prepares a level's conversations, in source order, on its own goroutine, a few
// ahead of the simulation: their first turns (generating and tokenizing the opening prompt)
// are built on another core while the event loop runs. The order of conversations is the source's, so
// results do not depend on scheduling.
type prefetcher struct {
	ch     chan []prefetched // batches of prefetchBatch conversations (the last may be shorter)
	buf    []prefetched      // the batch being handed out
	stop   chan struct{}
	done   chan struct{}
	err    error // the source's Close error, once done is closed
	closed bool
}

type prefetched struct {
	s   *script
	arr int64 // trace: the session's arrival offset
	err error
}

// prefetchDepth is how many conversations are prepared ahead, handed over in batches of
// prefetchBatch: one channel operation per conversation woke the parked prefetcher each time
// (a futex call on the event loop's goroutine, 0.5 s of a million-request run's loop).
const (
	prefetchDepth = 64
	prefetchBatch = 16
)

func startPrefetch(src workloads.Source, regular bool) *prefetcher {
	p := &prefetcher{ch: make(chan []prefetched, prefetchDepth/prefetchBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer func() { p.err = src.Close() }()
		defer close(p.ch)
		batch := make([]prefetched, 0, prefetchBatch)
		send := func() bool {
			select {
			case p.ch <- batch:
				batch = make([]prefetched, 0, prefetchBatch)
				return true
			case <-p.stop:
				return false
			}
		}
		for {
			item, ok := nextPrefetched(src, regular)
			if !ok {
				if len(batch) > 0 {
					send()
				}
				return
			}
			batch = append(batch, item)
			if item.err != nil {
				send()
				return
			}
			if len(batch) == prefetchBatch && !send() {
				return
			}
		}
	}()
	return p
}

// nextPrefetched builds src's next conversation; false at the end of src.
func nextPrefetched(src workloads.Source, regular bool) (prefetched, bool) {
	var item prefetched
	sess, err := src.Next()
	switch {
	case err == io.EOF:
		return item, false
	case err != nil:
		item.err = err
	default:
		item.arr = int64(sess.Arrival)
		item.s, item.err = newScript(sess, regular)
	}
	return item, true
}

// Conversations remembers the conversations of each workload level a run generates, for other
// runs of the same workload in the process (a fit runs every published set a few dozen times
// with other GPU constants): a later run takes copies of the scripts instead of generating and
// tokenizing the prompts again, ~30 % of such a run's CPU. A remembered level is generated
// whole, before the run, on the run's goroutine; the scripts' token ids and texts are shared
// read-only by every run that copies them. Safe for concurrent use; the zero value is ready.
type Conversations struct {
	// Budget bounds what is remembered, in bytes of token ids and text (0: no bound): a level
	// that would take the total past it is generated for each run, as without Conversations.
	Budget int64
	mu     sync.Mutex
	m      map[conversationsKey]*conversationsLevel
	used   int64
}

type conversationsKey struct {
	params  workloads.Params
	regular bool
}

type conversationsLevel struct {
	once    sync.Once
	items   []prefetched // each script with its first turn pending (newScript), never run
	errNew  error        // workloads.NewSource's error: every run waiting on once reports it
	err     error        // the source's Close error
	counted bool         // its size is in Conversations.used
}

// size is about how many bytes of token ids and text the level's scripts hold.
func (lv *conversationsLevel) size() int64 {
	n := 0
	add := func(t workloads.Turn, reply []uint32) { n += 4*cap(t.PromptIDs) + len(t.RouteText) + 4*cap(reply) }
	for _, it := range lv.items {
		if it.s == nil {
			continue
		}
		add(it.s.turn, it.s.reply)
		for _, p := range it.s.turns {
			add(p.turn, p.reply)
		}
	}
	return int64(n)
}

// prefetcher returns a prefetcher handing out copies of the level's conversations, generated
// from p's source on first use.
func (c *Conversations) prefetcher(p workloads.Params, regular bool) (*prefetcher, error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[conversationsKey]*conversationsLevel{}
	}
	k := conversationsKey{p, regular}
	lv := c.m[k]
	if lv == nil {
		lv = &conversationsLevel{}
		c.m[k] = lv
	}
	c.mu.Unlock()
	lv.once.Do(func() {
		src, err := workloads.NewSource(p)
		if err != nil {
			lv.errNew = err
			return
		}
		for {
			item, ok := nextPrefetched(src, regular)
			if !ok {
				break
			}
			lv.items = append(lv.items, item)
			if item.err != nil {
				break
			}
		}
		lv.err = src.Close()
	})
	errNew := lv.errNew
	c.mu.Lock()
	switch {
	case errNew != nil:
		if c.m[k] == lv {
			delete(c.m, k) // not remembered: the next run tries again
		}
	case !lv.counted && c.m[k] == lv:
		if n := lv.size(); c.Budget > 0 && c.used+n > c.Budget {
			delete(c.m, k) // past the budget: this run's (and a concurrent one's) alone
		} else {
			c.used += n
			lv.counted = true
		}
	}
	c.mu.Unlock()
	if errNew != nil {
		return nil, errNew
	}
	pf := &prefetcher{ch: make(chan []prefetched), stop: make(chan struct{}), done: make(chan struct{}), err: lv.err}
	close(pf.ch)
	close(pf.done)
	pf.buf = make([]prefetched, len(lv.items))
	for i, it := range lv.items {
		if it.s != nil {
			sc := *it.s
			sc.turns = slices.Clone(sc.turns)
			it.s = &sc
		}
		pf.buf[i] = it
	}
	return pf, nil
}

// next returns the next prepared conversation; nil, nil at the end of the source.
func (p *prefetcher) next() (*script, int64, error) {
	if len(p.buf) == 0 {
		b, ok := <-p.ch
		if !ok {
			return nil, 0, nil
		}
		p.buf = b
	}
	item := p.buf[0]
	p.buf[0] = prefetched{} // the level, not the batch, holds the conversation from here
	p.buf = p.buf[1:]
	return item.s, item.arr, item.err
}

// close stops the goroutine, waits for it and returns the source's Close error. Later calls
// do nothing.
func (p *prefetcher) close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	close(p.stop)
	<-p.done
	return p.err
}

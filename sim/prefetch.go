package sim

import (
	"errors"
	"io"
	"strconv"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// script is a conversation: every turn of it, built ahead on the prefetcher's goroutine
// (workloads Session.ForSimulator: token ids and routing text appended piece by piece, no
// bodies). A simulated server always generates exactly max_tokens tokens and its reply text is
// workloads.ReplyText, so each reply, and with it the next turn, is known before the turn is
// sent; a failed turn ends its conversation and the turns built after it are dropped.
type script struct {
	turns []plannedTurn
	k     int            // the pending turn's index
	turn  workloads.Turn // the pending turn, when has
	has   bool
	route wire.Route
	id    string   // the pending turn's request id, "session/turn"
	reply []uint32 // regular mode: the pending turn's reply ids (the server caches them)
}

// plannedTurn is one turn of a script.
type plannedTurn struct {
	turn  workloads.Turn
	route wire.Route
	id    string
	reply []uint32 // regular mode only
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
		if regular { // the engine keeps the reply's ids (Req.Output): a slice of its own
			replyIDs = nil
		}
		reply, replyIDs = workloads.AppendReply(reply[:0], replyIDs[:0], t.PromptIDs, t.MaxTokens)
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
	sc.turn, sc.route, sc.id, sc.reply = p.turn, p.route, p.id, p.reply
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
			var item prefetched
			sess, err := src.Next()
			switch {
			case err == io.EOF:
				if len(batch) > 0 {
					send()
				}
				return
			case err != nil:
				item.err = err
			default:
				item.arr = int64(sess.Arrival)
				item.s, item.err = newScript(sess, regular)
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

package sim

import (
	"errors"
	"io"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// script is a conversation in progress: its session, kept incrementally (workloads
// Session.ForSimulator: token ids and routing text appended piece by piece, no bodies), and
// its pending turn. Turn 0 is built by the prefetcher, on another core; each later turn is
// built when the previous one succeeded, from its reply. A simulated server always generates
// exactly max_tokens tokens and its reply text is workloads.ReplyText, so the reply is known
// without the response; a failed turn ends its conversation.
type script struct {
	sess     *workloads.Session
	turn     workloads.Turn // the pending turn, when has
	has      bool
	route    wire.Route
	regular  bool
	reply    string   // the pending turn's reply (regular mode: built with the turn)
	replyIDs []uint32 // its token ids (regular mode: the server caches them with the prompt)
}

// newScript starts s and builds its first turn.
func newScript(s *workloads.Session, regular bool) (*script, error) {
	s.ForSimulator()
	sc := &script{sess: s, regular: regular}
	return sc, sc.build("")
}

// build makes the next turn, the previous one's reply appended; has is false at the end.
func (sc *script) build(reply string) error {
	t, ok := sc.sess.Next(reply)
	return sc.set(t, ok)
}

// set makes t the pending turn (none when !ok).
func (sc *script) set(t workloads.Turn, ok bool) error {
	sc.turn, sc.has = t, ok
	if !ok {
		return nil
	}
	route, ok := wire.RouteFromPath(t.Path)
	if !ok {
		return errors.New("sim: workload turn has no inference path")
	}
	sc.route = route
	sc.reply, sc.replyIDs = "", nil
	if sc.regular {
		sc.reply, sc.replyIDs = workloads.Reply(t.PromptIDs, t.MaxTokens)
	}
	return nil
}

// next builds the turn after the pending one from its reply; false when it was the last.
func (sc *script) next() (bool, error) {
	if !sc.has {
		return false, nil
	}
	if sc.replyIDs == nil {
		sc.reply, sc.replyIDs = workloads.Reply(sc.turn.PromptIDs, sc.turn.MaxTokens)
	}
	t, ok := sc.sess.NextReply(sc.reply, sc.replyIDs)
	return ok, sc.set(t, ok)
}

// prefetcher prepares a level's conversations, in source order, on its own goroutine, a few
// ahead of the simulation: their first turns (generating and tokenizing the opening prompt)
// are built on another core while the event loop runs. The order of conversations is the source's, so
// results do not depend on scheduling.
type prefetcher struct {
	ch     chan prefetched
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

// prefetchDepth is how many conversations are prepared ahead.
const prefetchDepth = 64

func startPrefetch(src workloads.Source, regular bool) *prefetcher {
	p := &prefetcher{ch: make(chan prefetched, prefetchDepth), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer func() { p.err = src.Close() }()
		defer close(p.ch)
		for {
			var item prefetched
			sess, err := src.Next()
			switch {
			case err == io.EOF:
				return
			case err != nil:
				item.err = err
			default:
				item.arr = int64(sess.Arrival)
				item.s, item.err = newScript(sess, regular)
			}
			select {
			case p.ch <- item:
			case <-p.stop:
				return
			}
			if item.err != nil {
				return
			}
		}
	}()
	return p
}

// next returns the next prepared conversation; nil, nil at the end of the source.
func (p *prefetcher) next() (*script, int64, error) {
	item, ok := <-p.ch
	if !ok {
		return nil, 0, nil
	}
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

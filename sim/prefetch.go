package sim

import (
	"errors"
	"io"

	"github.com/pdrouter/pdrouter/router/wire"
	"github.com/pdrouter/pdrouter/workloads"
)

// script is a conversation prepared in advance: every turn's body built, parsed and tokenized,
// and the reply the servers will give. A simulated server always generates exactly max_tokens
// tokens and its reply text is workloads.ReplyText, so a successful conversation is fully
// determined before it runs; a failed turn ends its conversation (there is no reply to
// append), so nothing prepared is ever wrong.
type script struct {
	steps []step
}

// step is one prepared turn.
type step struct {
	turn     workloads.Turn
	body     *wire.Body
	reply    string   // the reply the next turn appends
	replyIDs []uint32 // regular mode: the reply's token ids, cached by the server with the prompt
}

// buildScript runs every turn of s.
func buildScript(s *workloads.Session, regular bool) (*script, error) {
	s.TrackPromptIDs()
	sc := &script{steps: make([]step, 0, s.Turns())}
	reply := ""
	for {
		t, ok := s.Next(reply)
		if !ok {
			return sc, nil
		}
		route, ok := wire.RouteFromPath(t.Path)
		if !ok {
			return nil, errors.New("sim: workload turn has no inference path")
		}
		body, err := wire.Parse(route, t.Body)
		if err != nil {
			return nil, err
		}
		reply = workloads.ReplyText(t.PromptIDs, t.MaxTokens)
		st := step{turn: t, body: body, reply: reply}
		if regular {
			st.replyIDs = workloads.Tokenize(reply)
		}
		sc.steps = append(sc.steps, st)
	}
}

// prefetcher prepares a level's conversations, in source order, on its own goroutine, a few
// ahead of the simulation: the preparation (building, parsing and tokenizing bodies) then runs
// on another core while the event loop runs. The order of conversations is the source's, so
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
				item.s, item.err = buildScript(sess, regular)
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

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// prefillGrace bounds how long a prefill leg may outlive its finished response (its answer
// normally arrives long before decode's first token) before it is cancelled.
const prefillGrace = 10 * time.Second

// maxPrefillBody bounds a prefill answer (one JSON object or one SSE event).
const maxPrefillBody = 64 << 20

// legResult is how a prefill leg ended.
type legResult struct {
	body []byte
	err  *upstreamError
}

// attemptPD sends one PD attempt (SPEC §1.4 steps 4–8): both legs at once; decode's status and
// headers held until decode's first event has arrived (for a non-stream reply, until it is
// complete; with logprobs asked for, also until prefill answered); a failure of either leg
// before that cancels the other and fails the attempt (retryable); afterwards the decode
// stream is relayed event by event. Each leg's Done is called exactly once: decode's here,
// prefill's by its own goroutine, which may outlive the response by up to prefillGrace. id is
// set to the first rid when the client sent no request id.
func (s *Server) attemptPD(ctx context.Context, w http.ResponseWriter, b *wire.Body, d *router.Decision, hdr http.Header, id *string, start time.Time) (attemptResult, int) {
	pt, dt := d.Prefill, d.Decode
	legs := b.PD(s.ids, wire.PDOptions{Host: wire.BootstrapHost(pt.URL()), Port: pt.Worker().BootstrapPort(),
		PrefillRank: pt.RankPtr(), DecodeRank: dt.RankPtr(), Style: s.style})
	if *id == "" {
		*id = legs.RIDs[0]
	}
	path := b.Route.String()
	s.logDecision(*id, legs.RIDs[0], legs.Rooms[0], path, d)

	// The prefill leg does not end with the handler (see prefillGrace), but keeps the request
	// deadline; decode's context ends with the handler.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancelDL context.CancelFunc
		pctx, cancelDL = context.WithDeadline(pctx, dl)
		prev := pcancel
		pcancel = func() { cancelDL(); prev() }
	}
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()

	prefDone := make(chan legResult, 1)
	prefExited := make(chan struct{})
	go func() {
		defer close(prefExited)
		defer pcancel()
		res := legResult{}
		resp, ue := send(pctx, s.clients[router.Prefill], http.MethodPost, pt.URL()+path, legs.Prefill, hdr, "prefill", pt.URL())
		if ue == nil {
			var rerr error
			res.body, rerr = io.ReadAll(io.LimitReader(resp.Body, maxPrefillBody+1))
			resp.Body.Close()
			switch {
			case rerr != nil:
				ue = &upstreamError{Worker: pt.URL(), Role: "prefill", Err: rerr}
			case len(res.body) > maxPrefillBody:
				ue = &upstreamError{Worker: pt.URL(), Role: "prefill", Err: fmt.Errorf("answer exceeds %d bytes", maxPrefillBody)}
			}
		}
		switch {
		case ue == nil:
			d.Done(router.Prefill, router.Success)
		case ue.Status == 0 && pctx.Err() != nil:
			res.err = ue
			d.Done(router.Prefill, router.Cancelled) // we cancelled it: says nothing of the worker
		default:
			res.err = ue
			d.Done(router.Prefill, legOutcome(ue))
		}
		prefDone <- res
	}()
	type head struct {
		resp *http.Response
		err  *upstreamError
	}
	decHead := make(chan head, 1)
	go func() {
		resp, ue := send(dctx, s.clients[router.Decode], http.MethodPost, dt.URL()+path, legs.Decode, hdr, "decode", dt.URL())
		if ue != nil {
			decHead <- head{err: ue}
			return
		}
		decHead <- head{resp: resp}
	}()
	closeHead := func() {
		if h := <-decHead; h.resp != nil {
			h.resp.Body.Close()
		}
	}

	var pref *legResult
	// timedOut reports a prefill failure that is the request deadline seen through the prefill
	// leg's own timer (same deadline, its own timer): it can fire a moment before the
	// request's, so wait for that one — the client's answer is then the timeout's 504, not the
	// prefill leg's error.
	timedOut := func() bool {
		if ctx.Err() != nil {
			return true
		}
		if !errors.Is(pctx.Err(), context.DeadlineExceeded) {
			return false
		}
		<-ctx.Done()
		return true
	}
	// gone ends an attempt whose request context ended (client gone or request timeout):
	// both legs cancelled and their rids aborted on both workers.
	gone := func(committed bool) (attemptResult, int) {
		pcancel()
		dcancel()
		d.Done(router.Decode, router.Cancelled)
		s.abort([]string{pt.URL(), dt.URL()}, legs.RIDs)
		return attemptResult{gone: true, committed: committed}, 0
	}
	// prefillFailed cancels decode and fails the attempt with prefill's error, fast.
	prefillFailed := func(pr legResult) (attemptResult, int) {
		dcancel()
		d.Done(router.Decode, router.Cancelled)
		s.metrics.PrefillFailures.Inc()
		return attemptResult{failed: pr.err}, 0
	}
	// release lets a prefill leg that has not answered yet finish on its own, for at most
	// prefillGrace more; its goroutine reports its Done either way.
	release := func() {
		if pref != nil {
			return
		}
		go func() {
			t := time.NewTimer(prefillGrace)
			defer t.Stop()
			select {
			case <-prefExited:
			case <-t.C:
				pcancel()
			}
		}()
	}

	// 1. Decode's head, watching prefill.
	var resp *http.Response
	for resp == nil {
		select {
		case pr := <-prefDone:
			if pr.err != nil {
				if timedOut() {
					r, c := gone(false)
					closeHead()
					return r, c
				}
				r, c := prefillFailed(pr)
				closeHead() // the decode goroutine ends promptly once cancelled
				return r, c
			}
			pref = &pr
		case h := <-decHead:
			if h.err != nil {
				if ctx.Err() != nil {
					return gone(false)
				}
				pcancel()
				d.Done(router.Decode, legOutcome(h.err))
				s.metrics.DecodeFailures.Inc()
				return attemptResult{failed: h.err}, 0
			}
			resp = h.resp
		case <-ctx.Done():
			r, c := gone(false)
			closeHead()
			return r, c
		}
	}
	defer resp.Body.Close()
	stop := make(chan struct{})
	defer close(stop)
	stream := isEventStream(resp, b)
	chunks := readFirst(resp.Body, stream, s.cfg.MaxPayloadSize, stop)

	// 2. Hold decode's head until its first complete event (stream) or its whole body
	// (non-stream); with logprobs asked for, until prefill answered too.
	var held [][]byte
	// sawEvent: the reader stopped after decode's first event (it owns the body until then);
	// ended: decode's body ended (io.EOF) or broke (readErr) while held.
	sawEvent, ended := false, false
	var readErr error
	for {
		hs := holdState{stream: stream, logprobs: b.Logprobs, prefillDone: pref != nil, sawEvent: sawEvent, ended: ended, readFailed: readErr != nil}
		if hs.done() {
			break
		}
		stopped := sawEvent || ended
		var prefCh <-chan legResult
		if pref == nil {
			prefCh = prefDone
		}
		var chunkCh <-chan relayChunk
		if !stopped {
			chunkCh = chunks
		}
		select {
		case pr := <-prefCh:
			if pr.err != nil {
				if timedOut() {
					return gone(false)
				}
				return prefillFailed(pr)
			}
			pref = &pr
		case c, ok := <-chunkCh:
			switch {
			case !ok:
				if !ended {
					sawEvent = true // the reader stopped after the first event
				}
			case c.err == io.EOF:
				ended = true
			case c.err != nil:
				ended, readErr = true, c.err
			default:
				held = append(held, c.data)
			}
		case <-ctx.Done():
			return gone(false)
		}
	}
	if readErr != nil && !sawEvent {
		if ctx.Err() != nil {
			return gone(false)
		}
		// Decode broke before sending anything: nothing reached the client, so retry.
		pcancel()
		d.Done(router.Decode, router.Failure)
		s.metrics.DecodeFailures.Inc()
		return attemptResult{failed: &upstreamError{Worker: dt.URL(), Role: "decode", Err: readErr}}, 0
	}
	var pre []byte
	if b.Logprobs && pref != nil {
		pre = wire.PrefillLogprobs(pref.body)
	}

	// 3. Commit and relay.
	if !stream { // the reader read it all
		body := collect(held)
		if pre != nil {
			body = wire.MergeLogprobs(pref.body, body)
		}
		commitHeaders(w, resp, *id, false)
		_, werr := w.Write(body)
		s.observeCached(body)
		release()
		if werr != nil {
			d.Done(router.Decode, router.Cancelled)
			return attemptResult{gone: true, committed: true}, 0
		}
		d.Done(router.Decode, router.Success)
		return attemptResult{}, resp.StatusCode
	}

	commitHeaders(w, resp, *id, true)
	sw := s.newStreamWriter(w, pre, start, b.Route.String())
	var end error // how the held part ended, if the body ended while held
	if ended {
		end = io.EOF
		if readErr != nil {
			end = readErr
		}
	}
	err := s.relayStream(ctx, w, resp.Body, sw, held, end, dt.URL(), "decode")
	switch {
	case errors.Is(err, errClientGone):
		return gone(true)
	case errors.Is(err, errRequestTimeout):
		pcancel()
		d.Done(router.Decode, router.Cancelled)
		s.abort([]string{pt.URL(), dt.URL()}, legs.RIDs)
		s.metrics.Errors.WithLabelValues("timeout").Inc()
	case err != nil:
		d.Done(router.Decode, router.Failure)
		s.metrics.DecodeFailures.Inc()
	default:
		d.Done(router.Decode, router.Success)
	}
	release()
	return attemptResult{}, resp.StatusCode
}

// collect concatenates held chunks.
func collect(held [][]byte) []byte {
	n := 0
	for _, c := range held {
		n += len(c)
	}
	out := make([]byte, 0, n)
	for _, c := range held {
		out = append(out, c...)
	}
	return out
}

// holdState is what the PD path knows while it holds decode's head (step 2 of attemptPD).
type holdState struct {
	stream      bool // decode answers an event stream
	logprobs    bool // the client asked for logprobs: prefill's answer must be merged in
	prefillDone bool // prefill answered (successfully: a failure ends the attempt at once)
	sawEvent    bool // the reader stopped after decode's first complete event
	ended       bool // decode's body ended (EOF) or broke while held
	readFailed  bool // it broke (a read error), rather than ended
}

// done is the hold loop's exit rule: stop holding once the reader has stopped (first event
// seen, or the body over) and either what the commit needs is there — the first event (stream)
// or the whole body (non-stream), plus prefill's answer when logprobs must be merged — or the
// body is over and nothing more can come: prefill has answered, or decode broke.
func (h holdState) done() bool {
	stopped := h.sawEvent || h.ended
	ready := (h.prefillDone && !h.stream || h.sawEvent || h.ended && !h.stream && !h.readFailed) && (!h.logprobs || h.prefillDone)
	return stopped && (ready || h.ended && (h.prefillDone || h.readFailed))
}

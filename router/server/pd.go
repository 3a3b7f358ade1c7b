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

// pdAttempt is one PD attempt (SPEC §1.4 steps 4–8) as a small state type, one method per
// step: startPD sends both legs at once; awaitHead waits for decode's status and headers while
// watching prefill; hold keeps them until decode's first complete event has arrived (for a
// non-stream reply, until it is complete; with logprobs asked for, also until prefill
// answered); commit writes the head and relays the rest event by event. A failure of either leg
// before the commit cancels the other and fails the attempt (retryable). Each leg's Done is
// called exactly once: decode's by the attempt's steps, prefill's by the prefill goroutine,
// which may outlive the response by up to prefillGrace.
type pdAttempt struct {
	s      *Server
	ctx    context.Context // the request's: ends with the handler or the request timeout
	b      *wire.Body
	d      *router.Decision
	pt, dt *router.Target
	legs   wire.PDLegs

	// The prefill leg does not end with the handler (see prefillGrace) but keeps the request
	// deadline; decode's context ends with the handler.
	pctx       context.Context
	pcancel    context.CancelFunc
	dcancel    context.CancelFunc
	prefDone   chan legResult // prefill's answer, once
	prefExited chan struct{}  // closed when the prefill goroutine has returned
	decHead    chan decodeHead
	pref       *legResult // prefill's successful answer, once it came
}

// decodeHead is how the decode leg's request ended: a response head, or an error.
type decodeHead struct {
	resp *http.Response
	err  *upstreamError
}

// heldDecode is what hold kept of decode's reply before the commit.
type heldDecode struct {
	stream   bool
	chunks   [][]byte
	sawEvent bool  // the reader stopped after decode's first event
	ended    bool  // decode's body ended (io.EOF) or broke while held
	readErr  error // it broke
}

// attemptPD runs one PD attempt through its steps. id is set to the first rid when the client
// sent no request id.
func (s *Server) attemptPD(ctx context.Context, w http.ResponseWriter, b *wire.Body, d *router.Decision, hdr http.Header, id *string, start time.Time) (attemptResult, int) {
	a := s.startPD(ctx, b, d, hdr, id)
	defer a.dcancel()
	resp, end, ok := a.awaitHead()
	if !ok {
		return end, 0
	}
	defer resp.Body.Close()
	stop := make(chan struct{})
	defer close(stop)
	h, end, ok := a.hold(resp, stop)
	if !ok {
		return end, 0
	}
	return a.commit(w, resp, h, *id, start)
}

// startPD builds both legs and sends them at once, each from its own goroutine.
func (s *Server) startPD(ctx context.Context, b *wire.Body, d *router.Decision, hdr http.Header, id *string) *pdAttempt {
	a := &pdAttempt{s: s, ctx: ctx, b: b, d: d, pt: d.Prefill, dt: d.Decode,
		prefDone: make(chan legResult, 1), prefExited: make(chan struct{}), decHead: make(chan decodeHead, 1)}
	a.legs = b.PD(s.ids, wire.PDOptions{Host: wire.BootstrapHost(a.pt.URL()), Port: a.pt.Worker().BootstrapPort(),
		PrefillRank: a.pt.RankPtr(), DecodeRank: a.dt.RankPtr(), Style: s.style})
	if *id == "" {
		*id = a.legs.RIDs[0]
	}
	path := b.Route.String()
	s.logDecision(*id, a.legs.RIDs[0], a.legs.Rooms[0], path, d)

	a.pctx, a.pcancel = context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancelDL context.CancelFunc
		a.pctx, cancelDL = context.WithDeadline(a.pctx, dl)
		prev := a.pcancel
		a.pcancel = func() { cancelDL(); prev() }
	}
	dctx, dcancel := context.WithCancel(ctx)
	a.dcancel = dcancel
	go a.runPrefill(path, hdr)
	go func() {
		resp, ue := send(dctx, s.upstream(router.Decode), &upstreamRequest{method: http.MethodPost, worker: a.dt.URL(), path: path, body: a.legs.Decode, hdr: hdr, role: "decode"})
		a.decHead <- decodeHead{resp: resp, err: ue}
	}()
	return a
}

// runPrefill sends the prefill leg, reads its answer and reports its Done.
func (a *pdAttempt) runPrefill(path string, hdr http.Header) {
	defer close(a.prefExited)
	defer a.pcancel()
	pt := a.pt
	res := legResult{}
	resp, ue := send(a.pctx, a.s.upstream(router.Prefill), &upstreamRequest{method: http.MethodPost, worker: pt.URL(), path: path, body: a.legs.Prefill, hdr: hdr, role: "prefill"})
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
		a.d.Done(router.Prefill, router.Success)
	case ue.Status == 0 && a.pctx.Err() != nil:
		res.err = ue
		a.d.Done(router.Prefill, router.Cancelled) // we cancelled it: says nothing of the worker
	default:
		res.err = ue
		a.d.Done(router.Prefill, legOutcome(ue))
	}
	a.prefDone <- res
}

// awaitHead is step 1: decode's status and headers, watching prefill. ok is false when the
// attempt ended; end says how.
func (a *pdAttempt) awaitHead() (resp *http.Response, end attemptResult, ok bool) {
	closeHead := func() { // the decode goroutine ends promptly once cancelled
		if h := <-a.decHead; h.resp != nil {
			h.resp.Body.Close()
		}
	}
	for {
		select {
		case pr := <-a.prefDone:
			if pr.err != nil {
				if a.timedOut() {
					end = a.gone(false)
				} else {
					end = a.prefillFailed(pr)
				}
				closeHead()
				return nil, end, false
			}
			a.pref = &pr
		case h := <-a.decHead:
			if h.err != nil {
				if a.ctx.Err() != nil {
					return nil, a.gone(false), false
				}
				a.pcancel()
				a.d.Done(router.Decode, legOutcome(h.err))
				a.s.metrics.DecodeFailures.Inc()
				return nil, attemptResult{failed: h.err}, false
			}
			return h.resp, attemptResult{}, true
		case <-a.ctx.Done():
			end = a.gone(false)
			closeHead()
			return nil, end, false
		}
	}
}

// hold is step 2: decode's head is held until its first complete event (stream) or its whole
// body (non-stream); with logprobs asked for, until prefill answered too (holdState.done).
func (a *pdAttempt) hold(resp *http.Response, stop chan struct{}) (h heldDecode, end attemptResult, ok bool) {
	h.stream = isEventStream(resp, a.b)
	chunks := readFirst(resp.Body, h.stream, a.s.cfg.MaxPayloadSize, stop)
	for {
		hs := holdState{stream: h.stream, logprobs: a.b.Logprobs, prefillDone: a.pref != nil, sawEvent: h.sawEvent, ended: h.ended, readFailed: h.readErr != nil}
		if hs.done() {
			break
		}
		var prefCh <-chan legResult
		if a.pref == nil {
			prefCh = a.prefDone
		}
		var chunkCh <-chan relayChunk
		if !h.sawEvent && !h.ended { // the reader owns the body until it stops
			chunkCh = chunks
		}
		select {
		case pr := <-prefCh:
			if pr.err != nil {
				if a.timedOut() {
					return h, a.gone(false), false
				}
				return h, a.prefillFailed(pr), false
			}
			a.pref = &pr
		case c, ok := <-chunkCh:
			switch {
			case !ok:
				if !h.ended {
					h.sawEvent = true // the reader stopped after the first event
				}
			case c.err == io.EOF:
				h.ended = true
			case c.err != nil:
				h.ended, h.readErr = true, c.err
			default:
				h.chunks = append(h.chunks, c.data)
			}
		case <-a.ctx.Done():
			return h, a.gone(false), false
		}
	}
	if h.readErr != nil && !h.sawEvent {
		if a.ctx.Err() != nil {
			return h, a.gone(false), false
		}
		// Decode broke before sending anything: nothing reached the client, so retry.
		a.pcancel()
		a.d.Done(router.Decode, router.Failure)
		a.s.metrics.DecodeFailures.Inc()
		return h, attemptResult{failed: &upstreamError{Worker: a.dt.URL(), Role: "decode", Err: h.readErr}}, false
	}
	return h, attemptResult{}, true
}

// commit is step 3: the head is written (with prefill's logprobs merged in when asked for),
// then the held part and the rest of decode's stream are relayed.
func (a *pdAttempt) commit(w http.ResponseWriter, resp *http.Response, h heldDecode, id string, start time.Time) (attemptResult, int) {
	s, d := a.s, a.d
	var pre []byte
	if a.b.Logprobs && a.pref != nil {
		pre = wire.PrefillLogprobs(a.pref.body)
	}
	if !h.stream { // the reader read it all
		body := collect(h.chunks)
		if pre != nil {
			body = wire.MergeLogprobs(a.pref.body, body)
		}
		commitHeaders(w, resp, id, false)
		_, werr := w.Write(body)
		s.observeCached(body)
		a.release()
		if werr != nil {
			d.Done(router.Decode, router.Cancelled)
			return attemptResult{gone: true, committed: true}, 0
		}
		d.Done(router.Decode, router.Success)
		return attemptResult{}, resp.StatusCode
	}

	commitHeaders(w, resp, id, true)
	sw := s.newStreamWriter(w, pre, start, a.b.Route.String())
	var end error // how the held part ended, if the body ended while held
	if h.ended {
		end = io.EOF
		if h.readErr != nil {
			end = h.readErr
		}
	}
	err := s.relayStream(a.ctx, w, resp.Body, sw, h.chunks, end, a.dt.URL(), "decode")
	switch {
	case errors.Is(err, errClientGone):
		return a.gone(true), 0
	case errors.Is(err, errRequestTimeout):
		a.pcancel()
		d.Done(router.Decode, router.Cancelled)
		s.abort([]string{a.pt.URL(), a.dt.URL()}, a.legs.RIDs)
		s.metrics.Errors.WithLabelValues("timeout").Inc()
	case err != nil:
		d.Done(router.Decode, router.Failure)
		s.metrics.DecodeFailures.Inc()
	default:
		d.Done(router.Decode, router.Success)
	}
	a.release()
	return attemptResult{}, resp.StatusCode
}

// timedOut reports a prefill failure that is the request deadline seen through the prefill
// leg's own timer (same deadline, its own timer): it can fire a moment before the request's,
// so wait for that one — the client's answer is then the timeout's 504, not the prefill leg's
// error.
func (a *pdAttempt) timedOut() bool {
	if a.ctx.Err() != nil {
		return true
	}
	if !errors.Is(a.pctx.Err(), context.DeadlineExceeded) {
		return false
	}
	<-a.ctx.Done()
	return true
}

// gone ends an attempt whose request context ended (client gone or request timeout): both
// legs cancelled and their rids aborted on both workers.
func (a *pdAttempt) gone(committed bool) attemptResult {
	a.pcancel()
	a.dcancel()
	a.d.Done(router.Decode, router.Cancelled)
	a.s.abort([]string{a.pt.URL(), a.dt.URL()}, a.legs.RIDs)
	return attemptResult{gone: true, committed: committed}
}

// prefillFailed cancels decode and fails the attempt with prefill's error, fast.
func (a *pdAttempt) prefillFailed(pr legResult) attemptResult {
	a.dcancel()
	a.d.Done(router.Decode, router.Cancelled)
	a.s.metrics.PrefillFailures.Inc()
	return attemptResult{failed: pr.err}
}

// release lets a prefill leg that has not answered yet finish on its own, for at most
// prefillGrace more; its goroutine reports its Done either way.
func (a *pdAttempt) release() {
	if a.pref != nil {
		return
	}
	go func() {
		t := time.NewTimer(prefillGrace)
		defer t.Stop()
		select {
		case <-a.prefExited:
		case <-t.C:
			a.pcancel()
		}
	}()
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

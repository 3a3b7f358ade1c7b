package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// prefillGrace bounds how long a prefill leg may outlive its finished response (its answer
// normally arrives long before decode's first token) before it is cancelled.
const prefillGrace = 10 * time.Second

// maxPrefillBody bounds a prefill answer (one JSON object or one SSE event).
const maxPrefillBody = 64 << 20

// legResult is how a prefill leg ended: its answer, or its error.
type legResult struct {
	body []byte
	err  *upstreamError
}

// pdAttempt is one PD attempt, for the call of its handler (attemptPD, which runs the decode
// leg): on the handler's stack, but for what it shares with the goroutine of its prefill leg
// (runPrefill), pdShared.
type pdAttempt struct {
	*pdShared
	decode    upstreamRequest // the decode leg, sent on the handler's goroutine
	rids      []string        // the legs' rids, aborted on both workers when the request ends
	stopWatch func() bool     // undoes the request context's watch (see legs)
}

// pdShared is what a PD attempt's handler and the goroutine of its prefill leg share for the
// call. Between the two, router.PDAttempt decides who is charged, whether a failure cancels the
// other leg, and whether decode's head may go to the client; it lives under mu. Only this part
// goes to the heap (the goroutine may outlive the handler by prefillGrace).
type pdShared struct {
	s           *Server
	d           *router.Decision
	prefill     upstreamRequest
	keepPrefill bool             // the client asked for logprobs: prefill's answer is kept (legResult.body)
	lr          io.LimitedReader // sendPrefill's bound on prefill's answer (here, not one more allocation)

	// Both legs run on legs, which cancel ends: when either leg fails before the commit (the
	// other is of no use then), when the request ends (the client went away: the request
	// context's watch, pdAttempt.stopWatch's to undo), and once both legs are over. It is not
	// derived from the request's context because the prefill leg may outlive the handler
	// (prefillGrace). Both legs end at the request's deadline (their exchanges'
	// upstreamRequest.deadline). Why a leg was cancelled is the state's to say
	// (router.PDAttempt), not the context's. (One context for both legs, not one each: each
	// costs a cancelCtx, a children map in its parent and a Done channel.)
	legs   context.Context
	cancel context.CancelFunc
	spans  *legSpans // the legs' spans under --enable-trace (tracing.go), else nil

	mu          sync.Mutex // protects the fields below
	state       router.PDAttempt
	firstErr    *upstreamError // the error of the leg whose failure ended the attempt (state.Failure)
	prefillOver bool           // runPrefill has reported the leg's Done
	handlerOver bool           // end has run: the decode leg is over
	resultIn    bool           // result is set
	grace       *time.Timer    // end's prefillGrace timer, when armed
	// The prefill leg's result, once runPrefill is done with it (resultIn); wait is made by a
	// handler that waits for it before then (awaitPrefill), and closed by runPrefill. Most
	// handlers never wait (only to merge logprobs, or after an empty stream): no channel then.
	result legResult
	wait   chan struct{}
}

// attemptPD runs one PD attempt (SPEC §1.4 steps 4–8). The decode leg runs here on the
// handler's goroutine, from its send to the end of its relay, as attemptRegular; only the
// prefill leg has a goroutine of its own. Decode's head is held until its first complete event
// (stream) or its whole body (non-stream) has arrived and, when needsPrefill says so, prefill's
// answer too; then it is committed and the rest relayed event by event. A failure of either leg
// before the commit cancels the other and fails the attempt (retryable).
func (s *Server) attemptPD(ctx context.Context, x *exchange, d *router.Decision) (res attemptResult) {
	a := s.startPD(ctx, x, d)
	decode := router.Cancelled // decode's outcome: unless it answered, we cancelled it
	defer func() {
		if a.spans != nil {
			endLeg(a.spans.decode, decode, nil)
		}
		d.Done(router.Decode, decode)
		a.end(ctx, x)
	}()
	resp, ue := send(a.legs, s.upstream(router.Decode), &a.decode, s.budget)
	if a.spans != nil {
		traceSent(a.spans.decode, resp, ue)
	}
	if ue != nil {
		res, decode = a.failed(ctx, x, ue)
		return res
	}
	defer resp.Body.Close()
	stream := isEventStream(resp, x.body)
	bp := relayBufs.Get().(*[]byte) // held, then the relay's reads, until the attempt returns
	defer relayBufs.Put(bp)
	held, sawEvent, end := readFirst(resp.Body, stream, s.cfg.MaxPayloadSize, *bp)
	if end != nil && end != io.EOF { // before its first event: nothing reached the client, so retry
		res, decode = a.failed(ctx, x, &upstreamError{Worker: a.decode.worker, Role: "decode", Err: end})
		return res
	}
	if ue := firstEventError(&a.decode, held, stream); ue != nil {
		// Decode failed before its first token: nothing reached the client, so the attempt
		// fails (retryable) as if decode had answered the error status.
		res, decode = a.failed(ctx, x, ue)
		return res
	}
	a.answered()
	var pref *legResult // prefill's answer, when the hold waited for it
	if needsPrefill(stream, sawEvent, x.body.Logprobs) {
		// No timer: prefill's leg ends at the request's deadline (its dial, exchange and
		// answer run within it), so its result comes by then; a.failed says gone after it.
		pr, ok := a.awaitPrefill(ctx)
		if !ok {
			return attemptResult{gone: true}
		}
		if pr.err != nil { // it failed (or ran out of time), and cancelled decode
			res, decode = a.failed(ctx, x, nil)
			return res
		}
		pref = &pr
	}
	if !a.commit(ctx, x) { // prefill failed (or the request ended) since
		res, decode = a.failed(ctx, x, nil)
		return res
	}
	var pre []byte
	if x.body.Logprobs && pref != nil {
		pre = wire.PrefillLogprobs(pref.body)
	}
	commitHeaders(x, resp, stream)
	if !stream { // readFirst read it all
		if pre != nil {
			held = wire.MergeLogprobs(pref.body, held)
		}
		_, werr := x.w.Write(held)
		s.observeCached(held)
		if werr != nil {
			return attemptResult{gone: true, committed: true}
		}
		decode = router.Success
		return attemptResult{status: resp.StatusCode}
	}
	// The relay reads into held's buffer: held is relayed first, in place.
	sw := s.newStreamWriter(x, pre, router.Decode)
	sw.d = d
	err := s.relayStream(ctx, &sw, &heldBody{held: held, end: end, body: resp.Body}, &a.decode, held[:cap(held)])
	if res, decode = s.streamEnd(err, resp.StatusCode); decode == router.Failure {
		s.metrics.DecodeFailures.Inc()
	}
	return res
}

// needsPrefill reports whether decode's head must wait for prefill's answer before its
// commit: to merge prefill's logprobs, or when a stream ended before any event (nothing to
// commit until prefill has said how it went).
func needsPrefill(stream, sawEvent, logprobs bool) bool {
	return logprobs || stream && !sawEvent
}

// startPD builds both legs, logs the decision and starts the prefill leg on its own goroutine.
// The client-visible id becomes the first rid when the client sent none.
func (s *Server) startPD(ctx context.Context, x *exchange, d *router.Decision) pdAttempt {
	pt, dt := d.Prefill, d.Decode
	legs := x.body.PD(s.ids, wire.PDOptions{Host: s.bootstrapHost(pt.URL()), Port: pt.Worker().BootstrapPort(),
		PrefillRank: pt.RankPtr(), DecodeRank: dt.RankPtr(), Style: s.style})
	if x.id == "" {
		x.id = legs.RIDs[0]
	}
	path := x.route.String()
	s.logDecision(wire.DecisionLine{ID: x.id, RID: legs.RIDs[0], Room: legs.Rooms[0], Route: path}, d)
	p := &pdShared{s: s, d: d, keepPrefill: x.body.Logprobs,
		prefill: upstreamRequest{method: http.MethodPost, worker: pt.URL(), path: path, pieces: legs.Prefill, hdr: x.hdr, role: "prefill", deadline: x.deadline, noHeader: true}}
	decode := upstreamRequest{method: http.MethodPost, worker: dt.URL(), path: path, pieces: legs.Decode, hdr: x.hdr, role: "decode", deadline: x.deadline}
	if s.tr != nil { // (decode, not a.decode: startLeg's r would take a, and x with it, to the heap)
		p.spans = &legSpans{prefill: s.tr.startLeg(x, &p.prefill, d, router.Prefill), decode: s.tr.startLeg(x, &decode, d, router.Decode)}
	}
	p.legs, p.cancel = context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, p.cancel) // the client went away: both legs end
	go p.runPrefill()
	return pdAttempt{pdShared: p, decode: decode, rids: legs.RIDs, stopWatch: stop}
}

// bootstrapHost returns wire.BootstrapHost(prefillURL), parsed once per prefill URL: one entry
// per worker ever routed to (workers come and go by the operator's hand, not per request).
func (s *Server) bootstrapHost(prefillURL string) string {
	if v, ok := s.bootHosts.Load(prefillURL); ok {
		return v.(string)
	}
	h := wire.BootstrapHost(prefillURL)
	s.bootHosts.Store(prefillURL, h)
	return h
}

// runPrefill sends the prefill leg, reads its answer, reports its Done, cancels decode when its
// failure ends the attempt (before the commit), and hands its result to awaitPrefill.
func (a *pdShared) runPrefill() {
	body, ue := a.sendPrefill()
	a.mu.Lock()
	outcome, cancelDecode := router.Success, false
	switch {
	case ue == nil:
		a.state.Answered(router.Prefill)
	case ue.Status == 0 && (a.legs.Err() != nil || !time.Now().Before(a.prefill.deadline)):
		// We cancelled it, or the request's deadline ended it: that says nothing of the worker
		// (unless decode's failure was its doing: the state says).
		outcome = a.state.Outcome(router.Prefill)
	default:
		if cancelDecode = a.state.Failed(router.Prefill, attemptOf(ue)); cancelDecode {
			a.firstErr = ue
		}
		outcome = a.state.Outcome(router.Prefill)
	}
	a.prefillOver = true
	if a.grace != nil {
		a.grace.Stop()
	}
	bothOver := a.handlerOver
	a.mu.Unlock()
	if a.spans != nil {
		var err error
		if ue != nil {
			err = ue
		}
		endLeg(a.spans.prefill, outcome, err)
	}
	a.d.Done(router.Prefill, outcome)
	if cancelDecode || bothOver { // decode is of no use now, or over too: release the context
		a.cancel()
	}
	if ue != nil && ue.Status == 0 && outcome == router.Failure && connFailure(ue.Err) {
		a.s.hc.suspect(a.prefill.worker)
	}
	a.mu.Lock()
	a.result, a.resultIn = legResult{body: body, err: ue}, true
	wait := a.wait
	a.mu.Unlock()
	if wait != nil {
		close(wait)
	}
}

// awaitPrefill returns the prefill leg's result once runPrefill has it; ok is false when ctx
// (the request's) ends first.
func (a *pdShared) awaitPrefill(ctx context.Context) (r legResult, ok bool) {
	a.mu.Lock()
	if a.resultIn {
		defer a.mu.Unlock()
		return a.result, true
	}
	if a.wait == nil {
		a.wait = make(chan struct{})
	}
	wait := a.wait
	a.mu.Unlock()
	select {
	case <-wait:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.result, true
	case <-ctx.Done():
		return legResult{}, false
	}
}

// attemptOf describes a failed leg for the router's rules (nil: a failure without an answer).
func attemptOf(ue *upstreamError) router.Attempt {
	if ue == nil {
		return router.Attempt{Transport: true}
	}
	return router.Attempt{Status: ue.Status, Transport: ue.Status == 0, Body: ue.Body}
}

// firstEventError returns decode's failure when the first event of its stream is an error
// event (SGLang and fakeworker answer a room that failed before its first token so, with 200
// and the event), nil otherwise.
func firstEventError(r *upstreamRequest, held []byte, stream bool) *upstreamError {
	if !stream {
		return nil
	}
	var p wire.Parser
	p.FeedView(held) // held is not written to: parsed in place
	for ev, ok := p.Next(); ok; ev, ok = p.Next() {
		if !ev.HasData() {
			continue
		}
		if !errorEvent(ev.Data) {
			return nil
		}
		return &upstreamError{Worker: r.worker, Role: r.role, Status: errorEventStatus(ev.Data), Body: bytes.Clone(ev.Data)}
	}
	return nil
}

// answered notes that decode answered its first event or body: from now on a prefill failure
// is not decode's silence.
func (a *pdAttempt) answered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state.Answered(router.Decode)
}

// sendPrefill sends the prefill leg and reads its answer, within maxPrefillBody. The answer
// is kept only when the client asked for logprobs (merged into decode's), and then charged to
// the memory budget; otherwise it is read through and dropped (nil). Its header is not read
// (upstreamRequest.noHeader).
func (a *pdShared) sendPrefill() ([]byte, *upstreamError) {
	var b *budget
	if a.keepPrefill {
		b = a.s.budget
	}
	resp, ue := send(a.legs, a.s.upstream(router.Prefill), &a.prefill, b)
	if a.spans != nil {
		traceSent(a.spans.prefill, resp, ue)
	}
	if ue != nil {
		return nil, ue
	}
	defer resp.Body.Close()
	var body []byte
	var n int64
	var err error
	a.lr = io.LimitedReader{R: resp.Body, N: maxPrefillBody + 1}
	if a.keepPrefill {
		body, err = io.ReadAll(&a.lr)
		n = int64(len(body))
	} else {
		n, err = io.Copy(io.Discard, &a.lr)
	}
	if err == nil && n > maxPrefillBody {
		err = fmt.Errorf("answer exceeds %d bytes", maxPrefillBody)
	}
	if err != nil {
		return nil, &upstreamError{Worker: a.prefill.worker, Role: "prefill", Err: err}
	}
	return body, nil
}

// commit reports whether decode's head may go to the client, and records that it does:
// unless the request ended or prefill failed first.
func (a *pdAttempt) commit(ctx context.Context, x *exchange) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !x.over(ctx) && a.state.Commit()
}

// failed ends an attempt before the commit, when decode failed (ue) or was cancelled (ue nil,
// or ue the cancellation's error): gone when the request ended. Otherwise the leg that failed
// first decides (router.PDAttempt): the attempt fails with that leg's error, or — when it gave
// up waiting for its peer, still silent — with an error naming the peer, which is charged. A
// decode failure cancels the prefill leg. It returns decode's outcome.
func (a *pdAttempt) failed(ctx context.Context, x *exchange, ue *upstreamError) (attemptResult, router.Outcome) {
	if x.over(ctx) {
		return attemptResult{gone: true}, router.Cancelled
	}
	a.mu.Lock()
	cancelPrefill := false
	// A decode leg that failed on its own account (not cut by prefill's failure: the request
	// is not over, so only that cancels the legs) is the state's to judge.
	if ue != nil && (ue.Status != 0 || a.legs.Err() == nil) {
		if cancelPrefill = a.state.Failed(router.Decode, attemptOf(ue)); cancelPrefill {
			a.firstErr = ue
		}
	}
	f, ok := a.state.Failure()
	first := a.firstErr
	decode := a.state.Outcome(router.Decode)
	a.mu.Unlock()
	if cancelPrefill {
		a.cancel()
	}
	if !ok || first == nil { // cannot happen: a failure before the commit was recorded
		first = &upstreamError{Worker: a.decode.worker, Role: "decode", Err: errors.New("attempt failed before its commit")}
		f = router.PDFailureReport{Failed: router.Decode, Blamed: router.Decode}
	}
	return attemptResult{failed: a.blame(f, first)}, decode
}

// blame returns the error a failed attempt answers (and its retry avoids), naming the worker
// f blames, and counts it.
func (a *pdAttempt) blame(f router.PDFailureReport, first *upstreamError) *upstreamError {
	m := a.s.metrics
	switch {
	case f.Blamed == f.Failed && f.Failed == router.Prefill:
		m.PrefillFailures.Inc()
		return first
	case f.Blamed == f.Failed:
		m.DecodeFailures.Inc()
		return first
	case f.Blamed == router.Prefill: // decode waited for a prefill still silent
		m.PrefillFailures.Inc()
		return &upstreamError{Worker: a.prefill.worker, Role: "prefill", Err: fmt.Errorf("never delivered the KV: %w", first)}
	default: // prefill waited for a decode still silent
		m.DecodeFailures.Inc()
		return &upstreamError{Worker: a.decode.worker, Role: "decode", Err: fmt.Errorf("never completed the bootstrap with its prefill: %w", first)}
	}
}

// end lets the prefill leg go once the attempt is over. When the request ended (client gone or
// timed out), both legs are cancelled and their rids aborted on both workers (SPEC §1.4 step
// 8); otherwise a prefill leg that has not answered yet may finish on its own for prefillGrace
// more, within the request deadline. runPrefill reports its Done either way.
func (a *pdAttempt) end(ctx context.Context, x *exchange) {
	a.stopWatch() // the handler returns, and net/http then cancels ctx: the prefill leg may go on
	if x.over(ctx) {
		a.cancel()
		a.s.abort([]string{a.prefill.worker, a.decode.worker}, a.rids)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handlerOver = true
	if a.prefillOver {
		a.cancel()
		return
	}
	a.grace = time.AfterFunc(prefillGrace, a.cancel)
}

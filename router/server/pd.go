package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/server/internal/h1"
	"github.com/pdrouter/pdrouter/router/wire"
)

// prefillGrace bounds how long a prefill leg may outlive its finished response (its answer
// normally arrives long before decode's first token) before it is cancelled.
const prefillGrace = 10 * time.Second

// maxPrefillBody bounds a prefill answer (one JSON object or one SSE event).
const maxPrefillBody = 64 << 20

// errPrefillGrace cancels a prefill leg that outlived its response by prefillGrace.
var errPrefillGrace = fmt.Errorf("prefill leg still running %s after its response ended", prefillGrace)

// legResult is how a prefill leg ended: its answer, or its error.
type legResult struct {
	body []byte
	err  *upstreamError
}

// pdAttempt is what one PD attempt shares with its prefill runner (runPrefill), which sends
// the prefill leg, reports its Done and sends its result on result, once. Until decode's head
// is committed, a prefill failure cancels decode with the failure as dcan's cause.
//
// Attempts are recycled (pdAttempts): refs counts who still uses one — the handler
// (attemptPD), the prefill runner and, while armed, the prefill's grace timer — and the last
// to let go (release) puts it back, with its result channel, its prefill leg's header map and
// its legs' buffers (issue 29: ~2 KB and about eleven allocations a PD request).
type pdAttempt struct {
	refs            atomic.Int32
	s               *Server
	d               *router.Decision
	legs            wire.PDLegs
	prefill, decode upstreamRequest
	result          chan legResult // prefill's result; buffered, as the handler may not wait for it
	keepPrefill     bool           // the client asked for logprobs: prefill's answer is kept (legResult.body)
	headOut         bool           // decode's head is (being) written to the client (the handler's)

	// The prefill leg does not end with the handler (see prefillGrace): it runs on pctx, which
	// has the request's deadline (pdl: the prefill connection's deadline, no timer) and memory
	// budget but not its cancellation, until pcan ends it; decode's runs on the request's
	// context, and dcan ends it on prefill's failure. (h1.Cancel, not a context of their own
	// per leg: a context.WithCancelCause and the transport's context.AfterFunc on it cost a
	// children map, a channel and several allocations per leg.)
	pctx       context.Context
	pdl        h1.Deadline
	pcan, dcan h1.Cancel

	// Kept when the attempt is recycled: prefill's 2xx head is parsed into prefillHdr
	// (h1.Request.Into, no map per answer), and small bodies' legs are written into scratch
	// when h1 sends both (h1Sends; the net/http fallback may still read a body after it
	// answered, so its legs get buffers of their own).
	prefillHdr http.Header
	scratch    wire.PDScratch
	lr         io.LimitedReader // sendPrefill's bound on prefill's answer

	// mu protects the fields below: what each leg's goroutine knows of the other when it fails,
	// so the one that fails first is the one that decides who is charged (router.PDBlame).
	mu             sync.Mutex
	grace          *time.Timer // end's prefillGrace timer, when armed (it holds a ref)
	committed      bool        // decode's head went to the client: prefill's failure no longer matters
	decodeSettled  bool        // decode answered its first event or body, or failed
	prefillSettled bool        // prefill answered or failed
	chargeDecode   bool        // prefill's failure was decode's doing: decode's leg reports Failure
	chargePrefill  bool        // decode's failure was prefill's doing: prefill's leg reports Failure
}

// attemptPD runs one PD attempt (SPEC §1.4 steps 4–8). The decode leg runs here on the
// handler's goroutine, from its send to the end of its relay, as attemptRegular; only the
// prefill leg has a goroutine of its own. Decode's head is held until its first complete event
// (stream) or its whole body (non-stream) has arrived and, when holdState says so, prefill's
// answer too; then it is committed and the rest relayed event by event. A failure of either leg
// before the commit cancels the other and fails the attempt (retryable); decode learns of
// prefill's failure through its context's cause.
func (s *Server) attemptPD(ctx context.Context, x *exchange, d *router.Decision) (res attemptResult) {
	a := s.startPD(ctx, x, d)
	decode := router.Cancelled // decode's outcome: unless it answered, we cancelled it
	defer func() {
		d.Done(router.Decode, decode)
		a.end(ctx)
		a.release()
	}()
	resp, ue := send(ctx, s.upstream(router.Decode), &a.decode)
	if ue != nil {
		res, decode = a.failed(ctx, ue)
		return res
	}
	defer releaseResp(resp)
	if into := a.decode.into; into != nil {
		// Decode's head went straight into the client's (empty) header: an attempt that
		// fails before its commit leaves it empty again, for the retry or the error answer.
		defer func() {
			if !a.headOut {
				clear(into)
			}
		}()
	}
	stream := isEventStream(resp, x.body)
	held, pooled, end := readFirst(resp.Body, stream, s.cfg.MaxPayloadSize)
	if pooled != nil { // held is read from it until the attempt returns
		defer relayBufs.Put(pooled)
	}
	hs := holdState{stream: stream, logprobs: x.body.Logprobs, sawEvent: end == nil, ended: end != nil, readFailed: end != nil && end != io.EOF}
	if ue := firstEventError(&a.decode, held, hs); ue != nil {
		// Decode failed before its first token: nothing reached the client, so the attempt
		// fails (retryable) as if decode had answered the error status, and is charged as
		// router.PDBlame says (a decode whose KV never came from a silent prefill is the
		// prefill's failure).
		res, decode = a.failed(ctx, ue)
		return res
	}
	if !hs.readFailed {
		a.settleDecode()
	}
	if hs.readFailed { // before its first event: nothing reached the client, so retry
		res, decode = a.failed(ctx, &upstreamError{Worker: a.decode.worker, Role: "decode", Err: end})
		return res
	}
	var pref *legResult // prefill's answer, when the hold waited for it
	if !hs.done() {
		// The request's context ends at its deadline without a timer (requestContext), and so
		// does the prefill leg (pctx): at the deadline its exchange fails and its result comes.
		select {
		case pr := <-a.result:
			if pr.err != nil { // it cancelled decode too
				res, decode = a.failed(ctx, nil)
				return res
			}
			pref = &pr
		case <-ctx.Done():
			return attemptResult{gone: true}
		}
	}
	if !a.commit(ctx) { // prefill failed (or the request ended) since
		res, decode = a.failed(ctx, nil)
		return res
	}
	var pre []byte
	if x.body.Logprobs && pref != nil {
		pre = wire.PrefillLogprobs(pref.body)
	}
	a.headOut = true
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
	err := s.relayStream(ctx, s.newStreamWriter(x, pre, router.Decode), &heldBody{held: held, end: end, body: resp.Body}, &a.decode)
	if res, decode = s.streamEnd(err, resp.StatusCode); decode == router.Failure {
		s.metrics.DecodeFailures.Inc()
	}
	return res
}

// startPD builds both legs, logs the decision and starts the prefill leg on its own goroutine.
// The client-visible id becomes the first rid when the client sent none.
func (s *Server) startPD(ctx context.Context, x *exchange, d *router.Decision) *pdAttempt {
	pt, dt := d.Prefill, d.Decode
	a := pdAttempts.Get().(*pdAttempt)
	var scratch *wire.PDScratch
	if s.h1Sends(pt.URL()) && s.h1Sends(dt.URL()) {
		scratch = &a.scratch
	}
	legs := x.body.PDWith(s.ids, wire.PDOptions{Host: s.bootstrapHost(pt.URL()), Port: pt.Worker().BootstrapPort(),
		PrefillRank: pt.RankPtr(), DecodeRank: dt.RankPtr(), Style: s.style}, scratch)
	if x.id == "" {
		x.id = legs.RIDs[0]
	}
	path := x.route.String()
	s.logDecision(wire.DecisionLine{ID: x.id, RID: legs.RIDs[0], Room: legs.Rooms[0], Route: path}, d)
	a.refs.Store(2) // this handler and the prefill runner
	a.s, a.d, a.legs, a.keepPrefill = s, d, legs, x.body.Logprobs
	a.prefill = upstreamRequest{method: http.MethodPost, worker: pt.URL(), path: path, pieces: legs.Prefill, hdr: x.hdr, role: "prefill", into: a.prefillHdr}
	a.decode = upstreamRequest{method: http.MethodPost, worker: dt.URL(), path: path, pieces: legs.Decode, hdr: x.hdr, role: "decode"}
	if h := x.w.Header(); len(h) == 0 {
		// A 2xx head may be parsed straight into the client's header (h1.Request.Into), as
		// regular's is: attemptPD empties it again when the attempt fails before its commit.
		// A header that holds fields already (CORS) is not: it could not be restored.
		a.decode.into = h
	}
	// Not derived from ctx: the leg may outlive the handler, and ctx lives in the exchange,
	// which is recycled when the handler returns (putExchange).
	if dl, ok := ctx.Deadline(); ok {
		a.pctx = a.pdl.Init(context.Background(), dl, budgetKey{}, budgetFrom(ctx))
	} else {
		a.pctx = withBudget(context.Background(), budgetFrom(ctx))
	}
	a.prefill.cancel, a.decode.cancel = &a.pcan, &a.dcan
	s.prefillRunners.run(a)
	return a
}

// maxKeptScratch bounds the legs' buffer a recycled attempt keeps (two legs of a 4 KiB body
// and a batch of a few hundred ids fit).
const maxKeptScratch = 32 << 10

// pdAttempts recycles PD attempts (see pdAttempt).
var pdAttempts = sync.Pool{New: func() any {
	return &pdAttempt{result: make(chan legResult, 1), prefillHdr: make(http.Header, 4)}
}}

// release lets a go for one of its users; the last puts it back in pdAttempts.
func (a *pdAttempt) release() {
	if a.refs.Add(-1) != 0 {
		return
	}
	select {
	case <-a.result: // the handler did not wait for it
	default:
	}
	result, hdr, scratch := a.result, a.prefillHdr, a.scratch
	clear(hdr)
	if scratch.Bytes() > maxKeptScratch { // a large batch's: not kept for every attempt after
		scratch = wire.PDScratch{}
	}
	*a = pdAttempt{result: result, prefillHdr: hdr, scratch: scratch}
	pdAttempts.Put(a)
}

// h1Sends reports whether the h1 transport itself sends requests to url (see h1.Serves),
// cached per worker URL.
func (s *Server) h1Sends(url string) bool { return perURL(&s.h1URLs, url, h1.Serves) }

// perURL returns f(url), computed once per url and kept in m: one entry per worker ever
// routed to (workers come and go by the operator's hand, not per request).
func perURL[T any](m *sync.Map, url string, f func(string) T) T {
	if v, ok := m.Load(url); ok {
		return v.(T)
	}
	v := f(url)
	m.Store(url, v)
	return v
}

// prefillRunners runs prefill legs on goroutines that outlive them: a goroutine started per
// leg begins with the runtime's smallest stack and grows it by copying three or four times on
// the way down the transport (~20 % of the leg's CPU in BenchmarkHotPath's profile); an idle
// runner's stack has grown already. A runner waits runnerIdle for its next leg, and stops
// after that or once the server has stopped (quit); legs that find no runner idle start one.
// Like the goroutine per leg before them, runners are not waited for by Server.Wait.
type prefillRunners struct {
	work chan *pdAttempt // unbuffered: a send succeeds only when a runner is idle
	quit chan struct{}   // closed when the server stops (Start's context ends)
	stop sync.Once
}

// runnerIdle is how long an idle prefill runner waits for its next leg before it stops.
const runnerIdle = 10 * time.Second

func newPrefillRunners() *prefillRunners {
	return &prefillRunners{work: make(chan *pdAttempt), quit: make(chan struct{})}
}

// run runs a's prefill leg on an idle runner, or a new one.
func (p *prefillRunners) run(a *pdAttempt) {
	select {
	case p.work <- a:
	default:
		go p.runner(a)
	}
}

// runner runs a's prefill leg, then the legs it is handed, until it idles for a whole
// runnerIdle tick (so it stops after runnerIdle to twice that without legs; the timer is not
// reset per leg) or the server stops.
func (p *prefillRunners) runner(a *pdAttempt) {
	t := time.NewTicker(runnerIdle)
	defer t.Stop()
	for busy := false; ; {
		if a != nil {
			a.runPrefill()
			a.release()
			a, busy = nil, true
		}
		select {
		case a = <-p.work:
		case <-t.C:
			if !busy {
				return
			}
			busy = false
		case <-p.quit:
			return
		}
	}
}

// close stops the idle runners, and each busy one when its leg ends.
func (p *prefillRunners) close() { p.stop.Do(func() { close(p.quit) }) }

// bootstrapHost returns wire.BootstrapHost(prefillURL), parsed once per prefill URL.
func (s *Server) bootstrapHost(prefillURL string) string {
	return perURL(&s.bootHosts, prefillURL, wire.BootstrapHost)
}

// runPrefill runs the prefill leg on a goroutine of its own (a prefill runner): it sends it, reads its answer, reports
// its Done, cancels decode when it failed (before the commit), and sends its result. A failure
// is charged as router.PDBlame says: a bootstrap timeout while decode was still silent is
// decode's (its Done reports Failure in failed), not this worker's.
func (a *pdAttempt) runPrefill() {
	var res legResult
	outcome, failed := router.Cancelled, false
	defer func() {
		a.d.Done(router.Prefill, outcome)
		a.pcan.Cancel(nil) // the leg is over: end finds nothing left to cancel
		if failed {
			a.cancelDecode(res.err)
		}
		a.mu.Lock()
		t := a.grace
		a.mu.Unlock()
		if t != nil && t.Stop() {
			a.release() // the timer's ref
		}
		a.result <- res
	}()
	res.body, res.err = a.sendPrefill()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.prefillSettled = true
	switch {
	case res.err == nil:
		outcome = router.Success
	case res.err.Status == 0 && (a.pcan.Err() != nil || a.pctx.Err() != nil):
		// We cancelled it, or the request's deadline ended it (as the request's end would
		// cancel it): that says nothing of the worker, and decode has ended or is ending
		// already — unless decode's failure was this worker's doing (it never delivered the
		// KV).
		if a.chargePrefill {
			outcome = router.Failure
		}
	default:
		var peer router.Outcome
		outcome, peer = router.PDBlame(router.PDFailure{Role: router.Prefill, Attempt: attemptOf(res.err), PeerOpen: !a.decodeSettled})
		a.chargeDecode = peer == router.Failure
		failed = true
		if res.err.Status == 0 && connFailure(res.err.Err) {
			a.s.hc.suspect(a.prefill.worker)
		}
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
func firstEventError(r *upstreamRequest, held []byte, hs holdState) *upstreamError {
	if !hs.stream || hs.readFailed {
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

// settleDecode notes that decode answered its first event or body: from now on a prefill
// failure is not decode's silence.
func (a *pdAttempt) settleDecode() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.decodeSettled = true
}

// sendPrefill sends the prefill leg and reads its answer, within maxPrefillBody. The answer
// is kept only when the client asked for logprobs (merged into decode's); otherwise it is
// read through and dropped (nil).
func (a *pdAttempt) sendPrefill() ([]byte, *upstreamError) {
	resp, ue := send(a.pctx, a.s.upstream(router.Prefill), &a.prefill)
	if ue != nil {
		return nil, ue
	}
	defer releaseResp(resp)
	var body []byte
	var n int64
	var err error
	a.lr = io.LimitedReader{R: resp.Body, N: maxPrefillBody + 1} // in a: no allocation of its own
	if a.keepPrefill {
		body, err = io.ReadAll(&a.lr)
		n = int64(len(body))
	} else {
		n, err = io.Copy(io.Discard, &a.lr)
	}
	a.lr.R = nil
	if err == nil && n > maxPrefillBody {
		err = fmt.Errorf("answer exceeds %d bytes", maxPrefillBody)
	}
	if err != nil {
		return nil, &upstreamError{Worker: a.prefill.worker, Role: "prefill", Err: err}
	}
	return body, nil
}

// cancelDecode cancels decode with prefill's failure as the cause, unless decode's head has
// already gone to the client.
func (a *pdAttempt) cancelDecode(ue *upstreamError) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.committed {
		a.dcan.Cancel(ue)
	}
}

// commit marks decode's head as going to the client, unless decode was cancelled first.
func (a *pdAttempt) commit(ctx context.Context) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.committed = ctx.Err() == nil && a.dcan.Err() == nil
	return a.committed
}

// failed ends an attempt before the commit, when decode failed (ue) or was cancelled (ue nil):
// gone when the request ended. When prefill's failure cancelled decode (the cause), the attempt
// fails with prefill's error — or, when that failure was decode's doing (runPrefill set
// chargeDecode), with an error naming decode, which is charged. Otherwise decode failed first:
// the prefill leg is cancelled and router.PDBlame charges decode, or prefill when decode gave
// up waiting for a prefill still silent. It returns decode's outcome.
func (a *pdAttempt) failed(ctx context.Context, ue *upstreamError) (attemptResult, router.Outcome) {
	if ctx.Err() != nil {
		return attemptResult{gone: true}, router.Cancelled
	}
	if pe, ok := a.dcan.Cause().(*upstreamError); ok {
		a.mu.Lock()
		charge := a.chargeDecode
		a.mu.Unlock()
		if charge {
			a.s.metrics.DecodeFailures.Inc()
			return attemptResult{failed: &upstreamError{Worker: a.decode.worker, Role: "decode",
				Err: fmt.Errorf("never completed the bootstrap with its prefill: %w", pe)}}, router.Failure
		}
		a.s.metrics.PrefillFailures.Inc()
		return attemptResult{failed: pe}, router.Cancelled
	}
	a.mu.Lock()
	a.decodeSettled = true
	mine, peer := router.PDBlame(router.PDFailure{Role: router.Decode, Attempt: attemptOf(ue), PeerOpen: !a.prefillSettled})
	a.chargePrefill = peer == router.Failure
	a.mu.Unlock()
	a.pcan.Cancel(ue)
	if peer == router.Failure {
		a.s.metrics.PrefillFailures.Inc()
		return attemptResult{failed: &upstreamError{Worker: a.prefill.worker, Role: "prefill",
			Err: fmt.Errorf("never delivered the KV: %w", ue)}}, mine
	}
	a.s.metrics.DecodeFailures.Inc()
	return attemptResult{failed: ue}, mine
}

// end lets the prefill leg go once the attempt is over. When the request ended (client gone or
// timed out), both legs are cancelled and their rids aborted on both workers (SPEC §1.4 step
// 8); otherwise a prefill leg that has not answered yet may finish on its own for prefillGrace
// more, within the request deadline. runPrefill reports its Done either way.
func (a *pdAttempt) end(ctx context.Context) {
	a.dcan.Cancel(nil)
	if err := ctx.Err(); err != nil {
		cause := err // the deadline passed (its context has no cancel of its own) …
		if c := context.Cause(ctx); c != nil && !errors.Is(err, context.DeadlineExceeded) {
			cause = c // … or the client went away
		}
		a.pcan.Cancel(cause)
		a.s.abort([]string{a.prefill.worker, a.decode.worker}, a.legs.RIDs)
		return
	}
	if a.pcan.Err() != nil { // it answered, or was cancelled
		return
	}
	grace := prefillGrace
	if dl, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(dl))
	}
	// The timer holds a ref until it has fired or the runner stopped it; a runner that
	// finished before the timer was set leaves it to fire on a leg already over (a no-op).
	a.refs.Add(1)
	t := time.AfterFunc(grace, func() {
		a.pcan.Cancel(errPrefillGrace)
		a.release()
	})
	a.mu.Lock()
	a.grace = t
	a.mu.Unlock()
}

// holdState is what the PD path knows while it holds decode's head (before attemptPD commits it).
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

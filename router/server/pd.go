package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// prefillGrace bounds how long a finished response waits for its prefill leg's own answer
// (which normally arrived long before decode's first token) before cancelling it.
const prefillGrace = 10 * time.Second

// maxPrefillBody bounds what is read of a prefill answer (one JSON object or one SSE event).
const maxPrefillBody = 64 << 20

// legResult is how a prefill leg ended.
type legResult struct {
	body []byte
	err  *upstreamError
}

// attemptPD sends one PD attempt (SPEC §1.4 steps 4–8): both legs at once; decode's status and
// headers held until prefill has succeeded or decode's first event has arrived; a failure of
// either leg before that cancels the other and fails the attempt (retryable); afterwards the
// decode stream is relayed event by event. Each leg's Done is called exactly once. id is set
// to the first rid when the client sent no request id.
func (s *Server) attemptPD(ctx context.Context, w http.ResponseWriter, b *wire.Body, d *router.Decision, hdr http.Header, id *string, start time.Time) (attemptResult, int) {
	pt, dt := d.Prefill, d.Decode
	legs := b.PD(s.ids, wire.PDOptions{Host: wire.BootstrapHost(pt.URL()), Port: pt.Worker().BootstrapPort(),
		PrefillRank: pt.RankPtr(), DecodeRank: dt.RankPtr(), Style: s.style})
	if *id == "" {
		*id = legs.RIDs[0]
	}
	path := b.Route.String()
	s.logDecision(*id, legs.RIDs[0], legs.Rooms[0], path, d)

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	prefDone := make(chan legResult, 1)
	go func() {
		res := legResult{}
		resp, err := send(actx, s.clients[router.Prefill], http.MethodPost, pt.URL()+path, legs.Prefill, hdr, "prefill", pt.URL())
		if err == nil {
			res.body, err = io.ReadAll(io.LimitReader(resp.Body, maxPrefillBody))
			resp.Body.Close()
			if err != nil {
				err = &upstreamError{Worker: pt.URL(), Role: "prefill", Err: err}
			}
		}
		switch {
		case err == nil:
			d.Done(router.Prefill, router.Success)
		case actx.Err() != nil:
			d.Done(router.Prefill, router.Cancelled) // we cancelled it: says nothing of the worker
		default:
			d.Done(router.Prefill, legOutcome(err))
		}
		if err != nil {
			res.err = err.(*upstreamError)
		}
		prefDone <- res
	}()
	type head struct {
		resp *http.Response
		err  *upstreamError
	}
	decHead := make(chan head, 1)
	go func() {
		resp, err := send(actx, s.clients[router.Decode], http.MethodPost, dt.URL()+path, legs.Decode, hdr, "decode", dt.URL())
		if err != nil {
			decHead <- head{err: err.(*upstreamError)}
			return
		}
		decHead <- head{resp: resp}
	}()

	var pref *legResult
	// prefillFailed cancels decode and fails the attempt with prefill's error, fast.
	prefillFailed := func(pr legResult, decodeBody io.Closer) (attemptResult, int) {
		cancel()
		if decodeBody != nil {
			decodeBody.Close()
		}
		d.Done(router.Decode, router.Cancelled)
		s.metrics.PrefillFailures.Inc()
		return attemptResult{failed: pr.err}, 0
	}
	gone := func() (attemptResult, int) {
		cancel()
		d.Done(router.Decode, router.Cancelled)
		s.abort([]string{pt.URL(), dt.URL()}, legs.RIDs)
		return attemptResult{gone: true}, 0
	}
	// finish waits (bounded) for the prefill leg so its Done comes from its own answer.
	finish := func() {
		if pref == nil {
			t := time.NewTimer(prefillGrace)
			defer t.Stop()
			select {
			case <-prefDone:
			case <-t.C:
				cancel()
				<-prefDone
			}
		}
	}

	// 1. Decode's head, watching prefill.
	var resp *http.Response
	for resp == nil {
		select {
		case pr := <-prefDone:
			if pr.err != nil {
				r, c := prefillFailed(pr, nil)
				<-decHead // the decode goroutine ends promptly once cancelled
				return r, c
			}
			pref = &pr
		case h := <-decHead:
			if h.err != nil {
				cancel()
				if pref == nil {
					<-prefDone
				}
				d.Done(router.Decode, legOutcome(h.err))
				s.metrics.DecodeFailures.Inc()
				return attemptResult{failed: h.err}, 0
			}
			resp = h.resp
		case <-ctx.Done():
			r, c := gone()
			if h := <-decHead; h.resp != nil {
				h.resp.Body.Close()
			}
			if pref == nil {
				<-prefDone
			}
			return r, c
		}
	}
	defer resp.Body.Close()
	stop := make(chan struct{})
	defer close(stop)
	stream := isEventStream(resp, b)
	chunks := readFirst(resp.Body, stream, stop)

	// 2. Hold decode's head until prefill succeeded or decode's first complete event arrived
	// (with logprobs asked for, prefill's answer is needed before anything is relayed).
	var held [][]byte
	// sawEvent: the reader stopped after decode's first event (it owns the body until then);
	// ended: decode's body ended (io.EOF) or broke (readErr) while held.
	sawEvent, ended := false, false
	var readErr error
	for {
		stopped := sawEvent || ended
		// A complete non-stream decode answer implies prefill's KV arrived: no need to wait for
		// prefill's own HTTP answer unless its logprobs are needed.
		ready := (pref != nil && !stream || sawEvent || ended && !stream && readErr == nil) && (!b.Logprobs || pref != nil)
		if stopped && (ready || ended && (pref != nil || readErr != nil)) {
			break
		}
		var prefCh <-chan legResult
		if pref == nil {
			prefCh = prefDone
		}
		var chunkCh <-chan relayChunk
		if !ended && !sawEvent {
			chunkCh = chunks
		}
		select {
		case pr := <-prefCh:
			if pr.err != nil {
				return prefillFailed(pr, nil)
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
			r, c := gone()
			if pref == nil {
				<-prefDone
			}
			return r, c
		}
	}
	if readErr != nil && !sawEvent {
		// Decode broke before sending anything: nothing reached the client, so retry.
		cancel()
		if pref == nil {
			<-prefDone
		}
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
		finish()
		if werr != nil {
			d.Done(router.Decode, router.Cancelled)
			return attemptResult{gone: true}, 0
		}
		d.Done(router.Decode, router.Success)
		return attemptResult{}, resp.StatusCode
	}

	commitHeaders(w, resp, *id, true)
	sw := newStreamWriter(w, pre, start, func(ttft time.Duration) { s.metrics.TTFT.WithLabelValues(b.Route.String()).Observe(ttft.Seconds()) })
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
		cancel()
		d.Done(router.Decode, router.Cancelled)
		s.abort([]string{pt.URL(), dt.URL()}, legs.RIDs)
		finish()
		return attemptResult{gone: true}, 0
	case err != nil:
		d.Done(router.Decode, router.Failure)
		s.metrics.DecodeFailures.Inc()
	default:
		d.Done(router.Decode, router.Success)
	}
	finish()
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

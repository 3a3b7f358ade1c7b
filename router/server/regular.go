package server

import (
	"context"
	"io"
	"net/http"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
	"go.opentelemetry.io/otel/trace"
)

// attemptRegular proxies one attempt to the regular target d chose (SPEC §1.5): the body as
// sent, plus data_parallel_rank under --dp-aware. Streams are relayed event by event.
func (s *Server) attemptRegular(ctx context.Context, x *exchange, d *router.Decision) (res attemptResult) {
	t := d.Regular
	out := router.Cancelled // the leg's outcome: unless it answered, we cancelled it
	r := &upstreamRequest{method: http.MethodPost, worker: t.URL(), path: x.route.String(), body: x.body.Raw, hdr: x.hdr, role: "regular", deadline: x.deadline}
	var span trace.Span // the leg's, under --enable-trace
	if s.tr != nil {
		span = s.tr.startLeg(x, r, d, router.Regular)
	}
	defer func() {
		endLeg(span, out, nil)
		d.Done(router.Regular, out)
	}()
	if rank, ok := t.Rank(); ok { // the prompt is referred to, not copied
		r.body, r.pieces = nil, x.body.DPRankPieces(rank)
	}
	s.logDecision(wire.DecisionLine{ID: x.id, Route: r.path}, d)
	resp, ue := send(ctx, s.upstream(router.Regular), r, s.budget)
	if span != nil {
		traceSent(span, resp, ue)
	}
	if ue != nil {
		if x.over(ctx) {
			return attemptResult{gone: true}
		}
		out = legOutcome(ue)
		return attemptResult{failed: ue}
	}
	defer resp.Body.Close()
	stream := isEventStream(resp, x.body)
	commitHeaders(x, resp, stream)
	if stream {
		sw := s.newStreamWriter(x, nil, router.Regular)
		sw.d = d
		res, out = s.streamEnd(s.relayStream(ctx, &sw, &heldBody{body: resp.Body}, r, nil), resp.StatusCode)
		return res
	}
	// Keep a bounded copy of the reply to read the worker's cache hit from.
	var tee limitedBuffer
	_, err := io.Copy(x.w, io.TeeReader(resp.Body, &tee))
	switch {
	case err == nil:
		s.observeCached(tee.b)
		out = router.Success
		return attemptResult{status: resp.StatusCode}
	case x.over(ctx):
		return attemptResult{gone: true, committed: true}
	}
	// The reply broke after its head went out: abort the connection so the client sees a
	// truncated response instead of a short 200.
	out = router.Failure
	s.metrics.Errors.WithLabelValues("regular_truncated").Inc()
	if connFailure(err) {
		s.hc.suspect(r.worker)
	}
	panic(http.ErrAbortHandler)
}

// limitedBuffer keeps the first 1 MiB written to it and drops the rest.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 1<<20 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

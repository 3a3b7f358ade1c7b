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

// attemptRegular proxies one attempt to the regular target d chose (SPEC §1.5): the body as
// sent, plus data_parallel_rank under --dp-aware. Streams are relayed event by event.
func (s *Server) attemptRegular(ctx context.Context, w http.ResponseWriter, b *wire.Body, d *router.Decision, hdr http.Header, id string, start time.Time) (attemptResult, int) {
	t := d.Regular
	body := b.Raw
	if rank, ok := t.Rank(); ok {
		body = b.WithDPRank(nil, rank)
	}
	path := b.Route.String()
	s.logDecision(id, "", 0, path, d)
	resp, ue := send(ctx, s.upstream(router.Regular), &upstreamRequest{method: http.MethodPost, worker: t.URL(), path: path, body: body, hdr: hdr, role: "regular"})
	if ue != nil {
		if ctx.Err() != nil {
			d.Done(router.Regular, router.Cancelled)
			return attemptResult{gone: true}, 0
		}
		d.Done(router.Regular, legOutcome(ue))
		return attemptResult{failed: ue}, 0
	}
	defer resp.Body.Close()
	stream := isEventStream(resp, b)
	commitHeaders(w, resp, id, stream)
	if !stream {
		// Keep a bounded copy of the reply to read the worker's cache hit from.
		var tee limitedBuffer
		_, err := io.Copy(w, io.TeeReader(resp.Body, &tee))
		switch {
		case err == nil:
			s.observeCached(tee.b)
			d.Done(router.Regular, router.Success)
		case ctx.Err() != nil:
			d.Done(router.Regular, router.Cancelled)
			return attemptResult{gone: true, committed: true}, 0
		default:
			// The reply broke after its head went out: abort the connection so the client
			// sees a truncated response instead of a short 200.
			d.Done(router.Regular, router.Failure)
			s.metrics.Errors.WithLabelValues("regular_truncated").Inc()
			panic(http.ErrAbortHandler)
		}
		return attemptResult{}, resp.StatusCode
	}
	sw := s.newStreamWriter(w, nil, start, path)
	err := s.relayStream(ctx, w, resp.Body, sw, nil, nil, t.URL(), "regular")
	switch {
	case errors.Is(err, errClientGone):
		d.Done(router.Regular, router.Cancelled)
		return attemptResult{gone: true, committed: true}, 0
	case errors.Is(err, errRequestTimeout):
		d.Done(router.Regular, router.Cancelled)
		s.metrics.Errors.WithLabelValues("timeout").Inc()
	case err != nil:
		d.Done(router.Regular, router.Failure)
	default:
		d.Done(router.Regular, router.Success)
	}
	return attemptResult{}, resp.StatusCode
}

// limitedBuffer keeps the first 1 MiB written to it and drops the rest.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := 1<<20 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

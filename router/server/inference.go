package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pdrouter/pdrouter/router"
	"github.com/pdrouter/pdrouter/router/wire"
)

// Error types of the OpenAI-style bodies the router itself writes.
const (
	typeUnavailable = "service_unavailable_error"
	typeRateLimit   = "rate_limit_error"
	typeTimeout     = "timeout_error"
	typeTooLarge    = "request_too_large"
	typeAuth        = "authentication_error"
	typeNotImpl     = "not_implemented_error"
)

// writeError answers with an OpenAI-style JSON error.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(wire.ErrorBody(status, typ, msg))
}

// errClientGone ends an attempt whose client went away; errRequestTimeout one that hit
// --request-timeout-secs after the response started (an error event was written).
var (
	errClientGone     = errors.New("client disconnected")
	errRequestTimeout = errors.New("request timed out")
)

// exchange is one client request on its way through serve: the values every step of its path
// reads (handler, route, attempt, relay), in one place. It lives for its handler's call.
type exchange struct {
	w     http.ResponseWriter
	req   *http.Request
	route wire.Route
	start time.Time
	id    string      // the client-visible request id; "" until the client's header or a rid sets it
	body  *wire.Body  // the parsed request body
	hdr   http.Header // the client headers forwarded to workers
	// rreq is the routing view, kept across retries (Avoid grows); nil until route. Behind a
	// pointer: Route hands it to a policy's interface, which takes it to the heap, and the
	// exchange with it if it were a field.
	rreq *router.Request
	// deadline is when --request-timeout-secs ends the request. It is no context's: the
	// upstream exchanges carry it as their connections' deadline (upstreamRequest.deadline), and
	// the waits between them check it.
	deadline time.Time
}

// over reports whether the request has ended: its client went away (ctx, the request's context)
// or its deadline passed.
func (x *exchange) over(ctx context.Context) bool {
	return ctx.Err() != nil || x.timedOut()
}

// failedAttempts is how many attempts of the request failed (the workers it avoids).
func (x *exchange) failedAttempts() int {
	if x.rreq == nil {
		return 0
	}
	return len(x.rreq.Avoid)
}

// timedOut reports whether the request's deadline has passed.
func (x *exchange) timedOut() bool { return !time.Now().Before(x.deadline) }

// attemptResult is how one routed attempt ended.
type attemptResult struct {
	// failed is set when the attempt failed before any byte reached the client: the caller
	// may retry it.
	failed *upstreamError
	// gone is set when the request's context ended: the client disconnected or the request
	// timed out.
	gone bool
	// committed is set when the response had started (nothing more can be answered).
	committed bool
	// status is the status answered, when the attempt answered.
	status int
	// streamErr is set when a relayed stream broke or ended in an error event after its head
	// went out: answered (an error event), but an error in every metric.
	streamErr *upstreamError
}

// legOutcome classifies an upstream error for the breaker: a 4xx is the client's fault and
// counts as a success (the worker answered correctly), as in sgl-router's PD path.
func legOutcome(ue *upstreamError) router.Outcome {
	if ue == nil {
		return router.Failure
	}
	if errors.Is(ue.Err, errOverBudget) { // the router's memory, not the worker's fault
		return router.Cancelled
	}
	return router.LegOutcome(router.Attempt{Status: ue.Status, Transport: ue.Status == 0})
}

// forwardHeaders picks the client headers forwarded to workers; nil when the client sent none
// of them. Keys are canonical (forwardedHeaders, s.ridKeys), so they index the header map
// directly instead of being canonicalised again per request.
func (s *Server) forwardHeaders(req *http.Request) http.Header {
	var h http.Header
	add := func(k string) {
		if v := req.Header[k]; len(v) > 0 {
			if h == nil {
				h = make(http.Header, 4)
			}
			h[k] = v
		}
	}
	for _, k := range forwardedHeaders {
		add(k)
	}
	for _, k := range s.ridKeys {
		add(k)
	}
	return h
}

// clientRequestID returns the first configured request-id header present, or "".
func (s *Server) clientRequestID(req *http.Request) string { return firstHeader(req.Header, s.ridKeys) }

// routingKeyHeader carries a request's routing key (smg's header), read after
// Config.RoutingKeyHeaders.
const routingKeyHeader = "X-Smg-Routing-Key"

// routingKey returns the request's routing key: the first routing-key header present, else
// the first of --routing-key-fields the body has as a string or number, else "" (at once when
// no policy routes by key).
func (s *Server) routingKey(x *exchange) string {
	if s.keyHdrs == nil {
		return ""
	}
	if k := firstHeader(x.req.Header, s.keyHdrs); k != "" {
		return k
	}
	for _, f := range s.cfg.RoutingKeyFields {
		v, ok := fieldPath(x.body, f)
		if !ok || len(v) == 0 {
			continue
		}
		switch {
		case v[0] == '"':
			var k string
			if json.Unmarshal(v, &k) == nil && k != "" {
				return k
			}
		case v[0] == '-' || '0' <= v[0] && v[0] <= '9':
			return string(v)
		}
	}
	return ""
}

// fieldPath returns the raw JSON value at f in the body: a top-level member, or along a dotted
// path a member of nested objects (metadata.session_id); a top-level member whose name has the
// dots wins. Only the objects on the path are decoded.
func fieldPath(b *wire.Body, f string) ([]byte, bool) {
	if v, ok := b.Field(f); ok {
		return v, true
	}
	head, rest, dotted := strings.Cut(f, ".")
	if !dotted {
		return nil, false
	}
	v, ok := b.Field(head)
	for ok && rest != "" {
		var obj map[string]json.RawMessage
		if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &obj) != nil {
			return nil, false
		}
		head, rest, _ = strings.Cut(rest, ".")
		v, ok = obj[head]
	}
	return v, ok
}

// firstHeader returns the first non-empty value of the first of keys (canonical) h has, "" when
// none has one.
func firstHeader(h http.Header, keys []string) string {
	for _, k := range keys {
		if v := h[k]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// inference serves /generate, /v1/chat/completions and /v1/completions (SPEC §1.4, §1.5).
func (s *Server) inference(route wire.Route) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		x := &exchange{w: w, req: req, route: route, start: time.Now(), id: s.clientRequestID(req)}
		if s.tr != nil { // the request's span rides in its context
			req = s.tr.startRequest(x)
			defer s.tr.endRequest(x)
		}
		ch := &charge{b: s.budget} // the body's bytes, held until the response is over
		defer ch.release()
		raw, err := s.readBody(w, req, ch)
		if err != nil {
			s.bodyFailed(x, err)
			return
		}
		if x.body, err = wire.ParseLimited(route, raw, wire.Limits{MaxBatch: s.cfg.MaxBatchSize}); err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				we = &wire.Error{Status: http.StatusBadRequest, Type: wire.TypeInvalidRequest, Message: err.Error()}
			}
			s.fail(x, we, "bad_request")
			return
		}
		release, ok := s.admit(x)
		if !ok {
			return
		}
		defer release()
		// The request ends at --request-timeout-secs from its arrival, or when the client goes
		// away (its context).
		x.deadline = x.start.Add(time.Duration(s.cfg.RequestTimeoutSecs) * time.Second)
		x.hdr = s.forwardHeaders(req)
		code := s.route(req.Context(), x)
		s.metrics.observeRequest(route.String(), code, time.Since(x.start).Seconds())
	}
}

// fail answers a request the router rejects before routing it; kind labels the error metric.
func (s *Server) fail(x *exchange, e *wire.Error, kind string) {
	s.reply(x, e)
	s.metrics.Errors.WithLabelValues(kind).Inc()
	s.metrics.observeRequest(x.route.String(), e.Status, 0)
}

// reply answers with an OpenAI-style error and the request id, and returns its status.
func (s *Server) reply(x *exchange, e *wire.Error) int {
	if x.id == "" {
		x.id = s.reqIDs.RID(x.route)
	}
	x.w.Header().Set("X-Request-Id", x.id)
	writeError(x.w, e.Status, e.Type, e.Message)
	return e.Status
}

// route runs the retry loop: route, attempt, and on a failure before any byte reached the
// client, back off and route again (SPEC §1.6). ctx is the request's context. It returns the
// status answered.
func (s *Server) route(ctx context.Context, x *exchange) int {
	rt := s.r.NewRetrier()
	defer rt.Done()
	retriedReuse := false
	if x.id == "" && !s.r.PD() {
		x.id = s.reqIDs.RID(x.route)
	}
	rreq := &router.Request{Text: x.body.Text, Model: x.body.Model, RoutingKey: s.routingKey(x)}
	x.rreq = rreq
	if s.kv != nil {
		rreq.Tokens = s.kv.tokens(x.body)
	}
	if s.latency {
		if err := requestSLOs(x.req.Header, rreq); err != nil {
			return s.reply(x, &wire.Error{Status: http.StatusBadRequest, Type: wire.TypeInvalidRequest, Message: err.Error()})
		}
	}
	for attempt := 0; ; attempt++ {
		d, err := s.r.Route(rreq)
		if err != nil {
			return s.unrouted(x, err)
		}
		s.metrics.observeDecision(d)
		var res attemptResult
		if s.r.PD() {
			res = s.attemptPD(ctx, x, d)
		} else {
			res = s.attemptRegular(ctx, x, d)
		}
		switch {
		case res.gone && !res.committed:
			return s.ended(ctx, x)
		case res.gone:
			s.metrics.Errors.WithLabelValues("client_disconnect").Inc()
			return 499
		case res.failed == nil && res.streamErr != nil:
			return s.streamFailed(x, res.streamErr)
		case res.failed == nil:
			return res.status
		}
		ue := res.failed
		if errors.Is(ue.Err, errOverBudget) { // a held reply went over the budget: never retried
			s.metrics.Errors.WithLabelValues("over_budget").Inc()
			x.w.Header().Set("Retry-After", "1")
			return s.reply(x, &wire.Error{Status: http.StatusServiceUnavailable, Type: typeUnavailable,
				Message: fmt.Sprintf("%s worker %s: reply held over the router's memory budget (--body-memory-budget): retry later", ue.Role, router.RedactURL(ue.Worker))})
		}
		if ue.Status == 0 && connFailure(ue.Err) {
			s.hc.suspect(ue.Worker) // refused or reset: is the worker gone?
		}
		if s.r.PD() {
			s.metrics.sgl.legFailed(ue)
		}
		rreq.Avoid = append(rreq.Avoid, ue.Worker) // the retry moves to another target if it can
		s.metrics.Errors.WithLabelValues(errorKind(ue)).Inc()
		s.attemptFailed(x.id, attempt, ue)
		var wait time.Duration
		retry := false
		if ue.Status == 0 && ue.reused && !retriedReuse {
			// A reset on a reused keep-alive connection: the worker closed it as we sent.
			retriedReuse, retry = true, true
		} else {
			wait, retry = rt.Next(router.Attempt{Status: ue.Status, Transport: ue.Status == 0, Body: ue.Body})
		}
		if rt.OverBudget() {
			s.metrics.RetriesOverBudget.WithLabelValues(x.route.String()).Inc()
		}
		if !retry || x.over(ctx) {
			return s.reply(x, ue.clientError())
		}
		s.metrics.retried(x.route.String())
		if !sleep(ctx, wait, x.deadline) {
			return s.ended(ctx, x)
		}
	}
}

// unrouted answers a request Route refused (err): shed when every worker of a role was
// overloaded, else 503.
func (s *Server) unrouted(x *exchange, err error) int {
	var overloaded *router.OverloadError
	if errors.As(err, &overloaded) {
		return s.shed(x, overloaded)
	}
	s.metrics.Errors.WithLabelValues("no_workers").Inc()
	return s.reply(x, &wire.Error{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Message: err.Error()})
}

// shed answers a request that no worker of a role could take without going over its overload
// bound: 503 with Retry-After, counted (requests_shed_total, errors_total{kind="overloaded"})
// and written to the decision log (reason "overloaded"), never queued.
func (s *Server) shed(x *exchange, e *router.OverloadError) int {
	s.metrics.Shed.WithLabelValues(e.Role.String()).Inc()
	s.metrics.Errors.WithLabelValues("overloaded").Inc()
	if x.id == "" {
		x.id = s.reqIDs.RID(x.route)
	}
	if s.dlog != nil {
		s.writeDecision(&wire.DecisionLine{ID: x.id, Route: x.route.String(), Reason: "overloaded"})
	}
	x.w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(e.RetryAfter.Seconds())))))
	return s.reply(x, &wire.Error{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Message: e.Error()})
}

// sleep waits d, or until ctx ends or the deadline passes (then it reports false).
func sleep(ctx context.Context, d time.Duration, deadline time.Time) bool {
	if d <= 0 {
		return true
	}
	cut := false // the deadline comes first
	if until := time.Until(deadline); until < d {
		d, cut = max(until, 0), true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !cut
	case <-ctx.Done():
		return false
	}
}

// ended answers a request whose context ended before its response started: 504 when
// --request-timeout-secs ran out and the client is still there (every accepted request gets
// exactly one response), nothing when the client has gone.
func (s *Server) ended(ctx context.Context, x *exchange) int {
	if x.timedOut() && ctx.Err() == nil {
		s.metrics.Errors.WithLabelValues("timeout").Inc()
		return s.reply(x, &wire.Error{Status: http.StatusGatewayTimeout, Type: typeTimeout,
			Message: fmt.Sprintf("request exceeded --request-timeout-secs %d", s.cfg.RequestTimeoutSecs)})
	}
	s.metrics.Errors.WithLabelValues("client_disconnect").Inc()
	return 499
}

func errorKind(ue *upstreamError) string {
	var answer *upstreamError
	if ue.Status == 0 && errors.As(ue.Err, &answer) {
		// A PD failure charged to the peer of the leg that failed (pdAttempt.blame): the
		// failing answer is that leg's.
		return errorKind(answer)
	}
	if ue.Status == 0 {
		if errors.Is(ue.Err, context.DeadlineExceeded) {
			return "timeout"
		}
		return ue.Role + "_transport"
	}
	return ue.Role + "_status"
}

// isEventStream reports whether a worker response is an SSE stream.
func isEventStream(resp *http.Response, b *wire.Body) bool {
	return b.Stream || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
}

// commitHeaders writes the response head relayed from a worker.
func commitHeaders(x *exchange, resp *http.Response, stream bool) {
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	h["X-Request-Id"] = []string{x.id} // assigned, not Set: the key is canonical
	if stream {
		if len(h["Content-Type"]) == 0 || h["Content-Type"][0] == "" {
			h["Content-Type"] = eventStreamType
		}
		h["Cache-Control"] = noCache
	}
	x.w.WriteHeader(resp.StatusCode)
}

// Header values commitHeaders assigns (shared: nothing modifies them).
var (
	eventStreamType = []string{"text/event-stream"}
	noCache         = []string{"no-cache"}
)

// relayStream copies an SSE body to the client event by event on the calling goroutine until
// it ends or the client goes away, flushing when the upstream has nothing more buffered. It
// returns nil after a complete stream (a stream that ends without [DONE] is relayed as it
// came), errClientGone, errRequestTimeout (after an error event and [DONE]), or the upstream
// error naming r's worker (after an error event and [DONE]); a failure after [DONE] is a clean
// end.
//
// buf is the read buffer (nil: one of relayBufSize is made); it may be the one body's first
// bytes were held in (heldBody), which the reads then overwrite as they are relayed.
func (s *Server) relayStream(ctx context.Context, sw *streamWriter, body *heldBody, r *upstreamRequest, buf []byte) error {
	if buf == nil {
		bp := relayBufs.Get().(*[]byte)
		defer relayBufs.Put(bp)
		buf = *bp
	}
	var err error
	for err == nil {
		var n int
		n, err = body.Read(buf)
		if n > 0 {
			if werr := sw.write(buf[:n]); werr != nil {
				if !errors.Is(werr, errSSEEventTooLarge) {
					return errClientGone
				}
				err = werr // the worker's fault: answered below as a failed stream
				break
			}
			// Flush when the upstream has nothing more buffered: bytes that already arrived
			// go out in the same write as the next read's.
			if err == nil && !body.Pending() {
				sw.flush()
			}
		}
	}
	if err == io.EOF || sw.sawDone {
		// No flush: the handler returns at once, and the server writes what is buffered
		// together with the end of the chunked response, in one write.
		if werr := sw.close(); werr != nil {
			return errClientGone
		}
		if sw.usage != nil {
			s.observeCached(sw.usage)
		}
		if d, ok := sw.tpot(); ok && sw.tpotObs != nil {
			sw.tpotObs.Observe(d.Seconds())
		}
		if len(sw.errEvent) > 0 { // relayed as it came; an error all the same
			return &upstreamError{Worker: r.worker, Role: r.role, Status: errorEventStatus(sw.errEvent),
				Body: bytes.Clone(sw.errEvent[:min(len(sw.errEvent), 512)]), Err: errStreamErrorEvent}
		}
		return nil
	}
	if !r.deadline.IsZero() && !time.Now().Before(r.deadline) {
		msg := fmt.Sprintf("request exceeded --request-timeout-secs %d", s.cfg.RequestTimeoutSecs)
		_, _ = sw.w.Write(wire.StreamError(http.StatusGatewayTimeout, msg))
		sw.flush()
		return errRequestTimeout
	}
	if ctx.Err() != nil {
		return errClientGone
	}
	if connFailure(err) {
		s.hc.suspect(r.worker) // the stream was cut: is the worker gone?
	}
	msg := fmt.Sprintf("%s worker %s: stream failed: %v", r.role, r.worker, err)
	_, _ = sw.w.Write(wire.StreamError(http.StatusBadGateway, msg))
	sw.flush()
	return &upstreamError{Worker: r.worker, Role: r.role, Err: err}
}

// streamEnd classifies how a relayed stream ended (relayStream's error): the attempt's result
// and the leg's outcome for its breaker.
func (s *Server) streamEnd(err error, status int) (attemptResult, router.Outcome) {
	switch {
	case errors.Is(err, errClientGone):
		return attemptResult{gone: true, committed: true}, router.Cancelled
	case errors.Is(err, errRequestTimeout): // counted as "timeout" by streamFailed
		return attemptResult{status: status, streamErr: &upstreamError{Status: http.StatusGatewayTimeout, Err: err}}, router.Cancelled
	case err != nil:
		ue, ok := err.(*upstreamError)
		if !ok {
			ue = &upstreamError{Role: "unknown", Err: err}
		}
		outcome := router.Failure
		if ue.Status != 0 {
			outcome = legOutcome(ue) // the worker's own error event: a 4xx is the request's fault
		}
		return attemptResult{status: status, streamErr: ue}, outcome
	}
	return attemptResult{status: status}, router.Success
}

// errStreamErrorEvent is the cause of a stream that ended in the worker's error event.
var errStreamErrorEvent = errors.New("worker ended the stream with an error event")

// streamFailed counts a stream that broke or ended in an error event after its head went out
// as the error it is, in every metric: errors_total{kind="<role>_stream"}, the worker's
// errors, sgl-router's stream errors, and requests_total under the error's status (502 for a
// broken stream, the event's own code for an error event) rather than the 200 its head said.
// It returns that status.
func (s *Server) streamFailed(x *exchange, ue *upstreamError) int {
	code := http.StatusBadGateway
	if ue.Status != 0 {
		code = ue.Status
	}
	if ue.Worker == "" { // our --request-timeout-secs cut it
		s.metrics.Errors.WithLabelValues("timeout").Inc()
	} else {
		s.metrics.Errors.WithLabelValues(ue.Role + "_stream").Inc()
		s.metrics.WorkerErrors.WithLabelValues(router.RedactURL(ue.Worker), ue.Role, "stream").Inc()
	}
	if ue.Role == "decode" {
		s.metrics.sgl.pdStreamErrors.inc(ue.Worker)
	}
	if sw, ok := x.w.(*statusWriter); ok {
		sw.streamErr = code // counted as a stream error; requests_total keeps the 200 sent
	}
	return code
}

// abort asks workers to drop rids (best effort, in the background, SPEC §1.4 step 8).
func (s *Server) abort(urls []string, rids []string) {
	for _, u := range urls {
		for _, rid := range rids {
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				body := fmt.Appendf(nil, `{"rid":%q}`, rid)
				resp, ue := send(ctx, clientDoer{s.admin}, &upstreamRequest{method: http.MethodPost, worker: u, path: "/abort_request", body: body, role: "abort"}, nil)
				if ue == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}
}

// errBodyOverBudget is a body larger than the whole of --body-memory-budget: it can never be
// admitted, so it is answered 413 rather than 503.
var errBodyOverBudget = errors.New("request body exceeds --body-memory-budget")

// readBody reads a request body within --max-payload-size, --body-read-timeout-secs and the
// memory budget (ch takes its bytes as they are allocated; the caller releases them when the
// response is over). A Content-Length above the limit is refused before a byte is read; a
// chunked body is counted as it is read and cut at the limit: either way the error is an
// *http.MaxBytesError. A Content-Length the budget cannot hold now is refused before a byte is
// read, a chunked body as soon as its next block would not fit: errOverBudget (or
// errBodyOverBudget when the whole budget could never hold it). A body not read whole within
// the timeout ends with os.ErrDeadlineExceeded. After any error the connection closes with
// the answer, and its read deadline stays, so net/http never waits for the rest of a stalled
// body. A declared length is read into one buffer of that size, so a body costs its size
// once, not the doublings of a growing buffer.
func (s *Server) readBody(w http.ResponseWriter, req *http.Request, ch *charge) (raw []byte, err error) {
	limit := s.cfg.MaxPayloadSize
	defer func() {
		if err != nil {
			w.Header().Set("Connection", "close")
		}
	}()
	if req.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if req.ContentLength > s.budget.limit {
		return nil, errBodyOverBudget
	}
	if !ch.add(req.ContentLength) {
		return nil, errOverBudget
	}
	// The deadline is per request and only readBody moves it: set here, when the headers have
	// arrived (ReadHeaderTimeout bounded those), and cleared only once the body is in — an
	// error leaves it, so a stalled connection is cut, not waited for.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(time.Duration(s.cfg.BodyReadTimeoutSecs) * time.Second))
	if req.ContentLength >= 0 { // within the limit (above), and net/http reads no more than it
		buf := make([]byte, req.ContentLength)
		n, err := io.ReadFull(req.Body, buf)
		if err == io.ErrUnexpectedEOF || err == io.EOF && n == 0 && req.ContentLength > 0 {
			return nil, fmt.Errorf("body ended after %d of %d bytes", n, req.ContentLength)
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		raw = buf[:n]
	} else if raw, err = readChunked(http.MaxBytesReader(w, req.Body, limit), ch, s.budget.limit); err != nil {
		return nil, err
	}
	// The body is in: clear the deadline, or net/http's background read of the connection
	// would cancel the request's context when it passes in the middle of a long response.
	_ = rc.SetReadDeadline(time.Time{})
	return raw, nil
}

// bodyFailed answers a request whose body could not be read (readBody's error).
func (s *Server) bodyFailed(x *exchange, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.fail(x, &wire.Error{Status: http.StatusRequestEntityTooLarge, Type: typeTooLarge,
			Message: fmt.Sprintf("request body exceeds --max-payload-size %d bytes", s.cfg.MaxPayloadSize)}, "payload_too_large")
	case errors.Is(err, errBodyOverBudget):
		s.fail(x, &wire.Error{Status: http.StatusRequestEntityTooLarge, Type: typeTooLarge,
			Message: fmt.Sprintf("request body exceeds the router's whole --body-memory-budget %d bytes", s.budget.limit)}, "payload_too_large")
	case errors.Is(err, errOverBudget):
		x.w.Header().Set("Retry-After", "1")
		s.fail(x, &wire.Error{Status: http.StatusServiceUnavailable, Type: typeUnavailable,
			Message: errOverBudget.Error() + ": retry later"}, "over_budget")
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.fail(x, &wire.Error{Status: http.StatusRequestTimeout, Type: typeTimeout,
			Message: fmt.Sprintf("request body not received within --body-read-timeout-secs %d", s.cfg.BodyReadTimeoutSecs)}, "body_timeout")
	default:
		s.fail(x, &wire.Error{Status: http.StatusBadRequest, Type: wire.TypeInvalidRequest, Message: "cannot read request body: " + err.Error()}, "bad_request")
	}
}

// readChunked reads a body of unknown length in blocks that double up to 4 MiB, then joins
// them once into one buffer of the body's size, giving each block back as soon as it is
// copied: a body of n bytes peaks at about n plus one block, and one cut at the limit or refused
// at about what it had read. Blocks after the first live outside the Go heap (mapBlock), so
// that giving one back frees its memory at once rather than at the next garbage collection.
// Each block is charged to ch before it is allocated: errOverBudget when it does not fit,
// errBodyOverBudget when the body could never fit in a budget of budgetLimit bytes. The
// charge is not reduced after the join (it stays at or above the body's size). After an
// error the blocks are given back and the charge released at once, before the answer is
// written: of concurrent bodies that do not fit together, the ones refused make room for the
// others at once (otherwise all of them could be refused, each waiting on the others' answers).
func readChunked(r io.Reader, ch *charge, budgetLimit int64) (_ []byte, err error) {
	var blocks []bodyBlock
	defer func() {
		if err != nil { // first: unmapping a large body takes milliseconds
			ch.release()
		}
		for i := range blocks {
			blocks[i].free()
		}
	}()
	total, size := 0, 32<<10
	for {
		if !ch.add(int64(size)) {
			if int64(total+size) > budgetLimit {
				return nil, errBodyOverBudget
			}
			return nil, errOverBudget
		}
		b := newBodyBlock(size, len(blocks) == 0) // most chunked bodies fit in the first
		blocks = append(blocks, b)
		n, err := io.ReadFull(r, b.buf)
		blocks[len(blocks)-1].n = n
		total += n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, 4<<20)
	}
	if len(blocks) == 1 && !blocks[0].mapped {
		return blocks[0].buf[:blocks[0].n], nil
	}
	out := make([]byte, 0, total)
	for i := range blocks {
		out = append(out, blocks[i].buf[:blocks[i].n]...)
		blocks[i].free()
	}
	return out, nil
}

// bodyBlock is one block of a chunked body being read: n bytes of buf are filled.
type bodyBlock struct {
	buf    []byte
	n      int
	mapped bool // buf is a mapping of its own (mapBlock), unmapped by free
}

// newBodyBlock returns a block of size bytes: on the Go heap when heap is set or no mapping is
// to be had, else mapped.
func newBodyBlock(size int, heap bool) bodyBlock {
	if !heap {
		if b := mapBlock(size); b != nil {
			return bodyBlock{buf: b, mapped: true}
		}
	}
	return bodyBlock{buf: make([]byte, size)}
}

// free gives a mapped block back to the kernel; it may be called again, and is a no-op for a
// heap block (the garbage collector frees it).
func (b *bodyBlock) free() {
	if b.mapped {
		unmapBlock(b.buf)
	}
	b.buf, b.n, b.mapped = nil, 0, false
}
